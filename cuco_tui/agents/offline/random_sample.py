"""The random-sampling agent: the yardstick the offline agent is measured against (issue 34).
It searches exactly the offline agent's space (points.valid_points: every strategy template's
valid, normalized knob settings) and, whatever it is asked (fast path, diff, full, crossover),
proposes a point drawn uniformly at random from those not proposed yet. It reads no result:
the same search seed gives the same sequence of points, however the candidates did. When every
point has been proposed it raises AgentExhausted, as the offline agent does."""

from __future__ import annotations

import random

from cuco_tui.agents.base import AgentExhausted, Proposal, ProposalRequest
from cuco_tui.agents.offline.points import point_key, proposal_at, record_key, seed_key, valid_points
from cuco_tui.agents.offline.strategy import StrategyBook
from cuco_tui.core.records import CandidateRecord
from cuco_tui.core.workload import Workload
from cuco_tui.design.space import Capabilities

RANDOM_SAMPLE = "Random sample"  # how every rationale of this agent starts: the lineage says what it was


class RandomSampleAgent:
    uses_hints = False  # it reads nothing: not the hints, not the results
    spent_usd = 0.0

    def __init__(self, workload: Workload, caps: Capabilities = Capabilities(), seed: int = 0) -> None:
        self.name = "random"
        self.workload = workload
        self.caps = caps
        self.book = StrategyBook.load(workload.root, workload.seed)
        self.points = valid_points(self.book, caps)
        self.rng = random.Random(seed)
        # the seed is in every session: its own point is never a proposal
        self.proposed: set[str] = {seed_key(self.book)}

    def set_budget(self, usd: float | None) -> None:
        """Nothing to cap: proposing costs nothing."""

    def summarize(self, history: list[CandidateRecord]) -> str:
        """Learn which points the session holds already (a resumed search proposes none of them
        again); the results themselves are not read."""
        for rec in history:
            key = record_key(self.book, rec)
            if key is not None:
                self.proposed.add(key)
        left = sum(point_key(s.name, k) not in self.proposed for s, k in self.points)
        return (f"random sampling of {len(self.points)} points: {left} not proposed yet; results are not read, "
                f"every proposal is a uniform draw among the points left")

    def propose(self, request: ProposalRequest) -> Proposal:
        left = [(s, k) for s, k in self.points if point_key(s.name, k) not in self.proposed]
        if not left:
            raise AgentExhausted("the random agent has proposed every valid combination of the offline agent's "
                                 "strategy templates")
        strategy, knobs = self.rng.choice(left)
        self.proposed.add(point_key(strategy.name, knobs))
        knob_text = ", ".join(f"{k}={v}" for k, v in knobs.items()) or "none"
        why = (f"{RANDOM_SAMPLE}: {strategy.name}, knobs {knob_text}, drawn uniformly at random from the "
               f"{len(left)} points of the offline agent's space not proposed yet (asked for {request.kind}; "
               f"results are not read).")
        return proposal_at(self.book, strategy, knobs, kind="full", parents=tuple(p.id for p in request.parents),
                           why=why, agent=self.name)
