"""The cuco-tui application: opens a workload on the evaluate screen; `s` opens the search
dashboard (or `start_search=True` opens it at once); `open_session` opens a session's lineage.

One key, one meaning on every screen (README, "Keys"): q quits (gracefully: a running search is
stopped first, and asks when proposals wait), b browses sessions, l shows the lineage of what is
on screen, s the search (asking first when the command line did not start one), o opens the
thing under the cursor, / goes to a candidate id, esc goes back (never out of the search; from
the lineage `cuco-tui open` opened, to the session browser), ^p lists every action. The
palette's system commands are these, with Quit the same graceful path."""

from __future__ import annotations

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen

from pathlib import Path
from typing import Any, Iterable

from cuco_tui.app.live_search import LiveSearch
from cuco_tui.app.profile_run import Profiler
from cuco_tui.app.profiles import Profiles
from cuco_tui.app.screens.candidate import CandidateScreen
from cuco_tui.app.screens.dashboard import DashboardScreen
from cuco_tui.app.screens.evaluate import EvaluateFn, EvaluateScreen
from cuco_tui.app.screens.lineage import LineageScreen
from cuco_tui.app.search_launch import SearchLaunch
from cuco_tui.app.widgets.confirm import Confirm
from cuco_tui.app.widgets.search.start_question import start_question
from cuco_tui.core.result import CascadeResult
from cuco_tui.core.workload import DEFAULT_WORKLOAD
from cuco_tui.executors import Executor
from cuco_tui.lineage import SessionError, SessionRepo, list_sessions, open_session_or_bundle
from cuco_tui.search.config import SearchConfig
from cuco_tui.workload.manifest import load_workload


def _cascade_evaluate(*args, **kwargs) -> CascadeResult:
    """The real evaluation cascade, imported when first used."""
    from cuco_tui.evaluate.cascade import evaluate

    return evaluate(*args, **kwargs)


def latest_session(root: Path | None = None) -> Path | None:
    """The most recently modified session under `root` (default: the sessions folder), else the
    newest example bundle (search.sessions.example_bundles), else None."""
    from cuco_tui.search.sessions import example_bundles, sessions_root

    sessions = list_sessions(root if root is not None else sessions_root())
    if sessions:
        return sessions[0].path
    bundles = sorted(example_bundles(root), key=lambda p: p.stat().st_mtime, reverse=True)
    return bundles[0] if bundles else None


class CucoApp(App):
    """`workload_name`: a folder under workloads/ or a path to one (raises WorkloadError with a
    sentence if it cannot be loaded); `gpus`: the GPU group to run on (None: the cascade picks);
    `evaluate_fn`: called as evaluate_fn(candidate, workload, EvalOptions, progress=callback).

    The search (`s`, or at once with `start_search`): `search_config` (default: the workload's,
    10 generations), `review_mode` overrides its review mode, `session` the session folder
    (default: a new one in the sessions folder), `executor` where its evaluations run (None: this
    machine's GPU groups), `engine_options` extra SearchEngine keyword arguments,
    `agent` "offline", "claude" or "random" (None: claude when ANTHROPIC_API_KEY is set), `resume` a
    session folder to continue instead of a new one. `open_session`: a lineage to open first, a
    session folder or bundle, or a session already opened (`cuco-tui open` imports a bundle once,
    to refuse a bad one before the app starts; the app then owns it). `b` lists the sessions and
    the example bundles to browse. `profiler` runs the profiles `t` asks for (default: `cuco eval
    ID --session S --profile SHAPE` in a process of its own, app/profile_run.py)."""

    CSS_PATH = "cuco.tcss"
    TITLE = "cuco"
    BINDINGS = [Binding("q", "quit", "Quit"), Binding("s", "search", "Search"), Binding("l", "lineage", "Lineage"),
                Binding("b", "browse", "Browse")]
    # The palette's own system commands kept (theme, keys, screenshot); Quit is replaced by ours.
    SYSTEM_KEPT = ("Theme", "Keys", "Maximize", "Minimize", "Screenshot")

    def __init__(
        self,
        workload_name: str = DEFAULT_WORKLOAD,
        gpus: list[int] | None = None,
        evaluate_fn: EvaluateFn | None = None,
        *,
        start_search: bool = False,
        review_mode: str | None = None,
        search_config: SearchConfig | None = None,
        session: Path | str | None = None,
        engine_options: dict[str, Any] | None = None,
        open_session: Path | str | SessionRepo | None = None,
        sessions_root: Path | None = None,
        agent: str | None = None,
        model: str | None = None,
        resume: Path | str | None = None,
        resume_overrides: dict[str, Any] | None = None,
        executor: Executor | None = None,
        profiler: Profiler | None = None,
    ) -> None:
        super().__init__()
        self.workload = load_workload(workload_name)
        self.gpus = list(gpus) if gpus else None
        self.evaluate_fn = evaluate_fn or _cascade_evaluate
        config = search_config or SearchConfig(workload=self.workload.name, generations=10,
                                               gpus=tuple(self.gpus or ()))
        if review_mode is not None:
            config = config.with_(review_mode=review_mode)  # ConfigError names the modes
        self.search_launch = SearchLaunch(self.workload, config, self.evaluate_fn,
                                          Path(session) if session is not None else None,
                                          tuple((engine_options or {}).items()), agent=agent, model=model,
                                          resume=Path(resume) if resume is not None else None,
                                          resume_overrides=tuple((resume_overrides or {}).items()),
                                          root=sessions_root, executor=executor)
        self.start_search = start_search
        self.open_session = (open_session if isinstance(open_session, SessionRepo) or open_session is None
                             else Path(open_session))
        self.sessions_root = sessions_root  # None: cuco_tui.search.sessions.sessions_root(), and the clone's examples
        # Made from search_launch once the app runs, started by the dashboard when it first opens;
        # the lineage screens get it so that candidates of its session can be steered.
        self.live_search: LiveSearch | None = None
        self._search_asked = False  # the engineer said yes to starting it (or the command line did)
        self.profiles = Profiles(self, profiler or Profiler(), lambda: self.live_search)

    def on_mount(self) -> None:
        self.live_search = LiveSearch(self.search_launch)
        if self.start_search:
            self._search_asked = True  # the command line asked for it
            self.action_search()
        elif isinstance(self.open_session, SessionRepo):
            self.push_screen(LineageScreen(self.open_session, owns_repo=True, search=self.live_search, first=True))
        elif self.open_session is not None:
            self._open_lineage(self.open_session, first=True)

    def action_lineage(self) -> None:
        """The lineage of what is on screen: a candidate's session (back to its lineage when one
        lies under it), this app's search once it started, else the most recent session in the
        sessions folder, else an example bundle. On a lineage, it says which."""
        screen = self.screen
        if isinstance(screen, LineageScreen):
            self.notify(f"this is the lineage of {screen.repo.path.name}; b browses the other sessions")
            return
        if isinstance(screen, CandidateScreen):
            self._lineage_of(screen)
            return
        live = self.live_search
        self._open_lineage(live.session if live is not None and live.started else None)

    def _lineage_of(self, candidate: CandidateScreen) -> None:
        """The candidate's session's lineage, the candidate selected: the one under it if any."""
        below = [s for s in self.screen_stack if isinstance(s, LineageScreen) and s.repo is candidate.repo]
        if below:
            while self.screen is not below[-1]:
                self.pop_screen()
            below[-1].jump_to(candidate.candidate_id)
            return
        live = self.live_search
        search = live if live is not None and live.works_on(candidate.repo.path) else None
        # The candidate screen's own handle: it outlives this lineage, which lies above it.
        self.push_screen(LineageScreen(candidate.repo, search=search, select=candidate.candidate_id))

    async def action_quit(self) -> None:
        """`q` while the search runs: the dashboard stops it and quits when what runs is
        committed, asking first when proposals wait for review; `q` again, or nothing to wait
        for: quit now."""
        dashboard = self.dashboard
        if dashboard is not None and not dashboard.quitting and dashboard.quit_after_search():
            return
        self.exit()

    def action_candidates(self) -> None:
        """The evaluate screen (the workload's candidates, one at a time); the search goes on."""
        while len(self.screen_stack) > 1 and not isinstance(self.screen, EvaluateScreen):
            self.pop_screen()

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield SystemCommand("Quit", "Quit: a running search stops first (asks when proposals wait for review)",
                            self.action_quit)
        yield SystemCommand("Browse", "Browse the sessions and the example bundles recorded on GPUs",
                            self.action_browse)
        yield SystemCommand("Lineage", "The lineage of this search's session (else the latest session)",
                            self.action_lineage)
        if not isinstance(screen, DashboardScreen):
            yield SystemCommand("Search", "The search dashboard (starts the search the first time)",
                                self.action_search)
        if not isinstance(screen, EvaluateScreen):
            yield SystemCommand("Evaluate", "The workload's candidates, evaluated one at a time",
                                self.action_candidates)
        for command in super().get_system_commands(screen):
            if command.title in self.SYSTEM_KEPT:
                yield command

    def action_browse(self) -> None:
        """Pick a session or an example bundle (the clone's sessions/examples/) and open its lineage."""
        from cuco_tui.app.screens.browse import BrowseScreen

        def chosen(path: Path | None) -> None:
            if path is not None:
                self._open_lineage(path)

        self.push_screen(BrowseScreen(self.sessions_root), chosen)

    @work(thread=True, exclusive=True, group="open-lineage")
    def _open_lineage(self, path: Path | None, first: bool = False) -> None:
        """In a thread (sessions are git repositories): find the session when `path` is None,
        open it (a bundle: import it first), then push the lineage screen (`first`: the one
        `cuco-tui open` asked for, whose esc goes to the session browser)."""
        if path is None:
            path = latest_session(self.sessions_root)
            if path is None:
                self.call_from_thread(self.notify, "no session in the sessions folder and no example bundle to "
                                      "open; run a search first", severity="warning")
                return
        try:
            repo = open_session_or_bundle(path)
        except SessionError as e:
            self.call_from_thread(self.notify, str(e), severity="error")
            return
        self.call_from_thread(self.push_screen, LineageScreen(repo, owns_repo=True, search=self.live_search,
                                                              first=first))

    @property
    def dashboard(self) -> DashboardScreen | None:
        if self.is_screen_installed("dashboard"):
            screen = self.get_screen("dashboard")
            return screen if isinstance(screen, DashboardScreen) else None
        return None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "search" and isinstance(self.screen, DashboardScreen):
            return False  # already there: hidden from the footer
        return True

    def action_search(self) -> None:
        """Open the search dashboard; the first time, this starts the search, after asking when
        the command line did not ask for one (workload, generations, GPUs: no to leave it)."""
        if self.live_search is None:  # not mounted yet: no search to open
            return
        running = self.profiles.profiler.running
        if self.dashboard is None and running is not None:  # it would evaluate on the profile's GPUs
            self.notify(f"a profile of {running.describe()} is running on the GPUs: start the search when it ends",
                        title="search", severity="warning")
            return
        if self.dashboard is None and not self._search_asked:
            self._ask_to_search()
            return
        if self.dashboard is None:
            self.install_screen(DashboardScreen(self.live_search), "dashboard")
        if self.screen is not self.dashboard:
            self.push_screen("dashboard")

    @work(thread=True, exclusive=True, group="ask-search")
    def _ask_to_search(self) -> None:
        """Read the GPUs (NVML, so off the event loop), then ask."""
        from cuco_tui.harness.gpus import inventory

        question, detail = start_question(self.search_launch, inventory())

        def answered(yes: bool | None) -> None:
            if yes:
                self._search_asked = True
                self.action_search()

        self.call_from_thread(self.push_screen, Confirm(question, detail, yes="Start", no="Not now"), answered)

    def on_unmount(self) -> None:
        self.profiles.cancel()  # a profile still running ends with the app, its ranks with it

    def get_default_screen(self) -> EvaluateScreen:
        return EvaluateScreen(self.workload, self.gpus, self.evaluate_fn)
