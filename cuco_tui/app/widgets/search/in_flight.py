"""The evaluations in flight: candidate, stage, GPU group, the cascade's last words; with
evaluations run as cluster jobs (the Slurm executor), the job's id, state (pending with Slurm's
reason, running, lost) and nodes, in three columns added when the first job shows up (a local
search never has them). A compile shows how long it has run and how many builds wait for a CPU
builder ("compiling 0:42 (2 queued)"; a fused CUTLASS candidate takes a minute), redrawn every
second from the time its state says it began. The dashboard hands it the evaluations of its
state and the build queue (show); the table keeps what it drew. `compact` (a short terminal) puts
the title into the top border."""

from __future__ import annotations

import time
from typing import Callable

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.reactive import reactive
from textual.widgets import DataTable, Label

from cuco_tui.app.search_state import BUILD_WAITING, BUILDING, Evaluation

STAGES = {0: "L0 static", 1: "L1 compile", 2: "L2 verify", 3: "L3 bench"}
JOB_COLUMNS = (("job", "job", 8), ("state", "job state", 16), ("nodes", "nodes", 12))  # key, label, width
STEP_WIDTH = 26  # "compiling 1:02:03 (12 queued)" cut at its end at worst


def elapsed(seconds: float) -> str:
    """0:42, 12:05, 1:02:03."""
    s = max(0, int(seconds))
    h, m = divmod(s // 60, 60)
    return f"{h}:{m:02d}:{s % 60:02d}" if h else f"{m}:{s % 60:02d}"


def step_text(e: Evaluation, now: float, queued: int) -> str:
    """The step cell: a compile with its time so far (and the builds waiting behind it),
    any other step as the cascade said it."""
    if e.level != 1 or not e.since:
        return e.step
    text = f"{e.step} {elapsed(now - e.since)}"
    if e.step in (BUILDING, BUILD_WAITING) and queued:
        text += f" ({queued} queued)"
    return text


def _job_state(e: Evaluation) -> str:
    if e.job_state in ("pending", "lost") and e.job_reason:
        return f"{e.job_state}: {e.job_reason}"
    return e.job_state


def _cells(e: Evaluation, jobs: bool, now: float, queued: int) -> dict[str, str]:
    cells = {"stage": STAGES.get(e.level, f"L{e.level}"),
             "gpus": "-" if e.job else ",".join(map(str, e.gpus)) or "cpu", "step": step_text(e, now, queued)}
    if jobs:
        cells |= {"job": e.job or "-", "state": _job_state(e) or "-", "nodes": ",".join(e.nodes) or "-"}
    return cells


class InFlightTable(Vertical):
    compact: reactive[bool] = reactive(False)

    def __init__(self, *args, clock: Callable[[], float] = time.time, **kwargs) -> None:
        """`clock`: wall-clock seconds, what the events' `at` are in (a test gives its own)."""
        super().__init__(*args, **kwargs)
        self._clock = clock
        self._drawn: dict[str, dict[str, str]] = {}  # candidate -> the cells on screen
        self._jobs = False  # the job columns were added
        self._shown: tuple[Evaluation, ...] = ()
        self._queued = 0

    def compose(self) -> ComposeResult:
        yield Label("Evaluating", id="in-flight-title", classes="panel-title")
        table: DataTable = DataTable(cursor_type="none", zebra_stripes=False)
        # fixed widths: what the table shows must not depend on rows already gone
        table.add_column("id", key="candidate", width=5)
        table.add_column("stage", key="stage", width=10)
        table.add_column("GPUs", key="gpus", width=4)
        table.add_column("step", key="step", width=STEP_WIDTH)
        yield table

    def on_mount(self) -> None:
        self.set_interval(1.0, self.tick)  # the compile times count up
        self.watch_compact(self.compact)

    def watch_compact(self, compact: bool) -> None:
        if self.is_mounted:
            self.query_one("#in-flight-title", Label).display = not compact
            self.border_title = "Evaluating" if compact else None

    @property
    def candidates(self) -> list[str]:
        return [str(k.value) for k in self.query_one(DataTable).rows]

    def tick(self) -> None:
        """Redraw what the clock changes (a compile's time); nothing when nothing compiles."""
        if any(e.level == 1 and e.since for e in self._shown):
            self.show(self._shown, self._queued)

    def show(self, evaluations: tuple[Evaluation, ...], queued: int = 0) -> None:
        """Rows for exactly `evaluations` (`queued`: the builds waiting for a builder): finished
        ones go, new ones join at the end, and only the cells that changed are redrawn."""
        self._shown, self._queued = evaluations, queued
        table = self.query_one(DataTable)
        if not self._jobs and any(e.job for e in evaluations):
            self._jobs = True
            for key, label, width in JOB_COLUMNS:
                table.add_column(label, key=key, width=width, default="-")
            for drawn in self._drawn.values():
                drawn.update({key: "-" for key, _, _ in JOB_COLUMNS})
        wanted = {e.candidate for e in evaluations}
        for cid in [c for c in self._drawn if c not in wanted]:
            table.remove_row(cid)
            del self._drawn[cid]
        now = self._clock()
        for e in evaluations:
            cells, drawn = _cells(e, self._jobs, now, queued), self._drawn.get(e.candidate)
            if drawn is None:
                table.add_row(e.candidate, *cells.values(), key=e.candidate)
            else:
                for column, value in cells.items():
                    if drawn[column] != value:
                        table.update_cell(e.candidate, column, value)
            self._drawn[e.candidate] = cells
