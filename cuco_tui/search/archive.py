"""Candidates' design coordinates and the MAP-Elites archive: the best candidate of each design
cell (backend, placement, sync, issuer), so a strategy that is not the overall best keeps a
representative the search can return to. How candidates rank is core/ranking.py."""

from __future__ import annotations

from cuco_tui.core.ranking import is_better, is_failure, rank_key
from cuco_tui.core.records import CandidateRecord
from cuco_tui.design.space import DIMENSIONS, DesignPoint
from cuco_tui.source.regions import design_of


def design_point(record: CandidateRecord) -> DesignPoint:
    """The record's design coordinates: what it carries, else its `// cuco-design:` line."""
    design = record.design or {}
    if not any(k in DIMENSIONS for k in design):
        design = {**(design_of(record.source) or {}), "knobs": design.get("knobs", {})} if record.source else design
    try:
        return DesignPoint.from_dict(design)
    except TypeError:
        return DesignPoint()


class Archive:
    """cell -> the best candidate that declared it. Only candidates that did not fail enter."""

    def __init__(self) -> None:
        self._cells: dict[tuple[str, ...], CandidateRecord] = {}

    def offer(self, record: CandidateRecord) -> bool:
        """Files `record` if it beats its cell's elite (or the cell is empty); True if it did."""
        if is_failure(record) or not record.source:
            return False
        cell = design_point(record).cell()
        if is_better(record, self._cells.get(cell)):
            self._cells[cell] = record
            return True
        return False

    def elites(self) -> list[CandidateRecord]:
        return sorted(self._cells.values(), key=rank_key)

    def cells(self) -> dict[tuple[str, ...], CandidateRecord]:
        return dict(self._cells)

    def __len__(self) -> int:
        return len(self._cells)

