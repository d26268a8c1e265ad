"""The lineage screen: a session's candidates as a DAG (table with a graph column, colored by
status), filters by island / status / backend, jump to an id, one candidate's details, two
marked candidates compared side by side (the compare screen), export, a profile of the
highlighted candidate (t, app/profiles.py), and Enter (or o) to open a candidate in full (the
candidate screen). A line under the header names the machine the
session was recorded on (GPUs, driver, CUDA, NCCL). Below 140 columns the details go under
the table, so that every column of the table is in view at 80.

Opening reads only the index's summaries (one SQLite query); the machine, a candidate's full
record and any diff are read from git in thread workers, so the event loop never waits on git."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.css.query import NoMatches
from textual.events import Resize
from textual.screen import Screen
from textual.widgets import Header, Input, Static

from cuco_tui.app.commands import LineageCommands
from cuco_tui.app.live_search import LiveSearch
from cuco_tui.app.profiles import ProfileTarget, ask_profile
from cuco_tui.app.screens.candidate import CandidateScreen
from cuco_tui.app.screens.compare import CompareScreen
from cuco_tui.app.widgets.candidate.export import DEFAULT_ROOT, ExportFailed, default_folder, export_candidate
from cuco_tui.app.widgets.lineage.candidate_details import CandidateDetails
from cuco_tui.app.widgets.lineage.candidate_table import CandidateTable
from cuco_tui.app.widgets.lineage.rows import LineageFilter, LineageRow, lineage_rows
from cuco_tui.app.widgets.key_bar import KeyBar
from cuco_tui.core.records import CandidateRecord, candidate_id_of
from cuco_tui.lineage import SessionError, SessionRepo


STACKED_BELOW = 140  # columns: below this the details are under the table, both full width


def _cycle(values: list, current):
    """The value after `current` in [None, *values] (None: no filter)."""
    options = [None, *values]
    return options[(options.index(current) + 1) % len(options)] if current in options else None


class LineageScreen(Screen):
    DEFAULT_CSS = """
    LineageScreen #lineage-machine { height: auto; padding: 0 1; color: $text-muted; background: $boost; }
    LineageScreen #lineage-bar { height: auto; padding: 0 1; background: $boost; }
    LineageScreen #lineage-body { height: 1fr; }
    LineageScreen.-stacked #lineage-body { layout: vertical; }
    LineageScreen.-stacked CandidateTable { width: 1fr; height: 1fr; }
    LineageScreen.-stacked CandidateDetails {
        width: 1fr; height: 1fr; border-left: none; border-top: solid $primary-darken-2;
    }
    LineageScreen #lineage-jump { dock: bottom; display: none; }
    LineageScreen #lineage-jump.-open { display: block; }
    """
    BINDINGS = [
        Binding("q", "app.quit", "Quit"),
        Binding("o,enter", "open_candidate", "Open"),
        Binding("escape", "back", "Back"),
        Binding("c", "compare", "Compare"),
        Binding("slash,g", "jump", "Go to id"),
        Binding("w", "export", "Export"),
        Binding("t", "profile", "Profile"),
        Binding("i", "cycle_island", "Island"),
        Binding("f", "cycle_status", "Status"),
        Binding("d", "cycle_backend", "Backend"),
        Binding("0", "clear_filters", "No filter"),
    ]
    COMMANDS = {LineageCommands}

    def __init__(self, repo: SessionRepo, owns_repo: bool = False, search: LiveSearch | None = None,
                 export_root: Path = DEFAULT_ROOT, *, select: str | None = None, first: bool = False) -> None:
        """`owns_repo`: close the repository when the screen goes away. `search`: the search
        the app runs, if any; candidates opened from here get it when it runs this session.
        `export_root`: where export writes <session>-<id>/. `select`: the candidate to select
        once shown. `first`: the lineage `cuco-tui open` opened, the app's first screen, whose
        esc goes to the session browser (beneath it lies only the workload's evaluate screen)."""
        super().__init__()
        self.select = select
        self.first = first
        self.repo = repo
        self.export_root = Path(export_root)
        self._owns_repo = owns_repo
        self.search = search
        self.rows: list[LineageRow] = []
        self.shown: list[LineageRow] = []
        self.filter = LineageFilter()
        self.marked: str | None = None
        self._drawn = False  # the table's first screenful is drawn
        self._machine_shown = False  # the header names the machine (read in a worker)
        # Set before the Header mounts: a title changed in on_mount reaches the Header through a
        # watcher queued for later, which fails if the screen is already gone by then.
        self.title = f"lineage · {self.repo.path.name}"

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("reading the machine it was recorded on…", id="lineage-machine")
        yield Static("", id="lineage-bar")
        with Horizontal(id="lineage-body"):
            yield CandidateTable(id="lineage-table")
            yield CandidateDetails(id="lineage-details")
        yield Input(placeholder="candidate id, e.g. c0042 or 42 (enter: go, escape: cancel)", id="lineage-jump")
        yield KeyBar()

    def on_mount(self) -> None:
        self._fit(self.size.width)
        self.rows = lineage_rows(self.repo.summaries())
        self._read_machine()  # after the summaries: both take the repository's lock
        self._apply_filter()
        self.query_one(CandidateTable).focus()
        if self.select is not None:
            self.jump_to(self.select)
        self.call_after_refresh(self._mark_ready)

    @work(thread=True, exclusive=True, group="lineage-machine", exit_on_error=False)
    def _read_machine(self) -> None:
        """The header's machine: a git read (a tag's blob, else the bounds'), so off the event loop."""
        try:
            machine = self.repo.machine()
        except Exception as e:  # a damaged record or a repository closed meanwhile: said, not lost
            text = f"machine record unreadable ({type(e).__name__}: {e})"
        else:
            text = (f"recorded on {machine.describe()}" if machine is not None
                    else "machine not recorded (a session made before cuco recorded it)")
        self.app.call_from_thread(self._show_machine, text)

    def _show_machine(self, text: str) -> None:
        try:
            self.query_one("#lineage-machine", Static).update(text)  # a line of its own: it wraps, never cut
        except NoMatches:
            return  # the screen was taken down while the machine was read
        self._machine_shown = True

    @property
    def machine_line(self) -> str:
        return str(self.query_one("#lineage-machine", Static).content)

    def on_resize(self, event: Resize) -> None:
        self._fit(event.size.width)

    def _fit(self, width: int) -> None:
        # Narrower than the table's columns and the details side by side: the details go below.
        self.set_class(width < STACKED_BELOW, "-stacked")

    def _mark_ready(self) -> None:
        self._drawn = True  # the rows are laid out and the first screenful drawn

    @property
    def ready(self) -> bool:
        """The first screenful is drawn and its header names the machine."""
        return self._drawn and self._machine_shown

    # ---- filters ---------------------------------------------------------------------------

    def set_filter(self, flt: LineageFilter) -> None:
        self.filter = flt
        self._apply_filter()

    def _apply_filter(self) -> None:
        self.shown = [r for r in self.rows if self.filter.keeps(r)]
        self.query_one(CandidateTable).show(self.shown)
        self._update_bar()

    def _update_bar(self) -> None:
        marked = f" · marked {self.marked} (c on another to compare)" if self.marked else " · c marks one to compare"
        self.query_one("#lineage-bar", Static).update(
            f"{len(self.shown)} of {len(self.rows)} candidates · filter: {self.filter.describe()}{marked}")

    def _values(self, key) -> list:
        return sorted({key(r) for r in self.rows})

    def action_cycle_island(self) -> None:
        island = _cycle(self._values(lambda r: r.summary.island), self.filter.island)
        self.set_filter(LineageFilter(island, self.filter.status, self.filter.backend))

    def action_cycle_status(self) -> None:
        status = _cycle(self._values(lambda r: r.summary.status), self.filter.status)
        self.set_filter(LineageFilter(self.filter.island, status, self.filter.backend))

    def action_cycle_backend(self) -> None:
        backend = _cycle(self._values(lambda r: r.backend), self.filter.backend)
        self.set_filter(LineageFilter(self.filter.island, self.filter.status, backend))

    def action_clear_filters(self) -> None:
        self.set_filter(LineageFilter())

    # ---- jump and details ------------------------------------------------------------------

    def action_jump(self) -> None:
        box = self.query_one("#lineage-jump", Input)
        box.add_class("-open")
        box.value = ""
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        event.input.remove_class("-open")
        self.jump_to(event.value.strip())

    def jump_to(self, typed: str) -> bool:
        """Select the candidate (`typed` as a person types it: c0030, c30, 0030 or 30), clearing
        the filters when they hide it."""
        table = self.query_one(CandidateTable)
        table.focus()
        candidate_id = candidate_id_of(typed)
        if candidate_id is None:
            self.notify(f"{typed!r} is not a candidate id (e.g. c0030, or 30)", severity="warning")
            return False
        if not table.select(candidate_id):
            if not any(r.id == candidate_id for r in self.rows):
                self.notify(f"no candidate {candidate_id!r} in this session", severity="warning")
                return False
            self.set_filter(LineageFilter())
            table.select(candidate_id)
        self._load_details(candidate_id)
        return True

    def candidate_choices(self) -> list[tuple[str, str]]:
        """(label, id) of every candidate, in lineage order: the palette's go-to entries."""
        out = []
        for r in self.rows:
            s = r.summary
            speed = f" {s.speedup:.2f}x" if s.speedup is not None else ""
            out.append((f"Go to candidate {s.id} · {s.status}{speed} · {s.kind}", s.id))
        return out

    def go_to_candidate(self, candidate_id: str) -> None:
        self.jump_to(candidate_id)

    def on_candidate_table_highlighted(self, event: CandidateTable.Highlighted) -> None:
        self._load_details(event.candidate_id)

    @work(thread=True, exclusive=True, group="lineage-details")
    def _load_details(self, candidate_id: str) -> None:
        try:
            record = self.repo.record(candidate_id)
        except sqlite3.ProgrammingError:
            return  # the screen closed the repository while this ran
        except SessionError as e:
            self.app.call_from_thread(self.notify, str(e), severity="error")
            return
        self.app.call_from_thread(self._show_details, record)

    def _show_details(self, record: CandidateRecord) -> None:
        try:
            self.query_one(CandidateDetails).show(record)
        except NoMatches:
            pass  # the screen was taken down while the record was read

    # ---- open ------------------------------------------------------------------------------

    def action_open_candidate(self) -> None:
        """The highlighted candidate in full; with the live search when the app runs one on this
        session (so re-benchmark and make parent work from there too)."""
        current = self.query_one(CandidateTable).highlighted_id
        if current is None:
            self.notify("no candidate is shown (clear the filters with 0)", severity="warning")
            return
        # Asked now, not when the screen opened: the search may have started since.
        live = self.search if self.search is not None and self.search.works_on(self.repo.path) else None
        self.app.push_screen(CandidateScreen(self.repo, current, search=live))

    # ---- compare ---------------------------------------------------------------------------

    def action_compare(self) -> None:
        current = self.query_one(CandidateTable).highlighted_id
        if current is None:
            return
        if self.marked is None or self.marked == current:
            self.marked = current
            self._update_bar()
            self.notify(f"marked {current}; press c on another candidate to compare")
            return
        a, self.marked = self.marked, None
        self._update_bar()
        self.app.push_screen(CompareScreen(self.repo, a, current))

    # ---- export ----------------------------------------------------------------------------

    def action_export(self) -> None:
        current = self.query_one(CandidateTable).highlighted_id
        if current is None:
            self.notify("no candidate is shown (clear the filters with 0)", severity="warning")
            return
        self._export(current)

    @work(thread=True, group="lineage-export", exit_on_error=False)
    def _export(self, candidate_id: str) -> None:
        try:
            done = export_candidate(self.repo.origin, candidate_id,
                                    default_folder(self.repo.path.name, candidate_id, self.export_root))
        except ExportFailed as e:
            self.app.call_from_thread(self.notify, f"export of {candidate_id} failed: {e}", severity="error")
            return
        self.app.call_from_thread(self.notify, done.said, title="export", timeout=15)

    # ---- profile ---------------------------------------------------------------------------

    def action_profile(self) -> None:
        """`t`: a profile of the highlighted candidate (app/profiles.py asks at which shape)."""
        current = self.query_one(CandidateTable).highlighted_id
        row = next((r for r in self.rows if r.id == current), None)
        if row is None:
            self.notify("no candidate is shown (clear the filters with 0)", severity="warning")
            return
        workload = str(self.repo.session_info().get("workload", ""))
        ask_profile(self, ProfileTarget(self.repo.path, row.id, row.summary.status, workload, self.repo.temporary))

    async def action_back(self) -> None:
        """Escape: close the id box when open, else leave the screen (the first lineage of
        `cuco-tui open`: to the session browser, not the workload's evaluate screen under it)."""
        box = self.query_one("#lineage-jump", Input)
        if box.has_class("-open"):
            box.remove_class("-open")
            self.query_one(CandidateTable).focus()
        elif self.first:
            await self.run_action("app.browse")
        elif len(self.app.screen_stack) > 1:
            self.app.pop_screen()

    def on_unmount(self) -> None:
        if self._owns_repo:
            self.workers.cancel_all()
            self.repo.close()
