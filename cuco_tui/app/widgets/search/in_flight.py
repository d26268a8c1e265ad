"""The evaluations in flight: candidate, stage, GPU group, the cascade's last words; with
evaluations run as cluster jobs (the Slurm executor), the job's id, state (pending with Slurm's
reason, running, lost) and nodes, in three columns added when the first job shows up (a local
search never has them). The dashboard hands it the evaluations of its state (show); the table
keeps what it drew."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Label

from cuco_tui.app.search_state import Evaluation

STAGES = {0: "L0 static", 1: "L1 compile", 2: "L2 verify", 3: "L3 bench"}
JOB_COLUMNS = (("job", "job", 8), ("state", "job state", 16), ("nodes", "nodes", 12))  # key, label, width


def _job_state(e: Evaluation) -> str:
    if e.job_state in ("pending", "lost") and e.job_reason:
        return f"{e.job_state}: {e.job_reason}"
    return e.job_state


def _cells(e: Evaluation, jobs: bool) -> dict[str, str]:
    cells = {"stage": STAGES.get(e.level, f"L{e.level}"),
             "gpus": "-" if e.job else ",".join(map(str, e.gpus)) or "cpu", "step": e.step}
    if jobs:
        cells |= {"job": e.job or "-", "state": _job_state(e) or "-", "nodes": ",".join(e.nodes) or "-"}
    return cells


class InFlightTable(Vertical):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._drawn: dict[str, dict[str, str]] = {}  # candidate -> the cells on screen
        self._jobs = False  # the job columns were added

    def compose(self) -> ComposeResult:
        yield Label("Evaluating", classes="panel-title")
        table: DataTable = DataTable(cursor_type="none", zebra_stripes=False)
        # fixed widths: what the table shows must not depend on rows already gone
        table.add_column("id", key="candidate", width=5)
        table.add_column("stage", key="stage", width=10)
        table.add_column("GPUs", key="gpus", width=4)
        table.add_column("step", key="step", width=14)
        yield table

    @property
    def candidates(self) -> list[str]:
        return [str(k.value) for k in self.query_one(DataTable).rows]

    def show(self, evaluations: tuple[Evaluation, ...]) -> None:
        """Rows for exactly `evaluations`: finished ones go, new ones join at the end, and only
        the cells that changed are redrawn."""
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
        for e in evaluations:
            cells, drawn = _cells(e, self._jobs), self._drawn.get(e.candidate)
            if drawn is None:
                table.add_row(e.candidate, *cells.values(), key=e.candidate)
            else:
                for column, value in cells.items():
                    if drawn[column] != value:
                        table.update_cell(e.candidate, column, value)
            self._drawn[e.candidate] = cells
