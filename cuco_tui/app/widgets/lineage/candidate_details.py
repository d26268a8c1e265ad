"""One candidate in full: its facts, design, rationale, and its CascadeResult (ResultView)."""

from __future__ import annotations

import json
from pathlib import Path

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from cuco_tui.app.messages import CandidateState
from cuco_tui.app.widgets.lineage.rows import status_style
from cuco_tui.app.widgets.result_view import ResultView, Shown
from cuco_tui.core.noise import record_speedup
from cuco_tui.core.result import CascadeResult
from cuco_tui.core.records import CandidateRecord


class CandidateDetails(Vertical):
    DEFAULT_CSS = """
    CandidateDetails {
        width: 2fr;
        height: 1fr;
        border-left: solid $primary-darken-2;
    }
    CandidateDetails #lineage-facts {
        height: auto;
        max-height: 50%;
        padding: 0 1;
        overflow-y: auto;
    }
    CandidateDetails ResultView {
        height: 1fr;
        padding: 0 1;
    }
    """

    def compose(self) -> ComposeResult:
        yield Static("Select a candidate.", id="lineage-facts")
        yield ResultView(id="lineage-result")

    def show(self, record: CandidateRecord) -> None:
        self.query_one("#lineage-facts", Static).update(facts_text(record))
        result = None
        if record.result:
            try:
                result = CascadeResult.from_dict(record.result)
            except (TypeError, ValueError, KeyError):
                result = None  # an older or damaged record: the facts above still show
        self.query_one(ResultView).show(
            Shown(Path(record.id), f"{record.id} result", CandidateState.DONE if result else CandidateState.IDLE,
                  result, "" if result else "no evaluation result recorded"))


def measured_shapes(record: CandidateRecord) -> int:
    """How many bench shapes the record's result timed (0 when it holds none)."""
    timings = (record.result or {}).get("timings")
    return len(timings) if isinstance(timings, list) else 0


def facts_text(record: CandidateRecord) -> Text:
    text = Text()
    text.append(f"{record.id}", style="bold")
    text.append(f"  {record.kind} · island {record.island} · generation {record.generation}\n")
    text.append("status ")
    text.append(record.status, style=status_style(record.status))
    shapes = measured_shapes(record)
    speedup = record_speedup(record)
    if speedup is not None:
        text.append(f" · speedup {speedup.label()}", style="bold")
        text.append(f" (geomean of {shapes} shapes)" if shapes > 1 else " (1 shape)" if shapes else "")
    if record.latency_ms is not None:
        text.append(f" · {record.latency_ms:.3f} ms")
        text.append(" (sum of their medians)" if shapes > 1 else " (median)" if shapes else "")
    text.append(f"\nparents {', '.join(record.parents) or '(seed)'} · agent {record.agent}")
    if record.review:
        text.append(f" · review {record.review}")
    text.append("\n\nDesign\n", style="bold")
    design = {k: v for k, v in record.design.items() if k != "knobs"}
    text.append("  ".join(f"{k}={v}" for k, v in design.items()) + "\n")
    if record.design.get("knobs"):
        text.append("knobs " + json.dumps(record.design["knobs"], sort_keys=True) + "\n")
    text.append("\nRationale\n", style="bold")
    text.append(record.rationale.strip() or "(none)")
    return text
