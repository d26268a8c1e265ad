"""The evaluations in flight: candidate, stage, GPU group, the cascade's last words."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Label

STAGES = {0: "L0 static", 1: "L1 compile", 2: "L2 verify", 3: "L3 bench"}


class InFlightTable(Vertical):
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

    def started(self, candidate: str, level: int, gpus: tuple[int, ...], message: str) -> None:
        table = self.query_one(DataTable)
        where = ",".join(map(str, gpus)) or "cpu"
        stage = STAGES.get(level, f"L{level}")
        if candidate in self.candidates:
            table.update_cell(candidate, "stage", stage)
            if gpus:
                table.update_cell(candidate, "gpus", where)
            table.update_cell(candidate, "step", message)
        else:
            table.add_row(candidate, stage, where, message, key=candidate)

    def finished(self, candidate: str) -> None:
        if candidate in self.candidates:
            self.query_one(DataTable).remove_row(candidate)
