"""The one search the app runs, and everything it opened: LiveSearch starts a SearchLaunch (the
session created or reopened, the agent built through agents/factory.py, the SearchEngine wired
to its EventBus), runs it, and closes the session's repository once when asked. Screens steer
and read the search only through it: the engine's public controls, the session's path, and a
repository handle of their own on the session. start(), run() and close() block (git, NVML,
building the agent): the dashboard calls them from its thread worker, never from the event
loop; the controls (search/steering.py's Controls) may be called from any thread, and each is
the engine's own Steering's."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cuco_tui.app.search_launch import SearchLaunch
from cuco_tui.lineage import SessionRepo
from cuco_tui.search.engine import SearchEngine
from cuco_tui.search.events import EventBus
from cuco_tui.search.steering import Controls, Steering

if TYPE_CHECKING:
    from cuco_tui.search.summary import SearchSummary


class SearchNotStarted(RuntimeError):
    """A control or a read that needs the engine, asked before start() built it."""


class LiveSearch(Controls):
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
        """Create or reopen the session, build the agent and the engine, as every search starts
        (search/launch.py). Once only. Whatever can refuse the search (the world and the GPU
        groups, the agent) is checked before a new session is made, so a refusal leaves none
        behind."""
        from cuco_tui.search.launch import agent_maker, new_target, resumed_target, start_engine

        with self._lock:
            if self._starting or self._closed:
                raise RuntimeError("this search was already started or closed; a LiveSearch starts once")
            self._starting = True
        launch = self.launch
        options: dict[str, Any] = dict(launch.engine_options)
        if launch.evaluate_fn is not None:
            options["evaluate_fn"] = launch.evaluate_fn
        target = (resumed_target(launch.resume, dict(launch.resume_overrides)) if launch.resume is not None
                  else new_target(launch.workload, launch.config, launch.session, launch.root))
        engine, repo = start_engine(target, agent_maker(launch.agent_kind, launch.model), launch.executor,
                                    self.events, **options)
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
    def gpus_busy(self) -> bool:
        """True while the search may be evaluating on this machine's GPUs: from start() on while it
        runs unpaused, and while evaluations started before a pause are still in flight."""
        with self._lock:
            engine, starting, closed = self._engine, self._starting, self._closed
        if engine is None:
            return starting and not closed  # building the engine, about to measure on the GPUs
        return engine.running and (not engine.steering.paused or engine.evaluating)

    @property
    def can_measure(self) -> bool | None:
        """True when the search has a GPU to verify and time on, False when it compiles only (no
        GPU), None until it planned its GPU groups."""
        engine = self._engine
        return None if engine is None else engine.can_measure

    # ---- controls (any thread): steering.Controls, forwarded to the engine's Steering --------

    @property
    def steering(self) -> Steering:
        """The engine's controls; SearchNotStarted before start() built it."""
        return self._started().steering

    def stop(self) -> None:
        """Stop proposing; what is in flight finishes and is committed. Before start(): the
        engine is stopped as soon as it is built."""
        with self._lock:
            engine = self._engine
            if engine is None:
                self._stop_asked = True
                return
        engine.stop()

    def _started(self) -> SearchEngine:
        engine = self._engine
        if engine is None:
            raise SearchNotStarted("the search is still starting")
        return engine
