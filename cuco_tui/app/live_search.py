"""The one search the app runs, and everything it opened: LiveSearch starts a SearchLaunch (the
session created or reopened, the agent built through agents/factory.py, the SearchEngine wired
to its EventBus), runs it, and closes the session's repository once when asked. Screens steer
and read the search only through it: the engine's public controls, the session's path, and a
repository handle of their own on the session. start(), run() and close() block (git, NVML,
building the agent): the dashboard calls them from its thread worker, never from the event
loop; the controls may be called from any thread, and each is the engine's own."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cuco_tui.app.search_launch import SearchLaunch
from cuco_tui.lineage import SessionRepo
from cuco_tui.search.engine import SearchEngine
from cuco_tui.search.events import EventBus

if TYPE_CHECKING:
    from cuco_tui.search.summary import SearchSummary


class SearchNotStarted(RuntimeError):
    """A control or a read that needs the engine, asked before start() built it."""


class LiveSearch:
    def __init__(self, launch: SearchLaunch, events: EventBus | None = None) -> None:
        self.launch = launch
        self.events = events or EventBus()
        self._lock = threading.Lock()  # guards the fields below: start() runs on a worker, stop() anywhere
        self._engine: SearchEngine | None = None
        self._repo: SessionRepo | None = None
        self._starting = False
        self._closed = False
        self._stop_asked = False  # stop() came before the engine existed

    # ---- lifetime (blocking: call from a thread) ---------------------------------------------

    def start(self) -> None:
        """Create or reopen the session, build the agent and the engine. Once only. Whatever can
        refuse the search (the agent, the world and the GPU groups) is checked before a new
        session is made, so a refusal leaves none behind."""
        from cuco_tui.agents.factory import make_agent
        from cuco_tui.search.scheduling import plan_executor
        from cuco_tui.search.sessions import create_session, new_session_folder, open_session

        with self._lock:
            if self._starting or self._closed:
                raise RuntimeError("this search was already started or closed; a LiveSearch starts once")
            self._starting = True
        launch = self.launch
        kwargs: dict[str, Any] = dict(launch.engine_options)
        if launch.evaluate_fn is not None:
            kwargs["evaluate_fn"] = launch.evaluate_fn
        if launch.resume is not None:
            repo, workload, config = open_session(launch.resume)
            config = config.with_(**dict(launch.resume_overrides))
            try:
                kwargs["gpu_pool"] = plan_executor(workload, config, kwargs.get("gpu_pool"))
                agent = make_agent(launch.agent_kind, workload, world=config.world, gpus=tuple(config.gpus),
                                   seed=config.seed, budget_usd=config.budget_usd, model=launch.model)
            except BaseException:
                repo.close()
                raise
        else:
            workload, config = launch.workload, launch.config
            folder = new_session_folder(launch.session, launch.root, workload.name)
            kwargs["gpu_pool"] = plan_executor(workload, config, kwargs.get("gpu_pool"))
            agent = make_agent(launch.agent_kind, workload, world=config.world, gpus=tuple(config.gpus),
                               seed=config.seed, budget_usd=config.budget_usd, model=launch.model)
            repo = create_session(workload, config, folder)
        try:
            engine = SearchEngine(workload, agent, repo, config, events=self.events, **kwargs)
        except BaseException:
            repo.close()
            raise
        with self._lock:
            self._engine, self._repo = engine, repo
            stop = self._stop_asked
        if stop:
            engine.stop()

    def run(self) -> SearchSummary:
        """Run (or resume) the search to its last generation; blocking."""
        return self._started().run()

    def close(self) -> None:
        """Close the session's repository, once (later calls do nothing). After run() returned:
        the engine commits through it while it runs."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            repo = self._repo
        if repo is not None:
            repo.close()

    def __enter__(self) -> "LiveSearch":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- what the screens read ---------------------------------------------------------------

    @property
    def started(self) -> bool:
        return self._engine is not None

    @property
    def running(self) -> bool:
        """True while the engine takes steering commands (from its run's start to its last drain)."""
        engine = self._engine
        return engine is not None and engine.running

    @property
    def session(self) -> Path | None:
        """The session folder, once started."""
        repo = self._repo
        return None if repo is None else Path(repo.path)

    def works_on(self, session: Path) -> bool:
        """True when this search has started on the session at `session`."""
        mine = self.session
        if mine is None:
            return False
        try:
            return mine.resolve() == Path(session).resolve()
        except OSError:
            return False

    def open_repo(self) -> SessionRepo:
        """A handle of the caller's own on the session (the caller closes it): a screen may
        outlive the search, whose handle closes when it ends. Raises SessionError."""
        session = self.session
        if session is None:
            raise SearchNotStarted("the search is still starting")
        return SessionRepo.open(session)

    @property
    def can_measure(self) -> bool | None:
        """True when the search has a GPU to verify and time on, False when it compiles only (no
        GPU), None until it planned its GPU groups."""
        engine = self._engine
        return None if engine is None else engine.can_measure

    @property
    def paused(self) -> bool:
        return self._started().paused

    @property
    def review_mode(self) -> str:
        return self._started().review_mode

    @property
    def hints(self) -> tuple[str, ...]:
        return self._started().hints

    @property
    def preferred_parent(self) -> str | None:
        return self._started().preferred_parent

    # ---- controls (any thread; the engine's own) ---------------------------------------------

    def pause(self) -> None:
        self._started().pause()

    def resume(self) -> None:
        self._started().resume()

    def stop(self) -> None:
        """Stop proposing; what is in flight finishes and is committed. Before start(): the
        engine is stopped as soon as it is built."""
        with self._lock:
            engine = self._engine
            if engine is None:
                self._stop_asked = True
                return
        engine.stop()

    def set_review_mode(self, mode: str) -> None:
        self._started().set_review_mode(mode)

    def add_hint(self, text: str) -> None:
        self._started().add_hint(text)

    def set_budget(self, usd: float | None) -> None:
        self._started().set_budget(usd)

    def review(self, candidate_id: str, decision: str, reason: str = "", source: str | None = None) -> None:
        self._started().review(candidate_id, decision, reason, source)

    def rebenchmark(self, candidate_id: str) -> str:
        """The id the re-benchmark will be committed under."""
        return self._started().rebenchmark(candidate_id)

    def prefer_parent(self, candidate_id: str) -> None:
        self._started().prefer_parent(candidate_id)

    def _started(self) -> SearchEngine:
        engine = self._engine
        if engine is None:
            raise SearchNotStarted("the search is still starting")
        return engine
