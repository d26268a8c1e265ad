"""Compare two candidates (lineage: `c` on one, `c` on another): their per-shape timings, design
coordinates and knobs side by side with the differences marked, then the diff of their code.
Both are read from the session in a thread worker (git), as the candidate screen reads one."""

from __future__ import annotations

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Header, Static

from cuco_tui.app.commands import CompareCommands
from cuco_tui.app.widgets.candidate.model import CandidateView, load_candidate
from cuco_tui.app.widgets.diff_text import diff_content
from cuco_tui.app.widgets.lineage.compare import compare_table
from cuco_tui.app.widgets.key_bar import KeyBar
from cuco_tui.lineage import SessionError, SessionRepo


class CompareScreen(Screen):
    DEFAULT_CSS = """
    CompareScreen #compare-body { height: 1fr; padding: 0 1; }
    CompareScreen .compare-part { height: auto; width: auto; margin-bottom: 1; }
    CompareScreen #compare-diff { width: 1fr; }
    """
    BINDINGS = [Binding("escape", "back", "Back")]
    COMMANDS = {CompareCommands}

    def __init__(self, repo: SessionRepo, a_id: str, b_id: str) -> None:
        super().__init__()
        self.repo = repo
        self.a_id = a_id
        self.b_id = b_id
        self.diff_text: str | None = None  # set once read
        self.views: tuple[CandidateView, CandidateView] | None = None
        # Set before the Header mounts: a title changed in on_mount reaches the Header through a
        # watcher queued for later, which fails if the screen is already gone by then.
        self.title = f"compare {self.a_id} → {self.b_id}"

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll(id="compare-body"):
            yield Static(f"reading {self.a_id} and {self.b_id}…", id="compare-table", classes="compare-part")
            yield Static("", id="compare-diff", classes="compare-part")
        yield KeyBar()

    def on_mount(self) -> None:
        self._load()

    @work(thread=True, exclusive=True, group="compare")
    def _load(self) -> None:
        try:
            a, b = load_candidate(self.repo, self.a_id), load_candidate(self.repo, self.b_id)
            diff = self.repo.diff(self.a_id, self.b_id)
        except SessionError as e:
            self.app.call_from_thread(self.notify, str(e), severity="error")
            return
        self.app.call_from_thread(self._show, a, b, diff)

    def _show(self, a: CandidateView, b: CandidateView, diff: str) -> None:
        self.views, self.diff_text = (a, b), diff
        self.query_one("#compare-table", Static).update(compare_table(a, b))
        body = self.query_one("#compare-diff", Static)
        if diff:
            body.update(diff_content(diff))
        else:
            body.update(f"{self.a_id} and {self.b_id} have the same candidate.cu")

    def action_back(self) -> None:
        self.app.pop_screen()
