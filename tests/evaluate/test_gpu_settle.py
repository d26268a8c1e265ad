"""GPU test (marker gpu) of the device alignment's parts, on one GPU at W=1 (no second GPU needed,
a few seconds): the pause lasts SETTLE_US, nothing of it lands inside a timed repetition, a host
that reaches the timed call after the pause ran out is counted late, and a launch that waits for
its own work on the host is not. (tests/evaluate/test_gpu_align.py checks the whole discipline on
two GPUs: the seed against its reference, under either alignment.)"""

from __future__ import annotations

import time

import pytest

from cuco_tui.harness.plan import SETTLE_US, RunPlan
from cuco_tui.harness.rank_events import EventLog
from cuco_tui.harness.rank_group import RankGroup
from cuco_tui.harness.timing import Timing
from cuco_tui.harness.watchdog import Watchdog

pytestmark = pytest.mark.gpu

PAUSE_MS = SETTLE_US / 1000.0


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    import cupy
    from cupy.cuda import nccl

    d = tmp_path_factory.mktemp("settle")
    plan = RunPlan(mode="baseline", workload="w", reference="reference.py", library=None, shapes=(), rtol=0.0,
                   floor=0.0, warmup=1, repetitions=5, nonce=1, gpus=(0,), rundir=str(d))
    log = EventLog(d / "rank0.jsonl", 0)
    g = RankGroup(cupy, nccl, plan, 0, log, Watchdog(log, d / "abort"))  # watchdog not started: arm/disarm only
    g.join()
    yield g
    g.close()


def _kernel(g):
    with g.stream:
        g.flag.fill(0.0)  # one small kernel on the harness's stream


def test_the_pause_lasts_settle_us(group):
    cp = group.cupy
    before, after = cp.cuda.Event(), cp.cuda.Event()
    before.record(group.stream)
    group.align_on_device()
    after.record(group.stream)
    after.synchronize()
    ms = cp.cuda.get_elapsed_time(before, after)
    assert PAUSE_MS <= ms < PAUSE_MS + 0.25, ms


def test_a_repetition_holds_nothing_of_the_pause_and_starts_in_time(group):
    t = Timing(group)
    times = [t.time_once(lambda: _kernel(group), "small", 10.0) for _ in range(20)]
    assert max(times) < 0.1, times  # a 300 us pause inside the events would show here
    assert t.late.get("small", 0) <= 1, t.late  # one for OS jitter at most


def test_a_host_that_arrives_after_the_pause_is_counted_late(group, monkeypatch):
    t = Timing(group)
    aligned = group.align_on_device

    def slow_host(*args, **kwargs) -> bool:
        late = aligned(*args, **kwargs)
        time.sleep(3 * PAUSE_MS / 1000.0)  # this host descheduled until the pause has run out
        return late

    monkeypatch.setattr(group, "align_on_device", slow_host)
    for _ in range(3):
        t.time_once(lambda: _kernel(group), "slow host", 10.0)
    assert t.late.get("slow host", 0) == 3, t.late


def test_a_launch_that_waits_for_its_own_work_is_not_late(group):
    """As MoE's reference and templates do (the counts read on the host mid-launch). Fails with the
    late check asked after fn instead of before: that counts every such repetition."""
    t = Timing(group)

    def syncing() -> None:
        _kernel(group)
        group.stream.synchronize()
        _kernel(group)

    for _ in range(5):
        t.time_once(syncing, "syncing", 10.0)
    assert t.late.get("syncing", 0) <= 1, t.late


def test_a_host_that_comes_to_the_all_reduce_after_its_pause_is_late(group):
    """The other ranks wait in the all-reduce for such a host, so the lined-up point is its own and
    its timed call still starts a host launch after it: counted, where the event query alone would
    not see it."""
    assert group.align_on_device() is False  # at once after the pause's launch: on time
    group.wait_stream("the alignment", 10.0)
    cp = group.cupy
    settle = group._settle
    group._settle = lambda *a, **k: (settle(*a, **k), cp.cuda.runtime.streamSynchronize(group.stream.ptr))
    try:
        assert group.align_on_device() is True  # the host waited past the pause before the all-reduce
    finally:
        group._settle = settle
    group.wait_stream("the alignment", 10.0)
