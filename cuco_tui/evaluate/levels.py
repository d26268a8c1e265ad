"""The seam for an evaluation level beyond L0-L3: a part of the run that a plan entry turns on in
the ranks (L2's perturbed schedules, evaluate/races.py; compute-sanitizer, evaluate/sanitizer.py).

A level is three things, linked by its entry in the run plan (harness/plan.py):
  - here, an `EvaluationLevel`: how it narrows the options and the build, its plan change (with
    `dataclasses.replace`) and how the ranks are started, then its reading of the ranks' events
    before the cascade decides the status and what it adds to the result after;
  - its field in `RunPlan`, which the rank workers read;
  - in the worker, a `RankStep` (harness/rank_steps.py) that the field turns on.
The cascade asks every level of `cascade.levels_for(options)`, in order, at each point; a hook a
level does not need keeps the default, which changes nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from cuco_tui.core.result import CascadeResult, Diagnostic, Level, Verification
from cuco_tui.harness.launcher import GroupRun, RankOutcome
from cuco_tui.harness.plan import RunPlan
from cuco_tui.toolchain import BuildCache
from cuco_tui.toolchain.toolchain import Toolchain

if TYPE_CHECKING:  # cascade imports this module
    from cuco_tui.evaluate.cascade import EvalOptions


class LevelUnavailable(RuntimeError):
    """A level that was asked for cannot run here: the evaluation stops after L1 with this sentence."""


@dataclass(frozen=True)
class Setup:
    """What a level may use to prepare its part of a run."""

    options: EvalOptions  # as every level narrowed them
    gpus: tuple[int, ...]
    toolchain: Toolchain
    cache: BuildCache
    say: Callable[[Level, str], None]  # a step for whoever watches (the CLI's spinner, the TUI)


@dataclass(frozen=True)
class Prepared:
    """A level's part of a run: the plan with its entry, and the command that starts each rank
    (None: the harness's worker as it is)."""

    plan: RunPlan
    worker_argv: list[str] | None = None
    diagnostics: tuple[Diagnostic, ...] = ()  # warnings about what it could not set up (the run goes on)


@dataclass(frozen=True)
class RunFacts:
    """What a reading knows of the run besides the ranks' events."""

    candidate: str  # the candidate's path as given
    workload: str
    gpus: tuple[int, ...]


@dataclass(frozen=True)
class Reading:
    """A level's reading of the ranks' events, before the cascade decides the status."""

    notes: tuple[Diagnostic, ...] = ()  # what it did or could not do, added to the result's diagnostics
    during: str = ""  # " (during ...)": its step a run stopped in (an error or a hang), added to the reason

    def explain(self, failed: Verification, what: str) -> tuple[str, Diagnostic] | None:
        """(the reason, the diagnostic) of the first failed verification when this level's step
        failed it; None leaves it to the cascade ("wrong output at ...")."""
        return None


class EvaluationLevel:
    name = ""

    def narrow(self, options: EvalOptions) -> EvalOptions:
        """The options of an evaluation under this level (compute-sanitizer: verification only)."""
        return options

    def compile_flags(self) -> tuple[str, ...]:
        """nvcc flags the candidate is built with under this level (compute-sanitizer: -lineinfo)."""
        return ()

    def prepare(self, plan: RunPlan, setup: Setup) -> Prepared:
        """Its plan entry and how the ranks start; LevelUnavailable when it was asked for and cannot."""
        return Prepared(plan)

    def read(self, outcomes: list[RankOutcome], facts: RunFacts) -> Reading:
        return Reading()

    def finish(self, result: CascadeResult, group: GroupRun) -> CascadeResult:
        """The result with what this level found outside the ranks' events (the tool's reports)."""
        return result


def prepare_all(levels: list[EvaluationLevel], plan: RunPlan, setup: Setup) -> Prepared:
    """Every level's part of the run, in order: each changes the plan the one before left."""
    worker_argv: list[str] | None = None
    diagnostics: tuple[Diagnostic, ...] = ()
    for level in levels:
        prepared = level.prepare(plan, setup)
        plan, diagnostics = prepared.plan, diagnostics + prepared.diagnostics
        worker_argv = prepared.worker_argv or worker_argv
    return Prepared(plan, worker_argv, diagnostics)


def reading_of(levels: list[EvaluationLevel], outcomes: list[RankOutcome], facts: RunFacts) -> Reading:
    """The levels' readings as one: every note, the first step a run stopped in, the first
    explanation of a failed verification."""
    readings = [level.read(outcomes, facts) for level in levels]
    return _Readings(tuple(d for r in readings for d in r.notes), next((r.during for r in readings if r.during), ""),
                     tuple(readings))


@dataclass(frozen=True)
class _Readings(Reading):
    parts: tuple[Reading, ...] = ()

    def explain(self, failed: Verification, what: str) -> tuple[str, Diagnostic] | None:
        return next((x for r in self.parts if (x := r.explain(failed, what)) is not None), None)
