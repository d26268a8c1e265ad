"""One candidate as the candidate view shows it, read once from the session (in a thread) into
plain data: the record (from the index: record.json, with result.json and the rationale in
it), its source (candidate.cu from git), a diff against each parent, its logs under the
names the commit stores them (logs/<name>.txt), what its timings are measured against: the
session's bounds and the workload's work per shape (FLOPs, bytes), and the newest profile kept with
it (lineage/profiles.py). No Textual here."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping

from cuco_tui.core.bounds import Bounds, ShapeFigures, Work, all_figures
from cuco_tui.core.profile import Profile
from cuco_tui.core.result import CascadeResult, Diagnostic, Status
from cuco_tui.lineage import SessionError, SessionRepo
from cuco_tui.lineage.files import log_paths
from cuco_tui.lineage.profiles import stored_profile
from cuco_tui.core.records import CandidateRecord, RecordStatus


@dataclass(frozen=True)
class ParentDiff:
    parent: str
    diff: str  # unified diff of candidate.cu, parent -> candidate; "" when the same code
    error: str = ""  # why there is no diff (a parent missing from the session)


@dataclass(frozen=True)
class LogFile:
    name: str  # the key in the result's logs, e.g. "rank0.stderr"
    path: str  # where the commit stores it, e.g. "logs/rank0.stderr.txt"
    text: str


@dataclass(frozen=True)
class CandidateView:
    session: str  # the session folder's name (never its full path: snapshots stay the same)
    record: CandidateRecord
    result: CascadeResult | None  # None: no result, or one this version cannot read
    diffs: tuple[ParentDiff, ...]
    logs: tuple[LogFile, ...]  # only logs with text
    result_error: str = ""  # why result is None although the record holds one
    bounds: Bounds | None = None  # the session's, when it measured them
    work: Mapping[str, Work] = field(default_factory=dict)  # per bench shape, when the workload counts it
    profile: Profile | None = None  # the newest profile kept with it (lineage/profiles.py), if any
    profile_error: str = ""  # why a profile kept with it cannot be read

    def figures(self) -> tuple[ShapeFigures, ...]:
        """Per measured shape: time, speedup, TFLOP/s, GB/s and % of the bound where known."""
        return all_figures(self.result.timings, self.bounds, self.work) if self.result is not None else ()

    def no_bound(self) -> str:
        """Why the timings have no % of the bound, in a few words ("" when every shape has one).
        A candidate with timings was timed on GPUs, so a session without bounds did not fail for
        want of a GPU: it was recorded before cuco kept bounds, or measuring them failed."""
        shown = self.figures()
        missing = [f.shape for f in shown if f.pct_of_bound is None]
        if not missing:
            return ""
        if self.bounds is not None:
            return f"no bound for {', '.join(missing)}: the session's bounds do not cover {'it' if len(missing) == 1 else 'them'}"
        if self.result is not None and self.result.gpus:
            return ("no bound recorded: this session was timed on GPUs but keeps no bounds (it was recorded before "
                    "cuco kept them, or measuring them failed)")
        return "no bound: the session measured none (it needs a GPU)"

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def source_lines(self) -> list[str]:
        return self.record.source.splitlines()

    @property
    def measured(self) -> bool:
        return self.result is not None and bool(self.result.timings)

    def not_measured(self) -> str:
        """Why there are no timings, in a few words ("" when there are)."""
        if self.measured:
            return ""
        if self.record.status is RecordStatus.UNREVIEWED:
            return "not evaluated: the search stopped before this proposal was reviewed"
        if self.result is None:
            return "not measured: no evaluation result recorded"
        if self.result.status in (Status.VERIFIED, Status.MEASURED):
            return f"not measured: {self.result.reason or 'verified only (the benchmark was not run)'}"
        return f"not measured: {self.result.status.value}"

    def located_diagnostics(self) -> list[Diagnostic]:
        """The result's diagnostics, each that points into this candidate given its source line
        when the result lacks it (L0 findings and older results carry only file:line:col)."""
        if self.result is None:
            return []
        lines = self.source_lines
        names = {"candidate.cu", f"{self.id}.cu", Path(self.result.candidate).name}
        out = []
        for d in self.result.diagnostics:
            if d.line and not d.source_line and Path(d.file).name in names and 0 < d.line <= len(lines):
                d = replace(d, source_line=lines[d.line - 1])
            out.append(d)
        return out

    @property
    def compile_failed(self) -> bool:
        return self.result is not None and self.result.status is Status.COMPILE_ERROR


def parse_result(record: CandidateRecord) -> tuple[CascadeResult | None, str]:
    if not record.result or record.status is RecordStatus.UNREVIEWED:  # never evaluated: nothing to read
        return None, ""
    if record.result.get("status") == RecordStatus.PENDING:  # lineage/files.py: committed unevaluated
        return None, "the evaluation never finished"
    try:
        return CascadeResult.from_dict(record.result), ""
    except (TypeError, ValueError, KeyError) as e:
        return None, f"the stored result cannot be read by this version ({type(e).__name__}: {e})"


def load_candidate(repo: SessionRepo, candidate_id: str) -> CandidateView:
    """Everything the view shows of one candidate. Blocking (git reads): call from a thread.
    Raises SessionError for an id the session does not hold."""
    record = repo.record(candidate_id)
    result, error = parse_result(record)
    diffs = []
    for parent in record.parents:
        try:
            diffs.append(ParentDiff(parent, repo.diff(parent, candidate_id)))
        except SessionError as e:
            diffs.append(ParentDiff(parent, "", str(e)))
    logs: list[LogFile] = []
    stored = (record.result or {}).get("logs") or {}
    if isinstance(stored, dict):
        # The commit's logs/ files are written from exactly these texts (lineage.files), under
        # these paths; the record already holds them, so no second read of git is needed.
        for name, path in log_paths(stored).items():
            text = stored[name] if isinstance(stored[name], str) else str(stored[name])
            if text.strip():
                logs.append(LogFile(str(name), path, text))
    bounds = repo.bounds()
    work = {b.shape: b.work for b in bounds.shapes} if bounds is not None else session_work(repo, result)
    try:
        profile, profile_error = stored_profile(repo, candidate_id), ""
    except SessionError as e:
        profile, profile_error = None, str(e)
    return CandidateView(repo.path.name, record, result, tuple(diffs), tuple(logs), error, bounds, work, profile,
                         profile_error)


def session_work(repo: SessionRepo, result: CascadeResult | None) -> dict[str, Work]:
    """The workload's work per shape at the result's world size, for a session without bounds
    (made without a GPU, or before bounds were recorded); {} when there is nothing to count."""
    if result is None or not result.timings or not result.world:
        return {}
    from cuco_tui.core.workload import WorkloadError
    from cuco_tui.evaluate.work import work_counts
    from cuco_tui.workload.manifest import load_workload

    try:
        workload = load_workload(str(repo.session_info().get("workload", "")))
    except WorkloadError:  # a bundle of a workload this checkout lacks
        return {}
    return work_counts(workload, result.world)
