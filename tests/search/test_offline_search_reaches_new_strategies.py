"""The offline search reaches the new strategies: fused_tile of gemm_allgather (a fused persistent
AG+GEMM) and arrival_pipeline of moe_dispatch_combine, on a CPU.

What is real: the SearchEngine (islands, explore -> exploit, parent selection, novelty filter,
commits), the OfflineAgent (strategies no evaluation has seen first, then by score; one-knob
diffs, crossovers, rendering of the workload's templates), the cascade's L0 (`check_l0`: the
static, sync and design declaration checks; a rejection is returned as the cascade returns it)
and, for the candidates of the new strategies, the design classifier.

What stands in for nvcc and the GPU (`L0ThenModel`): after L0, a candidate is either "compiled
only" (Status.NO_GPU, as the cascade answers on a machine without GPUs), or "measured" with a
speedup from a small model keyed on its strategy and knobs (SPEEDUPS below: the new strategy
1.3x, plus 0.15x for one value of one knob; every other strategy 0.95-1.15x; the seed 1.0x).
Compiling and running every point of the new strategies is tested elsewhere
(tests/workloads/gemm_allgather/test_fused_gemm.py, tests/workloads/moe_dispatch_combine/
test_moe_templates.py); here the question is whether the search finds them and, once measured
ahead, tunes them. The evaluator only sees a file, so the agent is wrapped (`Recording`) to map
each proposal's source text to the knobs it was rendered from, which is what the model reads.

One GPU group and one proposal per generation keep it deterministic: each generation is
proposed, evaluated and committed before the next is drawn (fixed agent and config seeds)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from engine_helpers import MemoryLineage, timing

from cuco_tui.agents.base import Proposal, ProposalRequest
from cuco_tui.agents.offline.agent import OfflineAgent
from cuco_tui.core.records import CandidateRecord
from cuco_tui.core.result import CascadeResult, Level, Status
from cuco_tui.design.classify import classify
from cuco_tui.design.space import Capabilities
from cuco_tui.evaluate.cascade import Progress
from cuco_tui.evaluate.l0 import check_l0
from cuco_tui.executors import GpuGroup, GpuPool
from cuco_tui.search.config import SearchConfig
from cuco_tui.search.engine import SearchEngine
from cuco_tui.search.events import EventBus
from cuco_tui.workload.manifest import load_workload

SEED = 0  # the agent's and the config's
# An exploration draws a strategy no evaluation has seen before any measured one (OfflineAgent._full),
# so a new template is reached within the first generations whatever the others measured: at agent
# seeds 0-7, fused_tile first at generation 1-7 measured and 1-9 without a GPU, arrival_pipeline
# 1-9 and 3-9 (one proposal a generation, exploits taking their turns).
REACHED_BY = 10
NO_GPU_GENERATIONS = 12
MEASURED_GENERATIONS = 20  # and then enough generations to tune it


@dataclass(frozen=True)
class NewStrategy:
    workload: str
    strategy: str
    knob: str  # the knob whose `best` value adds BONUS to the new strategy's speedup
    best: Any
    code_check: str  # what the real classifier must see in every candidate of the strategy
    reads_right: Callable[[Any], bool]  # Evidence -> bool


NEW = [
    NewStrategy("gemm_allgather", "fused_tile", "tile_order", "arrival", "fused (one kernel moves and computes)",
                lambda ev: ev.fused),
    NewStrategy("moe_dispatch_combine", "arrival_pipeline", "chunks", 2, "overlapping communication and compute",
                lambda ev: ev.overlap != "none"),
]

# The speedup model of the "measured" mode: a documented stand-in for a GPU, so the test can ask
# whether the search ends up on the strategy that pays. The seed (no strategy knob) is 1.0x.
NEW_BASE, BONUS = 1.3, 0.15
SPEEDUPS = {  # every other strategy: flat, between 0.95x and 1.15x, whatever its knobs
    "host_sequential": 1.0, "host_chunked": 1.05, "lsa_gather": 0.95, "peer_pipeline": 1.15,
    "dispatch_overlap": 1.05, "chunked_pipeline": 1.1, "ipc_dispatch": 0.95, "expert_pipeline": 1.15,
}


def modelled_speedup(case: NewStrategy, knobs: dict[str, Any] | None) -> float:
    if not knobs:  # the seed
        return 1.0
    if knobs["strategy"] == case.strategy:
        return NEW_BASE + (BONUS if knobs.get(case.knob) == case.best else 0.0)
    return SPEEDUPS.get(knobs["strategy"], 1.0)  # a strategy added since: as the seed


class Recording:
    """The real OfflineAgent, remembering which knobs rendered each source it proposed."""

    def __init__(self, agent: OfflineAgent) -> None:
        self.agent = agent
        self.name = agent.name
        self.knobs_of: dict[str, dict[str, Any]] = {}
        self.spent_usd = agent.spent_usd

    def set_budget(self, usd: float | None) -> None:
        self.agent.set_budget(usd)

    def propose(self, request: ProposalRequest) -> Proposal:
        proposal = self.agent.propose(request)
        if proposal.source:
            self.knobs_of[proposal.source] = dict(proposal.design.get("knobs", {}))
        return proposal

    def summarize(self, history: list[CandidateRecord]) -> str:
        return self.agent.summarize(history)


class L0ThenModel:
    """The cascade's L0 (check_l0, as evaluate() runs it); then, for what passes, either "compiled
    only, no GPU" or a measurement from `modelled_speedup`."""

    def __init__(self, case: NewStrategy, agent: Recording | None, measured: bool) -> None:
        self.case, self.agent, self.measured = case, agent, measured
        self.calls = 0

    def __call__(self, path, workload, options, progress=None, kept=None) -> CascadeResult:
        self.calls += 1
        say = progress or (lambda p: None)
        path = Path(path)
        source = path.read_text()
        base = {"candidate": str(path), "workload": workload.name, "world": 2, "gpus": list(options.gpus or ())}
        say(Progress(Level.STATIC, "static checks"))
        l0 = check_l0(source, workload.seed.read_text(), path.name)
        diags = list(l0.diagnostics)
        if l0.rejected:
            return CascadeResult(**base, status=Status.REJECTED, level=Level.STATIC, diagnostics=diags,
                                 reason=l0.reason)
        say(Progress(Level.COMPILE, "compiling with nvcc (not here: a stand-in)"))
        if not self.measured:
            return CascadeResult(**base, status=Status.NO_GPU, level=Level.COMPILE, diagnostics=diags,
                                 reason="no_gpu: no GPU found; compiled only")
        speedup = modelled_speedup(self.case, self.agent.knobs_of.get(source) if self.agent else None)
        return CascadeResult(**base, status=Status.MEASURED, level=Level.BENCHMARK, diagnostics=diags,
                             timings=[timing(speedup)], reason="measured (modelled speedup)")


def search(tmp_path: Path, case: NewStrategy, measured: bool):
    workload = load_workload(case.workload)
    agent = Recording(OfflineAgent(workload, Capabilities(world=2), seed=SEED))
    evaluator = L0ThenModel(case, agent, measured)
    config = SearchConfig(
        workload=case.workload,
        generations=MEASURED_GENERATIONS if measured else NO_GPU_GENERATIONS,
        islands=2,
        proposals_per_generation=1,  # each generation committed before the next is drawn: deterministic
        explore_share=0.5,
        meta_interval=1,  # the agent re-reads the results (its strategy scores) every generation
        plateau_warn=0, plateau_diversify=0, plateau_stop=0,  # the flat model must not stop the run early
        max_concurrent_builds=1,
        seed=SEED,
    )
    # As on a machine without GPUs (one CPU slot), or one group of two GPUs.
    pool = GpuPool([GpuGroup(0, (0, 1))]) if measured else GpuPool.cpu_only(1)
    repo = MemoryLineage(tmp_path)
    engine = SearchEngine(workload, agent, repo, config, evaluate_fn=evaluator, events=EventBus(), gpu_pool=pool,
                          compile_ahead=False, design_context=lambda point: "", bounds_fn=None)
    summary = engine.run()
    assert engine.can_measure is measured
    assert summary.reason == "done", summary.reason
    records = repo.records()
    assert evaluator.calls == len([r for r in records if r.result is not None])  # every evaluated one went through it
    return records, summary


def strategy_of(record: CandidateRecord) -> str | None:
    return record.design.get("knobs", {}).get("strategy")


def knob_key(record: CandidateRecord) -> tuple:
    return tuple(sorted(record.design["knobs"].items()))


def describe(records: list[CandidateRecord]) -> str:
    return ", ".join(f"{r.id} g{r.generation} {r.kind} {strategy_of(r)} {r.status}"
                     + (f" {r.speedup:.2f}x" if r.speedup else "") for r in records)


@pytest.mark.parametrize("case", NEW, ids=lambda c: c.strategy)
def test_without_a_gpu_the_search_reaches_the_new_strategy_and_it_passes_L0(tmp_path, case):
    records, _ = search(tmp_path, case, measured=False)
    mine = [r for r in records if strategy_of(r) == case.strategy]
    assert mine, (f"{case.strategy} never proposed in {NO_GPU_GENERATIONS} generations: "
                  f"{Counter(map(strategy_of, records))}\n{describe(records)}")
    assert min(r.generation for r in mine) <= REACHED_BY, describe(records)
    for r in mine:  # passed L0: compiled only (no GPU), neither rejected nor turned away
        reason = (r.result or {}).get("reason", r.extra)
        assert r.status == Status.NO_GPU.value and r.result["level"] == Level.COMPILE, (r.id, r.status, reason)
    # the other strategies were explored as well: the optimism for the untested is spent as they compile
    assert len({strategy_of(r) for r in records if r.kind != "seed"}) >= 3, describe(records)
    assert not [r for r in records if r.status == Status.REJECTED.value and not r.rejected_by], \
        describe(records)


@pytest.mark.parametrize("case", NEW, ids=lambda c: c.strategy)
def test_measured_the_search_ends_on_the_new_strategy_and_tunes_it(tmp_path, case):
    records, summary = search(tmp_path, case, measured=True)
    by_id = {r.id: r for r in records}
    mine = [r for r in records if strategy_of(r) == case.strategy]
    assert mine, (f"{case.strategy} never proposed in {MEASURED_GENERATIONS} generations: "
                  f"{Counter(map(strategy_of, records))}\n{describe(records)}")
    assert min(r.generation for r in mine) <= REACHED_BY, describe(records)  # reached before it paid off
    assert all(r.status == Status.MEASURED.value for r in mine), describe(mine)  # every one passed L0

    # the session's best is the new strategy (and, tuned, at the knob value the model rewards)
    best = by_id[summary.best]
    assert best.speedup == max(r.speedup for r in records if r.speedup is not None)
    assert strategy_of(best) == case.strategy, describe(records)
    assert best.speedup == pytest.approx(NEW_BASE + BONUS)
    assert best.design["knobs"][case.knob] == case.best

    # exploited: several settings measured, and one-knob diffs from a parent of the new strategy
    settings = {knob_key(r) for r in mine}
    assert len(settings) >= 3, describe(mine)

    def one_knob_from_parent(r: CandidateRecord) -> bool:
        parent = by_id[r.parents[0]]
        if strategy_of(parent) != case.strategy:
            return False
        a, b = parent.design["knobs"], r.design["knobs"]
        return sum(a.get(k) != b.get(k) for k in a.keys() | b.keys()) == 1

    diffs = [r for r in mine if r.kind == "diff" and one_knob_from_parent(r)]
    assert diffs, describe(records)

    # the real classifier reads every candidate of the strategy as what the strategy promises
    wrong = [r.id for r in mine if not case.reads_right(classify(r.source))]
    assert not wrong, f"not classified as {case.code_check}: {wrong}"


def test_the_stand_in_runs_the_cascades_L0(tmp_path):
    """The evaluator double is not a pass-through: a candidate that edits the seed's frozen
    region is rejected at L0, as the cascade rejects it."""
    case = NEW[0]
    workload = load_workload(case.workload)
    seed = workload.seed.read_text()
    good, bad = tmp_path / "good.cu", tmp_path / "bad.cu"
    good.write_text(seed)
    frozen = seed.index("// EVOLVE-BLOCK-START")  # everything before the first block is frozen
    bad.write_text(seed[:frozen] + "static int cuco_edited_frozen_region = 1;\n" + seed[frozen:])

    class Options:
        gpus = ()

    double = L0ThenModel(case, None, measured=False)
    assert double(good, workload, Options()).status == Status.NO_GPU
    rejected = double(bad, workload, Options())
    assert rejected.status == Status.REJECTED and rejected.level == Level.STATIC
    assert rejected.reason.startswith("rejected by static checks: ")
