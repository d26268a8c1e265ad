"""What the search dashboard shows, as one frozen value, and the pure function that folds the
engine's events (cuco_tui.search.events) into it. The dashboard replaces its DashboardState with
apply(state, event) for every event and hands each widget its part; tests replay event
sequences through apply without a screen. Nothing here imports Textual."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Callable, Mapping

from cuco_tui.core.bounds import Bounds, Work
from cuco_tui.core.ending import describe_end
from cuco_tui.core.noise import Band, speedup_of
from cuco_tui.core.records import CandidateRecord, id_number
from cuco_tui.core.ranking import status_tier
from cuco_tui.core.result import CascadeResult, ShapeTiming
from cuco_tui.search import events as ev

SOURCE = "candidate.cu"
# The steps of a compile ahead (BuildQueued, BuildStarted), as the in-flight table names them.
BUILD_WAITING = "build queued"
BUILDING = "compiling"
BUILT = "built, waits its turn"  # for a GPU group (or a job slot) to evaluate it on


def unified_diff(parent_id: str, parent_source: str, child_id: str, child_source: str) -> str:
    lines = difflib.unified_diff(parent_source.splitlines(), child_source.splitlines(),
                                 f"{parent_id}/{SOURCE}", f"{child_id}/{SOURCE}", lineterm="")
    return "\n".join(lines)


@dataclass(frozen=True)
class PendingProposal:
    """A proposal the engine holds for the engineer's review."""

    candidate: str
    kind: str
    parents: tuple[str, ...]
    rationale: str
    design: Mapping[str, Any] = field(default_factory=dict)
    why: str = ""  # why the engine holds it
    diff: str = ""  # unified diff against the first parent ("" when the same code)
    source: str = ""  # the proposal's code, whole (what an edit starts from)


@dataclass(frozen=True)
class Evaluation:
    """An evaluation in flight: the stage it reached, where it runs, the cascade's last words;
    run as a cluster job (the Slurm executor), the job's id, state and nodes too."""

    candidate: str
    level: int  # cuco_tui.core.result.Level
    gpus: tuple[int, ...] = ()  # () until a stage names its GPU group (the CPU stages)
    step: str = ""
    job: str = ""  # the cluster job's id; "" while it runs (or waits) on this machine
    job_state: str = ""  # "pending" | "running" | "finished" | "lost" (JobChanged.state)
    job_reason: str = ""  # why it pends (Slurm's reason), or why it was lost
    nodes: tuple[str, ...] = ()
    # When its current stage began (the event's wall-clock `at`; 0: not known): the in-flight
    # table shows the time since. Not compared: two states showing the same step are equal.
    since: float = field(default=0.0, compare=False)


@dataclass(frozen=True)
class BoardEntry:
    """A committed candidate as the leaderboard shows it: what it is and how it ended."""

    candidate: str
    kind: str
    strategy: str  # the offline agent's strategy, else the design's backend and sync
    status: str
    speedup: float | None = None
    timings: tuple[ShapeTiming, ...] = ()  # per bench shape, when measured

    @property
    def measured(self) -> bool:
        """Timed, so it has a speed to rank by (a verified candidate was checked, never timed)."""
        return self.status == "measured" and self.speedup is not None

    @property
    def band(self) -> Band | None:
        """The speedup with the band of its measurement's noise (core/noise.py), when measured."""
        return speedup_of(self.speedup, self.timings) if self.measured and self.speedup is not None else None


def strategy_label(design: Mapping[str, Any]) -> str:
    knobs = design.get("knobs") or {}
    if isinstance(knobs, Mapping) and knobs.get("strategy"):
        return str(knobs["strategy"])
    parts = [str(design[k]) for k in ("backend", "sync") if design.get(k)]
    return "/".join(parts) or "-"


def board_entry(record: CandidateRecord) -> BoardEntry:
    timings: tuple[ShapeTiming, ...] = ()
    if record.result and record.result.get("timings"):
        try:
            timings = tuple(CascadeResult.from_dict(record.result).timings)
        except (TypeError, ValueError, KeyError):
            timings = ()  # a result this version cannot read: the entry still shows its status
    return BoardEntry(record.id, record.kind, strategy_label(record.design), shown_status(record), record.speedup,
                      timings)


def shown_status(record: CandidateRecord) -> str:
    """The status the dashboard counts and ranks: "rejected" for one turned down in review."""
    return "rejected" if record.reviewed.rejected else record.status


def board_key(entry: BoardEntry) -> tuple[int, float, int]:
    """Best first: measured by speedup, then verified (nothing timed), then compiled only
    (no_gpu), then the rest (core/ranking.py's tiers); newest first. Only a measured entry's
    speed counts."""
    speed = entry.speedup if entry.measured and entry.speedup is not None else 0.0
    return (status_tier(entry.status, timed=entry.measured), -speed, -id_number(entry.candidate))


def _frozen(mapping: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping))


class RunPhase(StrEnum):
    """Where the search is. STOPPING and FAILED are the dashboard's own: the engineer asked it to
    stop, or it could not start (or crashed). ENDED: the engine said how it ended (DashboardState.end)."""

    STARTING = "starting"
    RUNNING = "running"
    PAUSED = "paused"
    STOPPING = "stopping"
    ENDED = "ended"
    FAILED = "failed"


@dataclass(frozen=True)
class DashboardState:
    """`run`: the search's phase. `end`, once it ENDED: how, as the session's state that `cuco
    sessions` lists, with the reason where that says more: "finished", "exhausted", "stopped",
    "stopped (budget)" (core/ending.py). `run_text` is what the dashboard shows of both."""

    run: RunPhase = RunPhase.STARTING
    end: str = ""
    phase: str = "-"
    generation: int = 0
    generations: int = 0
    evaluations_limit: int | None = None  # the session's total of candidates to evaluate, when set
    islands: int = 0
    review_mode: str = "-"
    statuses: Mapping[str, int] = field(default_factory=lambda: _frozen({}))  # committed, per status
    best_id: str | None = None
    best_speedup: float | None = None
    spent: float = 0.0
    budget: float | None = None
    hints: int = 0
    hints_unread: str = ""  # why the agent reads no hints (one line), "" when it reads them
    proposals: tuple[PendingProposal, ...] = ()  # awaiting review, in the order they came
    evaluations: tuple[Evaluation, ...] = ()  # in flight, in the order they started
    builds_queued: int = 0  # compiles ahead waiting for a CPU builder (BuildQueued, BuildStarted)
    points: tuple[tuple[int, float], ...] = ()  # (candidate number, speedup) of the measured, in commit order
    # Committed candidates' code: the diff of a held proposal against its parent, and what `o` opens.
    sources: Mapping[str, str] = field(default_factory=lambda: _frozen({}))
    # From SearchStarted: which search this is (empty until it started).
    session: str = ""
    executor: str = ""  # where evaluations run when not on this machine's GPU groups (a Slurm partition), else ""
    workload: str = ""
    agent: str = ""
    resumed_at: int | None = None  # the generation a resumed search went on from
    errors: tuple[str, ...] = ()  # the engine's error messages, in order
    # The leaderboard: every committed candidate, best first (board_key).
    board: tuple[BoardEntry, ...] = ()
    # What % of bound, TFLOP/s and GB/s come from (BoundsKnown); bounds_note says why there are none.
    bounds: Bounds | None = None
    work: Mapping[str, Work] = field(default_factory=lambda: _frozen({}))
    bounds_note: str = ""
    can_measure: bool | None = None  # the search has a GPU group (None until it started)
    notices: tuple[str, ...] = ()  # what the engine warns of (a plateau), in order

    @property
    def held(self) -> int:
        return len(self.proposals)

    @property
    def in_flight(self) -> int:
        return len(self.evaluations)

    @property
    def ended(self) -> bool:
        """True once the search ended (finished, exhausted or stopped)."""
        return self.run is RunPhase.ENDED

    @property
    def over(self) -> bool:
        """True once nothing can be steered: the search ended or could not start."""
        return self.run in (RunPhase.ENDED, RunPhase.FAILED)

    @property
    def run_text(self) -> str:
        """The phase as a person reads it: how the search ended once it did ("stopped (budget)")."""
        return self.end if self.run is RunPhase.ENDED else self.run.value

    def proposal(self, candidate: str) -> PendingProposal | None:
        return next((p for p in self.proposals if p.candidate == candidate), None)


# ---------------------------------------------------------------------------- one fold per event type


def _started(s: DashboardState, e: ev.SearchStarted) -> DashboardState:
    return replace(s, executor=e.executor, run=RunPhase.RUNNING, islands=e.islands, generations=e.generations, review_mode=e.review_mode,
                   budget=e.budget_usd, session=e.session, workload=e.workload, agent=e.agent,
                   resumed_at=e.start_generation if e.resumed else None, can_measure=e.can_measure,
                   hints_unread=e.hints_unread, evaluations_limit=e.evaluations)


def _generation(s: DashboardState, e: ev.GenerationStarted) -> DashboardState:
    return replace(s, generation=e.generation, phase=e.phase)


def _proposal_ready(s: DashboardState, e: ev.ProposalReady) -> DashboardState:
    # Nothing to show yet: the queue shows a proposal once held (AwaitingReview), the table
    # once its evaluation starts; the dollars come as BudgetSpent.
    return s


def _pending(s: DashboardState, e: ev.AwaitingReview) -> PendingProposal:
    if e.parents:
        parent = e.parents[0]
        known = s.sources.get(parent)
        diff = (unified_diff(parent, known, e.candidate, e.source) if known is not None
                else f"(the source of {parent} is not known to the dashboard)")
    else:
        diff = unified_diff("(none)", "", e.candidate, e.source)
    return PendingProposal(candidate=e.candidate, kind=e.kind, parents=tuple(e.parents), rationale=e.rationale,
                           design=_frozen(e.design), why=e.why, diff=diff, source=e.source)


def _awaiting(s: DashboardState, e: ev.AwaitingReview) -> DashboardState:
    if s.proposal(e.candidate) is not None:
        return s
    return replace(s, proposals=(*s.proposals, _pending(s, e)))


def _without_proposal(s: DashboardState, candidate: str) -> tuple[PendingProposal, ...]:
    return tuple(p for p in s.proposals if p.candidate != candidate)


def _without_evaluation(s: DashboardState, candidate: str) -> tuple[Evaluation, ...]:
    return tuple(x for x in s.evaluations if x.candidate != candidate)


def _decided(s: DashboardState, e: ev.ReviewDecided) -> DashboardState:
    return replace(s, proposals=_without_proposal(s, e.candidate))


def _with_evaluation(s: DashboardState, new: Evaluation) -> DashboardState:
    """`new` in place of the candidate's evaluation, or after the others when it had none."""
    if not any(x.candidate == new.candidate for x in s.evaluations):
        return replace(s, evaluations=(*s.evaluations, new))
    return replace(s, evaluations=tuple(new if x.candidate == new.candidate else x for x in s.evaluations))


def _stage_started(s: DashboardState, e: ev.StageStarted) -> DashboardState:
    now = next((x for x in s.evaluations if x.candidate == e.candidate), None)
    if now is None:
        return _with_evaluation(s, Evaluation(e.candidate, e.level, tuple(e.gpus), e.message, since=e.at))
    # A stage that names no GPUs (a CPU stage after a GPU one) leaves the group shown; the time
    # counts from the stage's first step.
    new = replace(now, level=e.level, gpus=tuple(e.gpus) or now.gpus, step=e.message,
                  since=now.since if now.level == e.level and now.since else e.at)
    return _with_evaluation(s, new)


def _build(s: DashboardState, candidate: str, step: str, at: float, queued: int) -> DashboardState:
    now = next((x for x in s.evaluations if x.candidate == candidate), None)
    new = (Evaluation(candidate, 1, (), step, since=at) if now is None
           else replace(now, level=1, step=step, since=at))
    return replace(_with_evaluation(s, new), builds_queued=queued)


def _build_queued(s: DashboardState, e: ev.BuildQueued) -> DashboardState:
    return _build(s, e.candidate, BUILD_WAITING, e.at, e.queued)


def _build_started(s: DashboardState, e: ev.BuildStarted) -> DashboardState:
    return _build(s, e.candidate, BUILDING, e.at, e.queued)


def _job_changed(s: DashboardState, e: ev.JobChanged) -> DashboardState:
    now = next((x for x in s.evaluations if x.candidate == e.candidate), None)
    if e.state == "cancelled":  # the search stopped: the evaluation ends uncommitted
        return s if now is None else replace(s, evaluations=_without_evaluation(s, e.candidate))
    if now is None:
        if e.state not in ("pending", "running"):  # e.g. a late word on an evaluation already gone
            return s
        now = Evaluation(e.candidate, 1)  # L1: compiled ahead, now queued on the cluster
        s = replace(s, evaluations=(*s.evaluations, now))
    new = replace(now, job=e.job, job_state=e.state, job_reason=e.reason, nodes=tuple(e.nodes))
    return replace(s, evaluations=tuple(new if x.candidate == e.candidate else x for x in s.evaluations))


def _stage_finished(s: DashboardState, e: ev.StageFinished) -> DashboardState:
    if not e.status:  # it goes on to the next stage; a compile ahead's time stops counting
        now = next((x for x in s.evaluations if x.candidate == e.candidate), None)
        if now is None or now.step != BUILDING or e.level != 1:
            return s
        return _with_evaluation(s, replace(now, step=BUILT, since=e.at))
    return replace(s, evaluations=_without_evaluation(s, e.candidate))


def _committed(s: DashboardState, e: ev.CandidateCommitted) -> DashboardState:
    r = e.record
    if r.placeholder:  # an older engine's note that the agent ran out (a resumed session): no candidate
        return s
    status = shown_status(r)
    statuses = dict(s.statuses)
    statuses[status] = statuses.get(status, 0) + 1
    points = s.points if r.speedup is None else (*s.points, (id_number(r.id), float(r.speedup)))
    entry = board_entry(r)
    board = tuple(sorted([b for b in s.board if b.candidate != entry.candidate] + [entry], key=board_key))
    return replace(s, statuses=_frozen(statuses), sources=_frozen({**s.sources, r.id: r.source}),
                   proposals=_without_proposal(s, r.id), evaluations=_without_evaluation(s, r.id), points=points,
                   board=board)


def _measuring_bounds(s: DashboardState, e: ev.MeasuringBounds) -> DashboardState:
    gpus = ",".join(map(str, e.gpus))
    return replace(s, bounds_note=f"measuring on GPUs {gpus}…")


def _bounds_known(s: DashboardState, e: ev.BoundsKnown) -> DashboardState:
    return replace(s, bounds=e.bounds, work=_frozen(e.work), bounds_note=e.why)


def _plateau(s: DashboardState, e: ev.Plateau) -> DashboardState:
    return replace(s, notices=(*s.notices, e.message))


def _restored(s: DashboardState, e: ev.SessionRestored) -> DashboardState:
    """A resumed search's earlier candidates, as if each had just been committed."""
    for record in sorted(e.records, key=lambda r: id_number(r.id)):
        commit = ev.CandidateCommitted(record=record, sha="")
        s = _committed(s, commit)
    if e.best is not None:
        s = replace(s, best_id=e.best.id, best_speedup=e.best.speedup)
    return s


def _best(s: DashboardState, e: ev.BestImproved) -> DashboardState:
    return replace(s, best_id=e.record.id, best_speedup=e.record.speedup)


def _budget(s: DashboardState, e: ev.BudgetSpent) -> DashboardState:
    return replace(s, spent=e.spent, budget=e.cap)


def _hint(s: DashboardState, e: ev.HintAdded) -> DashboardState:
    return replace(s, hints=s.hints + 1)


def _paused(s: DashboardState, e: ev.Paused) -> DashboardState:
    return replace(s, run=RunPhase.PAUSED)


def _resumed(s: DashboardState, e: ev.Resumed) -> DashboardState:
    return replace(s, run=RunPhase.RUNNING)


def _finished(s: DashboardState, e: ev.SearchFinished) -> DashboardState:
    return replace(s, run=RunPhase.ENDED, end=describe_end(e.reason))


def _error(s: DashboardState, e: ev.EngineError) -> DashboardState:
    return replace(s, errors=(*s.errors, e.message))


_FOLDS: dict[type[ev.Event], Callable[[DashboardState, Any], DashboardState]] = {
    ev.SearchStarted: _started,
    ev.GenerationStarted: _generation,
    ev.ProposalReady: _proposal_ready,
    ev.AwaitingReview: _awaiting,
    ev.ReviewDecided: _decided,
    ev.StageStarted: _stage_started,
    ev.BuildQueued: _build_queued,
    ev.BuildStarted: _build_started,
    ev.StageFinished: _stage_finished,
    ev.JobChanged: _job_changed,
    ev.CandidateCommitted: _committed,
    ev.BestImproved: _best,
    ev.BudgetSpent: _budget,
    ev.HintAdded: _hint,
    ev.Paused: _paused,
    ev.Resumed: _resumed,
    ev.SearchFinished: _finished,
    ev.EngineError: _error,
    ev.SessionRestored: _restored,
    ev.MeasuringBounds: _measuring_bounds,
    ev.BoundsKnown: _bounds_known,
    ev.Plateau: _plateau,
}
EVENT_TYPES = frozenset(_FOLDS)  # the event types apply() knows


def apply(state: DashboardState, event: ev.Event) -> DashboardState:
    """The state after `event`. An event type not in EVENT_TYPES leaves the state as it was: a
    newer engine's event must not break a running dashboard (the tests check every type in
    cuco_tui.search.events is known)."""
    fold = _FOLDS.get(type(event))
    return state if fold is None else fold(state, event)
