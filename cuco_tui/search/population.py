"""The population: islands of candidates, parent selection (a power law over rank), the
explore -> exploit schedule and the mutation kind it favors, migration between islands,
the novelty filter and the MAP-Elites archive. Plain data and arithmetic: no threads, no I/O,
so it is rebuilt exactly from the lineage's records on resume."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from cuco_tui.core.ranking import is_better, is_failure, rank_key
from cuco_tui.search.archive import Archive, design_point
from cuco_tui.search.config import SearchConfig
from cuco_tui.search.novelty import NoveltyFilter
from cuco_tui.core.records import CandidateRecord, RecordStatus

EXPLORE, EXPLOIT = "explore", "exploit"
SHARED_KINDS = ("seed", "fast_path")  # candidates every island starts from

# How often each mutation kind is asked for in each phase: explore favors new strategies
# (full rewrites) and recombination; exploit favors small changes to good candidates.
KIND_WEIGHTS: dict[str, dict[str, float]] = {
    EXPLORE: {"full": 0.45, "crossover": 0.35, "diff": 0.20},
    EXPLOIT: {"diff": 0.70, "crossover": 0.20, "full": 0.10},
}


def phase_of(generation: int, config: SearchConfig) -> str:
    """Generations 1..round(explore_share * N) explore; the rest exploit."""
    return EXPLORE if generation <= config.explore_generations else EXPLOIT


def choose_kind(phase: str, rng: random.Random, can_crossover: bool = True) -> str:
    weights = dict(KIND_WEIGHTS[phase])
    if not can_crossover:
        weights.pop("crossover")
    kinds = list(weights)
    return rng.choices(kinds, [weights[k] for k in kinds])[0]


def rank_weights(n: int, exponent: float) -> list[float]:
    """Weight of rank r (0 = best) among n: (r + 1) ** -exponent."""
    return [(r + 1) ** -exponent for r in range(n)]


def can_be_parent(record: CandidateRecord) -> bool:
    """Has code, was not turned away before evaluation (review, novelty, agent error) and was not
    left unreviewed (never evaluated)."""
    return bool(record.source) and not record.rejected_by and record.status is not RecordStatus.UNREVIEWED


@dataclass
class Island:
    index: int
    members: list[str] = field(default_factory=list)  # its own candidates and the shared ones
    migrants: list[str] = field(default_factory=list)  # best candidates of the island before it

    def pool(self) -> list[str]:
        return list(dict.fromkeys(self.members + self.migrants))


@dataclass(frozen=True)
class Selection:
    kind: str
    parents: tuple[CandidateRecord, ...]
    inspirations: tuple[CandidateRecord, ...]


class Population:
    def __init__(self, config: SearchConfig) -> None:
        self.config = config
        self.records: dict[str, CandidateRecord] = {}
        self.islands = [Island(i) for i in range(config.islands)]
        self.archive = Archive()
        self.novelty = NoveltyFilter(config.novelty_threshold)
        # The best measured candidate: replaced only by one faster beyond noise (core/ranking.is_better).
        self.best: CandidateRecord | None = None
        self.migrations = 0

    # ------------------------------------------------------------------ filling

    def add(self, record: CandidateRecord) -> bool:
        """Take in a committed candidate; True when it is the new best measured one."""
        self.records[record.id] = record
        if record.status is not RecordStatus.UNREVIEWED:  # held for review again on resume: not a duplicate of itself
            self.novelty.add(record.id, record.source, record.design)
        if can_be_parent(record):
            targets = self.islands if record.kind in SHARED_KINDS else [self.islands[record.island % len(self.islands)]]
            for island in targets:
                if record.id not in island.members:
                    island.members.append(record.id)
        self.archive.offer(record)
        if record.status == "measured" and record.speedup is not None and is_better(record, self.best):
            self.best = record
            return True
        return False

    @classmethod
    def rebuild(cls, records: list[CandidateRecord], config: SearchConfig) -> "Population":
        """The population as the live search had it: records in generation order, with the
        migrations that followed every k-th generation."""
        pop = cls(config)
        by_gen: dict[int, list[CandidateRecord]] = {}
        for r in records:
            by_gen.setdefault(r.generation, []).append(r)
        last = max(by_gen, default=0)
        for gen in range(0, last + 1):
            for r in sorted(by_gen.get(gen, []), key=lambda r: r.id):
                pop.add(r)
            if gen > 0 and gen % config.migration_interval == 0:
                pop.migrate()
        return pop

    # ------------------------------------------------------------------ reading

    def ranked(self, island: int, include_failures: bool = True) -> list[CandidateRecord]:
        recs = [self.records[i] for i in self.islands[island].pool() if i in self.records]
        recs = [r for r in recs if can_be_parent(r)]
        if not include_failures:
            recs = [r for r in recs if not is_failure(r)] or recs  # failures only when nothing else
        return sorted(recs, key=rank_key)

    def best_of_island(self, island: int) -> CandidateRecord | None:
        own = [self.records[i] for i in self.islands[island].members if i in self.records]
        own = [r for r in own if can_be_parent(r) and not is_failure(r)]
        return min(own, key=rank_key) if own else None

    def last_failure(self, island: int) -> CandidateRecord | None:
        """The newest failed candidate of this island (for feedback in the next prompt)."""
        fails = [r for r in self.records.values() if r.island == island and is_failure(r) and r.result is not None]
        return max(fails, key=lambda r: (r.generation, r.id)) if fails else None

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.records.values():
            out[r.status] = out.get(r.status, 0) + 1
        return out

    # ------------------------------------------------------------------ choosing

    def sample(self, ranked: list[CandidateRecord], rng: random.Random, exclude: set[str] = frozenset()) -> CandidateRecord | None:
        choices = [r for r in ranked if r.id not in exclude]
        if not choices:
            return None
        return rng.choices(choices, rank_weights(len(choices), self.config.selection_exponent))[0]

    def select(self, island: int, phase: str, rng: random.Random, kind: str | None = None) -> Selection | None:
        """Mutation kind, parent(s) and inspirations for one proposal on `island`; None when
        the island has no candidate to start from. Explore keeps failures in the draw (ranked
        last); exploit draws from candidates that did not fail whenever there are any."""
        ranked = self.ranked(island, include_failures=(phase == EXPLORE))
        if not ranked:
            return None
        partners = self._crossover_partners(island, ranked)
        kind = kind or choose_kind(phase, rng, can_crossover=len(partners) >= 2)
        if kind == "crossover" and len(partners) < 2:
            kind = "full" if phase == EXPLORE else "diff"
        parent = self.sample(ranked, rng)
        assert parent is not None
        parents = [parent]
        if kind == "crossover":
            other = self.sample(partners, rng, exclude={parent.id})
            if other is None:
                kind = "full" if phase == EXPLORE else "diff"
            else:
                parents.append(other)
        return Selection(kind, tuple(parents), tuple(self.inspirations(island, {p.id for p in parents})))

    def _crossover_partners(self, island: int, ranked: list[CandidateRecord]) -> list[CandidateRecord]:
        """Candidates a crossover may pair: the island's, its migrants, and the archive's elites
        (another strategy's best is where recombination pays)."""
        ok = [r for r in ranked if not is_failure(r)]
        elites = [e for e in self.archive.elites() if can_be_parent(e)]
        return sorted({r.id: r for r in ok + elites}.values(), key=rank_key)

    def inspirations(self, island: int, exclude: set[str]) -> list[CandidateRecord]:
        """The island's best others, then elites of design cells not yet shown."""
        n = self.config.inspirations
        out = [r for r in self.ranked(island, include_failures=False) if r.id not in exclude and not is_failure(r)][:n]
        shown = {design_point(self.records[i]).cell() for i in exclude if i in self.records}
        shown |= {design_point(r).cell() for r in out}
        for e in self.archive.elites():
            if len(out) >= n + 1:
                break
            cell = design_point(e).cell()
            if cell not in shown and e.id not in exclude and can_be_parent(e):
                out.append(e)
                shown.add(cell)
        return out

    # ------------------------------------------------------------------ migration

    def migrate(self) -> list[tuple[int, int, str]]:
        """The best candidate of island i becomes a parent option on island i+1 (a ring).
        Returns (from, to, candidate) for each move made."""
        n = len(self.islands)
        if n < 2:
            return []
        bests = [self.best_of_island(i) for i in range(n)]  # all chosen before any move
        moves = []
        for i, best in enumerate(bests):
            if best is None:
                continue
            dest = self.islands[(i + 1) % n]
            if best.id not in dest.pool():
                dest.migrants.append(best.id)
                moves.append((i, dest.index, best.id))
        self.migrations += 1
        return moves
