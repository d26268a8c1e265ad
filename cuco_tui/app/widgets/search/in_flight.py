"""The evaluations in flight: candidate, stage, GPU group, the cascade's last words. The
dashboard hands it the evaluations of its state (show); the table keeps what it drew."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Label

from cuco_tui.app.search_state import Evaluation

STAGES = {0: "L0 static", 1: "L1 compile", 2: "L2 verify", 3: "L3 bench"}


def _cells(e: Evaluation) -> dict[str, str]:
    return {"stage": STAGES.get(e.level, f"L{e.level}"), "gpus": ",".join(map(str, e.gpus)) or "cpu",
            "step": e.step}


class InFlightTable(Vertical):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._drawn: dict[str, dict[str, str]] = {}  # candidate -> the cells on screen

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
        wanted = {e.candidate for e in evaluations}
        for cid in [c for c in self._drawn if c not in wanted]:
            table.remove_row(cid)
            del self._drawn[cid]
        for e in evaluations:
            cells, drawn = _cells(e), self._drawn.get(e.candidate)
            if drawn is None:
                table.add_row(e.candidate, cells["stage"], cells["gpus"], cells["step"], key=e.candidate)
            else:
                for column, value in cells.items():
                    if drawn[column] != value:
                        table.update_cell(e.candidate, column, value)
            self._drawn[e.candidate] = cells
