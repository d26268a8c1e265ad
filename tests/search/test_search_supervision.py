"""What the engineer supervising a search relies on, on the engine with a scripted agent and a
fake evaluator: proposals left unreviewed by a stop come back on resume; re-benchmark is refused
without a GPU; a plateau warns, diversifies, then stops; the session's bounds are measured once
on a GPU and read back; the workloads count their work."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import pytest

from cuco_tui.core.bounds import Bounds, ShapeBound, Work, all_figures, figures, mean_pct_of_bound
from cuco_tui.core.result import CascadeResult, Level, Status
from cuco_tui.evaluate.work import work_counts
from cuco_tui.executors import GpuGroup, GpuPool
from cuco_tui.search.config import ConfigError, SearchConfig
from cuco_tui.search.engine import SearchEngine, SteeringError
from cuco_tui.search.events import (AwaitingReview, BoundsKnown, EngineError, EventBus, GenerationStarted, MeasuringBounds,
                                    Plateau, ProposalReady)
from cuco_tui.search.plateau import PlateauWatch
from cuco_tui.workload.manifest import load_workload
from engine_helpers import W, FakeEvaluator, MemoryLineage, ScriptedAgent, make, timing


# ---------------------------------------------------------------------------- unreviewed, then resumed


def stop_while_held(tmp_path):
    """A review-mode search stopped as soon as its first proposal is held; its records."""
    engine, repo, bus = make(tmp_path, review_mode="review", generations=4, fast_path=False)
    bus.subscribe(lambda e: isinstance(e, AwaitingReview) and threading.Thread(target=engine.stop).start())
    assert engine.run().reason == "stopped"
    return repo.records()


def test_a_resumed_review_search_holds_the_unreviewed_proposals_again(tmp_path):
    before = stop_while_held(tmp_path)
    left = [r for r in before if r.status == "unreviewed"]
    assert left
    engine, repo, bus = make(tmp_path, records=before, review_mode="review", generations=4, fast_path=False)
    held = []

    def on_event(e):
        if isinstance(e, AwaitingReview):
            held.append(e)
            if len(held) == 1:
                threading.Thread(target=engine.review, args=(e.candidate, "accept")).start()
            else:
                threading.Thread(target=engine.stop).start()

    bus.subscribe(on_event)
    engine.run()
    first = held[0]  # held before any new proposal: the one the last run left
    assert f"{left[0].id} was not reviewed before the search stopped" in first.why
    assert first.source == left[0].source and first.parents == left[0].parents
    again = next(r for r in repo.records() if r.id == first.candidate)
    assert again.review_of == left[0].id and again.review == "accepted" and again.status == "measured"


def test_a_resumed_auto_search_evaluates_the_unreviewed_once(tmp_path):
    before = stop_while_held(tmp_path)
    left = [r for r in before if r.status == "unreviewed"]
    engine, repo, bus = make(tmp_path, records=before, review_mode="auto", generations=2, fast_path=False)
    engine.run()
    after = repo.records()
    again = [r for r in after if r.review_of]
    assert sorted(r.review_of for r in again) == sorted(r.id for r in left)
    assert all(r.status == "measured" for r in again)
    # a third run finds every unreviewed proposal taken up: nothing is evaluated twice
    engine3, repo3, bus3 = make(tmp_path, records=after, review_mode="auto", generations=2, fast_path=False)
    engine3.run()
    assert len([r for r in repo3.records() if r.review_of]) == len(again)


def test_an_unreviewed_proposal_is_no_parent_and_no_lesson_for_the_agent(tmp_path):
    before = stop_while_held(tmp_path)
    left = {r.id for r in before if r.status == "unreviewed"}
    agent = ScriptedAgent(offset=100)
    engine, repo, bus = make(tmp_path, agent=agent, records=before, review_mode="auto", generations=3,
                             fast_path=False)
    seen = []
    agent.summarize = lambda history: seen.append([r.id for r in history]) or ""
    engine.run()
    assert all(not left & {p.id for p in call.parents} for call in agent.calls)
    assert seen and all(not left & set(ids) for ids in seen)


# ---------------------------------------------------------------------------- re-benchmark without a GPU


def test_rebenchmark_is_refused_without_a_gpu_and_commits_nothing(tmp_path):
    config = SearchConfig(generations=2, islands=1, max_concurrent_builds=1, review_mode="review", fast_path=False)
    repo = MemoryLineage(tmp_path)
    bus = EventBus()
    engine = SearchEngine(W, ScriptedAgent(), repo, config, evaluate_fn=FakeEvaluator(), events=bus,
                          gpu_pool=GpuPool.cpu_only(1), compile_ahead=False, design_context=lambda p: "")
    errors = []

    def on_event(e):
        if isinstance(e, AwaitingReview):
            try:
                engine.rebenchmark("c0000")
            except SteeringError as exc:
                errors.append(str(exc))
            threading.Thread(target=engine.stop).start()

    bus.subscribe(on_event)
    assert engine.can_measure is None  # not planned yet
    engine.run()
    assert engine.can_measure is False
    assert errors and "needs a GPU" in errors[0]
    assert not [r for r in repo.records() if r.kind == "rebenchmark"]
    known = bus.history(BoundsKnown)[0]
    assert known.bounds is None and "no GPU" in known.why and known.work["square-8k"].flops > 0


# ---------------------------------------------------------------------------- plateau


class Flat:
    """Every candidate measured at the same speedup: nothing ever improves."""

    def __init__(self, speedup: float = 1.2) -> None:
        self.speedup = speedup

    def __call__(self, path, workload, options, progress=None, kept=None):
        return CascadeResult(candidate=str(path), workload=workload.name, status=Status.MEASURED,
                             level=Level.BENCHMARK, timings=[timing(self.speedup)], world=2, reason="measured")


def test_a_plateau_warns_then_diversifies_then_stops(tmp_path):
    engine, repo, bus = make(tmp_path, evaluator=Flat(), generations=12, islands=2, fast_path=False,
                             explore_share=0.0, plateau_warn=2, plateau_diversify=3, plateau_stop=5)
    summary = engine.run()
    stages = [(e.stage, e.generations) for e in bus.history(Plateau)]
    assert stages == [("warn", 2), ("diversify", 3), ("stop", 5)]
    assert summary.reason == "plateau"
    assert max(r.generation for r in repo.records()) == 5
    # exploit by the schedule (explore_share 0), explore once diversified
    phases = [e.phase for e in bus.history(GenerationStarted) if e.generation > 0]
    assert phases == ["exploit", "exploit", "exploit", "explore", "explore"]
    assert {e.generation for e in bus.history(ProposalReady)} == {1, 2, 3, 4, 5}
    assert {r.extra["phase"] for r in repo.records() if r.generation >= 4} == {"explore"}
    assert bus.history(Plateau)[0].message.startswith("plateau: no gain above 1.20x (by more than 1%) for 2 ")
    assert engine.population.migrations >= 1  # the islands exchanged their best when it diversified


def test_gains_keep_the_search_going_and_a_stage_at_zero_never_comes(tmp_path):
    engine, repo, bus = make(tmp_path, generations=6, fast_path=False, plateau_warn=1, plateau_diversify=1,
                             plateau_stop=1)
    assert engine.run().reason == "done"  # the fake evaluator's speedups rise with every variant
    assert not bus.history(Plateau)
    engine, repo, bus = make(tmp_path / "flat", evaluator=Flat(), generations=4, fast_path=False,
                             plateau_warn=0, plateau_diversify=0, plateau_stop=0)
    assert engine.run().reason == "done" and not bus.history(Plateau)


def test_nothing_measured_is_no_plateau():
    watch = PlateauWatch(warn=1, diversify=1, stop=1)
    assert watch.after(10) is None and watch.stale(10) == 0


def test_the_plateau_is_rebuilt_on_resume(tmp_path):
    engine, repo, bus = make(tmp_path, evaluator=Flat(), generations=3, fast_path=False, plateau_warn=2,
                             plateau_diversify=3, plateau_stop=6)
    engine.run()
    assert [e.stage for e in bus.history(Plateau)] == ["warn", "diversify"]
    engine2, repo2, bus2 = make(tmp_path, agent=ScriptedAgent(offset=100), evaluator=Flat(), records=repo.records(),
                                generations=10,
                                fast_path=False, plateau_warn=2, plateau_diversify=3, plateau_stop=6)
    assert engine2.run().reason == "plateau"
    # restored: still diversified (every island explores), and the resumed run gets the whole
    # patience again: it stops after 6 generations of its own, 9 after the last gain
    assert [(e.stage, e.generations) for e in bus2.history(Plateau)] == [("stop", 9)]
    assert [e.phase for e in bus2.history(GenerationStarted)] == ["explore"] * 6


def test_a_run_that_cannot_measure_never_stops_for_a_plateau(tmp_path):
    engine, repo, bus = make(tmp_path, evaluator=Flat(), generations=3, fast_path=False, plateau_warn=1,
                             plateau_diversify=2, plateau_stop=3)
    engine.run()
    config = SearchConfig(generations=8, islands=2, max_concurrent_builds=1, fast_path=False, plateau_warn=1,
                          plateau_diversify=2, plateau_stop=3)
    bus2 = EventBus()
    engine2 = SearchEngine(W, ScriptedAgent(offset=100), MemoryLineage(tmp_path, repo.records()), config,
                           evaluate_fn=Flat(), events=bus2, gpu_pool=GpuPool.cpu_only(1), compile_ahead=False,
                           design_context=lambda p: "")
    assert engine2.run().reason != "plateau"
    assert engine2.can_measure is False and [e.stage for e in bus2.history(Plateau)] == []


def test_plateau_settings_are_checked_and_round_trip():
    for bad in ({"plateau_warn": -1}, {"plateau_stop": -2}, {"plateau_margin": 1.0}):
        with pytest.raises(ConfigError):
            SearchConfig(**bad)
    c = SearchConfig(plateau_warn=2, plateau_diversify=5, plateau_stop=0, plateau_margin=0.05, measure_bounds=False)
    assert SearchConfig.from_dict(c.to_dict()) == c


# ---------------------------------------------------------------------------- bounds


def fake_bounds(workload, gpus, world) -> Bounds:
    work = work_counts(workload, world)
    return Bounds(workload.name, world, tuple(gpus),
                  tuple(ShapeBound(s.name, 1.0, 0.5, 0.4, 0.5, 100.0, work[s.name]) for s in workload.bench_shapes))


def test_the_bounds_are_measured_once_on_a_group_lent_alone_and_read_back(tmp_path):
    calls = []

    def measure(workload, gpus, world):
        calls.append((gpus, world))
        return fake_bounds(workload, gpus, world)

    config = SearchConfig(generations=1, islands=2, max_concurrent_builds=1, fast_path=False)
    repo = MemoryLineage(tmp_path)
    bus = EventBus()
    pool = GpuPool([GpuGroup(0, (0, 1)), GpuGroup(1, (2, 3))])
    SearchEngine(W, ScriptedAgent(), repo, config, evaluate_fn=FakeEvaluator(), events=bus, gpu_pool=pool,
                 compile_ahead=False, design_context=lambda p: "", bounds_fn=measure).run()
    assert calls == [((0, 1), 2)]
    assert bus.history(MeasuringBounds)[0].gpus == (0, 1)
    known = bus.history(BoundsKnown)[0]
    assert known.bounds == repo.stored_bounds and known.bounds.of("square-8k").speedup == 2.0
    # resumed: read back, not measured again
    bus2 = EventBus()
    SearchEngine(W, ScriptedAgent(), repo, config.with_(generations=2), evaluate_fn=FakeEvaluator(), events=bus2,
                 gpu_pool=pool, compile_ahead=False, design_context=lambda p: "", bounds_fn=measure).run()
    assert len(calls) == 1 and bus2.history(BoundsKnown)[0].bounds == repo.stored_bounds
    assert not bus2.history(MeasuringBounds)


def test_a_stand_in_evaluator_measures_no_bounds_and_a_failure_is_said(tmp_path):
    engine, repo, bus = make(tmp_path, generations=1)
    engine.run()
    assert bus.history(BoundsKnown)[0].bounds is None and "stand-in evaluator" in bus.history(BoundsKnown)[0].why

    def broken(workload, gpus, world):
        raise RuntimeError("the reference crashed")

    config = SearchConfig(generations=1, islands=1, max_concurrent_builds=1, fast_path=False)
    bus = EventBus()
    summary = SearchEngine(W, ScriptedAgent(), MemoryLineage(tmp_path / "b"), config, evaluate_fn=FakeEvaluator(),
                           events=bus, gpu_pool=GpuPool([GpuGroup(0, (0, 1))]), compile_ahead=False,
                           design_context=lambda p: "", bounds_fn=broken).run()
    assert summary.reason == "done"
    assert "the reference crashed" in bus.history(BoundsKnown)[0].why


def test_a_reference_that_differs_from_float64_on_the_gpus_is_said_loudly_and_kept_with_the_bounds(tmp_path):
    def measure(workload, gpus, world):
        return replace(fake_bounds(workload, gpus, world), reference_ok=False,
                       reference_check="differs from expected() in float64 (W=2 on GPUs 0,1, rtol 0.02): rank 1 'y' "
                                       "at verify: max relative error 0.5 at [3, 5] (got 2, float64 4)")

    config = SearchConfig(generations=1, islands=1, max_concurrent_builds=1, fast_path=False)
    repo, bus = MemoryLineage(tmp_path), EventBus()
    SearchEngine(W, ScriptedAgent(), repo, config, evaluate_fn=FakeEvaluator(), events=bus,
                 gpu_pool=GpuPool([GpuGroup(0, (0, 1))]), compile_ahead=False, design_context=lambda p: "",
                 bounds_fn=measure).run()
    said = [e.message for e in bus.history(EngineError) if "reference on the GPUs" in e.message]
    assert said == ["the reference on the GPUs: differs from expected() in float64 (W=2 on GPUs 0,1, rtol 0.02): "
                    "rank 1 'y' at verify: max relative error 0.5 at [3, 5] (got 2, float64 4); every candidate is "
                    "verified against it: fix it, or its tolerance, before trusting a verdict (cuco workload check "
                    "--gpu)"]
    assert Bounds.from_dict(repo.stored_bounds.to_dict()) == repo.stored_bounds
    assert not repo.stored_bounds.reference_ok
    # a matching reference says nothing
    bus2 = EventBus()
    SearchEngine(W, ScriptedAgent(), MemoryLineage(tmp_path / "ok"), config, evaluate_fn=FakeEvaluator(), events=bus2,
                 gpu_pool=GpuPool([GpuGroup(0, (0, 1))]), compile_ahead=False, design_context=lambda p: "",
                 bounds_fn=fake_bounds).run()
    assert not [e for e in bus2.history(EngineError) if "reference" in e.message]


def test_figures_of_a_shape():
    t = timing(1.5)  # reference 1.0 ms, candidate 1/1.5 ms
    bound = ShapeBound("square-8k", reference_ms=2.0, bound_ms=1.0, work=Work(flops=10**9, comm_bytes=10**9))
    f = figures(t, bound)
    assert f.time_ms == pytest.approx(1 / 1.5) and f.speedup == 1.5
    assert f.tflops == pytest.approx(1.5) and f.gbps == pytest.approx(1500.0)
    assert f.pct_of_bound == pytest.approx(75.0) and f.bound_speedup == 2.0
    bare = figures(t)
    assert (bare.tflops, bare.gbps, bare.pct_of_bound) == (None, None, None)
    own = figures(t, None, Work(flops=2 * 10**9))
    assert own.tflops == pytest.approx(3.0) and own.gbps is None
    shapes = all_figures([t, replace(timing(3.0), shape="long-seq")], Bounds("w", 2, (0, 1), (bound,)))
    assert shapes[1].pct_of_bound is None and mean_pct_of_bound(shapes) is None
    assert mean_pct_of_bound(shapes[:1]) == pytest.approx(75.0)
    assert Bounds.from_dict(Bounds("w", 2, (0, 1), (bound,)).to_dict()) == Bounds("w", 2, (0, 1), (bound,))


@pytest.mark.parametrize("name, world, shape, flops, comm", [
    ("gemm_allgather", 2, "square-8k", 2 * 8192 * 8192 * 4096, 4096 * 8192 * 2),
    ("kv_transfer", 2, "llama8b-4k", 2 * 32 * 4096 * 4096 * 2048, 32 * 4096 * 2048 * 2),
    ("tp_attn_out", 4, "prefill-8k", 2 * 8192 * 2048 * 8192, 2 * 3 * 8192 * 8192 * 2 // 4),
    ("moe_dispatch_combine", 2, "prefill-4k", 8 * 4096 * 6 * 7168 * 2048, 2 * 8 * 4096 // 2 * 7168 * 2),
])
def test_each_workload_counts_one_ranks_work(name, world, shape, flops, comm):
    work = work_counts(load_workload(name), world)[shape]
    assert (work.flops, work.comm_bytes) == (flops, comm)


def test_cp_attention_counts_the_busiest_rank_and_the_causal_triangle():
    w = load_workload("cp_attention")
    causal = next(s for s in w.bench_shapes if s.dims["CAUSAL"])
    dims, world = dict(causal.dims), 2
    sl = dims["S"] // world
    work = work_counts(w, world)[causal.name]
    assert work.flops == 4 * dims["H"] * dims["D"] * (sl * sl + sl * (sl + 1) // 2)
    full = dict(dims, CAUSAL=0)
    import importlib.util

    spec = importlib.util.spec_from_file_location("cp_ref", w.reference)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.flops(full, world) == 4 * dims["H"] * dims["D"] * sl * dims["S"] > work.flops
    assert module.comm_bytes(dims, world) == sl * dims["HKV"] * dims["D"] * 4


def test_the_reference_methods_and_the_functions_agree():
    """The baseline's worker calls Reference.comm_bytes(); the search uses the module's function."""
    import importlib.util
    from types import SimpleNamespace

    for name in ("gemm_allgather", "kv_transfer", "tp_attn_out", "cp_attention"):
        w = load_workload(name)
        spec = importlib.util.spec_from_file_location(f"ref_{name}", w.reference)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        world = min(w.world_sizes)
        for shape in w.bench_shapes:
            ref = object.__new__(module.Reference)
            ref.env = SimpleNamespace(dims=dict(shape.dims), world=world)
            assert module.Reference.comm_bytes(ref) == module.comm_bytes(dict(shape.dims), world), (name, shape)


def test_a_reference_without_counts_gives_none(tmp_path):
    w = load_workload("gemm_allgather")
    bare = tmp_path / "reference.py"
    bare.write_text("def io_spec(dims, world, rank=0):\n    return {}\n")
    assert work_counts(replace(w, reference=bare), 2) == {}
    broken = tmp_path / "broken.py"
    broken.write_text("import not_a_module_anywhere\n")
    assert work_counts(replace(w, reference=Path(broken)), 2) == {}


def test_a_resumed_search_tells_its_watchers_what_the_session_holds(tmp_path):
    from cuco_tui.search.events import SessionRestored

    engine, repo, bus = make(tmp_path, generations=1)
    engine.run()
    assert not bus.history(SessionRestored)  # a new session: nothing to restore
    before = repo.records()
    engine2, repo2, bus2 = make(tmp_path, agent=ScriptedAgent(offset=100), records=before, generations=2)
    engine2.run()
    restored = bus2.history(SessionRestored)[0]
    assert restored.records == tuple(before)
    assert restored.best.id == max((r for r in before if r.speedup), key=lambda r: r.speedup).id
