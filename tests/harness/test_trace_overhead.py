"""The trace-overhead measurement: tracing switched on and off inside one process (the plan
asks for it), and the figures computed from the ranks' `trace_ab` events."""

from __future__ import annotations

import importlib.util

import pytest

from cuco_tui.evaluate.cascade import EvalOptions, make_plan
from cuco_tui.harness.rank_events import Timed, TraceTimed
from cuco_tui.workload.manifest import load_workload
from repo_paths import REPO

BENCH = REPO / "benchmarks" / "trace_overhead.py"


def _bench():
    spec = importlib.util.spec_from_file_location("trace_overhead_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_plan_asks_for_in_process_trace_timing_only_when_tracing_is_on():
    w = load_workload("gemm_allgather")
    assert make_plan(w, None, EvalOptions(trace_ab=True), "evaluate").trace_ab is True
    assert make_plan(w, None, EvalOptions(trace_ab=True, trace=False), "evaluate").trace_ab is False
    assert make_plan(w, None, EvalOptions(), "evaluate").trace_ab is False


def test_overhead_uses_the_slowest_rank_of_each_repetition():
    events = [
        TraceTimed(rank=0, shape="long-seq", on_ms=(1.02, 1.04, 1.00), off_ms=(1.00, 1.00, 1.00)),
        TraceTimed(rank=1, shape="long-seq", on_ms=(1.01, 1.10, 1.01), off_ms=(1.00, 1.02, 0.99)),
        Timed(rank=0, shape="long-seq", dims={}, candidate_ms=(1.0,), reference_ms=(1.0,)),
    ]
    (row,) = _bench().overhead_rows("c.cu", events)
    # slowest rank per repetition: on [1.02, 1.10, 1.01], off [1.00, 1.02, 1.00]
    assert row["on_ms"] == pytest.approx(1.02)
    assert row["off_ms"] == pytest.approx(1.00)
    assert row["overhead_pct"] == pytest.approx(2.0)
    assert row["repetitions"] == 3
