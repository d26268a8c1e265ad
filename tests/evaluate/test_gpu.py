"""GPU tests: run by scripts/gpu-tests.sh on a GPU host; skipped cleanly elsewhere.

They evaluate real candidates on real GPUs: the seed and the device-initiated candidate
pass verification and benchmarking, each kind of broken candidate gets its status and a
readable diagnosis, and the GPUs stay usable after every failure."""

import importlib.util

import numpy as np
import pytest

from cuco_tui.evaluate.cascade import EvalOptions, evaluate
from cuco_tui.core.result import Level, Status
from cuco_tui.harness.gpus import inventory
from cuco_tui.workload.manifest import load_workload

pytestmark = pytest.mark.gpu

W = load_workload("gemm_allgather")
FAULTS = W.root / "faults"
ONE_SHAPE = EvalOptions(world=2, shapes=("short-seq",))
VERIFY_ONLY = EvalOptions(world=2, bench=False)


@pytest.fixture(scope="module", autouse=True)
def two_gpus():
    if inventory().count < 2:
        pytest.skip("needs 2 GPUs")


def test_reference_agrees_with_float64_on_the_gpu():
    import cupy
    from cupy.cuda import nccl

    from cuco_tui.harness.bf16 import from_bf16_bits

    spec = importlib.util.spec_from_file_location("ref", W.reference)
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    dims = W.verify_shapes[0].dims

    class Env:
        pass

    env = Env()
    env.comm = nccl.NcclCommunicator(1, nccl.get_unique_id(), 0)
    env.stream = cupy.cuda.Stream(non_blocking=True)
    env.world, env.rank, env.dims = 1, 0, dims
    io = ref.io_spec(dims, 1)
    inputs = {n: cupy.empty(s, dtype=cupy.uint16) for n, s, _ in io["inputs"]}
    outputs = {n: cupy.empty(s, dtype=cupy.uint16) for n, s, _ in io["outputs"]}
    with env.stream:
        ref.fill_inputs(cupy, inputs, dims, 1, 0, seed=11)
    ref.Reference(env).run(inputs, outputs)
    env.stream.synchronize()
    want = ref.expected([{k: cupy.asnumpy(v) for k, v in inputs.items()}], dims, 1)[0]["y"]
    got = from_bf16_bits(np, cupy.asnumpy(outputs["y"])).astype(np.float64)
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 5e-3


def test_seed_is_verified_and_measured():
    r = evaluate(W.seed, W, ONE_SHAPE)
    assert r.status == Status.MEASURED, r.reason
    assert r.level == Level.BENCHMARK
    assert all(v.ok for v in r.verifications) and len(r.verifications) >= 3
    t = r.timings[0]
    assert t.candidate.n >= 20 and len(t.per_rank) == 2
    # The seed is the reference written in C: it must land close to it.
    assert 0.8 < t.speedup < 1.25, t


def test_device_initiated_lsa_candidate_is_verified_and_measured():
    r = evaluate(W.root / "candidates" / "lsa_allgather.cu", W, ONE_SHAPE)
    assert r.status == Status.MEASURED, r.reason + "\n" + "\n".join(d.render() for d in r.diagnostics)
    assert r.timings[0].speedup > 0.5


def test_copy_engine_overlap_candidate_uses_ipc_peer_pointers():
    r = evaluate(W.root / "candidates" / "ce_overlap.cu", W, ONE_SHAPE)
    assert r.status == Status.MEASURED, r.reason + "\n" + r.deadlock_report + "\n".join(d.render() for d in r.diagnostics)
    assert r.timings[0].speedup > 0.5


def _healthy_after():
    r = evaluate(W.seed, W, VERIFY_ONLY)
    assert r.status == Status.VERIFIED, f"the next evaluation failed: {r.reason}"


def test_compile_error_names_the_line():
    r = evaluate(FAULTS / "compile_error.cu", W, VERIFY_ONLY)
    assert r.status == Status.COMPILE_ERROR
    assert any("cublasSetStreem" in d.source_line for d in r.diagnostics)


def test_wrong_values_are_incorrect():
    r = evaluate(FAULTS / "wrong_values.cu", W, VERIFY_ONLY)
    assert r.status == Status.INCORRECT, r.reason
    assert r.level == Level.VERIFY
    assert "max relative error" in r.reason and r.verifications[0].unwritten == 0
    _healthy_after()


def test_unwritten_outputs_are_incorrect():
    r = evaluate(FAULTS / "unwritten.cu", W, VERIFY_ONLY)
    assert r.status == Status.INCORRECT, r.reason
    assert "never written" in r.reason
    assert r.verifications[0].unwritten > 0
    _healthy_after()


def test_illegal_address_is_a_runtime_error():
    r = evaluate(FAULTS / "illegal_address.cu", W, VERIFY_ONLY)
    assert r.status == Status.RUNTIME_ERROR, r.reason
    assert "illegal" in r.reason.lower()
    _healthy_after()


def _line(source: str, text: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if text in line)


def test_a_candidate_that_never_returns_is_a_deadlock_with_its_wait_site():
    """hang.cu names its wait where it launches it (CUCO_WAIT_SITE("neighbour go") in the launch's
    arguments): each rank is reported waiting at that line for the named flag, not at the device
    line of the wait inside the kernel."""
    r = evaluate(FAULTS / "hang.cu", W, VERIFY_ONLY)
    assert r.status == Status.DEADLOCK, r.reason
    assert r.run_seconds < 20 + 3 + 30 + 10
    source = (FAULTS / "hang.cu").read_text()
    site, wait = _line(source, 'CUCO_WAIT_SITE("neighbour go")'), _line(source, "cuco::wait_geq")
    for rank, peer in ((0, 1), (1, 0)):
        assert (f"rank {rank} waits on rank {peer} (hang.cu:{site}, 'neighbour go' (flag 7): wants 1, saw 0)"
                in r.deadlock_report), r.deadlock_report
    assert f"line {wait}" not in r.deadlock_report and f"hang.cu:{wait}:" not in r.deadlock_report
    _healthy_after()


def test_a_wait_without_a_name_is_reported_at_the_launch_of_its_kernel(tmp_path):
    """The same hang with its wait unnamed (CUCO_SITE, the device line): each block's trace slot
    records the function it waits in, and the report names where the candidate launched it."""
    from cuco_tui.harness.rank_events import TimedOut

    source = (FAULTS / "hang.cu").read_text().replace("cuco::wait_geq<unsigned>(trace, site,",
                                                      "cuco::wait_geq<unsigned>(trace, CUCO_SITE,", 1)
    assert "CUCO_SITE," in source
    path = tmp_path / "unnamed.cu"
    path.write_text(source)
    events = []
    r = evaluate(path, W, VERIFY_ONLY, events_out=events)
    assert r.status == Status.DEADLOCK, r.reason
    waiting = [s for e in events if isinstance(e, TimedOut) for s in e.trace if s["state"] == "waiting"]
    assert waiting and all(s["function"] == "wait_for_neighbour" and not s["label"] for s in waiting), waiting
    wait, launch = _line(source, "cuco::wait_geq"), _line(source, "wait_for_neighbour<<<")
    for rank, peer in ((0, 1), (1, 0)):
        assert (f"rank {rank} waits on rank {peer} (unnamed.cu:{launch} (in wait_for_neighbour at line {wait}), "
                "flag 7: wants 1, saw 0)") in r.deadlock_report, r.deadlock_report
    _healthy_after()
