"""The candidate screen: one candidate of a session in full, in tabs that exist only when the
candidate has something for them (source; a diff per parent; compiler errors with their lines;
deadlock diagnosis; verification; timings per shape and per rank; the newest profile kept with it; run
logs), and its actions:
re-benchmark (with a GPU) and make-parent (through the live search, when the app runs one on
this session), export (always) and a profile at a bench shape (app/profiles.py: while it runs, a
line counts its time; once kept, the candidate is read again and its Profile tab shown). Keys: r
re-benchmark, u use as parent, w export, t profile, ] and [ the tabs, esc back (one meaning each
on every screen).

Everything is read from the session (SessionRepo) in a thread worker, so the event loop never
waits on git; the search's controls are called from short workers too, as the dashboard does,
since the engine's lock may be held across a git commit."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from rich.text import Text
from textual import events, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Header, Static, Tabs

from cuco_tui.app.commands import CandidateCommands
from cuco_tui.app.live_search import LiveSearch
from cuco_tui.app.messages import ProfileFinished, ProfileStarted
from cuco_tui.app.profiles import Profiles, ProfileTarget, RunsProfiles, ask_profile, clock, same_session
from cuco_tui.app.widgets.candidate.export import DEFAULT_ROOT, ExportFailed, default_folder, export_candidate
from cuco_tui.app.widgets.candidate.model import CandidateView, load_candidate
from cuco_tui.app.widgets.candidate.tabs import CandidateTabs
from cuco_tui.app.widgets.lineage.rows import status_style
from cuco_tui.app.widgets.key_bar import KeyBar
from cuco_tui.core.noise import record_speedup
from cuco_tui.lineage import SessionError, SessionRepo

LIVE_ACTIONS = {"rebenchmark": "re-benchmark", "make_parent": "use as parent"}
OFF_KEYS = {"r": "rebenchmark", "u": "make_parent", "t": "profile"}  # keys whose action may be off
NO_GPU_REBENCHMARK = ("re-benchmark needs a GPU to time on; this search has none, so it would only compile the same "
                      "code again and commit nothing new")


class CandidateScreen(Screen):
    DEFAULT_CSS = """
    CandidateScreen #candidate-head { height: auto; padding: 0 1; background: $boost; }
    CandidateScreen #candidate-body { height: 1fr; }
    CandidateScreen #candidate-loading { padding: 1 2; color: $text-muted; }
    CandidateScreen #candidate-profiling { height: auto; padding: 0 1; background: $boost; color: $warning;
                                           display: none; }
    CandidateScreen #candidate-profiling.-running { display: block; }
    """
    BINDINGS = [
        Binding("r", "rebenchmark", "Re-benchmark"),
        Binding("u", "make_parent", "Use as parent"),
        Binding("w", "export", "Export"),
        Binding("t", "profile", "Profile"),
        Binding("right_square_bracket", "next_tab", "Next tab", key_display="]"),
        Binding("left_square_bracket", "previous_tab", "Prev tab", key_display="["),
        Binding("escape", "back", "Back"),
    ]
    COMMANDS = {CandidateCommands}

    def __init__(self, repo: SessionRepo, candidate_id: str, *, search: LiveSearch | None = None,
                 owns_repo: bool = False, export_root: Path = DEFAULT_ROOT) -> None:
        """`search`: the live search on this session (None: browsing; re-benchmark and make
        parent are off). `owns_repo`: close the repository when the screen goes away.
        `export_root`: where export writes <session>-<id>/ (relative: to the working folder)."""
        super().__init__()
        self.repo = repo
        self.candidate_id = candidate_id
        self.search = search
        self.export_root = Path(export_root)
        self._owns_repo = owns_repo
        self.view: CandidateView | None = None  # set once loaded
        self.error: str | None = None  # set when the candidate cannot be read
        self._show_tab: str | None = None  # the tab to show once read again (a profile was kept)
        self._profile_clock: Timer | None = None  # counts a running profile's time up, each second
        # Set before the Header mounts: a title changed in on_mount reaches the Header through a
        # watcher queued for later, which fails if the screen is already gone by then.
        self.title = f"{self.candidate_id} · {self.repo.path.name}"

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(f"{self.candidate_id}", id="candidate-head")
        yield Static("", id="candidate-profiling")
        with Vertical(id="candidate-body"):
            yield Static(f"reading {self.candidate_id} from the session…", id="candidate-loading")
        yield KeyBar()

    def on_mount(self) -> None:
        self._load()
        profiles = self._profiles()
        running = profiles.profiler.running if profiles is not None else None
        if running is not None and self._mine(running.session, running.candidate_id):  # opened while it runs
            self._profiling(running.shape)

    @property
    def ready(self) -> bool:
        """True once the tabs are on screen (or the candidate could not be read)."""
        if self.error is not None:
            return True
        tabs = self.query(CandidateTabs)
        return bool(tabs) and bool(tabs.first().active)  # the first tab is chosen after mounting

    @property
    def tabs(self) -> CandidateTabs:
        return self.query_one(CandidateTabs)

    # ---- loading ---------------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="candidate-load", exit_on_error=False)
    def _load(self) -> None:
        try:
            view = load_candidate(self.repo, self.candidate_id)
        except SessionError as e:
            self.app.call_from_thread(self._failed, str(e))
            return
        except Exception as e:  # a closed repository, a damaged record: said, not crashed on
            self.app.call_from_thread(self._failed, f"cannot read {self.candidate_id}: {type(e).__name__}: {e}")
            return
        self.app.call_from_thread(self._show, view)

    def _failed(self, message: str) -> None:
        self.error = message
        self.query_one("#candidate-loading", Static).update(message)
        self.notify(message, severity="error")

    async def _show(self, view: CandidateView) -> None:
        self.view = view
        self.query_one("#candidate-head", Static).update(self._head(view))
        body = self.query_one("#candidate-body", Vertical)
        await body.remove_children()
        tabs = CandidateTabs(view, id="candidate-tabs")
        await body.mount(tabs)
        tabs.query_one(Tabs).focus()  # left/right move between tabs from the start
        wanted, self._show_tab = self._show_tab, None
        if wanted is not None:
            tabs.show(wanted)
        self.refresh_bindings()

    def _head(self, view: CandidateView) -> Text:
        r = view.record
        text = Text()
        text.append(r.id, style="bold")
        text.append(f"  {r.kind} · generation {r.generation} · island {r.island} · ")
        text.append(r.status, style=status_style(r.status))
        speedup = record_speedup(r)
        if speedup is not None:
            text.append(f" · {speedup.label()}", style="bold")
        text.append(f" · parents {', '.join(r.parents) or '(seed)'}")
        if view.not_measured():
            text.append(f" · {view.not_measured()}", style="dim")
        text.append("\n")
        if self._live() and self.search is not None and self.search.can_measure is False:
            text.append("live search attached: u makes it the next parent; no re-benchmark (no GPU here)", style="dim")
        elif self._live():
            text.append("live search attached: r re-benchmarks this candidate, u makes it the next parent",
                        style="dim")
        else:
            text.append("browsing: no running search on this session, so re-benchmark and make parent are off",
                        style="dim")
        return text

    # ---- actions ---------------------------------------------------------------------------

    def _live(self) -> bool:
        return self.search is not None and self.search.running

    def _no_gpu(self) -> bool:
        return self.search is not None and self.search.can_measure is False

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in LIVE_ACTIONS and not self._live():
            return None  # shown, dimmed: the footer says it exists and is off here
        if action == "rebenchmark" and self._no_gpu():
            return None
        if action in LIVE_ACTIONS or action in ("export", "profile"):
            return self.view is not None or None
        return True

    def explain_disabled(self, action: str) -> bool:
        """Notify why `action` cannot run now; True when it cannot (the palette asks first)."""
        if action in LIVE_ACTIONS and not self._live():
            what = LIVE_ACTIONS[action]
            why = ("the search on this session has ended" if self.search is not None else
                   "no search is running on this session (browsing)")
            self.notify(f"{what} needs a running search: {why}", severity="warning")
            return True
        if action == "rebenchmark" and self._no_gpu():
            self.notify(NO_GPU_REBENCHMARK, severity="warning")
            return True
        if action in (*LIVE_ACTIONS, "export", "profile") and self.view is None:
            self.notify(f"{self.candidate_id} is still being read", severity="warning")
            return True
        return False

    def on_key(self, event: events.Key) -> None:
        # A disabled binding lets its key through to here: say why it did nothing.
        action = OFF_KEYS.get(event.key)
        if action is not None and self.check_action(action, ()) is not True:
            event.stop()
            self.explain_disabled(action)

    @work(thread=True, group="candidate-actions", exit_on_error=False)
    def _steer(self, what: str, call: Callable[[], str]) -> None:
        try:
            said = call()
        except Exception as exc:  # SteeringError: a sentence for the engineer
            self.app.call_from_thread(self.notify, str(exc), title=what, severity="warning")
            return
        self.app.call_from_thread(self.notify, said, title=what)

    def action_rebenchmark(self) -> None:
        search, cid = self.search, self.candidate_id
        if self.explain_disabled("rebenchmark") or search is None:
            return

        def rebench() -> str:
            new = search.rebenchmark(cid)
            return f"re-benchmark of {cid} queued: it will be committed as {new}, a child of {cid}"

        self._steer("re-benchmark", rebench)

    def action_make_parent(self) -> None:
        search, cid = self.search, self.candidate_id
        if self.explain_disabled("make_parent") or search is None:
            return

        def prefer() -> str:
            search.prefer_parent(cid)
            return f"the next proposal will start from {cid}"

        self._steer("use as parent", prefer)

    def action_export(self) -> None:
        if self.explain_disabled("export") or self.view is None:
            return
        self._export(self.view.id, default_folder(self.view.session, self.view.id, self.export_root))

    @work(thread=True, group="candidate-actions", exit_on_error=False)
    def _export(self, candidate_id: str, folder: Path) -> None:
        try:
            done = export_candidate(self.repo.origin, candidate_id, folder)
        except ExportFailed as e:
            self.app.call_from_thread(self.notify, f"export of {candidate_id} failed: {e}", severity="error")
            return
        self.app.call_from_thread(self.notify, done.said, title="export", timeout=15)

    # ---- profile ---------------------------------------------------------------------------

    def _profiles(self) -> Profiles | None:
        app = self.app
        return app.profiles if isinstance(app, RunsProfiles) else None

    def action_profile(self) -> None:
        """`t`: a profile of this candidate at a bench shape (app/profiles.py asks which, or says
        in one line why not)."""
        if self.explain_disabled("profile") or self.view is None:
            return
        workload = str(self.repo.session_info().get("workload", ""))
        ask_profile(self, ProfileTarget(self.repo.path, self.candidate_id, self.view.record.status, workload,
                                        self.repo.temporary))

    def _mine(self, session: Path, candidate_id: str) -> bool:
        return candidate_id == self.candidate_id and same_session(session, self.repo.path)

    def on_profile_started(self, message: ProfileStarted) -> None:
        if self._mine(message.request.session, message.request.candidate_id):
            self._profiling(message.request.shape)

    def on_profile_finished(self, message: ProfileFinished) -> None:
        ended = message.ended
        if not self._mine(ended.request.session, ended.request.candidate_id):
            return
        if self._profile_clock is not None:
            self._profile_clock.stop()
            self._profile_clock = None
        self.query_one("#candidate-profiling", Static).remove_class("-running")
        if ended.ok:  # kept in the session: read the candidate again, its Profile tab shown
            self._show_tab = "profile"
            self._load()

    def _profiling(self, shape: str) -> None:
        line = self.query_one("#candidate-profiling", Static)
        line.add_class("-running")

        def tick() -> None:
            profiles = self._profiles()
            took = clock(profiles.profiler.elapsed()) if profiles is not None else ""
            line.update(f"profiling at {shape}: {took} (compile, verify, time, then 5 launches recorded)")

        tick()
        if self._profile_clock is None:
            self._profile_clock = self.set_interval(1.0, tick)

    def action_next_tab(self) -> None:
        if self.query(CandidateTabs):
            self.tabs.step(1)

    def action_previous_tab(self) -> None:
        if self.query(CandidateTabs):
            self.tabs.step(-1)

    def action_back(self) -> None:
        if len(self.app.screen_stack) > 1:
            self.app.pop_screen()

    def on_unmount(self) -> None:
        if self._owns_repo:
            self.workers.cancel_all()
            self.repo.close()
