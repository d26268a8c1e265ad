"""The fault suite's candidates: each has an expectation, each passes L0 and (but one) compiles,
so that on a GPU host each fails for the reason it was written for."""

import pytest

from cuco_tui.toolchain import BuildCache, compile_candidate
from cuco_tui.toolchain.toolchain import discover
from cuco_tui.evaluate.faults import load_expectations
from cuco_tui.evaluate.static_checks import check_static, is_rejected
from cuco_tui.workload.manifest import load_workload

W = load_workload("gemm_allgather")
FAULTS = sorted((W.root / "faults").glob("*.cu"))


def test_every_fault_has_an_expectation_and_back():
    expected = load_expectations(W)
    assert sorted(expected) == sorted(p.stem for p in FAULTS)
    assert len(FAULTS) >= 10
    kinds = {v["status"] for v in expected.values()}
    assert kinds == {"rejected", "compile_error", "incorrect", "runtime_error", "deadlock"}


@pytest.mark.parametrize("path", FAULTS, ids=[p.stem for p in FAULTS])
def test_fault_passes_static_checks(path):
    assert not is_rejected(check_static(path.read_text(), W.seed.read_text(), path.name))


@pytest.mark.skipif(not discover().can_compile, reason="needs nvcc, NCCL and cuBLAS headers")
@pytest.mark.parametrize("path", FAULTS, ids=[p.stem for p in FAULTS])
def test_fault_compiles_unless_it_is_the_compile_error(path, tmp_path_factory):
    cache = BuildCache(tmp_path_factory.getbasetemp() / "fault-cache")
    r = compile_candidate(path, discover(), cache)
    assert r.ok == (path.stem != "compile_error"), "\n".join(d.render() for d in r.diagnostics)


def test_a_fault_that_needs_more_ranks_is_skipped_and_said_so(monkeypatch):
    from cuco_tui.evaluate import faults as selftest
    from cuco_tui.evaluate.cascade import EvalOptions

    assert load_expectations(W)["cycle_of_three"]["min_world"] == 3
    monkeypatch.setattr(selftest, "choose_gpus", lambda workload, options: ([0, 1], ""))

    def never(*args, **kwargs):
        raise AssertionError("a fault that needs 3 ranks was evaluated on 2")

    monkeypatch.setattr(selftest, "evaluate", never)
    said = []
    checks = selftest.run_fault_suite(W, EvalOptions(world=2), only=("cycle_of_three",), say=said.append)
    assert said == ["cycle_of_three: skipped, it needs 3 ranks at least and this run has 2"]
    assert [(c.name, c.got, c.skipped) for c in checks] == [
        ("cycle_of_three", "skipped", "it needs 3 ranks at least and this run has 2")]


def test_a_fault_that_needs_more_ranks_runs_when_there_are_enough(monkeypatch):
    from cuco_tui.evaluate import faults as selftest
    from cuco_tui.evaluate.cascade import EvalOptions

    class Evaluated(Exception):
        pass

    def evaluate(path, *args, **kwargs):
        raise Evaluated(path.name)

    monkeypatch.setattr(selftest, "choose_gpus", lambda workload, options: ([0, 0, 0, 0], ""))
    monkeypatch.setattr(selftest, "evaluate", evaluate)
    with pytest.raises(Evaluated, match="cycle_of_three.cu"):
        selftest.run_fault_suite(W, EvalOptions(world=4, share_gpu=True), only=("cycle_of_three",))
