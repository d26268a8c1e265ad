"""A profile on request, from the cascade's side (an evaluation level, levels.py): the plan asks the
ranks for a timeline of the candidate at one bench shape (in the ranks: harness/rank_steps.py
ProfiledLaunches, through CUPTI), and the files they write are read back into the result's
`profile` (core/profile.py): a summary per rank, with the exposed communication, and a Chrome trace
(core/profile_trace.py) written into the run folder, which ui.perfetto.dev opens.

A profile that cannot be taken (CUPTI not installed on the GPU host, the run ending before the
shape) is a `Profile` whose `problem` says why in one sentence; the evaluation's status and
timings are what they would have been without it."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from cuco_tui.core.profile import Activity, Profile, summarize
from cuco_tui.core.profile_trace import chrome_trace
from cuco_tui.core.result import CascadeResult
from cuco_tui.evaluate.levels import EvaluationLevel, LevelUnavailable, Prepared, Setup
from cuco_tui.harness.gpus import is_shared
from cuco_tui.harness.launcher import GroupRun, RankOutcome
from cuco_tui.harness.plan import ProfilePlan, RunPlan
from cuco_tui.harness.rank_events import ProfileCaptured

DEFAULT_LAUNCHES = 5
TRACE_FILE = "profile.trace.json"
SUMMARY_FILE = "profile.json"


class Profiling(EvaluationLevel):
    name = "profile"

    def __init__(self, shape: str, launches: int = DEFAULT_LAUNCHES) -> None:
        self.spec = ProfilePlan(shape, launches)

    def prepare(self, plan: RunPlan, setup: Setup) -> Prepared:
        if is_shared(list(setup.gpus)):
            raise LevelUnavailable("cannot profile with every rank on one GPU: the ranks take turns on it, so the "
                                   "timeline would show the sharing, not the candidate")
        timed = [s.name for s in plan.shapes if s.level == "bench"]
        if self.spec.shape not in timed:
            raise LevelUnavailable(f"cannot profile at {self.spec.shape}: this run times "
                                   + (f"only {', '.join(timed)}" if timed else "no bench shape"))
        return Prepared(replace(plan, profile=self.spec))

    def finish(self, result: CascadeResult, group: GroupRun) -> CascadeResult:
        gpus = {o.rank: o.gpu for o in group.ranks}
        return replace(result, profile=read_profile(group.ranks, group.rundir, self.spec, gpus))


def read_profile(outcomes: list[RankOutcome], rundir: Path, spec: ProfilePlan,
                 gpus: dict[int, int] | None = None) -> Profile:
    """The ranks' profile files as one Profile, its trace and summary written beside them in `rundir`."""
    empty = Profile(spec.shape, spec.launches)
    reports = {o.rank: e for o in outcomes for e in o.of(ProfileCaptured) if e.shape == spec.shape}
    if not reports:
        return replace(empty, problem=f"the run ended before {spec.shape} was profiled (see the result's reason)")
    missing = [o.rank for o in outcomes if o.rank not in reports]
    if missing:
        return replace(empty, problem=f"rank {missing[0]} did not report its profile")
    problems = [f"rank {rank}: {e.problem}" for rank, e in sorted(reports.items()) if e.problem]
    if problems:
        # The first rank's sentence: the others say the same, or that another rank could not.
        return replace(empty, problem=problems[0])
    per_rank: dict[int, list[Activity]] = {}
    notes: list[str] = []
    for rank, e in sorted(reports.items()):
        try:
            data = json.loads((rundir / e.file).read_text())
            per_rank[rank] = [Activity.from_dict(a) for a in data["activities"]]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            return replace(empty, problem=f"rank {rank}'s profile {rundir / e.file} cannot be read: {exc}")
        if e.dropped:
            notes.append(f"rank {rank} recorded {e.dropped} activities more than it kept; its summary leaves them out")
    trace = chrome_trace(per_rank, gpus)
    if trace.note:
        notes.append(trace.note)
    (rundir / TRACE_FILE).write_text(trace.text)
    profile = Profile(spec.shape, spec.launches, tuple(summarize(acts, rank) for rank, acts in sorted(per_rank.items())),
                      trace=str(rundir / TRACE_FILE), notes=tuple(notes))
    (rundir / SUMMARY_FILE).write_text(json.dumps(profile.to_dict(), indent=1))
    return profile
