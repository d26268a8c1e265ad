"""GPU test of a profile on request (evaluate/profiling.py, harness/profile_capture.py): run by
scripts/gpu-tests.sh on a GPU host with the `profile` extra (cupti-python); skipped elsewhere. The
gemm_allgather seed (a cuBLAS GEMM, then ncclAllGather) is profiled at one bench shape on 2 GPUs:
each rank's summary has compute and communication, its exposed communication is no more than its
communication, the trace is written under 5 MB, and the timings are taken as without a profile."""

import json
from pathlib import Path

import pytest

from cuco_tui.core.profile_trace import MAX_TRACE_BYTES
from cuco_tui.core.result import Status
from cuco_tui.evaluate.cascade import EvalOptions, evaluate
from cuco_tui.harness.gpus import inventory
from cuco_tui.workload.manifest import load_workload

pytestmark = pytest.mark.gpu

W = load_workload("gemm_allgather")


@pytest.fixture(scope="module", autouse=True)
def two_gpus_and_cupti():
    if inventory().count < 2:
        pytest.skip("needs 2 GPUs")
    pytest.importorskip("cupti.cupti", reason="needs cupti-python: pip install 'cuco-tui[profile]'")


def test_the_seed_profiled_at_one_shape_has_compute_communication_and_a_trace():
    r = evaluate(W.seed, W, EvalOptions(world=2, shapes=("short-seq",), profile="short-seq"))
    assert r.status == Status.MEASURED, r.reason
    assert [t.shape for t in r.timings] == ["short-seq"]
    p = r.profile
    assert p is not None and p.ok, p.problem if p is not None else "no profile"
    assert p.shape == "short-seq" and p.launches == 5 and [s.rank for s in p.ranks] == [0, 1]
    for s in p.ranks:
        assert s.compute_ns > 0, s  # the GEMM
        assert s.communication_ns > 0, s  # ncclAllGather's kernel
        assert 0 <= s.exposed_ns <= s.communication_ns, s
        assert s.span_ns >= max(s.compute_ns, s.communication_ns), s
    trace = Path(p.trace)
    assert trace.is_file() and trace.stat().st_size <= MAX_TRACE_BYTES
    cats = {e.get("cat") for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"}
    assert cats == {"compute", "communication"}
