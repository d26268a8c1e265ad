"""The record the engine commits for each way a proposal can end: evaluated (whatever the
cascade found), crashed (the evaluator raised), its job failed without a result (an executor
that runs evaluations as cluster jobs), or turned away before evaluation: the agent failed or
gave no code, a duplicate, rejected in review. A turned-away record has status rejected and its
reason as its one diagnostic, so the lineage, the TUI and the next prompt read it like any other
failure.

A proposal still waiting for the engineer when the search stops was never judged by anyone: it
is recorded with status and review "unreviewed" (`unreviewed`), not as rejected, and a resumed
search holds it for review again (Drafts.review_again)."""

from __future__ import annotations

import traceback
from dataclasses import replace
from typing import Any

from cuco_tui.core.records import CandidateRecord, RecordStatus, Review, ReviewOutcome, id_number
from cuco_tui.core.result import CascadeResult, Diagnostic, Level, Status
from cuco_tui.executors.base import JobRun
from cuco_tui.search.novelty import Verdict


def _result(record: CandidateRecord, status: Status, level: Level, reason: str,
            diagnostics: list[Diagnostic] | None = None, logs: dict[str, str] | None = None) -> dict[str, Any]:
    return CascadeResult(candidate=f"{record.id}.cu", workload="", status=status, level=level, reason=reason,
                         diagnostics=diagnostics or [], logs=logs or {}).to_dict()


REMEASURES = ("confirm", "rebenchmark")  # kinds that evaluate a candidate's code again


def is_evaluation(record: CandidateRecord) -> bool:
    """Whether `record` is a candidate sent to evaluation, as SearchConfig.evaluations counts
    them: not turned away before it (by the agent, the novelty filter, a review or the engine),
    not a re-measure of code already evaluated, not waiting or held."""
    if record.kind in REMEASURES or record.rejected_by:
        return False
    return record.status not in (RecordStatus.PENDING, RecordStatus.UNREVIEWED, RecordStatus.EXHAUSTED)


def turned_away(record: CandidateRecord, by: str, reason: str, code: str, **extra: Any) -> CandidateRecord:
    """A candidate stopped before evaluation (by "review", "novelty", "agent" or "engine"):
    status rejected, the reason as its one diagnostic."""
    diag = Diagnostic(level=int(Level.STATIC), severity="error", message=reason, code=code)
    result = _result(record, Status.REJECTED, Level.STATIC, reason, [diag])
    return replace(record, status=RecordStatus.REJECTED, result=result, rejected_by=by,
                   extra={**record.extra, **extra})


def crashed(record: CandidateRecord, exc: BaseException) -> CandidateRecord:
    """The evaluator raised instead of returning a result: a runtime error, with the traceback."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    reason = f"the evaluator crashed: {type(exc).__name__}: {exc}"
    diag = Diagnostic(level=int(Level.COMPILE), severity="error", message=reason, code="engine")
    result = _result(record, Status.RUNTIME_ERROR, Level.COMPILE, reason, [diag], {"traceback": text[-8000:]})
    return replace(record, status=RecordStatus.RUNTIME_ERROR, result=result)


def evaluated(record: CandidateRecord, result: CascadeResult) -> CandidateRecord:
    """The cascade's result, whatever it found; latency is the sum of the shapes' medians."""
    latency = sum(t.candidate.median for t in result.timings) if result.timings else None
    return replace(record, status=RecordStatus(result.status), result=result.to_dict(), speedup=result.speedup,
                   latency_ms=latency)


def agent_failed(record: CandidateRecord, exc: Exception) -> CandidateRecord:
    """The agent raised instead of proposing."""
    return turned_away(record, "agent", f"the agent failed: {type(exc).__name__}: {exc}", "agent")


def no_candidate(record: CandidateRecord, why: str) -> CandidateRecord:
    """The agent answered without a usable candidate (`why`: its error, or an empty reply)."""
    return turned_away(record, "agent", f"no candidate: {why}", "agent")


def duplicate(record: CandidateRecord, verdict: Verdict) -> CandidateRecord:
    """The novelty filter found the proposal already in the search."""
    return turned_away(record, "novelty", f"novelty filter: {verdict.reason}", "novelty",
                       duplicate_of=verdict.duplicate_of, similarity=round(verdict.similarity, 6))


def rejected_in_review(record: CandidateRecord, reason: str) -> CandidateRecord:
    """The engineer rejected the held proposal (`reason`: theirs, or "no reason given")."""
    return turned_away(replace(record, review=str(Review(ReviewOutcome.REJECTED, reason))), "review", f"rejected in review: {reason}",
                       "review")


def unreviewed(record: CandidateRecord, held_because: str) -> CandidateRecord:
    """The search stopped (or ended) while the proposal waited for the engineer: neither
    accepted nor rejected. `held_because`: why the review gate held it."""
    reason = "the search stopped before this proposal was reviewed; resuming the session holds it for review again"
    return replace(record, status=RecordStatus.UNREVIEWED, review=str(Review(ReviewOutcome.UNREVIEWED)),
                   result={"status": RecordStatus.UNREVIEWED.value, "reason": reason}, held_because=held_because)


def is_unreviewed(record: CandidateRecord) -> bool:
    return record.status is RecordStatus.UNREVIEWED


def left_for_a_resume(records: list[CandidateRecord]) -> bool:
    """Whether an earlier run left work that a resume does before any new generation: a
    proposal never reviewed (SearchEngine._review_again holds it again) or a finalist never
    re-measured alone (Scheduler.confirm_left_over)."""
    again = {r.review_of for r in records}
    confirmed = {r.confirm_of for r in records if r.kind == "confirm"}
    return any((is_unreviewed(r) and r.id not in again) or (r.finalist and r.id not in confirmed) for r in records)


def timed_beside(record: CandidateRecord, others: set[str]) -> CandidateRecord:
    """An evaluated record marked with the evaluations that held other GPU groups meanwhile
    (its figure may owe something to them: see scheduling.is_finalist)."""
    return replace(record, concurrent=len(others), concurrent_with=tuple(sorted(others, key=id_number)))


def job_failed(record: CandidateRecord, message: str, log: str = "") -> CandidateRecord:
    """The evaluation's job ended without a cascade result (the evaluator raised on the node, the
    job ran past its limit, or it was lost too often): a runtime error, with the job's output."""
    diag = Diagnostic(level=int(Level.COMPILE), severity="error", message=message, code="job")
    result = _result(record, Status.RUNTIME_ERROR, Level.COMPILE, message, [diag], {"job": log[-8000:]} if log else {})
    return replace(record, status=RecordStatus.RUNTIME_ERROR, result=result)


def ran_as_job(record: CandidateRecord, run: JobRun | None, lost: tuple[JobRun, ...] = ()) -> CandidateRecord:
    """The record with its job (id, state, nodes, partition) and the jobs of the same evaluation
    that were lost before it (each with Slurm's reason) in its extra."""
    extra = dict(record.extra)
    if run is not None:
        extra["job"] = run.to_dict()
    if lost:
        extra["lost_jobs"] = [r.to_dict() for r in lost]
    return replace(record, extra=extra)
