"""`cuco baseline --json` read back (evaluate/baseline.Baseline.from_dict), and the table of
evaluations against it (benchmarks/eval_table.py) measuring against the bound the search uses."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import replace

from cuco_tui.core.result import Spread
from cuco_tui.evaluate.baseline import Baseline, ShapeBaseline, bound
from repo_paths import REPO

DIMS = {"M": 8192, "K": 8192, "N": 8192}


def _spread(ms: float) -> Spread:
    return Spread(ms, ms * 0.9, ms * 1.2, ms * 0.95, ms * 1.05, 30)


def _baseline() -> Baseline:
    with_peer = ShapeBaseline("square-8k", DIMS, _spread(3.0), {"gemm": _spread(2.0), "allgather": _spread(1.5)},
                              comm_bytes=3 << 28, peer_copy=_spread(2.5), world=4)
    without = ShapeBaseline("long-seq", DIMS, _spread(4.0), {"gemm": _spread(1.0), "allgather": _spread(3.0)},
                            comm_bytes=3 << 28, world=4)
    return Baseline("gemm_allgather", [0, 1, 2, 3], [with_peer, without], 12.5, ["graphs off"])


def test_a_baseline_reads_back_from_its_json():
    b = _baseline()
    back = Baseline.from_dict(json.loads(json.dumps(b.to_dict())))
    assert back == b
    assert back.shapes[0].peer_gbps == b.shapes[0].peer_gbps  # the bandwidth depends on the world: 4 ranks


def test_a_baseline_records_which_discipline_timed_it():
    b = _baseline()
    aligned = Baseline("gemm_allgather", b.gpus, [replace(s, align="device") for s in b.shapes])
    back = Baseline.from_dict(json.loads(json.dumps(aligned.to_dict())))
    assert [s.align for s in back.shapes] == ["device", "device"]
    # `cuco baseline --json` from before 2026-11-27 says nothing of it: a host barrier alone timed it
    old = b.to_dict()
    for s in old["shapes"]:
        s.pop("align", None)
    assert [s.align for s in Baseline.from_dict(old).shapes] == ["host", "host"]


def _eval_table():
    spec = importlib.util.spec_from_file_location("eval_table", REPO / "benchmarks" / "eval_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_eval_table_measures_against_the_bound_the_search_uses(tmp_path, capsys):
    b = _baseline()
    (tmp_path / "base.json").write_text(json.dumps(b.to_dict()))
    timings = [{"shape": s.shape, "candidate": _spread(ms).__dict__, "reference": s.reference.__dict__,
                "speedup": s.reference.median / ms} for s, ms in zip(b.shapes, (2.5, 3.6))]
    (tmp_path / "ring.json").write_text(json.dumps({"status": "measured", "timings": timings}))
    assert _eval_table().main([str(tmp_path / "base.json"), f"ring={tmp_path / 'ring.json'}"]) == 0
    rows = [line.split("  ") for line in capsys.readouterr().out.splitlines()[1:3]]
    assert {r[1]: float(r[6]) for r in rows} == {s.shape: round(bound(s), 3) for s in b.shapes}
    # Without a peer copy the bound is max(compute, communication as the reference moves it): 3.0 ms.
    assert bound(b.shapes[1]) == 3.0
