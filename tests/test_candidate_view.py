"""The candidate view (one candidate of a session: source, diffs against its parents, compiler
errors with their lines, run logs, deadlock diagnosis, verification, timings; re-benchmark, make
parent, export) and the engine commands behind its actions. Sessions are built under tmp_path
from hand-made records, so every section has known content; the engine tests use the offline
agent and fake evaluators, as tests/test_search_engine.py does."""

from __future__ import annotations

import threading
import zlib
from pathlib import Path

import pytest

from cuco_tui.agents.offline import OfflineAgent
from cuco_tui.design.space import Capabilities
from cuco_tui.evaluate.result import CascadeResult, Level, ShapeTiming, Spread, Status
from cuco_tui.search.engine import SteeringError
from cuco_tui.search.events import AwaitingReview, CandidateCommitted
from test_search_engine import W
from test_search_engine import make as make_engine


def engine_timing(speedup: float) -> ShapeTiming:
    ref = Spread.of([1.0] * 10)
    cand = Spread.of([1.0 / speedup] * 10)
    return ShapeTiming("square-8k", {"M": 8192, "K": 8192, "N": 8192}, cand, ref, [cand, cand], speedup)


# ---------------------------------------------------------------------------- engine commands


class ById:
    """Compile errors for the candidates named in `fail`, by the id the engine gives the file;
    else measured, with a speedup from the source (so a re-benchmark measures the same)."""

    def __init__(self, fail=()):
        self.fail = set(fail)
        self.calls: list[str] = []

    def __call__(self, path, workload, options, progress=None):
        cid = Path(path).stem
        self.calls.append(cid)
        base = dict(candidate=str(path), workload=workload.name, world=2, gpus=list(options.gpus or ()))
        if cid in self.fail:
            return CascadeResult(**base, status=Status.COMPILE_ERROR, level=Level.COMPILE, reason="expected ';'")
        speedup = 0.8 + (zlib.crc32(Path(path).read_text().encode()) % 100) / 100
        return CascadeResult(**base, status=Status.MEASURED, level=Level.BENCHMARK, reason="measured",
                             timings=[engine_timing(speedup)])


def test_prefer_parent_gives_the_next_proposal_that_parent_once(tmp_path):
    """The offline agent in exploit: a failed candidate is never drawn while a good one exists,
    so only the engineer's choice makes it a parent, for one proposal."""
    agent = OfflineAgent(W, Capabilities(world=2), seed=4)
    asked: list = []
    propose = agent.propose

    def watched(request):
        asked.append(request)
        return propose(request)

    agent.propose = watched
    engine, repo, bus = make_engine(tmp_path, agent=agent, evaluator=ById(fail={"c0001"}), generations=3,
                                    islands=1, explore_share=0.0, fast_path=False)

    def on_commit(e):
        if isinstance(e, CandidateCommitted) and e.record.id == "c0001":
            assert e.record.status == "compile_error"
            engine.prefer_parent("c0001")  # generation 1 waits for c0001 before generation 2 starts
            assert engine.preferred_parent == "c0001"

    bus.subscribe(on_commit)
    engine.run()
    assert not bus.errors, bus.errors
    by_gen = {r.generation: r for r in asked}
    assert by_gen[1].parents[0].id == "c0000"
    assert by_gen[2].parents[0].id == "c0001"  # the failed one, as asked
    assert "c0001" in by_gen[2].feedback  # its failure goes to the agent
    assert by_gen[3].parents[0].id != "c0001"  # once only
    assert engine.preferred_parent is None
    committed = {r.id: r for r in repo.records()}
    assert committed["c0002"].parents[0] == "c0001" and committed["c0002"].generation == 2


def test_prefer_parent_and_rebenchmark_refuse_what_they_cannot_do(tmp_path):
    engine, repo, bus = make_engine(tmp_path, evaluator=ById(), generations=1, islands=1)
    with pytest.raises(SteeringError, match="running search"):
        engine.prefer_parent("c0000")  # not running yet
    with pytest.raises(SteeringError, match="running search"):
        engine.rebenchmark("c0000")
    errors: list[str] = []

    def on_commit(e):
        if isinstance(e, CandidateCommitted) and e.record.id == "c0000":
            for call in (lambda: engine.prefer_parent("c0099"), lambda: engine.rebenchmark("c0099")):
                try:
                    call()
                except SteeringError as exc:
                    errors.append(str(exc))

    bus.subscribe(on_commit)
    engine.run()
    assert not bus.errors, bus.errors
    assert errors == ["no committed candidate 'c0099' in this search"] * 2
    assert not engine.running
    with pytest.raises(SteeringError, match="not running"):
        engine.rebenchmark("c0000")  # the search is over


def test_rebenchmark_commits_a_new_candidate_whose_parent_is_the_original(tmp_path):
    evaluator = ById()
    engine, repo, bus = make_engine(tmp_path, evaluator=evaluator, generations=2, islands=1, review_mode="review",
                                    fast_path=False)
    queued: list[str] = []

    def on_event(e):
        # generation 1's proposal waits for review: the loop idles in its drain, and the
        # re-benchmark still runs then; the proposal is accepted once the re-benchmark is in
        if isinstance(e, AwaitingReview) and not queued:
            queued.append(engine.rebenchmark("c0000"))
        elif isinstance(e, CandidateCommitted) and queued and e.record.id == queued[0]:
            for held in engine.awaiting_review():
                threading.Thread(target=engine.review, args=(held.id, "accept")).start()
        elif isinstance(e, AwaitingReview):
            threading.Thread(target=engine.review, args=(e.candidate, "accept")).start()

    bus.subscribe(on_event)
    engine.run()
    assert not bus.errors, bus.errors
    assert queued == ["c0002"]  # c0001 is the held proposal
    records = {r.id: r for r in repo.records()}
    again, seed = records["c0002"], records["c0000"]
    assert again.kind == "rebenchmark" and again.parents == ("c0000",)
    assert again.rationale == "re-benchmark of c0000" and again.agent == "engineer"
    assert again.source == seed.source and again.design == seed.design
    assert again.status == "measured" and again.speedup == pytest.approx(seed.speedup)
    assert again.generation == 1 and again.extra["rebenchmark_of"] == "c0000"
    assert evaluator.calls.count("c0002") == 1
    assert records["c0001"].review == "accepted"
