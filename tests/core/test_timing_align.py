"""Which discipline timed a shape (ShapeTiming.align) survives JSON, and a result recorded before
it existed reads as timed by the host barrier, as every figure before 2026-11-27 was."""

import json
from dataclasses import asdict

from cuco_tui.core.result import ShapeTiming, Spread


def _timing(align: str) -> ShapeTiming:
    cand, ref = Spread.of([0.9, 1.0, 1.1]), Spread.of([1.1, 1.2, 1.3])
    return ShapeTiming("square-8k", {"M": 8192}, cand, ref, [cand, cand], 1.2, align=align)


def test_a_device_aligned_timing_round_trips():
    t = _timing("device")
    assert ShapeTiming.from_dict(json.loads(json.dumps(asdict(t)))) == t


def test_a_timing_recorded_without_align_was_timed_by_the_host_barrier():
    old = asdict(_timing("device"))
    del old["align"]
    assert ShapeTiming.from_dict(old).align == "host"
    assert ShapeTiming.from_dict(old) == _timing("host")
