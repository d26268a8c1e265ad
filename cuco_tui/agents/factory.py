"""Choosing and building the agent of a search, shared by `cuco search` and `cuco-tui`:
Claude when ANTHROPIC_API_KEY is set, the offline agent otherwise, unless one is named ("random":
uniform random sampling of the offline agent's space, the yardstick of issue 34). This is
where an agent is wired to what it is given from other rooms (the L0 screen from evaluate/): the
one module of agents/ that imports the evaluator, which puts the room above evaluate/ in
docs/architecture.md's floors."""

from __future__ import annotations

import os
from collections.abc import Mapping

from cuco_tui.agents.base import Agent
from cuco_tui.core.workload import Workload

AGENT_KINDS = ("offline", "claude", "random")


class AgentUnavailable(RuntimeError):
    """The named agent cannot be built here; the message says why and what to use instead."""


def default_agent_kind(env: Mapping[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    return "claude" if env.get("ANTHROPIC_API_KEY") else "offline"


def check_agent(kind: str, workload: Workload, env: Mapping[str, str] | None = None) -> None:
    """Raise AgentUnavailable (one sentence saying what to do) when agent `kind` cannot search
    `workload` here: called before a session is created, so a refusal leaves nothing behind."""
    env = os.environ if env is None else env
    if kind not in AGENT_KINDS:
        raise AgentUnavailable(f"no agent {kind!r}; the agents are {', '.join(AGENT_KINDS)}")
    if kind == "claude" and not env.get("ANTHROPIC_API_KEY"):
        raise AgentUnavailable("the Claude agent needs an Anthropic API key: set ANTHROPIC_API_KEY, or search with "
                               "--agent offline")
    if kind in ("offline", "random"):  # the same space: the workload's templates or its seed's knobs
        from cuco_tui.agents.offline.strategy import StrategyBook, StrategyError

        try:
            StrategyBook.load(workload.root, workload.seed)
        except StrategyError as exc:
            raise AgentUnavailable(str(exc)) from exc
        except Exception as exc:  # the workload's own templates/strategies.py: report, do not crash
            raise AgentUnavailable(f"{workload.root / 'templates' / 'strategies.py'} cannot be loaded: "
                                   f"{type(exc).__name__}: {exc}") from exc


def make_agent(kind: str, workload: Workload, *, world: int | None = None, gpus: tuple[int, ...] = (), seed: int = 0,
               budget_usd: float | None = None, model: str | None = None,
               env: Mapping[str, str] | None = None) -> Agent:
    """The agent `kind` for a search of `workload` at `world` ranks (0: the workload's smallest)
    on `gpus` (empty: any), with the search's random `seed` and dollar cap. Raises
    AgentUnavailable (see check_agent) before building anything it cannot."""
    check_agent(kind, workload, env)
    if kind in ("offline", "random"):
        from cuco_tui.agents.offline import OfflineAgent, RandomSampleAgent
        from cuco_tui.design.space import Capabilities

        world = world or min(workload.world_sizes)
        try:  # what this machine offers decides which design points are valid
            from cuco_tui.design.context import capabilities_from, hardware_facts

            caps = capabilities_from(hardware_facts(), world, list(gpus) or None)
        except Exception:
            caps = Capabilities(world=world)
        return (OfflineAgent if kind == "offline" else RandomSampleAgent)(workload, caps, seed=seed)
    try:
        from cuco_tui.agents.claude import DEFAULT_MODEL, ClaudeAgent
    except ImportError as exc:
        raise AgentUnavailable(f"the Claude agent is not available here ({exc}); use the offline agent") from exc
    from cuco_tui.evaluate.l0 import check_l0

    # The agent screens its own edits with the cascade's own L0, so a reply that breaks a frozen
    # line, calls a forbidden function or waits on a flag nothing writes goes back to the model as
    # a sentence, not to the GPUs, and its warnings come back as the proposal's notes.
    return ClaudeAgent(model=model or DEFAULT_MODEL, budget_usd=budget_usd, screen=check_l0,
                       host_driven=host_driven_reason)


def host_driven_reason(source: str) -> str:
    """Why the static classifier calls `source` host-driven ("" when some device-initiated
    backend moves its data): what a fast-path judge's ACCEPT is checked against."""
    from cuco_tui.design.classify import classify
    from cuco_tui.design.space import DEVICE_BACKENDS

    try:
        evidence = classify(source)
    except Exception as exc:  # a reader's failure must not pass a host-driven rewrite
        return f"the classifier could not read it: {type(exc).__name__}"
    moving = evidence.data_backends
    if any(b in DEVICE_BACKENDS for b in moving):
        return ""
    return "its data moves by " + (", ".join(moving) if moving else "no transfer the classifier can see")
