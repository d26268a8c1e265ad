"""The lineage as rows: candidates in `git log --graph`-like order (depth-first along first
parents, children by id), each with its depth, and the filters the screen applies to them.
Pure data, no Textual: built from index summaries, never from full records."""

from __future__ import annotations

from dataclasses import dataclass

from cuco_tui.core.records import RecordStatus
from cuco_tui.lineage import CandidateSummary

STATUS_STYLE = {  # looked up with the index's status strings too (a RecordStatus hashes as its value)
    RecordStatus.MEASURED: "green",
    RecordStatus.VERIFIED: "dark_sea_green",  # L2 passed, nothing timed (ranks sharing one GPU)
    RecordStatus.INCORRECT: "yellow",
    RecordStatus.REJECTED: "magenta",
    RecordStatus.NO_GPU: "cyan",
    RecordStatus.UNREVIEWED: "blue",  # held for review when the search stopped: no verdict
    RecordStatus.PENDING: "dim",
    RecordStatus.EXHAUSTED: "dim",  # an older engine's placeholder for an agent with nothing new (not shown as a row)
}
FAILURE_STYLE = "red"  # compile_error, deadlock, crash, timeout, ...
MAX_DRAWN_DEPTH = 12




def status_style(status: str) -> str:
    return STATUS_STYLE.get(status, FAILURE_STYLE)


@dataclass(frozen=True)
class LineageRow:
    summary: CandidateSummary
    depth: int  # along first parents; 0 for the seed (and for a candidate whose parent is gone)

    @property
    def id(self) -> str:
        return self.summary.id

    @property
    def backend(self) -> str:
        return str(self.summary.design.get("backend", ""))

    def graph_width(self) -> int:
        """len(self.graph()), without building it."""
        if self.depth == 0:
            return 1
        drawn = min(self.depth, MAX_DRAWN_DEPTH)
        return drawn + 1 + (len(f"+{self.depth - drawn}") if self.depth > drawn else 0)

    def graph(self) -> str:
        """The graph column: indentation by depth, a branch mark, a node; `+n` past the cap."""
        if self.depth == 0:
            return "●"
        drawn = min(self.depth, MAX_DRAWN_DEPTH)
        extra = f"+{self.depth - drawn}" if self.depth > drawn else ""
        mark = "◆" if len(self.summary.parents) > 1 else "●"  # a crossover merges parents
        return "│" * (drawn - 1) + "└" + mark + extra


def lineage_rows(summaries: list[CandidateSummary]) -> list[LineageRow]:
    """Depth-first order over the first-parent tree, roots and children ordered by id. An older
    engine's placeholders for an exhausted agent (RecordStatus.EXHAUSTED) are not candidates: no row."""
    summaries = [s for s in summaries if s.status != RecordStatus.EXHAUSTED]
    known = {s.id for s in summaries}
    children: dict[str, list[CandidateSummary]] = {}
    roots: list[CandidateSummary] = []
    for s in summaries:  # ordered by id, so every child list is too
        parent = s.parents[0] if s.parents else None
        if parent in known:
            children.setdefault(parent, []).append(s)
        else:
            roots.append(s)
    rows: list[LineageRow] = []
    stack: list[tuple[CandidateSummary, int]] = [(r, 0) for r in reversed(roots)]
    while stack:  # iterative: a 5,000-deep chain must not hit the recursion limit
        summary, depth = stack.pop()
        rows.append(LineageRow(summary, depth))
        stack.extend((c, depth + 1) for c in reversed(children.get(summary.id, ())))
    return rows


@dataclass(frozen=True)
class LineageFilter:
    """None: any value."""

    island: int | None = None
    status: str | None = None
    backend: str | None = None

    def keeps(self, row: LineageRow) -> bool:
        return ((self.island is None or row.summary.island == self.island)
                and (self.status is None or row.summary.status == self.status)
                and (self.backend is None or row.backend == self.backend))

    def describe(self) -> str:
        parts = [f"island {self.island}" if self.island is not None else "",
                 f"status {self.status}" if self.status else "",
                 f"backend {self.backend}" if self.backend else ""]
        return ", ".join(p for p in parts if p) or "none"
