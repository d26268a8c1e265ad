"""What an agent reads about a failed candidate in its next prompt: the reason, the compiler
errors with their source lines, the deadlock report, the verification error. (The records the
engine commits for each outcome are in outcomes.py.)"""

from __future__ import annotations

from cuco_tui.core.records import CandidateRecord, RecordStatus
from cuco_tui.core.result import CascadeResult

_NOT_FAILED = (RecordStatus.MEASURED, RecordStatus.VERIFIED, RecordStatus.NO_GPU, RecordStatus.PENDING)
MAX_FEEDBACK = 6000  # characters: enough for the first errors, short enough for a prompt


def render_failure(record: CandidateRecord, limit: int = MAX_FEEDBACK) -> str:
    """The failure of `record` as a person (or a model) should read it; "" if it did not fail."""
    if not record.result or record.placeholder or record.status in _NOT_FAILED:
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
