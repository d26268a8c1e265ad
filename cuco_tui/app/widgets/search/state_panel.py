"""The search's state at a glance: running/paused, phase, generation, islands, candidates per
status, best speedup and how close it is to the bound, dollars against the budget, review mode
(the dashboard hands it its DashboardState). `compact` (a short terminal) puts two facts a line."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.reactive import reactive
from textual.widgets import Label, Static

from cuco_tui.app.search_state import DashboardState, RunPhase
from cuco_tui.core.bounds import all_figures, mean_pct_of_bound


RUN_TONE = {RunPhase.STARTING: "-busy", RunPhase.RUNNING: "-ok", RunPhase.PAUSED: "-warn", RunPhase.STOPPING: "-warn",
            RunPhase.ENDED: "-ok", RunPhase.FAILED: "-bad"}


class StatePanel(Vertical):
    state: reactive[DashboardState] = reactive(DashboardState, always_update=True)
    compact: reactive[bool] = reactive(False)

    def compose(self) -> ComposeResult:
        yield Label("Search", classes="panel-title")
        yield Static("", id="state-run")
        yield Static("", id="state-facts")

    def watch_state(self, state: DashboardState) -> None:
        if not self.is_mounted:
            return
        run = self.query_one("#state-run", Static)
        run.remove_class("-ok", "-warn", "-bad")
        run.update(state.run_text)
        run.add_class(RUN_TONE[state.run])
        self.query_one("#state-facts", Static).update(render_compact(state) if self.compact else render_facts(state))

    def watch_compact(self, compact: bool) -> None:
        self.watch_state(self.state)

    def on_mount(self) -> None:
        self.watch_state(self.state)


def bound_fact(s: DashboardState, short: bool = False) -> str:
    """The bound as a speedup and how much of it the best reaches, or why it is not known
    (`short`: the reason's first words)."""
    if s.bounds is None or s.bounds.speedup is None:
        if s.bounds_note:
            return s.bounds_note.split(" (")[0].split(": ")[0] if short else s.bounds_note
        return "needs a GPU" if s.can_measure is False else "-"
    best = next((e for e in s.board if e.candidate == s.best_id), None)
    pct = mean_pct_of_bound(all_figures(best.timings, s.bounds, s.work)) if best is not None else None
    reached = f", best at {pct:.0f}%" if pct is not None else ""
    # Kept in sight while the session lasts (the EngineError said it once): every verdict rests on it.
    wrong = "" if s.bounds.reference_ok else (" · reference ≠ float64" if short else
                                              " · the reference differs from float64 on these GPUs")
    return f"{s.bounds.speedup:.2f}x{reached}{wrong}"


def best_speedup(s: DashboardState, spec: str) -> str:
    """The best's speedup with its spread, from its leaderboard entry ('-' before one is measured)."""
    if s.best_speedup is None:
        return "-"
    entry = next((e for e in s.board if e.candidate == s.best_id), None)
    band = entry.band if entry is not None else None
    return band.label(spec) if band is not None else f"{s.best_speedup:{spec}}x"


def hints_fact(s: DashboardState, short: bool = False) -> str:
    """How many hints the agent was given, or that it reads none (the offline agent)."""
    if s.hints_unread:
        return "unread" if short else "not read by this agent"
    return str(s.hints)


def render_facts(s: DashboardState) -> Content:
    statuses = " ".join(f"{k} {v}" for k, v in sorted(s.statuses.items())) or "none yet"
    best = f"{best_speedup(s, '.3f')} ({s.best_id})" if s.best_speedup is not None else "-"
    budget = f"${s.spent:.2f} of ${s.budget:.2f}" if s.budget is not None else f"${s.spent:.2f} (no cap)"
    gen = f"{s.generation} of {s.generations}" if s.generations else str(s.generation)
    if s.evaluations_limit is not None:
        gen += f", up to {s.evaluations_limit} evaluations"
    rows = [
        ("phase", s.phase), ("generation", gen), ("islands", str(s.islands or "-")),
        ("review", s.review_mode), ("committed", statuses),
        ("waiting", f"{s.held} for review, {s.in_flight} evaluating"),
        ("best", best), ("bound", bound_fact(s)), ("spent", budget), ("hints", hints_fact(s)),
    ]
    return _rows(rows)


def render_compact(s: DashboardState) -> Content:
    """The same facts in fewer lines, for a short terminal."""
    statuses = " ".join(f"{k} {v}" for k, v in sorted(s.statuses.items())) or "none yet"
    best = f"{best_speedup(s, '.2f')} {s.best_id}" if s.best_speedup is not None else "-"
    budget = f"${s.spent:.2f}/${s.budget:.2f}" if s.budget is not None else f"${s.spent:.2f}"
    gen = f"{s.generation}/{s.generations}" if s.generations else str(s.generation)
    rows = [
        ("gen", f"{gen} {s.phase} · {s.review_mode}"), ("done", statuses),
        ("waiting", f"{s.held} review, {s.in_flight} evaluating"),
        ("best", best), ("bound", bound_fact(s, short=True)), ("spent", f"{budget} · hints {hints_fact(s, short=True)}"),
    ]
    return _rows(rows, width=8)


def _rows(rows: list[tuple[str, str]], width: int = 11) -> Content:
    parts: list = []
    for i, (name, value) in enumerate(rows):
        parts.append((f"{name:<{width}}", "$text-muted"))
        parts.append(value + ("\n" if i < len(rows) - 1 else ""))
    return Content.assemble(*parts)
