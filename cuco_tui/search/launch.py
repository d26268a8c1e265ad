"""How a search starts, the one way `cuco search`, the app's LiveSearch and
SearchEngine.from_session start one: the session it searches in (a new one's folder checked,
or an existing one reopened: `SessionTarget`), then `start_engine`: the GPU groups planned (or
the executor given checked against the world), the agent built, the new session created, the
engine constructed on it.

Everything that can refuse a search (the folder, the world and the GPU groups, the agent) is
checked before a new session is created, so a refusal leaves no empty session behind; a
reopened session's repository is closed when its start is refused, and keeps the totals a
resume raised (TOTALS) only once its search starts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from cuco_tui.agents.base import Agent
from cuco_tui.core.workload import Workload
from cuco_tui.executors import Executor
from cuco_tui.lineage import SessionRepo
from cuco_tui.search.config import SearchConfig
from cuco_tui.search.engine import SearchEngine
from cuco_tui.search.events import EventBus
from cuco_tui.search.scheduling import plan_executor
from cuco_tui.search.sessions import create_session, new_session_folder, open_session

# Builds the search's agent for the workload and config it searches with (a resumed session's own).
AgentMaker = Callable[[Workload, SearchConfig], Agent]

# The session's totals, which a resume may raise to go on: kept with the session once its search
# starts, or a later plain resume and `cuco sessions` would count to those it was started with.
TOTALS = ("generations", "evaluations", "budget_usd")


@dataclass(frozen=True)
class SessionTarget:
    """Where a search runs: a new session at `folder` (checked, made only by start_engine) or
    an existing one, reopened (`repo`, with the config it was started with and any changes)."""

    workload: Workload
    config: SearchConfig
    folder: Path | None = None
    repo: SessionRepo | None = None

    def close(self) -> None:
        """Close a reopened session's repository (a start refused after it was opened)."""
        if self.repo is not None:
            self.repo.close()


def new_target(workload: Workload, config: SearchConfig, session: Path | None = None,
               root: Path | None = None) -> SessionTarget:
    """A new session at `session`, else a fresh folder under `root` (None: sessions_root()),
    checked now: SessionError says why it cannot go there. Nothing is made yet."""
    return SessionTarget(workload, config, folder=new_session_folder(session, root, workload.name))


def resumed_target(path: Path, overrides: Mapping[str, Any] | None = None) -> SessionTarget:
    """The session at `path`, reopened, with its workload and the config it was started with
    (`overrides` replaces some, e.g. generations). SessionError when it cannot be resumed."""
    repo, workload, config = open_session(Path(path))
    try:
        config = config.with_(**dict(overrides or {}))
    except BaseException:
        repo.close()
        raise
    return SessionTarget(workload, config, repo=repo)


def agent_maker(kind: str, model: str | None = None) -> AgentMaker:
    """The agent of `kind` ("offline" | "claude" | "random") for a workload and config, as agents/factory.py
    builds it (AgentUnavailable when it cannot search here)."""
    from cuco_tui.agents.factory import make_agent

    def make(workload: Workload, config: SearchConfig) -> Agent:
        return make_agent(kind, workload, world=config.world, gpus=tuple(config.gpus), seed=config.seed,
                          budget_usd=config.budget_usd, model=model)

    return make


def start_engine(target: SessionTarget, agent: AgentMaker, executor: Executor | None = None,
                 events: EventBus | None = None, **engine_options: Any) -> tuple[SearchEngine, SessionRepo]:
    """The engine of a search on `target`, its session created when new. First what can refuse,
    in this order: the world against the workload and the GPU groups (`executor`, else this
    machine's, planned now: WorkloadError, PlacementError), the agent (AgentUnavailable); then
    the session (SessionError). `engine_options` go to SearchEngine (evaluate_fn, compile_ahead,
    design_context, bounds_fn). Returns the engine and the session's repository, which the
    engine commits through: its caller closes it once the run is over."""
    try:
        planned = plan_executor(target.workload, target.config, executor)
        built = agent(target.workload, target.config)
    except BaseException:
        target.close()
        raise
    repo = target.repo if target.repo is not None else create_session(target.workload, target.config, target.folder)
    try:
        engine = SearchEngine(target.workload, built, repo, target.config, events=events, gpu_pool=planned,
                              **engine_options)
        if target.repo is not None:
            repo.update_config({k: getattr(target.config, k) for k in TOTALS})
    except BaseException:
        repo.close()
        raise
    return engine, repo
