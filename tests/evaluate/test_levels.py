"""The evaluation-level seam (evaluate/levels.py) as the cascade uses it: compute-sanitizer and L2's
perturbed schedules each give their plan entry, their rank command and their reading through it,
in order (the sanitizer's narrower options turn the perturbed rounds off); a level that cannot run
here ends the evaluation in one sentence; a level of a test's own adds its reading to a result
without any change to the cascade."""

from __future__ import annotations

import stat
import sys
from dataclasses import dataclass

import pytest

from cuco_tui.core.result import Diagnostic, Level, Status
from cuco_tui.evaluate import races, sanitizer
from cuco_tui.evaluate.cascade import EvalOptions, evaluate, interpret, levels_for, make_plan
from cuco_tui.evaluate.levels import EvaluationLevel, Reading, RunFacts, Setup, prepare_all
from cuco_tui.harness.launcher import GroupRun, RankOutcome
from cuco_tui.harness.rank_events import Verified, read_events
from cuco_tui.toolchain import BuildCache
from cuco_tui.toolchain.toolchain import discover
from cuco_tui.workload.manifest import load_workload
from repo_paths import DATA

W = load_workload("gemm_allgather")
TC = discover()


def _setup(options: EvalOptions, tmp_path, said: list[str], gpus=(0, 1)) -> Setup:
    return Setup(options, gpus, TC, BuildCache(tmp_path / "cache"), lambda level, message: said.append(message))


def _narrowed(options: EvalOptions):
    levels = levels_for(options)
    for level in levels:
        options = level.narrow(options)
    return levels, options


def test_under_the_sanitizer_the_ranks_start_under_the_tool_and_no_perturbed_rounds_are_planned(tmp_path, monkeypatch):
    tool = tmp_path / "bin" / "compute-sanitizer"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(tool.parent))
    levels, options = _narrowed(EvalOptions(sanitize="memcheck", perturb_seed=3))
    assert [type(x) for x in levels] == [sanitizer.Sanitizer, races.PerturbedSchedules]
    assert (options.bench, options.perturb) == (False, False)
    assert [f for x in levels for f in x.compile_flags()] == ["-lineinfo"]
    said: list[str] = []
    prepared = prepare_all(levels, make_plan(W, None, options, "evaluate"), _setup(options, tmp_path, said))
    assert prepared.plan.sanitize == "memcheck" and prepared.plan.limits.time_scale == sanitizer.SLOWDOWN
    assert prepared.plan.perturb is None and said == [] and prepared.diagnostics == ()
    assert prepared.worker_argv[:3] == [str(tool), "--tool", "memcheck"]
    assert prepared.worker_argv[-3:] == [sys.executable, "-m", "cuco_tui.harness.worker"]


@pytest.mark.skipif(TC.nvcc is None, reason="needs nvcc (the perturber is built)")
def test_the_perturbed_schedules_plan_their_seeds_on_the_built_interposer(tmp_path):
    levels, options = _narrowed(EvalOptions(perturb_seed=17, perturb_rounds=2))
    said: list[str] = []
    prepared = prepare_all(levels, make_plan(W, None, options, "evaluate"),
                           _setup(options, tmp_path, said, gpus=(0, 0, 0, 0)))
    p = prepared.plan.perturb
    assert (p.seed, p.rounds, p.unit_us) == (17, 2, races.unit_us(4, True)) and p.library.endswith(".so")
    assert said == ["the schedule perturber (built once per machine)"] and prepared.worker_argv is None
    _, off = _narrowed(EvalOptions(perturb=False))
    assert prepare_all(levels, make_plan(W, None, off, "evaluate"), _setup(off, tmp_path, [])).plan.perturb is None


def test_a_level_asked_for_that_cannot_run_here_ends_the_evaluation_in_one_sentence(tmp_path, monkeypatch):
    if not TC.can_compile:
        pytest.skip("needs nvcc, NCCL and cuBLAS headers (the candidate is compiled first)")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "nowhere"))
    try:
        pytest.skip(f"this machine has compute-sanitizer ({sanitizer.find_sanitizer(TC.nvcc)})")
    except sanitizer.SanitizerUnavailable:
        pass
    from cuco_tui.evaluate import cascade
    from cuco_tui.harness.gpus import GpuInfo, GpuInventory

    # Two GPUs as far as the cascade can tell: the level is prepared only for a run that would happen.
    monkeypatch.setattr(cascade, "inventory", lambda: GpuInventory((GpuInfo(0, "H100", 81559, 132),
                                                                    GpuInfo(1, "H100", 81559, 132))))
    r = evaluate(W.seed, W, EvalOptions(sanitize="memcheck", world=2, run_root=tmp_path / "runs"))
    assert r.status == Status.RUNTIME_ERROR and r.level == Level.COMPILE
    assert r.reason.startswith("cannot sanitize: compute-sanitizer was not found")
    assert not (tmp_path / "runs").exists()  # nothing was started


@dataclass(frozen=True)
class _Counted(Reading):
    pass


class _CountsComparisons(EvaluationLevel):
    """A level of this test's own: it reads how many outputs the ranks compared."""

    def read(self, outcomes: list[RankOutcome], facts: RunFacts) -> Reading:
        compared = sum(len(o.of(Verified)) for o in outcomes)
        return _Counted(notes=(Diagnostic(level=int(Level.VERIFY), severity="note", code="compared",
                                          message=f"{facts.workload}: {compared} outputs compared"),))


def test_a_new_level_adds_its_reading_without_a_change_to_the_cascade():
    ranks = [RankOutcome(r, r, 0, 0, read_events(DATA / "runs" / "measured" / f"rank{r}.jsonl")) for r in (0, 1)]
    run = GroupRun(ranks, 10.0, deadline_hit=False, aborted=False, gpus_released=True, rundir=DATA)
    base = {"candidate": "c.cu", "workload": "gemm_allgather", "world": 2, "gpus": [0, 1]}
    plain = interpret(run, W, dict(base))
    more = interpret(run, W, dict(base), levels=[races.PerturbedSchedules(), _CountsComparisons()])
    assert more.status == plain.status == Status.MEASURED
    added = [d for d in more.diagnostics if d not in plain.diagnostics]
    assert [d.message for d in added] == ["gemm_allgather: 14 outputs compared"]
