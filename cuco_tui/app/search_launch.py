"""How the dashboard starts a search: a new session under sessions/ (or at `session`), or an
existing one continued (`resume`); the agent named by `agent` (None: Claude when
ANTHROPIC_API_KEY is set, else offline); the engine wired to an EventBus. `start()` is blocking
(git init, NVML probe, building the agent): the dashboard calls it from its thread worker,
never from the event loop."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from cuco_tui.search.config import SearchConfig
from cuco_tui.search.engine import SearchEngine
from cuco_tui.search.events import EventBus
from cuco_tui.core.workload import Workload

EvaluateFn = Callable[..., Any]


@dataclass(frozen=True)
class SearchLaunch:
    """What a search started from the app runs with. `engine_options` go to SearchEngine as
    keyword arguments (gpu_pool, compile_ahead, design_context), for tests and odd machines.
    With `resume`, the session's own workload and config are used; `resume_overrides`
    replaces some of the config (e.g. more generations)."""

    workload: Workload
    config: SearchConfig
    evaluate_fn: EvaluateFn | None = None  # None: the real cascade
    session: Path | None = None  # None: a fresh folder under sessions/
    engine_options: tuple[tuple[str, Any], ...] = ()
    agent: str | None = None  # "offline" | "claude" | None: chosen from the environment
    model: str | None = None
    resume: Path | None = None
    resume_overrides: tuple[tuple[str, Any], ...] = ()

    @property
    def agent_kind(self) -> str:
        from cuco_tui.agents.factory import default_agent_kind

        return self.agent or default_agent_kind()

    def start(self, events: EventBus) -> SearchEngine:
        from cuco_tui.agents.factory import make_agent
        from cuco_tui.search.sessions import create_session, open_session

        if self.resume is not None:
            repo, workload, config = open_session(self.resume)
            config = config.with_(**dict(self.resume_overrides))
        else:
            workload, config = self.workload, self.config
            repo = create_session(workload, config, self.session)
        try:
            agent = make_agent(self.agent_kind, workload, world=config.world, gpus=tuple(config.gpus),
                               seed=config.seed, budget_usd=config.budget_usd, model=self.model)
        except Exception:
            repo.close()
            raise
        kwargs: dict[str, Any] = dict(self.engine_options)
        if self.evaluate_fn is not None:
            kwargs["evaluate_fn"] = self.evaluate_fn
        return SearchEngine(workload, agent, repo, config, events=events, **kwargs)
