"""What a search started from the app runs with: a new session in the sessions folder (or at
`session`), or an existing one continued (`resume`); the agent named by `agent` (None: Claude
when ANTHROPIC_API_KEY is set, else offline). A recipe only: cuco_tui.app.live_search.LiveSearch
starts it and owns what it opens."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from cuco_tui.core.workload import Workload
from cuco_tui.executors import Executor
from cuco_tui.search.config import SearchConfig

EvaluateFn = Callable[..., Any]


@dataclass(frozen=True)
class SearchLaunch:
    """`executor` is where the evaluations run (None: this machine's GPU groups, planned when the
    search starts). `engine_options` go to SearchEngine as keyword arguments (compile_ahead,
    design_context, bounds_fn), for tests and odd machines. With `resume`, the session's own
    workload and config are used; `resume_overrides` replaces some of the config (e.g. more
    generations)."""

    workload: Workload
    config: SearchConfig
    evaluate_fn: EvaluateFn | None = None  # None: the real cascade
    session: Path | None = None  # None: a fresh folder in the sessions folder (search.sessions.sessions_root)
    engine_options: tuple[tuple[str, Any], ...] = ()
    agent: str | None = None  # "offline" | "claude" | "random" | None: chosen from the environment
    model: str | None = None
    resume: Path | None = None
    resume_overrides: tuple[tuple[str, Any], ...] = ()
    root: Path | None = None  # the sessions folder of a new session; None: search.sessions.sessions_root()
    executor: Executor | None = None  # given on the command line (--executor slurm, the GPU groups it planned)

    @property
    def sessions_folder(self) -> Path:
        """Where a new session without `session` goes."""
        from cuco_tui.search.sessions import sessions_root

        return self.root if self.root is not None else sessions_root()

    @property
    def agent_kind(self) -> str:
        from cuco_tui.agents.factory import default_agent_kind

        return self.agent or default_agent_kind()
