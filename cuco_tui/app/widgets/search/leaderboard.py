"""The leaderboard: every committed candidate, best first (measured by speedup, then compiled
only, then the rest), with its place, strategy, status, speedup, % of the bound, time, TFLOP/s,
GB/s and the speedup of each bench shape. Every speedup carries its spread ('1.48x ±3%', the
half-width of its band of noise, core/noise.py), and a measured row within noise of the row
that opened its place shares the place, marked '≈' ('≈1': not told apart from the first).
Enter on a row asks the dashboard to open that candidate (Leaderboard.Chosen). The dashboard
hands it the board of its state, the bounds and the work, and sets `compact` on a short terminal
(the title goes into the top border: a line more for rows)."""

from __future__ import annotations

from typing import Mapping

from rich.cells import cell_len
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import DataTable, Label

from cuco_tui.app.search_state import BoardEntry
from cuco_tui.core.bounds import Bounds, Work, all_figures, format_figure, mean_pct_of_bound
from cuco_tui.core.noise import Band, exceeds

# What matters most first: a narrow column shows these and scrolls sideways for the rest. The
# status comes before % bound, which says nothing without a GPU: at 80 columns "no_gpu" and
# "compile_error" read whole (the dashboard's left column is as wide as these four need).
FIXED = ("#", "id", "speedup", "status", "% bound", "strategy", "ms", "TFLOP/s", "GB/s")
TIE = "≈"


def places(board: tuple[BoardEntry, ...]) -> list[str]:
    """Each entry's place, in board order (fastest first): '1', '2', ...; '≈N' for a measured
    entry that the entry opening place N does not beat beyond noise (a tie with it); '-' for
    one never timed."""
    out: list[str] = []
    opened: tuple[Band, int] | None = None  # the band that opened the current place, and its number
    n = 0
    for entry in board:
        band = entry.band
        if band is None:
            out.append("-")
            continue
        n += 1
        if opened is not None and not exceeds(opened[0], band):
            out.append(f"{TIE}{opened[1]}")
        else:
            opened = (band, n)
            out.append(str(n))
    return out


def totals(entry: BoardEntry, work: Mapping[str, Work]) -> tuple[float | None, float | None, float | None]:
    """(time, TFLOP/s, GB/s) over every shape: the shapes' medians summed, their work summed."""
    if not entry.timings:
        return None, None, None
    ms = sum(t.candidate.median for t in entry.timings)
    flops = sum(work[t.shape].flops for t in entry.timings if t.shape in work)
    moved = sum(work[t.shape].comm_bytes for t in entry.timings if t.shape in work)
    tflops = flops / (ms * 1e9) if flops and ms > 0 else None
    gbps = moved / (ms * 1e6) if moved and ms > 0 else None
    return ms, tflops, gbps


def row(entry: BoardEntry, shapes: list[str], bounds: Bounds | None, work: Mapping[str, Work],
        place: str = "-") -> tuple[str, ...]:
    figures = all_figures(entry.timings, bounds, work)
    pct = mean_pct_of_bound(figures)
    ms, tflops, gbps = totals(entry, work)
    by_shape = {f.shape: f for f in figures}
    band = entry.band
    cells = [place, entry.candidate, band.label() if band is not None else "-", entry.status,
             format_figure(pct, ".0f", "%"), entry.strategy,
             format_figure(ms, ".3f"), format_figure(tflops, ".0f"), format_figure(gbps, ".0f")]
    cells += [_shape_speedup(by_shape[s].speedup_band) if s in by_shape else "-" for s in shapes]
    return tuple(cells)


def _shape_speedup(band: Band | None) -> str:
    return band.label() if band is not None else "-"


class Leaderboard(Vertical):
    compact: reactive[bool] = reactive(False)

    class Chosen(Message):
        """Enter on a row: open this candidate."""

        def __init__(self, candidate: str) -> None:
            super().__init__()
            self.candidate = candidate

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._columns: list[tuple[str, int]] = []  # (label, width) on screen
        self._rows: dict[str, tuple[str, ...]] = {}  # candidate -> the cells on screen, in board order
        self._title = "Leaderboard"

    def compose(self) -> ComposeResult:
        yield Label("Leaderboard", id="leaderboard-title", classes="panel-title")
        table: DataTable = DataTable(id="leaderboard-table", cursor_type="row", zebra_stripes=False)
        yield table

    def watch_compact(self) -> None:
        self._show_title()

    def on_mount(self) -> None:
        self._show_title()

    def _show_title(self) -> None:
        if not self.is_mounted:
            return
        label = self.query_one("#leaderboard-title", Label)
        label.update(self._title)
        label.display = not self.compact
        self.border_title = self._title if self.compact else None

    @property
    def candidates(self) -> list[str]:
        """The rows' candidates, best first."""
        return list(self._rows)

    @property
    def highlighted(self) -> str | None:
        table = self.query_one(DataTable)
        if not self._rows or table.cursor_row < 0:
            return None
        ids = list(self._rows)
        return ids[min(table.cursor_row, len(ids) - 1)]

    def select(self, candidate: str) -> bool:
        """Move the cursor onto the candidate's row; False when it has none."""
        if candidate not in self._rows:
            return False
        self.query_one(DataTable).move_cursor(row=list(self._rows).index(candidate), animate=False)
        return True

    def cells(self, candidate: str) -> tuple[str, ...] | None:
        return self._rows.get(candidate)

    def show(self, board: tuple[BoardEntry, ...], bounds: Bounds | None, work: Mapping[str, Work],
             shapes: list[str]) -> None:
        """Rows for exactly `board`, in its order; a cursor moved off the top stays on its
        candidate, one at the top stays there (on the best)."""
        table = self.query_one(DataTable)
        rows = {e.candidate: row(e, shapes, bounds, work, place) for e, place in zip(board, places(board))}
        # Widths given, not measured by the table: a DataTable measures a new row's cells on a later
        # refresh, and a board shown twice in a frame (rows cleared in between) kept the labels'
        # widths (an 80x24 dashboard showed "c0" for c0000).
        columns = [(name, max([cell_len(name)] + [cell_len(cells[i]) for cells in rows.values()]))
                   for i, name in enumerate((*FIXED, *shapes))]
        if rows == self._rows and columns == self._columns:
            return
        keep = self.highlighted if table.cursor_row > 0 else None
        if columns != self._columns or not table.columns:
            table.clear(columns=True)
            for name, width in columns:
                table.add_column(name, key=name, width=width)
            self._columns = columns
        else:
            table.clear()
        for cid, cells in rows.items():
            table.add_row(*cells, key=cid)
        self._rows = rows
        measured = sum(1 for e in board if e.measured)
        self._title = f"Leaderboard · {measured} measured of {len(board)}"  # short: the narrow column shows it whole
        self._show_title()
        if keep in rows:
            table.move_cursor(row=list(rows).index(keep), animate=False)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if event.row_key.value is not None:
            self.post_message(self.Chosen(str(event.row_key.value)))
