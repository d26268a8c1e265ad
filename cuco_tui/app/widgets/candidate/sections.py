"""What the candidate view's tabs hold, decided from a CandidateView: a section exists only
when the candidate has content for it, and the overview says in words what is absent and why
(e.g. "not measured: compile_error"). Renderers come from the evaluate screen's ResultView and
the harness where they exist there; this module only arranges them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.syntax import Syntax
from rich.text import Text
from textual.content import Content

from cuco_tui.app.widgets.candidate.deadlock import deadlock_parts, parse_report
from cuco_tui.app.widgets.candidate.model import CandidateView
from cuco_tui.app.widgets.diff_text import diff_content
from cuco_tui.app.widgets.candidate.profile import profile_parts
from cuco_tui.app.widgets.candidate.timings import timings_parts
from cuco_tui.app.widgets.lineage.candidate_details import facts_text
from cuco_tui.app.widgets.result_view import LEVEL_NAMES, LOG_LINES, SEVERITY_STYLE
from cuco_tui.app.widgets.result_view import _verification_table as verification_table
from cuco_tui.core.result import Status

THEME = "ansi_dark"  # the terminal's own colors, as the dashboard's and the lineage's diffs use


@dataclass(frozen=True)
class Verbatim:
    """Text whose lines are kept whole (a log, a source line under its caret): a narrow pane
    scrolls it sideways. Any other Text or Content part wraps at the pane's width."""

    content: Content


@dataclass(frozen=True)
class Joined:
    """A part followed by the next with no blank line between (a message, then its source line)."""

    part: Any


@dataclass(frozen=True)
class Section:
    id: str  # the tab's id: "overview", "source", "diff-c0003", "errors", ...
    title: str
    parts: tuple[Any, ...]  # Content, Text, Verbatim or rich renderables, one Static each
    wide: bool = False  # its tables and code keep their width and scroll sideways; prose wraps


def _syntax(code: str, lexer: str, **kwargs: Any) -> Syntax:
    return Syntax(code, lexer, theme=THEME, background_color="default", word_wrap=False, **kwargs)


def _marked_lines(view: CandidateView) -> set[int]:
    """Source lines worth a highlight: where diagnostics point, where ranks hung."""
    lines = {d.line for d in view.located_diagnostics() if d.line}
    if view.result is not None and view.result.deadlock_report:
        lines |= {line for r in parse_report(view.result.deadlock_report).ranks for w in r.waits for line in w.lines}
    return lines


def overview(view: CandidateView) -> Section:
    r = view.result
    parts: list[Any] = [facts_text(view.record)]
    result = Text()
    result.append("Evaluation\n", style="bold")
    if r is not None:
        result.append(f"reached {LEVEL_NAMES[r.level]}: {r.reason}\n")
        if r.gpus:
            result.append(f"GPUs {','.join(map(str, r.gpus))} (world {r.world}) · ran {r.run_seconds:.1f} s\n",
                          style="dim")
    else:
        result.append((view.result_error or "no evaluation result recorded") + "\n")
    absent = absent_notes(view)
    if absent:
        result.append("\nNot in this candidate\n", style="bold")
        for note in absent:
            result.append(f"  {note}\n", style="dim")
    parts.append(result)
    return Section("overview", "Overview", tuple(parts))


def absent_notes(view: CandidateView) -> list[str]:
    """The sections a reader might look for and will not find, each with its reason."""
    r = view.result
    notes = []
    if not view.record.source.strip():
        notes.append("source: none (the agent returned no code)")
    if not view.record.parents:
        notes.append("diff: none (no parent: a seed)")
    if not view.measured:
        notes.append(f"timings: {view.not_measured()}")
    if r is not None and not r.verifications and r.status not in (Status.MEASURED, Status.VERIFIED):
        notes.append(f"verification: not run (stopped at {LEVEL_NAMES[r.level]})")
    if r is not None and r.status is Status.DEADLOCK and not r.deadlock_report.strip():
        notes.append("deadlock diagnosis: none stored with this result")
    if not view.logs:
        notes.append("run log: none stored")
    return notes


def source(view: CandidateView) -> Section | None:
    if not view.record.source.strip():
        return None
    code = _syntax(view.record.source, "cuda", line_numbers=True, highlight_lines=_marked_lines(view))
    return Section("source", "Source", (code,), wide=True)


def diffs(view: CandidateView) -> list[Section]:
    out = []
    for d in view.diffs:
        if d.error:
            body: Any = Text(d.error, style="red")
        elif not d.diff:
            body = Text(f"{view.id} has the same candidate.cu as {d.parent}.")
        else:
            body = diff_content(d.diff)  # wraps; what changed within a line is marked
        out.append(Section(f"diff-{d.parent}", f"Diff {d.parent}", (body,), wide=True))
    return out


def errors(view: CandidateView) -> Section | None:
    r = view.result
    if r is None:
        return None
    diags = view.located_diagnostics()
    log = r.logs.get("nvcc", "").strip()
    located = any(d.line for d in diags)
    parts: list[Any] = []
    if diags:
        parts.append(Joined(Content.styled(f"Diagnostics ({len(diags)})", "bold")))
        for d in diags:
            # The message wraps; the source line and its caret stay whole, one above the other.
            head, _, rest = d.render().partition("\n")
            message = Content.styled(head, SEVERITY_STYLE.get(d.severity, ""))
            parts.append(Joined(message) if rest else message)
            if rest:
                parts.append(Verbatim(Content(rest)))
    if view.compile_failed and log and not located:
        tail = "\n".join(log.splitlines()[-LOG_LINES:])
        parts.append(Verbatim(Content.assemble(("nvcc output (last lines)\n", "bold"), tail)))
    if not parts:
        return None
    title = "Compiler errors" if view.compile_failed else "Diagnostics"
    return Section("errors", title, tuple(parts), wide=True)


def logs(view: CandidateView) -> Section | None:
    if not view.logs:
        return None
    parts = [Verbatim(Content.assemble((f"{log.path}\n", "bold"), log.text.rstrip("\n") + "\n")) for log in view.logs]
    return Section("logs", "Run log", tuple(parts), wide=True)


def deadlock(view: CandidateView) -> Section | None:
    r = view.result
    if r is None or not r.deadlock_report.strip():
        return None
    return Section("deadlock", "Deadlock", deadlock_parts(r.deadlock_report, view.source_lines), wide=True)


def verification(view: CandidateView) -> Section | None:
    r = view.result
    if r is None or not r.verifications:
        return None
    parts: list[Any] = []
    if r.status is Status.INCORRECT:
        parts.append(Text(r.reason, style="bold red"))
    parts.append(verification_table(r.verifications))
    for v in r.verifications:
        if not v.ok and v.tolerance:
            parts.append(Text(f"{v.shape}: tolerance {v.tolerance:g} (|y - ref| / (|ref| + rms(ref)))"))
    return Section("verification", "Verification", tuple(parts), wide=True)


def timings(view: CandidateView) -> Section | None:
    r = view.result
    if r is None or not r.timings:
        return None
    return Section("timings", "Timings", timings_parts(r.timings, r.speedup, view.figures(), view.no_bound()),
                   wide=True)


def profile(view: CandidateView) -> Section | None:
    """The newest profile kept with the candidate (`cuco eval --session S ID --profile SHAPE`)."""
    p = view.profile
    if p is None:
        return Section("profile", "Profile", (Text(view.profile_error, style="red"),)) if view.profile_error else None
    return Section("profile", "Profile", profile_parts(p, view.id), wide=True)


def sections(view: CandidateView) -> list[Section]:
    """The tabs, in reading order; only those with content."""
    found = [overview(view), source(view), *diffs(view), errors(view), deadlock(view), verification(view),
             timings(view), profile(view), logs(view)]
    return [s for s in found if s is not None]


# The tab a candidate opens on: where its outcome is explained.
_FIRST_BY_STATUS = {
    Status.COMPILE_ERROR: "errors",
    Status.REJECTED: "errors",
    Status.DEADLOCK: "deadlock",
    Status.INCORRECT: "verification",
    Status.RUNTIME_ERROR: "errors",
    Status.MEASURED: "timings",
    Status.VERIFIED: "verification",  # nothing timed: what it passed
}


def first_section(view: CandidateView, shown: list[Section]) -> str:
    ids = [s.id for s in shown]
    wanted = _FIRST_BY_STATUS.get(view.result.status) if view.result is not None else None
    if wanted in ids:
        return wanted
    if view.result is not None and view.result.status is Status.RUNTIME_ERROR and "logs" in ids:
        return "logs"
    return "overview"
