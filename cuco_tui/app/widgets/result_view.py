"""The right panel: the selected candidate's last CascadeResult, level by level."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.reactive import reactive
from textual.widgets import Label, Static

from cuco_tui.app.messages import CandidateState, status_tone
from cuco_tui.app.widgets.measure import natural_width
from cuco_tui.core.bounds import all_figures
from cuco_tui.core.noise import speedup_of
from cuco_tui.core.result import CascadeResult, Diagnostic, Level, ShapeTiming, Verification

LEVEL_NAMES = {
    Level.STATIC: "L0 static checks",
    Level.COMPILE: "L1 compile",
    Level.VERIFY: "L2 verify",
    Level.BENCHMARK: "L3 benchmark",
}
SEVERITY_STYLE = {"error": "$text-error", "warning": "$text-warning", "note": "$text-muted"}
LOG_LINES = 30


@dataclass(frozen=True)
class Shown:
    """What the panel shows: one candidate, its state and its last result (None: never evaluated)."""

    path: Path
    label: str
    state: CandidateState = CandidateState.IDLE
    result: CascadeResult | None = None
    note: str = ""  # a line about the evaluation itself, e.g. an exception it raised


class ResultView(VerticalScroll):
    DEFAULT_CSS = """
    ResultView { overflow-x: auto; }
    """
    shown: reactive[Shown | None] = reactive(None)

    def compose(self) -> ComposeResult:
        yield Label("", id="result-title", classes="panel-title")
        yield Static("", id="result-status")
        yield Static("", id="result-facts")
        yield Static("", id="result-reason")
        yield Static("", id="result-diagnostics", classes="result-section")
        yield Static("", id="result-verifications", classes="result-section")
        yield Static("", id="result-timings", classes="result-section")
        yield Static("", id="result-deadlock", classes="result-section")
        yield Static("", id="result-log", classes="result-section")

    def show(self, shown: Shown | None) -> None:
        self.shown = shown

    def watch_shown(self, shown: Shown | None) -> None:
        if not self.is_mounted:
            return
        for section in self.query(".result-section"):
            section.display = False
        status = self.query_one("#result-status", Static)
        status.remove_class("-ok", "-warn", "-bad", "-busy")
        if shown is None:
            self.query_one("#result-title", Label).update("")
            status.update("")
            self.query_one("#result-facts", Static).update("")
            self.query_one("#result-reason", Static).update("Select a candidate on the left.")
            return
        self.query_one("#result-title", Label).update(shown.label)
        result = shown.result
        if shown.state.busy:
            status.update(f"{shown.state.value}…")
            status.add_class("-busy")
        elif result is not None:
            status.update(result.status.value)
            status.add_class(status_tone(result.status))
        elif shown.state is CandidateState.FAILED:
            status.update("evaluation failed")
            status.add_class("-bad")
        else:
            status.update("not evaluated")
        previous = " (last result below)" if shown.state.busy and result is not None else ""
        facts = _facts(result) + previous if result is not None else ("" if shown.state.busy else "press r to run it through the cascade")
        self.query_one("#result-facts", Static).update(facts)
        reason = shown.note or (result.reason if result is not None else "")
        self.query_one("#result-reason", Static).update(Content(reason))
        if result is not None:
            self._show_sections(result)

    def _show_sections(self, result: CascadeResult) -> None:
        self._section("#result-diagnostics", _diagnostics(result.diagnostics) if result.diagnostics else None)
        self._section("#result-verifications", _verification_table(result.verifications) if result.verifications else None)
        self._section("#result-timings", _timing_table(result.timings, result.speedup) if result.timings else None)
        report = result.deadlock_report.strip()
        self._section("#result-deadlock", Content.assemble(("Deadlock report\n", "bold"), report) if report else None)
        log = result.logs.get("nvcc", "").strip()
        located = any(d.line for d in result.diagnostics)
        if log and result.status.value == "compile_error" and not located:
            tail = "\n".join(log.splitlines()[-LOG_LINES:])
            self._section("#result-log", Content.assemble(("nvcc output (last lines)\n", "bold"), tail))

    def _section(self, selector: str, content) -> None:
        widget = self.query_one(selector, Static)
        widget.display = content is not None
        widget.update(content if content is not None else "")
        # A table as wide as it is: a narrow pane scrolls it sideways rather than squeezing it.
        width = natural_width(content) if content is not None else None
        padding = widget.styles.padding
        widget.styles.width = width + padding.left + padding.right if width is not None else "1fr"


def _facts(result: CascadeResult) -> str:
    parts = [f"reached {LEVEL_NAMES[result.level]}"]
    if result.build_seconds or result.build_cached:
        parts.append("build cached" if result.build_cached else f"built in {result.build_seconds:.1f} s")
    if result.gpus:
        parts.append(f"GPUs {','.join(map(str, result.gpus))} (world {result.world})")
    if result.run_seconds:
        parts.append(f"ran {result.run_seconds:.1f} s")
    if result.speedup is not None:
        parts.append(f"{speedup_of(result.speedup, result.timings).label()} the reference")
    return " · ".join(parts)


def _diagnostics(diags: list[Diagnostic]) -> Content:
    parts: list[Content | str | tuple[str, str]] = [(f"Diagnostics ({len(diags)})\n", "bold")]
    for d in diags:
        head, _, rest = d.render().partition("\n")
        parts.append((head, SEVERITY_STYLE.get(d.severity, "")))
        parts.append("\n")
        if rest:
            parts.append(rest + "\n")
    return Content.assemble(*parts)


def _verification_table(rows: list[Verification]) -> Group:
    """A table of short cells that never wrap (a narrow pane scrolls it sideways rather than
    breaking it one token a line), then each shape's worst element on a line of its own."""
    table = Table(title="Verification", title_justify="left", box=box.SIMPLE_HEAD, expand=False)
    for name, justify in (("shape", "left"), ("ok", "center"), ("max rel", "right"), ("fro rel", "right"),
                          ("unwritten", "right"), ("NaN/inf", "right")):
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for v in rows:
        table.add_row(v.shape, "✓" if v.ok else "✗", f"{v.max_rel_error:.3g}", f"{v.rel_fro_error:.3g}",
                      f"{v.unwritten}/{count(v.elements)}", str(v.nonfinite))
    worst = [Text.assemble((f"{v.shape}: ", "bold"), f"worst element {v.worst}") for v in rows if v.worst]
    return Group(table, *worst)


def count(n: int) -> str:
    """1572864 -> "1.6M": an element count short enough for a narrow pane."""
    for unit, size in (("G", 10**9), ("M", 10**6), ("k", 10**3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)


def _timing_table(rows: list[ShapeTiming], geomean: float | None) -> Table:
    caption = f"geometric mean speedup {speedup_of(geomean, rows).label()}" if geomean is not None else None
    table = Table(title="Timing (median of the slowest rank per iteration)", title_justify="left",
                  caption=caption, caption_justify="left", box=box.SIMPLE_HEAD, expand=False)
    for name in ("shape", "reference ms", "candidate ms", "spread %", "speedup"):
        table.add_column(name, justify="left" if name == "shape" else "right")
    for f in all_figures(rows):
        table.add_row(f.shape, f"{f.reference_ms:.3f}", f"{f.time_ms:.3f}", f"{f.iqr_pct:.1f}", f.speedup_band.label())
    return table
