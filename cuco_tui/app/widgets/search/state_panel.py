"""The search's state at a glance: running/paused, phase, generation, islands, candidates per
status, best speedup, dollars against the budget, review mode (the dashboard hands it its
DashboardState)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.reactive import reactive
from textual.widgets import Label, Static

from cuco_tui.app.search_state import DashboardState


RUN_TONE = {"running": "-ok", "paused": "-warn", "stopping": "-warn", "failed": "-bad"}


class StatePanel(Vertical):
    state: reactive[DashboardState] = reactive(DashboardState, always_update=True)

    def compose(self) -> ComposeResult:
        yield Label("Search", classes="panel-title")
        yield Static("", id="state-run")
        yield Static("", id="state-facts")

    def watch_state(self, state: DashboardState) -> None:
        if not self.is_mounted:
            return
        run = self.query_one("#state-run", Static)
        run.remove_class("-ok", "-warn", "-bad")
        run.update(state.run)
        run.add_class(RUN_TONE.get(state.run, "-busy" if state.run == "starting" else "-ok"))
        self.query_one("#state-facts", Static).update(render_facts(state))

    def on_mount(self) -> None:
        self.watch_state(self.state)


def render_facts(s: DashboardState) -> Content:
    statuses = " ".join(f"{k} {v}" for k, v in sorted(s.statuses.items())) or "none yet"
    best = f"{s.best_speedup:.3f}x ({s.best_id})" if s.best_speedup is not None else "-"
    budget = f"${s.spent:.2f} of ${s.budget:.2f}" if s.budget is not None else f"${s.spent:.2f} (no cap)"
    gen = f"{s.generation} of {s.generations}" if s.generations else str(s.generation)
    rows = [
        ("phase", s.phase), ("generation", gen), ("islands", str(s.islands or "-")),
        ("review", s.review_mode), ("committed", statuses),
        ("waiting", f"{s.held} for review, {s.in_flight} evaluating"),
        ("best", best), ("spent", budget), ("hints", str(s.hints)),
    ]
    parts: list = []
    for i, (name, value) in enumerate(rows):
        parts.append((f"{name:<11}", "$text-muted"))
        parts.append(value + ("\n" if i < len(rows) - 1 else ""))
    return Content.assemble(*parts)
