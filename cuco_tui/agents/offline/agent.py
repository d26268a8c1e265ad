"""The offline structured agent: proposes candidates by rendering the workload's strategy
templates at points of the design space, and steers by what the evaluations said.

- fast path: the most conservative device-initiated strategy at its default knobs;
- full (explore): a strategy no evaluation has seen yet if there is one (drawn by its share of
  the space, as random sampling would land), else one chosen by its record so far (failures
  penalized), with random knobs, the knobs that each need a long build (Strategy.build_knobs) kept
  at settings the session already proposed;
- diff (exploit): the parent's strategy with one knob changed; the knob is chosen by how much
  its values have moved the speedup, and values that failed are avoided;
- crossover: the better parent's strategy with knobs taken from either parent; parents with no
  knob to mix explore an untested strategy while one is left.
No network, no model: every decision is explained in the proposal's rationale."""

from __future__ import annotations

import math
import random
from collections import defaultdict
from dataclasses import dataclass, field, replace
from typing import Any

from cuco_tui.agents.base import AgentExhausted, Proposal, ProposalRequest
from cuco_tui.agents.offline.points import (
    defaults_in, point_key, proposal_at, record_key, seed_key, strategy_of, valid_points,
)
from cuco_tui.agents.offline.strategy import Knobs, Strategy, StrategyBook
from cuco_tui.design.space import Capabilities
from cuco_tui.core.records import CandidateRecord, RecordStatus
from cuco_tui.core.result import UNTIMED_OK
from cuco_tui.core.workload import Workload

GOOD = "measured"
UNTIMED = UNTIMED_OK  # verified (nothing timed) or compiled only: neither a speedup nor a failure


@dataclass
class _Outcome:
    tries: int = 0
    failures: int = 0
    speedups: list[float] = field(default_factory=list)
    unmeasured: int = 0  # compiled (no GPU) or verified (ranks sharing one GPU), never timed

    @property
    def best(self) -> float | None:
        return max(self.speedups) if self.speedups else None

    @property
    def mean(self) -> float | None:
        return sum(self.speedups) / len(self.speedups) if self.speedups else None


class OfflineAgent:
    uses_hints = False  # no model reads text here: decisions come from templates and results
    spent_usd = 0.0  # no call costs anything

    def set_budget(self, usd: float | None) -> None:
        """Nothing to cap: proposing costs nothing."""

    def __init__(self, workload: Workload, caps: Capabilities = Capabilities(), seed: int = 0) -> None:
        self.name = "offline"
        self.workload = workload
        self.caps = caps
        self.book = StrategyBook.load(workload.root, workload.seed)
        self.rng = random.Random(seed)
        self.proposed: set[str] = set()
        self.by_strategy: dict[str, _Outcome] = defaultdict(_Outcome)
        self.by_knob: dict[tuple[str, str, str], _Outcome] = defaultdict(_Outcome)
        # the seed is in every session: its own strategy at the defaults is never new
        self.proposed.add(seed_key(self.book))
        # strategies this agent has proposed: one in flight is no longer untested (the islands of a
        # generation explore different ones, before any of them is measured)
        self.drawn: set[str] = set()
        # per strategy, the settings of its build knobs proposed so far (each built once per machine)
        self.builds: dict[str, list[Knobs]] = defaultdict(list)
        # how much of the space each strategy holds: an untested strategy is drawn in proportion to
        # it, as random sampling would land in it (gemm_allgather: fused_tile holds 840 of 888 points)
        self._names = {s.name for s in self.book.strategies}
        self.points: dict[str, int] = defaultdict(int)
        for strategy, _ in valid_points(self.book, caps):
            self.points[strategy.name] += 1

    # ------------------------------------------------------------------ learning from results

    def summarize(self, history: list[CandidateRecord]) -> str:
        """Rebuild the statistics from every candidate so far; return them as the meta-summary."""
        self.by_strategy.clear()
        self.by_knob.clear()
        for rec in history:
            key = record_key(self.book, rec)
            if key is None:
                continue
            self.proposed.add(key)
            name, knobs = strategy_of(rec, self.book.seed_strategy)
            if rec.kind == "seed" and not knobs:  # the seed is its strategy at the defaults
                knobs = defaults_in(self.book, name)
            if name in self._names:
                self._note_build(self.book.get(name), knobs)
            if rec.status is RecordStatus.PENDING:
                continue
            outcomes = [self.by_strategy[name]] + [self.by_knob[(name, k, repr(v))] for k, v in knobs.items()]
            if rec.status in UNTIMED:
                for o in outcomes:
                    o.unmeasured += 1
                continue
            for o in outcomes:
                o.tries += 1
                if rec.status == GOOD and rec.speedup:
                    o.speedups.append(rec.speedup)
                else:
                    o.failures += 1
        lines = []
        for s in self.book.strategies:
            o = self.by_strategy.get(s.name)
            if not o or not o.tries:
                lines.append(f"{s.name}: " + (f"{o.unmeasured} compiled or verified, none timed" if o and o.unmeasured
                                              else "untested"))
                continue
            best = f"best {o.best:.2f}x" if o.best else "no measured run"
            lines.append(f"{s.name}: {o.tries} tried, {o.failures} failed, {best}")
        return "\n".join(lines)

    # ------------------------------------------------------------------ proposing

    def propose(self, request: ProposalRequest) -> Proposal:
        if request.kind == "fast_path":
            return self._fast_path(request)
        if request.kind == "crossover" and len(request.parents) >= 2:
            return self._crossover(request)
        if request.kind == "diff":
            return self._diff(request)
        return self._full(request)

    def _make(self, request: ProposalRequest, kind: str, strategy: Strategy, knobs: Knobs, why: str) -> Proposal:
        knobs = strategy.normalized(knobs)
        self.proposed.add(point_key(strategy.name, knobs))
        self.drawn.add(strategy.name)
        self._note_build(strategy, knobs)
        return proposal_at(self.book, strategy, knobs, kind=kind, parents=tuple(p.id for p in request.parents),
                           why=why, agent=self.name)

    def _note_build(self, s: Strategy, knobs: Knobs) -> None:
        if s.build_knobs and all(k in knobs for k in s.build_knobs):
            setting = {k: knobs[k] for k in s.build_knobs}
            if setting not in self.builds[s.name]:
                self.builds[s.name].append(setting)

    def _valid_strategies(self) -> list[Strategy]:
        return [s for s in self.book.strategies if any(self._valid(s, k) for k in self._some_knobs(s, 12))]

    def _valid(self, s: Strategy, knobs: Knobs) -> bool:
        return s.valid(knobs, self.caps)

    def _some_knobs(self, s: Strategy, n: int) -> list[Knobs]:
        return [s.default_knobs()] + [self._random_knobs(s) for _ in range(n)]

    def _random_knobs(self, s: Strategy) -> Knobs:
        return {k: self.rng.choice(values) for k, values in s.knobs.items()}

    def _fresh(self, s: Strategy, candidates: list[Knobs]) -> Knobs | None:
        for knobs in candidates:
            if self._valid(s, knobs) and point_key(s.name, s.normalized(knobs)) not in self.proposed:
                return s.normalized(knobs)
        return None

    def _built_first(self, s: Strategy, drawn: list[Knobs]) -> list[Knobs]:
        """Random settings, then the defaults; with the build knobs (s.build_knobs) first set to a
        combination this session proposed already (the defaults' when none), so that exploring
        does not pay a minute of nvcc per draw: on 2 x H100 a fused candidate linking a library
        built before compiled in 4.5 s, one that needed its own in ~50 s (2026-11-27)."""
        if not s.build_knobs:
            return drawn + [s.default_knobs()]
        built = self.builds.get(s.name) or [{k: s.default_knobs()[k] for k in s.build_knobs}]
        first = [{**k, **self.rng.choice(built)} for k in drawn]
        return first + drawn + [s.default_knobs()]

    def _fast_path(self, request: ProposalRequest) -> Proposal:
        for s in self.book.strategies:
            if s.fast_path and self._valid(s, s.default_knobs()):
                return self._make(request, "fast_path", s, s.default_knobs(),
                                  "Fast path: the most conservative device-initiated point, at default knobs, "
                                  "to establish a correct device-initiated candidate first.")
        # No template is marked for the fast path: the first one that leaves host collectives.
        for s in self.book.strategies:
            knobs = s.default_knobs()
            if self._valid(s, knobs) and s.design(knobs).backend != "nccl_host":
                return self._make(request, "fast_path", s, knobs,
                                  f"Fast path: this workload has no device-initiated template yet; {s.name} is the "
                                  f"first strategy that leaves NCCL host collectives ({s.design(knobs).backend}).")
        return self._full(request)

    def _strategy_score(self, s: Strategy) -> float:
        o = self.by_strategy.get(s.name)
        if not o or not o.tries:
            # optimism for the untested, spent as candidates compile without being measured (no
            # GPU), so exploration spreads over the strategies instead of repeating one
            return 2.0 / (1 + (o.unmeasured if o else 0))
        best = o.best or 0.0
        return max(0.05, best * (1.0 - 0.5 * o.failures / o.tries))

    def _full(self, request: ProposalRequest) -> Proposal:
        valid = self._valid_strategies()
        # Untested first: a strategy no evaluation has seen yet (a template new to the session) is
        # drawn before any measured one, however well those did; then every strategy by its score.
        return (self._draw(request, self._untested(valid), by_space=True) or self._draw(request, valid)
                or self._exhausted(request))

    def _untested(self, strategies: list[Strategy]) -> list[Strategy]:
        """Those no evaluation has seen and this agent has not proposed yet."""
        return [s for s in strategies if s.name not in self.drawn
                and (not (o := self.by_strategy.get(s.name)) or not (o.tries or o.unmeasured))]

    def _draw(self, request: ProposalRequest, strategies: list[Strategy], by_space: bool = False) -> Proposal | None:
        """A fresh point of a strategy drawn by score (untested ones: by their share of the space),
        with random knobs; None after 30 tries."""
        if not strategies:
            return None
        weights = [self._strategy_score(s) * (max(1, self.points[s.name]) if by_space else 1) for s in strategies]
        for _ in range(30):
            s = self.rng.choices(strategies, weights)[0]
            # A strategy's first point is its defaults, the template author's best guess (on 2 x H100
            # fused_tile at its defaults was 1.44x where its first random draws were 1.30-1.41x,
            # 2026-11-27); random settings after that.
            first = s.name not in self.drawn and self._fresh(s, [s.default_knobs()]) is not None
            knobs = self._fresh(s, [s.default_knobs()] if first else
                                self._built_first(s, [self._random_knobs(s) for _ in range(8)]))
            if knobs is not None:
                o = self.by_strategy.get(s.name)
                record = self._describe(o) if o else "untested so far"
                how = "at its defaults, the template's own first choice" if first else \
                    "chosen at random among those not tried yet"
                return self._make(request, self._explore_kind(request), s, knobs,
                                  f"Explore: {s.name} ({record}), knobs {self._fmt(knobs)} {how}.")
        return None

    @staticmethod
    def _explore_kind(request: ProposalRequest) -> str:
        return request.kind if request.kind in ("full", "crossover") else "full"

    def _describe(self, o: _Outcome) -> str:
        if not o.tries:
            return f"{o.unmeasured} compiled or verified, none timed" if o.unmeasured else "untested so far"
        best = f"best {o.best:.2f}x" if o.best else "none measured"
        return f"{o.tries} tried, {o.failures} failed, {best}"

    @staticmethod
    def _fmt(knobs: Knobs) -> str:
        return ", ".join(f"{k}={v}" for k, v in knobs.items()) or "none"

    def _knob_influence(self, s: Strategy, knob: str) -> float:
        """How much the values of `knob` have moved the speedup (spread of their means), plus
        a bonus for values never tried: the dimension worth changing next."""
        means, untried = [], 0
        for v in s.knobs[knob]:
            o = self.by_knob.get((s.name, knob, repr(v)))
            if o and o.mean is not None:
                means.append(o.mean)
            elif not o or not o.tries:
                untried += 1
        spread = (max(means) - min(means)) if len(means) > 1 else 0.0
        return 0.1 + spread + 0.3 * untried

    def _measured_spread(self, s: Strategy, knob: str) -> float:
        means = [o.mean for v in s.knobs[knob] if (o := self.by_knob.get((s.name, knob, repr(v)))) and o.mean is not None]
        return (max(means) - min(means)) if len(means) > 1 else 0.0

    def _tried(self, s: Strategy, knob: str, value: Any) -> bool:
        o = self.by_knob.get((s.name, knob, repr(value)))
        return bool(o and (o.tries or o.unmeasured))

    def _untried(self, s: Strategy, knob: str) -> bool:
        return not all(self._tried(s, knob, v) for v in s.knobs[knob])

    def _value_score(self, s: Strategy, knob: str, value: Any) -> float:
        o = self.by_knob.get((s.name, knob, repr(value)))
        if not o or not o.tries:
            return 1.5
        if o.mean is None:
            return 0.1  # only failures with this value
        return max(0.1, o.mean * (1.0 - 0.5 * o.failures / o.tries))

    def _diff(self, request: ProposalRequest) -> Proposal:
        parent = request.parents[0]
        name, knobs = strategy_of(parent, self.book.seed_strategy)
        try:
            s = self.book.get(name)
        except Exception:
            return self._full(request)
        if not s.knobs:
            return self._full(request)
        failed = parent.status not in (GOOD, *UNTIMED, RecordStatus.PENDING)
        ranked = sorted(s.knobs, key=lambda k: -self._knob_influence(s, k) * self.rng.uniform(0.7, 1.3))
        for knob in ranked:
            values = [v for v in s.knobs[knob] if v != knobs.get(knob)]
            weights = [self._value_score(s, knob, v) for v in values]
            # A value never tried goes before every tried one, whatever the noise: with flat
            # measurements the noise alone would otherwise re-try a value while another is unseen.
            order = sorted(zip(values, weights),
                           key=lambda vw: (self._tried(s, knob, vw[0]), -vw[1] * self.rng.uniform(0.8, 1.2)))
            for value, _ in order:
                new = {**s.default_knobs(), **knobs, knob: value}
                if self._valid(s, new) and point_key(s.name, s.normalized(new)) not in self.proposed:
                    why = (f"Exploit: from {parent.id} ({parent.status}"
                           + (f", {parent.speedup:.2f}x" if parent.speedup else "") + f"), change {knob} "
                           f"{knobs.get(knob)!r} -> {value!r}. ")
                    if failed:
                        why += "The parent failed, so one knob moves away from its setting. "
                    elif self._measured_spread(s, knob) > 0:
                        why += (f"{knob} is the knob whose measured values have moved the speedup most so far "
                                f"(influence {self._knob_influence(s, knob):.2f}).")
                    else:
                        why += (f"No measurement yet says which knob matters; {knob} still has values never "
                                f"tried." if self._untried(s, knob) else
                                f"No measurement yet says which knob matters; {knob} is changed to spread the tries.")
                    return self._make(request, "diff", s, new, why)
        return self._full(request)

    def _crossover(self, request: ProposalRequest) -> Proposal:
        a, b = request.parents[0], request.parents[1]
        if (b.speedup or 0) > (a.speedup or 0):
            a, b = b, a
        measured = bool(a.speedup)
        whose = "the better parent" if measured else "the first parent (neither was measured)"
        name_a, knobs_a = strategy_of(a, self.book.seed_strategy)
        name_b, knobs_b = strategy_of(b, self.book.seed_strategy)
        try:
            s = self.book.get(name_a)
        except Exception:
            return self._full(request)
        for _ in range(12):
            new = {**s.default_knobs(), **knobs_a}
            for k in s.knobs:
                if k in knobs_b and self.rng.random() < 0.5:
                    new[k] = knobs_b[k]
            if self._valid(s, new) and point_key(s.name, s.normalized(new)) not in self.proposed:
                return self._make(request, "crossover", s, new,
                                  f"Crossover of {a.id} ({name_a}) and {b.id} ({name_b}): the strategy of "
                                  f"{whose}, knobs mixed from both: {self._fmt(new)}.")
        # The parents share no knob that differs. While some strategy is untested, exploring it
        # teaches more than moving one knob of the better parent (a diff in all but name).
        untested = self._untested(self._valid_strategies())
        if untested and name_a != name_b:
            explored = self._draw(request, untested, by_space=True)
            if explored is not None:
                return replace(explored, rationale=f"Crossover of {a.id} ({name_a}) and {b.id} ({name_b}): they "
                                                   f"share no knob to mix, and some strategies are untested. "
                                                   + explored.rationale)
        # Keep the better one's strategy, move one knob.
        for knob in self.rng.sample(list(s.knobs), len(s.knobs)):
            for value in s.knobs[knob]:
                new = {**s.default_knobs(), **knobs_a, knob: value}
                if self._valid(s, new) and point_key(s.name, s.normalized(new)) not in self.proposed:
                    return self._make(request, "crossover", s, new,
                                      f"Crossover of {a.id} ({name_a}) and {b.id} ({name_b}): they share no knob "
                                      f"to mix, so the strategy of {whose} with {knob}={value!r}.")
        return self._full(request)

    def _exhausted(self, request: ProposalRequest) -> Proposal:
        """The random draws found nothing new: go through every setting of every template, and
        raise AgentExhausted only when none is left."""
        for s, knobs in valid_points(self.book, self.caps):
            if point_key(s.name, knobs) not in self.proposed:
                return self._make(request, self._explore_kind(request), s, knobs,
                                  f"Explore: {s.name}, knobs {self._fmt(knobs)}: one of the last settings "
                                  f"not tried yet (random draws found none).")
        raise AgentExhausted("the offline agent has proposed every valid combination of its strategy templates")

    def space_size(self) -> int:
        total = 0
        for s in self.book.strategies:
            combos = math.prod(len(v) for v in s.knobs.values()) if s.knobs else 1
            total += combos
        return total
