"""GPU tests of how the ranks start a timed repetition together (harness/plan.py ALIGNS): run by
scripts/gpu-tests.sh on a GPU host; skipped cleanly elsewhere. Lined up on the GPUs (the default:
an all-reduce and a pause kernel on each rank's stream) or by the host barrier alone, the seed is
measured against the reference of its own run, and the two agree about it."""

import pytest

from cuco_tui.core.result import Status
from cuco_tui.evaluate.cascade import EvalOptions, evaluate
from cuco_tui.harness.gpus import inventory
from cuco_tui.workload.manifest import load_workload

pytestmark = pytest.mark.gpu

W = load_workload("gemm_allgather")


@pytest.fixture(scope="module", autouse=True)
def two_gpus():
    if inventory().count < 2:
        pytest.skip("needs 2 GPUs")


@pytest.mark.parametrize("align", ["device", "host"])
def test_the_seed_is_measured_against_its_reference_with_either_alignment(align):
    result = evaluate(W.seed, W, EvalOptions(gpus=[0, 1], world=2, shapes=("short-seq",), align=align))
    assert result.status == Status.MEASURED, result.reason
    timing = result.timings[0]
    # The seed is the reference's algorithm: a speedup far from 1 would mean the alignment favours one side.
    assert 0.8 < timing.speedup < 1.25, timing
