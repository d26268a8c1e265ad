"""GPU tests of kept rank workers (harness/kept.py, `cuco search --keep-workers`): run by
scripts/gpu-tests.sh on a GPU host; skipped cleanly elsewhere. The next evaluation of a GPU group
runs in the same processes when the last left nothing behind, with the same results; a candidate
that leaks GPU memory, or one that faults, ends them, and the next evaluation starts fresh."""

import pytest

from cuco_tui.core.result import Status
from cuco_tui.evaluate.cascade import EvalOptions, evaluate
from cuco_tui.harness.gpus import inventory
from cuco_tui.harness.kept import KeptWorkers
from cuco_tui.harness.rank_events import Idle, Joined, Leaving
from cuco_tui.workload.manifest import load_workload

pytestmark = pytest.mark.gpu

W = load_workload("gemm_allgather")
ONE_SHAPE = EvalOptions(gpus=[0, 1], world=2, shapes=("short-seq",))
# The seed, with 256 MiB taken in its init (inside the EVOLVE block: L0 refuses changes outside) and
# never given back.
GATHERED = "  CUCO_TRY_CUDA(ctx, cudaMalloc(&c->gathered, (size_t)c->M * c->K * 2));\n"
LEAK = (GATHERED, GATHERED + "  void* leaked = nullptr;\n  CUCO_TRY_CUDA(ctx, cudaMalloc(&leaked, 256u << 20));\n")


@pytest.fixture(scope="module", autouse=True)
def two_gpus():
    if inventory().count < 2:
        pytest.skip("needs 2 GPUs")


@pytest.fixture
def kept():
    workers = KeptWorkers()
    yield workers
    workers.close()


def evaluated(path, kept, options=ONE_SHAPE):
    events = []
    result = evaluate(path, W, options, events_out=events, kept=kept)
    return result, events


def plans_before(events) -> set[int]:
    return {e.plans for e in events if isinstance(e, Joined)}


def why_left(events) -> list[str]:
    """The workers' own reasons for leaving, for a failure's message."""
    return [e.reason for e in events if isinstance(e, Leaving)]


def test_the_seed_three_times_in_the_same_workers_measures_the_same(kept):
    runs = [evaluated(W.seed, kept) for _ in range(3)]
    for r, _ in runs:
        assert r.status == Status.MEASURED, r.reason
        assert 0.8 < r.timings[0].speedup < 1.25, r.timings[0]
    # The reference timed in a process that ran two candidates before is the reference timed fresh.
    first, last = runs[0][0].timings[0].reference, runs[2][0].timings[0].reference
    assert abs(last.median / first.median - 1) < 0.10, (first, last)  # two medians of 30 differ ~2.5 %
    assert [plans_before(events) for _, events in runs] == [{0}, {1}, {2}], [why_left(e) for _, e in runs]
    assert len({e.pid for _, events in runs for e in events if isinstance(e, Joined)}) == 2
    assert all(sum(isinstance(e, Idle) for e in events) == 2 for _, events in runs)


def test_a_candidate_that_leaks_gpu_memory_ends_the_workers_after_its_results(kept, tmp_path):
    evaluated(W.seed, kept)
    leaky = tmp_path / "leaky.cu"
    source = W.seed.read_text()
    assert LEAK[0] in source
    leaky.write_text(source.replace(LEAK[0], LEAK[1], 1))
    result, events = evaluated(leaky, kept)
    assert result.status == Status.MEASURED, result.reason  # its results stand
    assert any(isinstance(e, Leaving) and "MiB of GPU memory" in e.reason for e in events)
    assert any("kept worker ended" in d.message for d in result.diagnostics)
    after, events = evaluated(W.seed, kept)
    assert after.status == Status.MEASURED and plans_before(events) == {0}


def test_a_wrong_answer_or_a_fault_ends_the_workers(kept):
    verify_only = EvalOptions(gpus=[0, 1], world=2, bench=False)
    first, events = evaluated(W.seed, kept)
    assert not why_left(events), why_left(events)
    for fault, status in (("wrong_values", Status.INCORRECT), ("illegal_address", Status.RUNTIME_ERROR)):
        failed, events = evaluated(W.root / "faults" / f"{fault}.cu", kept, verify_only)
        assert failed.status == status and plans_before(events) == {1}, (failed.reason, why_left(events))
        after, events = evaluated(W.seed, kept)
        assert after.status == Status.MEASURED and plans_before(events) == {0}, after.reason
