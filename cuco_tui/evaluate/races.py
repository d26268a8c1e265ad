"""L2's perturbed schedules, from the cascade's side (an evaluation level, levels.py): what the plan
asks of the ranks, and what their reports mean. In the ranks: harness/rank_steps.py PerturbedRounds.

After the ordinary checks the ranks run the back-to-back launches again under schedule
perturbations (harness/perturb_lib/cuco_perturb.h: a rank's copies, its compute or all its
ordering points held back, or holds at random, and a rank started late), one seed per round. A
correct candidate passes every round; a wrong answer there is a race the ordinary checks were
lucky to miss, and the result names the seed, what it did and the worst element, with the command
that replays it."""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from cuco_tui.core.result import Diagnostic, Level, Verification
from cuco_tui.evaluate.levels import EvaluationLevel, Prepared, Reading, RunFacts, Setup
from cuco_tui.harness.gpus import is_shared
from cuco_tui.harness.launcher import RankOutcome
from cuco_tui.harness.plan import PerturbPlan, RunPlan
from cuco_tui.harness.rank_events import PerturbEnded, PerturbStarted, PerturbWarning, RankEvent, Verified
from cuco_tui.toolchain.perturb import ensure_perturb_library

DEFAULT_ROUNDS = 4  # one round of each kind (seed % 4) from a random first seed
DEFAULT_UNIT_US = 2000
SEED_RANGE = 1 << 24


@dataclass(frozen=True)
class Round:
    """One perturbed round as the ranks reported it: one seed at one verify shape."""

    shape: str
    seed: int
    kind: str
    description: str
    seconds: float  # wall time of the round (the slowest rank's)
    delayed: int  # ordering points held back, all ranks
    delayed_us: int  # their holds, summed over the ranks
    calls: int  # ordering points seen, all ranks
    ok: bool | None  # None: the round did not finish
    per_class: dict[str, int] = field(default_factory=dict)  # calls seen by class (copy, nccl, ...), all ranks


def unit_us(world: int, shared: bool, asked: int | None = None) -> int:
    """The unit of the holds. Ranks that share a GPU take turns on it: a hold has to outlast
    the turns of the others to open a window, so the unit grows with the ranks that share."""
    if asked is not None:
        return asked
    return DEFAULT_UNIT_US * max(1, world // 2) if shared else DEFAULT_UNIT_US


def rounds(outcomes: list[RankOutcome]) -> list[Round]:
    """Every perturbed round any rank started, in order. The ranks run the same seeds at each
    verify shape, so a round is a (shape, seed) pair."""
    started: dict[tuple[str, int], PerturbStarted] = {}
    ended: dict[tuple[str, int], list[PerturbEnded]] = {}
    for o in outcomes:
        for event in o.events:
            match event:
                case PerturbStarted(shape=shape, seed=seed):
                    started.setdefault((shape, seed), event)
                case PerturbEnded(shape=shape, seed=seed):
                    ended.setdefault((shape, seed), []).append(event)
    out = []
    for (shape, seed), e in started.items():
        stats = ended.get((shape, seed), [])
        done = len(stats) == len(outcomes)
        out.append(Round(shape, seed, e.kind, e.description, max((s.seconds for s in stats), default=0.0),
                         sum(s.delayed for s in stats), sum(s.delayed_us for s in stats), sum(s.calls for s in stats),
                         all(s.ok for s in stats) if done else None, _sum_counts(s.per_class for s in stats)))
    return out


def _sum_counts(counts: Iterable[dict[str, int]]) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in counts:
        for op, n in c.items():
            out[op] = out.get(op, 0) + int(n)
    return out


def rounds_of_events(events: list[RankEvent]) -> list[Round]:
    """`rounds` from the flat list of events `evaluate(events_out=...)` collects (each names its rank)."""
    by_rank: dict[int, list[RankEvent]] = {}
    for e in events:
        by_rank.setdefault(e.rank, []).append(e)
    return rounds([RankOutcome(r, 0, 0, 0, evs) for r, evs in sorted(by_rank.items())])


def failed_seed(outcomes: list[RankOutcome], v: Verification) -> int | None:
    """The perturbation seed of a failed verification, None for an ordinary check."""
    for o in outcomes:
        for e in o.of(Verified):
            if e.perturb_seed is not None and f"{e.shape} {e.label}" == v.shape:
                return e.perturb_seed
    return None


def replay_hint(candidate: str, workload: str, seed: int, world: int, shared: bool) -> str:
    where = f" --share-gpu --world {world}" if shared else f" --world {world}"
    return (f"cuco eval {candidate} --workload {workload}{where} --no-bench --perturb-seed {seed} "
            f"--perturb-rounds 1")


def race_diagnostic(r: Round | None, seed: int, v: Verification, what: str, replay: str) -> tuple[str, Diagnostic]:
    """(the result's reason, the diagnostic) for a verification that failed under perturbation `seed`."""
    how = f"{r.kind}: {r.description}" if r else "a perturbation"
    reason = (f"race: wrong output under a perturbed schedule (seed {seed}, {how}) at {v.shape}: {what}; "
              f"the ordinary checks passed. Replay: {replay}")
    diag = Diagnostic(level=int(Level.VERIFY), severity="error", code="race",
                      message=(f"under perturbation seed {seed} ({how}), {v.shape}: {what}. A correct candidate "
                               f"gives the same answer whatever its streams' timing: some ordering (a wait, an "
                               f"event, a flag posted after the data it announces) is missing. Replay: {replay}"))
    return reason, diag


def _reached(done: list[Round]) -> str:
    """"; calls seen: nccl 8, gemm 8": which of the candidate's calls the rounds stood in front of."""
    seen = _sum_counts(r.per_class for r in done)
    parts = [f"{op} {n}" for op, n in seen.items() if n]
    return f"; calls seen: {', '.join(parts)}" if parts else ""


def notes(outcomes: list[RankOutcome], every: list[Round] | None = None) -> list[Diagnostic]:
    """What the perturbed rounds did, for a result that got past them; warnings when they could not
    run or reached none of the candidate's calls. `every`: `rounds(outcomes)`, when the caller has it."""
    out = [Diagnostic(level=int(Level.VERIFY), severity="warning", code="perturb", rank=o.rank,
                      message=f"rank {o.rank}: {e.message}")
           for o in outcomes for e in o.of(PerturbWarning)]
    every = rounds(outcomes) if every is None else every
    done = [r for r in every if r.ok]
    if not done or any(r.ok is not True for r in every):  # a failed or unfinished round speaks for itself
        return out
    schedules = sorted({r.seed for r in done})
    seeds = f"seed {schedules[0]}" if len(schedules) == 1 else f"seeds {schedules[0]}-{schedules[-1]}"
    kinds = ", ".join(dict.fromkeys(r.kind for r in done))
    shapes = len({r.shape for r in done})
    where = f" at each of {shapes} verify shapes" if shapes > 1 else ""
    seconds = sum(r.seconds for r in done)
    held = sum(r.delayed_us for r in done) / 1000.0
    out.append(Diagnostic(level=int(Level.VERIFY), severity="note", code="perturb",
                          message=(f"verified under {len(schedules)} perturbed schedule(s) ({seeds}: {kinds}){where} in "
                                   f"{seconds:.2f} s; {sum(r.delayed for r in done)} ordering points held back, "
                                   f"{held:.0f} ms in all{_reached(done)}")))
    if not any(r.calls for r in done):
        out.append(Diagnostic(level=int(Level.VERIFY), severity="warning", code="perturb",
                              message=("the schedule perturbation reached none of the candidate's calls (a CUDA "
                                       "runtime that is not the shared one, or a library loaded before the "
                                       "perturber that defines the same functions): its rounds tested nothing")))
    return out


class PerturbedSchedules(EvaluationLevel):
    """The level: its plan entry (the interposer, built once per machine; the seeds; the unit), and
    its reading of the rounds (a note of what they did, the round a run stopped in, a wrong answer
    in a round as a race with its replay). Off with `EvalOptions.perturb` False."""

    name = "perturbed schedules"

    def prepare(self, plan: RunPlan, setup: Setup) -> Prepared:
        o = setup.options
        if not o.perturb or o.perturb_rounds < 1:
            return Prepared(plan)
        setup.say(Level.COMPILE, "the schedule perturber (built once per machine)")
        lib = ensure_perturb_library(setup.toolchain, setup.cache)
        if not lib.ok:
            why = Diagnostic(level=int(Level.VERIFY), severity="warning", code="perturb",
                             message=f"verified without perturbed schedules: {lib.problem}")
            return Prepared(plan, diagnostics=(why,))
        seed = o.perturb_seed if o.perturb_seed is not None else secrets.randbelow(SEED_RANGE)
        unit = unit_us(len(setup.gpus), is_shared(list(setup.gpus)), o.perturb_unit_us)
        return Prepared(replace(plan, perturb=PerturbPlan(str(lib.path), seed, o.perturb_rounds, unit)))

    def read(self, outcomes: list[RankOutcome], facts: RunFacts) -> Reading:
        every = rounds(outcomes)
        unfinished = [r for r in every if r.ok is None]
        during = (f" (during the perturbed round of seed {unfinished[0].seed} at {unfinished[0].shape}: "
                  f"{unfinished[0].description})" if unfinished else "")
        return RoundsReading(tuple(notes(outcomes, every)), during, outcomes=tuple(outcomes), rounds=tuple(every),
                             facts=facts)


@dataclass(frozen=True)
class RoundsReading(Reading):
    outcomes: tuple[RankOutcome, ...] = ()
    rounds: tuple[Round, ...] = ()
    facts: RunFacts | None = None

    def explain(self, failed: Verification, what: str) -> tuple[str, Diagnostic] | None:
        seed = failed_seed(list(self.outcomes), failed)
        if seed is None or self.facts is None:
            return None
        replay = replay_hint(self.facts.candidate, self.facts.workload, seed, len(self.outcomes),
                             is_shared(list(self.facts.gpus)))
        return race_diagnostic(next((r for r in self.rounds if r.seed == seed), None), seed, failed, what, replay)
