"""How the dashboard starts a search: a new session under sessions/ (or at `session`), the
offline agent, and the engine wired to an EventBus. `start()` is blocking (git init, NVML
probe): the dashboard calls it from its thread worker, never from the event loop."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from cuco_tui.search.config import SearchConfig
from cuco_tui.search.engine import SearchEngine
from cuco_tui.search.events import EventBus
from cuco_tui.workload.manifest import Workload

EvaluateFn = Callable[..., Any]


@dataclass(frozen=True)
class SearchLaunch:
    """What a search started from the app runs with. `engine_options` go to SearchEngine as
    keyword arguments (gpu_pool, compile_ahead, design_context), for tests and odd machines."""

    workload: Workload
    config: SearchConfig
    evaluate_fn: EvaluateFn | None = None  # None: the real cascade
    session: Path | None = None  # None: a fresh folder under sessions/
    engine_options: tuple[tuple[str, Any], ...] = ()

    def start(self, events: EventBus) -> SearchEngine:
        from cuco_tui.agents.offline import OfflineAgent
        from cuco_tui.design.space import Capabilities
        from cuco_tui.search.session import create_session

        repo = create_session(self.workload, self.config, self.session)
        world = self.config.world or min(self.workload.world_sizes)
        agent = OfflineAgent(self.workload, Capabilities(world=world), seed=self.config.seed)
        kwargs: dict[str, Any] = dict(self.engine_options)
        if self.evaluate_fn is not None:
            kwargs["evaluate_fn"] = self.evaluate_fn
        return SearchEngine(self.workload, agent, repo, self.config, events=events, **kwargs)
