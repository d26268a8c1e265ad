"""The candidate DAG as a table with a graph column, one row per candidate, colored by status.

A Line-API scroll view, not a DataTable: a DataTable measures every cell of every row it holds
(40,000 measurements for 5,000 candidates, about a second), while this draws only the rows on
screen, so showing a session of any size costs one pass over plain strings for column widths."""

from __future__ import annotations

from rich.segment import Segment
from rich.style import Style
from textual.binding import Binding
from textual.events import Click
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from cuco_tui.app.widgets.lineage.rows import LineageRow, status_style

# Most telling first: a table narrower than its columns cuts the kind and the island (shown in the
# details) before the status, speedup, backend or parents.
COLUMNS = ("graph", "id", "status", "speedup", "backend", "parents", "kind", "island")
RIGHT_ALIGNED = {"island", "speedup"}
HEADER_STYLE = Style(bold=True, underline=True)
ID_STYLE = Style(bold=True)
DIM = Style(dim=True)
CURSOR_STYLE = Style(reverse=True)
GAP = 2
# Where two spaces between columns would push the last ones out of view, one: at 80 columns a
# session with compile errors and crossovers then shows its island column whole (it read "isl").
NARROW_GAP = 1


def _cells(row: LineageRow) -> tuple[str, ...]:
    s = row.summary
    speedup = f"{s.speedup:.2f}x" if s.speedup is not None else ""
    return (row.graph(), s.id, s.status, speedup, row.backend, ",".join(s.parents), s.kind, str(s.island))


class CandidateTable(ScrollView, can_focus=True):
    DEFAULT_CSS = """
    CandidateTable {
        width: 3fr;
        height: 1fr;
    }
    """
    BINDINGS = [
        Binding("up,k", "move(-1)", "Up", show=False),
        Binding("down,j", "move(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "move(-1000000000)", "First", show=False),
        Binding("end", "move(1000000000)", "Last", show=False),
    ]

    cursor: reactive[int] = reactive(0, always_update=True)

    class Highlighted(Message):
        """The cursor moved onto a candidate."""

        def __init__(self, candidate_id: str) -> None:
            super().__init__()
            self.candidate_id = candidate_id

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._rows: list[LineageRow] = []
        self._positions: dict[str, int] = {}
        self._widths: list[int] = [len(c) for c in COLUMNS]
        self._gap = GAP
        self._cache: dict[int, tuple[str, ...]] = {}  # row index -> cell texts, filled as drawn

    # ---- data ------------------------------------------------------------------------------

    def show(self, rows: list[LineageRow]) -> None:
        """Replace the rows. Cost: one pass for the column widths; rows are drawn when seen."""
        self._rows = rows
        self._positions = {row.id: i for i, row in enumerate(rows)}
        self._cache.clear()
        widths = [len(c) for c in COLUMNS]
        for row in rows:  # the widths from plain lengths, each column as wide as its widest cell
            s = row.summary
            widths[0] = max(widths[0], row.graph_width())
            widths[1] = max(widths[1], len(s.id))
            widths[2] = max(widths[2], len(s.status))
            widths[4] = max(widths[4], len(row.backend))
            widths[5] = max(widths[5], sum(len(p) for p in s.parents) + len(s.parents) - 1)
            widths[6] = max(widths[6], len(s.kind))
        widths[3] = max(widths[3], 7)
        self._widths = widths
        self._fit()
        self.cursor = 0

    def _fit(self) -> None:
        """The gap between columns for the width on screen, and the scrollable size with it."""
        widths = self._widths
        self._gap = GAP if sum(widths) + GAP * (len(widths) - 1) <= self.scrollable_content_region.width else NARROW_GAP
        self.virtual_size = Size(sum(widths) + self._gap * len(widths), len(self._rows) + 1)

    def on_resize(self) -> None:
        self._fit()
        self.refresh()

    @property
    def row_count(self) -> int:
        return len(self._rows)

    @property
    def highlighted_id(self) -> str | None:
        return self._rows[self.cursor].id if self._rows else None

    def select(self, candidate_id: str) -> bool:
        """Move the cursor to the candidate; False when it is not shown."""
        index = self._positions.get(candidate_id)
        if index is None:
            return False
        self.cursor = index
        return True

    # ---- cursor ----------------------------------------------------------------------------

    def validate_cursor(self, cursor: int) -> int:
        return max(0, min(cursor, len(self._rows) - 1)) if self._rows else 0

    def watch_cursor(self, cursor: int) -> None:
        self.refresh()
        if not self._rows:
            return
        # Row `cursor` is drawn at virtual line cursor + 1 (line 0 is the header).
        self.scroll_to_region(Region(0, cursor, 1, 3), animate=False, immediate=False, force=True,
                              x_axis=False)
        self.post_message(self.Highlighted(self._rows[cursor].id))

    def action_move(self, step: int) -> None:
        self.cursor += step

    def action_page(self, direction: int) -> None:
        self.cursor += direction * max(1, self.size.height - 2)

    def on_click(self, event: Click) -> None:
        if event.y >= 1:
            self.cursor = int(self.scroll_offset.y) + event.y - 1

    # ---- drawing ---------------------------------------------------------------------------

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        scroll_x, scroll_y = self.scroll_offset
        if y == 0:
            strip = self._strip(COLUMNS, None, HEADER_STYLE)
        else:
            index = scroll_y + y - 1
            if index >= len(self._rows):
                return Strip.blank(width)
            cells = self._cache.get(index)
            if cells is None:
                cells = self._cache[index] = _cells(self._rows[index])
            strip = self._strip(cells, self._rows[index], CURSOR_STYLE if index == self.cursor else None)
        return strip.crop_extend(scroll_x, scroll_x + width, None)

    def _strip(self, cells: tuple[str, ...], row: LineageRow | None, overlay: Style | None) -> Strip:
        segments: list[Segment] = []
        tone = Style(color=status_style(row.summary.status)) if row is not None else Style()
        for name, text, width in zip(COLUMNS, cells, self._widths):
            text = text[:width]
            padded = text.rjust(width) if name in RIGHT_ALIGNED else text.ljust(width)
            if row is None:
                style = Style()
            elif name in ("graph", "status", "speedup"):
                style = tone
            elif name == "id":
                style = ID_STYLE
            elif name == "parents":
                style = DIM
            else:
                style = Style()
            if overlay is not None:
                style = style + overlay
            segments.append(Segment(padded + " " * self._gap, style))
        return Strip(segments)
