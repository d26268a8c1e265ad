"""GPU tests of how the ranks start a timed repetition together (harness/plan.py ALIGNS): run by
scripts/gpu-tests.sh on a GPU host; skipped cleanly elsewhere. Lined up on the GPUs (the default:
an all-reduce and a pause kernel on each rank's stream) or by the host barrier alone, the seed is
measured against the reference of its own run, and the two agree about it; lined up on the GPUs,
no repetition starts late and no time holds the pause."""

import pytest

from cuco_tui.core.result import Status
from cuco_tui.evaluate.cascade import EvalOptions, evaluate
from cuco_tui.harness.gpus import inventory
from cuco_tui.harness.plan import SETTLE_US
from cuco_tui.workload.manifest import load_workload

pytestmark = pytest.mark.gpu

W = load_workload("gemm_allgather")


@pytest.fixture(scope="module", autouse=True)
def two_gpus():
    if inventory().count < 2:
        pytest.skip("needs 2 GPUs")


@pytest.fixture(scope="module")
def results():
    return {align: evaluate(W.seed, W, EvalOptions(gpus=[0, 1], world=2, shapes=("short-seq",), align=align))
            for align in ("device", "host")}


@pytest.mark.parametrize("align", ["device", "host"])
def test_the_seed_is_measured_against_its_reference_with_either_alignment(results, align):
    result = results[align]
    assert result.status == Status.MEASURED, result.reason
    timing = result.timings[0]
    assert timing.align == align
    # The seed is the reference's algorithm: a speedup far from 1 would mean the alignment favours one side.
    assert 0.8 < timing.speedup < 1.25, timing


def test_lined_up_on_the_gpus_nothing_starts_late_and_no_time_holds_the_pause(results):
    device, host = results["device"].timings[0], results["host"].timings[0]
    late = [d.message for d in results["device"].diagnostics if d.code == "timing"]
    assert not late, late  # the seed and the reference enqueue in far less than the pause
    # A pause inside the events would add SETTLE_US to every time; lined up, a time can only shrink
    # (no rank waits for another's host), give or take noise.
    slack = 0.5 * SETTLE_US / 1000.0
    assert device.reference.median < host.reference.median + slack, (device.reference, host.reference)
    assert device.candidate.median < host.candidate.median + slack, (device.candidate, host.candidate)
