"""Finalists timed beside other evaluations are re-measured alone: the pool's exclusive lease,
and the engine's confirmation, with a fake evaluator whose figures are flattered by company."""

from __future__ import annotations

import random
import re
import threading
import time
from pathlib import Path

import pytest

from cuco_tui.core.result import CascadeResult, Level, Status
from cuco_tui.search.config import ConfigError, SearchConfig
from cuco_tui.search.events import BestImproved, CandidateCommitted, ProposalReady
from cuco_tui.executors import GpuGroup, GpuPool, plan_groups

from engine_helpers import ScriptedAgent, make, timing


class InterferenceEvaluator:
    """Each variant has a true speedup (`true[n]`, else 1 + n/100); a run that overlapped any
    other run reports `flatter` times it. Every run's interval is kept."""

    def __init__(self, true=None, flatter=2.0, delay=0.15):
        self.true, self.flatter, self.delay = dict(true or {}), flatter, delay
        self.lock = threading.Lock()
        self.active: dict[int, dict] = {}
        self.runs: list[dict] = []  # {"cid", "n", "gpus", "start", "end", "beside"}

    def __call__(self, path, workload, options, progress=None, kept=None):
        source = Path(path).read_text()
        m = re.search(r"cuco_variant = (\d+)", source)
        n = int(m.group(1)) if m else 0
        gpus = tuple(options.gpus or ())
        run = {"cid": Path(path).stem, "n": n, "gpus": gpus, "start": time.monotonic(), "beside": False}
        key = id(run)
        with self.lock:
            for other in self.active.values():
                other["beside"] = True
                run["beside"] = True
            self.active[key] = run
        try:
            time.sleep(self.delay)
        finally:
            with self.lock:
                del self.active[key]
                run["end"] = time.monotonic()
                self.runs.append(run)
        speedup = self.true.get(n, 1.0 + n / 100) * (self.flatter if run["beside"] else 1.0)
        return CascadeResult(candidate=str(path), workload=workload.name, world=2, gpus=list(gpus),
                             status=Status.MEASURED, level=Level.BENCHMARK, timings=[timing(speedup)],
                             reason="measured")

    def run_of(self, cid):
        return next(r for r in self.runs if r["cid"] == cid)

    def overlapping(self, cid):
        me = self.run_of(cid)
        return [r["cid"] for r in self.runs if r is not me and r["start"] < me["end"] and me["start"] < r["end"]]


def test_an_inflated_finalist_is_re_measured_alone_and_only_its_confirmation_can_be_best(tmp_path):
    # the seed (variant 0) is 1.0x; generation 1 runs variants 1 and 2 side by side on the two groups,
    # where both look twice as fast as they are: 1.8x and 2.4x. Alone, variant 1 is 0.9x, variant 2 1.2x.
    evaluator = InterferenceEvaluator(true={0: 1.0, 1: 0.9, 2: 1.2})
    engine, repo, bus = make(tmp_path, evaluator=evaluator, groups=2, islands=2, generations=1, fast_path=False)
    summary = engine.run()
    recs = {r.id: r for r in repo.records()}
    finalists = [r for r in recs.values() if r.finalist]
    confirms = [r for r in recs.values() if r.kind == "confirm"]
    assert sorted(r.speedup for r in finalists) == [pytest.approx(1.8), pytest.approx(2.4)]
    assert all(r.concurrent == 1 and len(r.concurrent_with) == 1 for r in finalists)
    assert len(confirms) == 2
    for c in confirms:
        finalist = recs[c.parents[0]]
        assert c.parents == (finalist.id,) and c.confirm_of == finalist.id and finalist.finalist
        assert c.source == finalist.source and c.island == finalist.island and c.generation == finalist.generation
        assert c.rationale == f"re-measured alone: {finalist.id} was timed beside 1 other evaluation"
        assert c.concurrent == 0 and not c.finalist
        assert evaluator.overlapping(c.id) == []  # nothing else ran while it was timed
        assert c.speedup == pytest.approx(evaluator.true[evaluator.run_of(c.id)["n"]])
    # the best is variant 2's confirmation at its true 1.2x; no finalist was ever best
    best = max(confirms, key=lambda r: r.speedup)
    assert summary.best == best.id and summary.best_speedup == pytest.approx(1.2)
    assert repo.best == ["c0000", best.id]
    assert [e.record.id for e in bus.history(BestImproved)] == ["c0000", best.id]
    assert not any(recs[h].finalist for h in repo.heads.values())
    # the lineage keeps the figure as measured; the population ranks the finalist without it
    assert all(engine.population.records[r.id].speedup is None for r in finalists)
    assert engine.population.best.id == best.id
    # the confirmation is announced like any proposal, then committed
    ready = {e.candidate: e for e in bus.history(ProposalReady)}
    assert all(ready[c.id].kind == "confirm" and ready[c.id].agent == "engine" for c in confirms)
    assert {e.record.id for e in bus.history(CandidateCommitted)} == set(recs)


def test_a_figure_flattered_beside_others_does_not_beat_a_true_best(tmp_path):
    # variant 1 alone is 0.5x but shows 3x beside variant 2; the seed (1.0x, alone) stays the best
    evaluator = InterferenceEvaluator(true={0: 1.0, 1: 0.5, 2: 0.4}, flatter=6.0)
    engine, repo, bus = make(tmp_path, evaluator=evaluator, groups=2, islands=2, generations=1, fast_path=False)
    summary = engine.run()
    assert summary.best == "c0000" and repo.best == ["c0000"]
    confirms = [r for r in repo.records() if r.kind == "confirm"]
    assert sorted(r.speedup for r in confirms) == [pytest.approx(0.4), pytest.approx(0.5)]


def test_many_groups_every_best_was_measured_alone(tmp_path):
    rng = random.Random(7)
    true = {n: round(rng.uniform(0.6, 1.6), 3) for n in range(0, 40)}
    true[0] = 1.0
    evaluator = InterferenceEvaluator(true=true, flatter=1.5, delay=0.05)
    engine, repo, bus = make(tmp_path, evaluator=evaluator, groups=4, islands=4, generations=3, fast_path=False)
    summary = engine.run()
    recs = {r.id: r for r in repo.records()}
    confirms = [r for r in recs.values() if r.kind == "confirm"]
    assert confirms
    for c in confirms:
        assert evaluator.overlapping(c.id) == []
        assert recs[c.parents[0]].finalist and recs[c.parents[0]].concurrent >= 1
    for cid in repo.best:  # every best ran alone, at its true figure
        assert not recs[cid].concurrent and not recs[cid].finalist
        assert recs[cid].speedup == pytest.approx(true[evaluator.run_of(cid)["n"]])
    alone = [r for r in recs.values() if r.speedup is not None and not r.concurrent]
    assert summary.best == max(alone, key=lambda r: (r.speedup, r.id)).id
    # a finalist is exactly a candidate timed beside others at or within 2 % of the best of its moment
    for r in recs.values():
        if r.concurrent and r.status == "measured" and not r.finalist:
            assert r.speedup <= recs[repo.best[-1]].speedup


def test_resume_ranks_finalists_as_the_live_search_did(tmp_path):
    evaluator = InterferenceEvaluator(true={0: 1.0, 1: 0.9, 2: 1.2})
    engine, repo, bus = make(tmp_path, evaluator=evaluator, groups=2, islands=2, generations=1, fast_path=False)
    first = engine.run()
    engine2, repo2, bus2 = make(tmp_path, agent=ScriptedAgent(offset=100), evaluator=InterferenceEvaluator(delay=0.0),
                                records=repo.records(), groups=1, islands=2, generations=1, fast_path=False)
    summary = engine2.run()  # nothing left to run: the population is rebuilt from the lineage
    assert summary.best == first.best == engine2.population.best.id
    finalists = [r.id for r in repo.records() if r.finalist]
    assert finalists and all(engine2.population.records[f].speedup is None for f in finalists)


def test_resume_confirms_the_finalists_a_kill_left_unconfirmed(tmp_path):
    evaluator = InterferenceEvaluator(true={0: 1.0, 1: 0.9, 2: 1.2})
    engine, repo, bus = make(tmp_path, evaluator=evaluator, groups=2, islands=2, generations=1, fast_path=False)
    engine.run()
    finalists = {r.id for r in repo.records() if r.finalist}
    assert finalists
    # as if killed after the finalists were committed and before their confirmations ran
    kept = [r for r in repo.records() if r.kind != "confirm"]
    engine2, repo2, bus2 = make(tmp_path, agent=ScriptedAgent(offset=100), evaluator=InterferenceEvaluator(delay=0.0),
                                records=kept, groups=2, islands=2, generations=1, fast_path=False)
    summary = engine2.run()
    confirms = [r for r in repo2.records() if r.kind == "confirm"]
    assert {r.confirm_of for r in confirms} == finalists
    assert all(r.parents == (r.confirm_of,) for r in confirms)
    assert summary.best == engine2.population.best.id
    assert engine2.population.best.kind in ("confirm", "seed")  # never an unconfirmed finalist


def test_one_group_never_confirms_and_records_nothing_new(tmp_path):
    evaluator = InterferenceEvaluator(delay=0.0)
    engine, repo, bus = make(tmp_path, evaluator=evaluator, groups=1, generations=2)
    engine.run()
    recs = repo.records()
    assert len(recs) == 2 + 2 * 2 and all(r.kind != "confirm" for r in recs)
    assert all(not r.concurrent and not r.concurrent_with and not r.finalist for r in recs)
    assert not any(r["beside"] for r in evaluator.runs)


def test_confirm_alone_off_keeps_the_concurrent_figure(tmp_path):
    evaluator = InterferenceEvaluator(true={0: 1.0, 1: 0.9, 2: 1.2})
    engine, repo, bus = make(tmp_path, evaluator=evaluator, groups=2, islands=2, generations=1, fast_path=False,
                             confirm_alone=False)
    summary = engine.run()
    assert all(r.kind != "confirm" for r in repo.records())
    assert summary.best_speedup == pytest.approx(2.4)  # the flattered figure wins: what the feature prevents


def test_config_margin_is_checked_and_round_trips():
    with pytest.raises(ConfigError, match="confirm_margin"):
        SearchConfig(confirm_margin=1.5)
    cfg = SearchConfig(confirm_alone=False, confirm_margin=0.05)
    assert SearchConfig.from_dict(cfg.to_dict()) == cfg
    assert SearchConfig.from_dict({k: v for k, v in cfg.to_dict().items() if not k.startswith("confirm")}) \
        == SearchConfig()  # a session written before this setting gets the default


# ---------------------------------------------------------------------------- the pool


def test_exclusive_acquire_waits_for_every_group_and_holds_back_later_requests():
    pool = GpuPool(plan_groups([0, 1, 2, 3], 2))
    a = pool.acquire()
    got = {}

    def take(name, exclusive):
        got[name] = pool.acquire_exclusive() if exclusive else pool.acquire()

    tx = threading.Thread(target=take, args=("x", True))
    tx.start()
    time.sleep(0.05)
    assert "x" not in got  # group (2, 3) is free, but (0, 1) is lent
    ty = threading.Thread(target=take, args=("y", False))
    ty.start()
    time.sleep(0.05)
    assert "y" not in got  # behind the exclusive request, though a group is free
    pool.release(a)
    tx.join(60)  # a backstop: the release above lets it through
    assert got["x"] is not None and pool.exclusive == got["x"] and pool.busy() == 1
    time.sleep(0.05)
    assert "y" not in got  # nothing else is lent while the exclusive group is out
    pool.release(got["x"])
    ty.join(60)
    assert got["y"] is not None and pool.exclusive is None
    pool.release(got["y"])
    assert pool.busy() == 0


def test_exclusive_acquire_times_out_and_gives_way():
    pool = GpuPool(plan_groups([0, 1, 2, 3], 2))
    assert pool.acquire() is not None  # one group lent: the exclusive request cannot have them all
    assert pool.acquire_exclusive(timeout=0.05) is None
    assert pool.acquire(timeout=0.05) is not None  # the request that timed out blocks no one
    with pytest.raises(ValueError):
        pool.release(GpuGroup(7, (7,)))


def test_exclusive_requests_are_served_in_order_and_never_overlap_a_lent_group():
    pool = GpuPool(plan_groups(list(range(8)), 2))
    lock = threading.Lock()
    lent = {"n": 0, "exclusive": 0}
    bad = []
    order = []
    stop = threading.Event()

    def normal(k):
        while not stop.is_set():
            with pool.lease():
                with lock:
                    lent["n"] += 1
                    if lent["exclusive"]:
                        bad.append(("normal beside exclusive", k))
                time.sleep(0.002 * (k % 3 + 1))
                with lock:
                    lent["n"] -= 1

    def exclusive(k):
        with pool.lease(exclusive=True):
            with lock:
                order.append(k)
                lent["n"] += 1
                lent["exclusive"] += 1
                if lent["n"] != 1:
                    bad.append(("exclusive beside", lent["n"] - 1))
            time.sleep(0.003)
            with lock:
                lent["n"] -= 1
                lent["exclusive"] -= 1

    workers = [threading.Thread(target=normal, args=(k,)) for k in range(12)]
    for t in workers:
        t.start()
    time.sleep(0.02)
    confirmers = []
    for k in range(6):  # queued one after another while the groups are busy: none may starve
        t = threading.Thread(target=exclusive, args=(k,))
        t.start()
        confirmers.append(t)
        time.sleep(0.01)
    for t in confirmers:
        t.join(60)
    stop.set()
    for t in workers:
        t.join(60)
    assert not bad
    assert order == list(range(6))
    assert pool.busy() == 0 and pool.exclusive is None
