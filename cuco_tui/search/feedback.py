"""What an agent reads about a failed candidate in its next prompt: the reason, the compiler
errors with their source lines, the deadlock report, the verification error; and the records
the engine writes for outcomes that never reached the evaluator."""

from __future__ import annotations

import traceback
from dataclasses import replace
from typing import Any

from cuco_tui.core.result import CascadeResult, Diagnostic, Level, Status
from cuco_tui.core.records import CandidateRecord

MAX_FEEDBACK = 6000  # characters: enough for the first errors, short enough for a prompt


def render_failure(record: CandidateRecord, limit: int = MAX_FEEDBACK) -> str:
    """The failure of `record` as a person (or a model) should read it; "" if it did not fail."""
    if not record.result or record.status in ("measured", "no_gpu", "pending"):
        return ""
    try:
        result = CascadeResult.from_dict(record.result)
    except (KeyError, TypeError, ValueError):
        return f"{record.id} ({record.kind}) failed: {record.status}"
    parts = [f"{record.id} ({record.kind}, generation {record.generation}) failed: {result.status.value} at "
             f"L{int(result.level)} ({result.level.name.lower()}): {result.reason}"]
    errors = [d for d in result.diagnostics if d.severity == "error"] or result.diagnostics
    if errors:
        parts.append("Diagnostics:\n" + "\n".join(d.render() for d in errors[:8]))
    bad = [v for v in result.verifications if not v.ok]
    if bad:
        v = bad[0]
        parts.append(f"Verification at {v.shape}: max relative error {v.max_rel_error:.3g} (tolerance {v.tolerance:g}), "
                     f"{v.unwritten} of {v.elements} elements never written, {v.nonfinite} non-finite; worst: {v.worst}")
    if result.deadlock_report:
        parts.append("Deadlock report:\n" + result.deadlock_report)
    text = "\n\n".join(parts)
    return text if len(text) <= limit else text[: limit - 20] + "\n... (truncated)"


def _result(record: CandidateRecord, status: Status, level: Level, reason: str,
            diagnostics: list[Diagnostic] | None = None, logs: dict[str, str] | None = None) -> dict[str, Any]:
    return CascadeResult(candidate=f"{record.id}.cu", workload="", status=status, level=level, reason=reason,
                         diagnostics=diagnostics or [], logs=logs or {}).to_dict()


def turned_away(record: CandidateRecord, by: str, reason: str, code: str, **extra: Any) -> CandidateRecord:
    """A candidate stopped before evaluation (by "review", "novelty", "agent" or "engine"):
    status rejected, the reason as its one diagnostic."""
    diag = Diagnostic(level=int(Level.STATIC), severity="error", message=reason, code=code)
    result = _result(record, Status.REJECTED, Level.STATIC, reason, [diag])
    return replace(record, status=Status.REJECTED.value, result=result,
                   extra={**record.extra, "rejected_by": by, **extra})


def crashed(record: CandidateRecord, exc: BaseException) -> CandidateRecord:
    """The evaluator raised instead of returning a result: a runtime error, with the traceback."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    reason = f"the evaluator crashed: {type(exc).__name__}: {exc}"
    diag = Diagnostic(level=int(Level.COMPILE), severity="error", message=reason, code="engine")
    result = _result(record, Status.RUNTIME_ERROR, Level.COMPILE, reason, [diag], {"traceback": text[-8000:]})
    return replace(record, status=Status.RUNTIME_ERROR.value, result=result)


def evaluated(record: CandidateRecord, result: CascadeResult) -> CandidateRecord:
    latency = sum(t.candidate.median for t in result.timings) if result.timings else None
    return replace(record, status=result.status.value, result=result.to_dict(), speedup=result.speedup,
                   latency_ms=latency)
