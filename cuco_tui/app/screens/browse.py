"""Pick a session to browse: the sessions in the sessions folder (newest first) and the example
bundles a clone ships in sessions/examples/ (searches recorded on GPU hosts, browsable anywhere).
Dismisses with the chosen path, or None."""

from __future__ import annotations

import time
from pathlib import Path

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option

from cuco_tui.lineage import list_sessions
from cuco_tui.search.sessions import example_bundles, sessions_root


class BrowseScreen(ModalScreen[Path | None]):
    DEFAULT_CSS = """
    BrowseScreen { align: center middle; }
    BrowseScreen > Vertical {
        width: 100; max-width: 95%; height: auto; max-height: 80%;
        border: round $accent; background: $surface; padding: 0 1;
    }
    BrowseScreen OptionList { height: auto; max-height: 24; }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, root: Path | None = None) -> None:
        """`root`: the folder of sessions (and of examples/) to list; None: the sessions folder,
        and the examples of the clone."""
        super().__init__()
        self._given = Path(root) if root is not None else None
        self.root = self._given if self._given is not None else sessions_root()
        self._paths: list[Path] = []

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Label("Browse a session: Enter opens its lineage, Esc goes back", classes="panel-title")
            yield OptionList(id="browse-options")

    def on_mount(self) -> None:
        self.query_one(OptionList).add_option(Option("looking for sessions...", disabled=True))
        self._list()

    @work(thread=True, exclusive=True, group="browse")
    def _list(self) -> None:
        """In a thread: listing sessions opens each one's git repository."""
        rows: list[tuple[str, Path]] = []
        for b in example_bundles(self._given):
            rows.append((f"example  {b.stem}  (bundle, {b.stat().st_size // 1024} KiB)", b))
        for s in list_sessions(self.root):
            best = f"best {s.best_id} {s.best_speedup:.2f}x" if s.best_id and s.best_speedup else "no measured candidate"
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(s.modified))
            rows.append((f"session  {s.name}  {s.workload}, {s.candidates} candidates, {best}, {when}", s.path))
        self.app.call_from_thread(self._show, rows)

    def _show(self, rows: list[tuple[str, Path]]) -> None:
        options = self.query_one(OptionList)
        options.clear_options()
        self._paths = [p for _, p in rows]
        if not rows:
            options.add_option(Option(f"no sessions under {self.root} and no example bundles", disabled=True))
            return
        options.add_options([Option(label, id=str(i)) for i, (label, _) in enumerate(rows)])
        options.highlighted = 0
        options.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        if event.option.id is not None:
            self.dismiss(self._paths[int(event.option.id)])

    def action_cancel(self) -> None:
        self.dismiss(None)
