"""The left column: the workload's candidate files, each with its evaluation state."""

from __future__ import annotations

from pathlib import Path

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.reactive import reactive
from textual.widgets import Label, ListItem, ListView

from cuco_tui.app.messages import CandidateHighlighted, CandidateState, status_tone
from cuco_tui.core.result import Status


class CandidateRow(ListItem):
    """One candidate: its name relative to the workload folder, and its state."""

    state: reactive[CandidateState] = reactive(CandidateState.IDLE)
    status: reactive[Status | None] = reactive(None)

    def __init__(self, path: Path, label: str, **kwargs) -> None:
        super().__init__(**kwargs)
        self.path = path
        self.label = label

    def compose(self) -> ComposeResult:
        yield Label(self.label, classes="candidate-name")
        yield Label("", classes="candidate-state")

    def watch_state(self) -> None:
        self._redraw()

    def watch_status(self) -> None:
        self._redraw()

    def _redraw(self) -> None:
        if not self.is_mounted:
            return
        label = self.query_one(".candidate-state", Label)
        label.remove_class("-ok", "-warn", "-bad", "-busy")
        if self.state is CandidateState.DONE and self.status is not None:
            label.update(f"done · {self.status.value}")
            label.add_class(status_tone(self.status))
        else:
            label.update(self.state.value)
            if self.state.busy:
                label.add_class("-busy")
            elif self.state is CandidateState.FAILED:
                label.add_class("-bad")

    def on_mount(self) -> None:
        self._redraw()


class CandidateList(Vertical):
    """Lists `paths` (named relative to `root`); posts CandidateHighlighted as the cursor moves."""

    def __init__(self, paths: list[Path], root: Path, **kwargs) -> None:
        super().__init__(**kwargs)
        self._paths = list(paths)
        self._root = root

    def compose(self) -> ComposeResult:
        yield Label("Candidates", classes="panel-title")
        yield ListView(*(CandidateRow(p, _relative(p, self._root), id=f"candidate-{i}")
                         for i, p in enumerate(self._paths)))

    @property
    def highlighted(self) -> Path | None:
        item = self.query_one(ListView).highlighted_child
        return item.path if isinstance(item, CandidateRow) else None

    @property
    def paths(self) -> list[Path]:
        return list(self._paths)

    def label_of(self, path: Path) -> str:
        return _relative(path, self._root)

    def select(self, path: Path) -> None:
        """Move the cursor onto `path`."""
        self.query_one(ListView).index = self._paths.index(path)

    def set_state(self, path: Path, state: CandidateState, status: Status | None = None) -> None:
        row = self._row(path)
        row.status = status
        row.state = state

    def state_of(self, path: Path) -> CandidateState:
        return self._row(path).state

    def _row(self, path: Path) -> CandidateRow:
        return self.query_one(f"#candidate-{self._paths.index(path)}", CandidateRow)

    def on_list_view_highlighted(self, event: ListView.Highlighted) -> None:
        event.stop()
        if isinstance(event.item, CandidateRow):
            self.post_message(CandidateHighlighted(event.item.path))


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)
