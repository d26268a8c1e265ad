"""What every proposer (the offline structured agent, the Claude agent) takes and returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from cuco_tui.core.records import CandidateRecord
from cuco_tui.core.result import StaticVerdict
from cuco_tui.core.workload import Workload


# L0 of a candidate, given to whoever screens sources early (the Claude agent checking its own
# edits, the engine's review gate): (source, the workload seed, file name) -> its verdict, whose
# errors reject the source. It is the cascade's own L0 (evaluate/l0.py's check_l0), so what the
# screen passes the cascade's L0 passes. The agents themselves (offline/, claude/) never import
# the evaluator: agents/factory.py, the wiring, and the engine hand it in.
StaticScreen = Callable[[str, str, str], StaticVerdict]
# Why a candidate's communication is still host-driven ("" when it is device-initiated): the
# static classifier's word, which a fast-path judge's ACCEPT cannot overrule.
HostDrivenCheck = Callable[[str], str]


@dataclass(frozen=True)
class ProposalRequest:
    kind: str  # "fast_path" | "diff" | "full" | "crossover"
    workload: Workload
    parents: tuple[CandidateRecord, ...]  # the parent first; for a crossover, 2-3 parents
    inspirations: tuple[CandidateRecord, ...] = ()  # other good candidates to show
    feedback: str = ""  # the last failure's diagnostics (compiler errors, deadlock report, error norm)
    meta_summary: str = ""  # what the search has learned so far
    hints: tuple[str, ...] = ()  # the engineer's hints, newest last
    design_context: str = ""  # backend-conditioned API notes, strategy notes, hardware facts
    generation: int = 0
    island: int = 0
    phase: str = "explore"  # "explore" | "exploit"


@dataclass(frozen=True)
class Proposal:
    kind: str
    parents: tuple[str, ...]  # candidate ids
    source: str  # the whole candidate .cu ("" when the agent failed to produce one)
    design: dict[str, Any]
    rationale: str
    agent: str
    cost_usd: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0
    error: str = ""  # why no usable candidate came back (no code in the reply, edit outside the blocks, ...)
    extra: dict[str, Any] = field(default_factory=dict)


def hints_unread(agent: object) -> str:
    """"" when `agent` reads the engineer's hints; else the sentence that says it does not (an
    agent that does not declare uses_hints is taken to read them, as before the flag existed)."""
    if getattr(agent, "uses_hints", True):
        return ""
    name = getattr(agent, "name", "this")
    return (f"the {name} agent does not read hints: it proposes from the workload's templates, steered by the "
            f"results (a model-backed agent, --agent claude, reads them)")


class BudgetExhausted(Exception):
    """The agent's dollar budget is spent: the search stops proposing, cleanly."""


class AgentExhausted(Exception):
    """The agent has nothing new to propose (the offline agent: every valid setting of every
    template proposed): the search stops proposing, cleanly, with nothing committed for it."""


class Agent(Protocol):
    name: str
    # Whether propose() reads the engineer's hints (ProposalRequest.hints). An agent that does not
    # (the offline agent: templates steered by results) says so, and the search refuses a hint for
    # it in one line (hints_unread) instead of keeping one it will never use.
    uses_hints: bool
    # Dollars its calls have cost in this process (None: it does not count them). The search adds
    # what a summarize() cost to the session's spending from it.
    spent_usd: float | None

    def set_budget(self, usd: float | None) -> None:
        """Its own dollar cap from now on (None: none), what is left of the session's budget; an
        agent that spends nothing has no cap to set."""
        ...

    def propose(self, request: ProposalRequest) -> Proposal: ...

    def summarize(self, history: list[CandidateRecord]) -> str: ...
