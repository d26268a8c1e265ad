"""The search engine with a scripted agent, an in-memory lineage and a fake evaluator: the loop,
review, pause, budget, crashes, duplicates, resume and concurrent evaluations, in seconds."""

from __future__ import annotations

import threading
import time

import pytest

from cuco_tui.search.config import SearchConfig
from cuco_tui.search.engine import ReviewError, SearchEngine
from cuco_tui.search.events import (
    AwaitingReview,
    BestImproved,
    BudgetSpent,
    CandidateCommitted,
    EventBus,
    GenerationStarted,
    ProposalReady,
    SearchFinished,
    SearchStarted,
    StageFinished,
    StageStarted,
)
from cuco_tui.executors import GpuGroup, GpuPool
from engine_helpers import LSA, W, FakeEvaluator, MemoryLineage, ScriptedAgent, make, run_in_thread, variant


def test_full_loop_commits_every_candidate_with_its_parents(tmp_path):
    engine, repo, bus = make(tmp_path)
    summary = engine.run()
    recs = repo.records()
    ids = [r.id for r in recs]
    assert len(ids) == len(set(ids))
    seed, fast = recs[0], recs[1]
    assert seed.kind == "seed" and seed.generation == 0 and seed.parents == () and seed.design["backend"] == "nccl_host"
    assert fast.kind == "fast_path" and fast.generation == 0 and fast.parents == (seed.id,)
    assert fast.design["backend"] == "nccl_lsa"
    # 3 generations x 2 islands after generation 0, in the order proposed (with the look-ahead,
    # a generation's last may be committed after the next one's first)
    proposed = sorted(recs[2:], key=lambda r: r.id)
    assert [r.generation for r in proposed] == [1, 1, 2, 2, 3, 3]
    assert [r.island for r in proposed] == [0, 1, 0, 1, 0, 1]
    assert all(r.status == "measured" for r in recs)
    assert all(r.parents for r in recs[1:])
    assert summary.reason == "done" and summary.candidates == 8
    assert summary.best == max(recs, key=lambda r: r.speedup).id
    assert repo.best[-1] == summary.best and set(repo.heads) == {0, 1}
    # every candidate went through its stages, and the events open and close the run
    events = bus.history()
    assert isinstance(events[0], SearchStarted) and isinstance(events[-1], SearchFinished)
    assert len(bus.history(CandidateCommitted)) == 8
    assert [e.generation for e in bus.history(GenerationStarted)] == [0, 1, 2, 3]
    assert bus.history(BestImproved)
    started = {e.candidate for e in bus.history(StageStarted)}
    finished = {e.candidate for e in bus.history(StageFinished) if e.status}
    assert started == finished == set(ids)
    steps = [(e.candidate, e.level, e.message) for e in bus.history(StageStarted)]
    assert len(steps) == len(set(steps))  # each step said once, however many ranks report it


def test_the_agent_sees_the_schedule_the_parents_and_the_summary(tmp_path):
    agent = ScriptedAgent()
    engine, repo, bus = make(tmp_path, agent=agent, generations=4, explore_share=0.5, meta_interval=2)
    engine.run()
    reqs = agent.calls
    assert reqs[0].kind == "fast_path" and reqs[0].phase == "init"
    assert [r.phase for r in reqs[1:]] == ["explore"] * 4 + ["exploit"] * 4
    assert all(r.kind in ("full", "diff", "crossover") for r in reqs[1:])
    assert all(len(r.parents) == (2 if r.kind == "crossover" else 1) for r in reqs[1:])
    assert agent.summaries == 2 and reqs[-1].meta_summary.endswith("candidates so far")
    assert reqs[0].design_context == "notes for nccl_host"  # the seed's backend


def test_failures_become_feedback_on_their_island(tmp_path):
    agent = ScriptedAgent()
    # Without the look-ahead: with it, generation 2 may be proposed while the failing candidate
    # (the last of generation 1) still runs, which is its documented price, not this test's subject.
    engine, repo, bus = make(tmp_path, agent=agent, evaluator=FakeEvaluator(fail={2}), generations=2,
                             lookahead=False)
    engine.run()
    failed = [r for r in repo.records() if r.status == "compile_error"]
    assert len(failed) == 1 and failed[0].result["reason"].startswith("compile error")
    later = [r for r in agent.calls if r.generation == 2 and r.island == failed[0].island]
    assert later and failed[0].id in later[0].feedback and "expected ';'" in later[0].feedback


def test_evaluator_crash_is_committed_as_runtime_error(tmp_path):
    engine, repo, bus = make(tmp_path, evaluator=FakeEvaluator(crash={2}), generations=1)
    engine.run()
    crashed = [r for r in repo.records() if r.status == "runtime_error"]
    assert len(crashed) == 1
    assert "the evaluator crashed: OSError: the launcher lost its run folder" in crashed[0].result["reason"]
    assert "Traceback" in crashed[0].result["logs"]["traceback"]


def test_agent_errors_are_committed_as_rejected(tmp_path):
    agent = ScriptedAgent(script={1: "error", 2: "raise"})
    engine, repo, bus = make(tmp_path, agent=agent, generations=2)
    engine.run()
    rejected = [r for r in repo.records() if r.status == "rejected"]
    assert len(rejected) == 2
    reasons = sorted(r.result["reason"] for r in rejected)
    assert reasons[0] == "no candidate: no code block in the reply"
    assert reasons[1] == "the agent failed: RuntimeError: the model is down"
    assert all(r.rejected_by == "agent" and r.source == "" for r in rejected)
    assert all(r.result["diagnostics"][0]["code"] == "agent" for r in rejected)


def test_duplicates_are_committed_as_rejected_and_asked_again(tmp_path):
    agent = ScriptedAgent(script={1: "dup", 2: "dup"})  # variant 0 twice: the second is a duplicate
    engine, repo, bus = make(tmp_path, agent=agent, generations=1)
    engine.run()
    recs = repo.records()
    dups = [r for r in recs if r.rejected_by == "novelty"]
    assert len(dups) == 1 and dups[0].result["reason"].startswith("novelty filter: the same code as")
    assert dups[0].extra["duplicate_of"] in {r.id for r in recs}
    # the slot was asked again, with the reason in its feedback
    assert "propose a different candidate" in agent.calls[3].feedback
    assert sum(1 for r in recs if r.generation == 1 and r.status == "measured") == 2


def test_review_mode_holds_rejects_accepts_and_edits(tmp_path):
    engine, repo, bus = make(tmp_path, review_mode="review", generations=1, fast_path=False, islands=3)
    decisions = iter([("reject", "it drops the barrier", None), ("accept", "", None),
                      ("edit", "tighter", variant(99))])

    def on_event(e):
        if isinstance(e, AwaitingReview):
            d, reason, source = next(decisions)
            threading.Thread(target=engine.review, args=(e.candidate, d, reason, source)).start()

    bus.subscribe(on_event)
    summary = engine.run()
    by_review = {r.review: r for r in repo.records() if r.generation == 1}
    rejected = by_review["rejected: it drops the barrier"]
    assert rejected.status == "rejected" and rejected.result["reason"] == "rejected in review: it drops the barrier"
    assert by_review["accepted"].status == "measured"
    edited = by_review["edited"]
    assert edited.status == "measured" and "cuco_variant = 99" in edited.source and edited.extra["edited_by"] == "engineer"
    assert summary.by_status == {"measured": 3, "rejected": 1}
    with pytest.raises(ReviewError, match="not waiting for review"):
        engine.review("c0001", "accept")


def test_risky_mode_holds_only_backend_changes(tmp_path):
    agent = ScriptedAgent(script={1: ("design", LSA)})
    engine, repo, bus = make(tmp_path, agent=agent, review_mode="risky", generations=1, fast_path=False)
    held = []

    def on_event(e):
        if isinstance(e, AwaitingReview):
            held.append(e)
            threading.Thread(target=engine.review, args=(e.candidate, "accept")).start()

    bus.subscribe(on_event)
    engine.run()
    assert len(held) == 1 and "changes the backend from nccl_host to nccl_lsa" in held[0].why


def test_switching_to_auto_releases_held_proposals(tmp_path):
    engine, repo, bus = make(tmp_path, review_mode="review", generations=1, fast_path=False)
    bus.subscribe(lambda e: isinstance(e, AwaitingReview) and len(bus.history(AwaitingReview)) == 2
                  and threading.Thread(target=engine.set_review_mode, args=("auto",)).start())
    engine.run()
    assert [r.review for r in repo.records() if r.generation == 1] == ["accepted", "accepted"]


def test_stop_commits_held_proposals_as_unreviewed_not_rejected(tmp_path):
    engine, repo, bus = make(tmp_path, review_mode="review", generations=5, fast_path=False)
    bus.subscribe(lambda e: isinstance(e, AwaitingReview) and threading.Thread(target=engine.stop).start())
    summary = engine.run()
    assert summary.reason == "stopped"
    last = repo.records()[-1]
    assert last.status == "unreviewed" and last.review == "unreviewed"
    assert last.held_because == "review mode: every proposal waits for the engineer"
    assert not last.rejected_by and summary.by_status.get("rejected") is None
    assert summary.by_status["unreviewed"] >= 1
    assert max(r.generation for r in repo.records()) == 1


def test_pause_blocks_the_loop_and_resume_releases_it(tmp_path):
    agent = ScriptedAgent()
    engine, repo, bus = make(tmp_path, agent=agent, generations=3, fast_path=False)
    paused = threading.Event()

    def on_event(e):
        if isinstance(e, ProposalReady) and not paused.is_set():
            paused.set()
            engine.pause()

    bus.subscribe(on_event)
    t, out = run_in_thread(engine)
    assert paused.wait(120)
    time.sleep(0.5)
    calls = len(agent.calls)
    assert calls == 1  # the loop is held before the next proposal
    assert engine.paused
    time.sleep(0.3)
    assert len(agent.calls) == calls
    engine.resume()
    t.join(120)  # a backstop, not a budget
    assert not t.is_alive() and "error" not in out
    assert out["summary"].reason == "done" and len(agent.calls) == 6


def test_budget_cap_ends_proposing_cleanly(tmp_path):
    agent = ScriptedAgent(cost=0.4)
    engine, repo, bus = make(tmp_path, agent=agent, generations=5, budget_usd=1.0)
    summary = engine.run()
    assert summary.reason == "budget"
    assert len(agent.calls) == 3 and summary.spent_usd == pytest.approx(1.2)
    spent = bus.history(BudgetSpent)
    assert spent[-1].spent == pytest.approx(1.2) and spent[-1].cap == 1.0
    assert isinstance(bus.history()[-1], SearchFinished)


def test_budget_exhausted_from_the_agent_ends_cleanly(tmp_path):
    agent = ScriptedAgent(script={3: "budget"})
    engine, repo, bus = make(tmp_path, agent=agent, generations=5)
    summary = engine.run()
    assert summary.reason == "budget" and len(repo.records()) == 4  # seed, fast path, 2 of generation 1
    assert bus.history(SearchFinished)[0].reason == "budget"


def test_an_agent_with_nothing_new_ends_the_search_and_commits_nothing_for_it(tmp_path):
    agent = ScriptedAgent(script={3: "exhausted"})
    engine, repo, bus = make(tmp_path, agent=agent, generations=5)
    summary = engine.run()
    assert summary.reason == "agent exhausted"
    assert [r.status for r in repo.records()] == ["measured"] * 4  # seed, fast path, 2 of generation 1
    assert repo.ended == "agent exhausted"  # `cuco sessions` lists it as exhausted, not resumable


def test_set_budget_raises_the_cap_mid_run(tmp_path):
    agent = ScriptedAgent(cost=0.5)
    engine, repo, bus = make(tmp_path, agent=agent, generations=2, budget_usd=0.5)
    bus.subscribe(lambda e: isinstance(e, ProposalReady) and e.candidate == "c0001" and engine.set_budget(100.0))
    assert engine.run().reason == "done"


def test_hints_reach_the_agent_and_are_kept(tmp_path):
    agent = ScriptedAgent()
    engine, repo, bus = make(tmp_path, agent=agent, generations=2, fast_path=False)
    bus.subscribe(lambda e: isinstance(e, GenerationStarted) and e.generation == 1
                  and engine.add_hint("try copy engines for the peer shards"))
    engine.run()
    assert agent.calls[-1].hints == ("try copy engines for the peer shards",)
    assert repo.records()[-1].hints == ("try copy engines for the peer shards",)


def test_a_hint_for_an_agent_that_reads_none_is_refused_in_one_line(tmp_path):
    """The offline agent renders templates: a hint would be counted and never read. The engine
    says so instead, and keeps none; its start says so to every watcher."""
    from cuco_tui.agents.base import hints_unread
    from cuco_tui.agents.offline import OfflineAgent
    from cuco_tui.search.engine import SteeringError
    from cuco_tui.search.events import HintAdded

    agent = OfflineAgent(W)
    engine, repo, bus = make(tmp_path, agent=agent, generations=1, fast_path=False)
    refused = []

    def hint(e):
        if isinstance(e, GenerationStarted) and e.generation == 1:
            with pytest.raises(SteeringError) as exc:
                engine.add_hint("try copy engines for the peer shards")
            refused.append(str(exc.value))

    bus.subscribe(hint)
    engine.run()
    assert refused == [hints_unread(agent)] and "does not read hints" in refused[0]
    assert engine.hints == () and not bus.history(HintAdded)
    assert bus.history(SearchStarted)[0].hints_unread == refused[0]
    assert ScriptedAgent().name and not hints_unread(ScriptedAgent())  # an agent that does not say reads them


def test_resume_continues_ids_generations_and_population(tmp_path):
    engine, repo, bus = make(tmp_path, generations=2)
    engine.run()
    before = repo.records()
    agent = ScriptedAgent(offset=100)
    engine2, repo2, bus2 = make(tmp_path, agent=agent, records=before, generations=4)
    engine2.run()
    after = repo2.records()
    assert after[: len(before)] == before
    new = sorted(after[len(before):], key=lambda r: r.id)  # with the look-ahead, committed out of id order
    assert [r.generation for r in new] == [3, 3, 4, 4]
    assert new[0].id == f"c{len(before):04d}"
    start = bus2.history(SearchStarted)[0]
    assert start.resumed and start.start_generation == 3
    assert agent.summaries >= 1  # the agent relearns from the lineage
    assert all(r.kind != "seed" for r in new) and all(r.kind != "fast_path" for r in new)
    assert agent.calls[0].parents  # parents come from the rebuilt islands


def test_several_groups_run_evaluations_at_once_never_sharing_a_gpu(tmp_path):
    evaluator = FakeEvaluator(delay=0.2)
    engine, repo, bus = make(tmp_path, evaluator=evaluator, groups=2, islands=4, generations=2, fast_path=False,
                             confirm_alone=False)  # measures parallel throughput, not ranking
    engine.run()
    assert evaluator.worst == 1
    used = {g for _, g in evaluator.calls}
    assert used == {(0, 1), (2, 3)}
    # the two groups ran evaluations at the same time (asked of the evaluator, not of this machine's clock)
    assert evaluator.peak == 2


def test_an_engine_bug_is_reported_and_raised(tmp_path):
    class BrokenLineage(MemoryLineage):
        def records(self, with_source=False):
            raise KeyError("index.json")

    bus = EventBus()
    engine = SearchEngine(W, ScriptedAgent(), BrokenLineage(tmp_path), SearchConfig(generations=1), events=bus,
                          evaluate_fn=FakeEvaluator(), gpu_pool=GpuPool.cpu_only(1), compile_ahead=False)
    with pytest.raises(KeyError):
        engine.run()
    assert bus.history(SearchFinished)[0].reason == "error"
    assert "index.json" in bus.history()[-2].message


def test_event_bus_is_ordered_bounded_and_survives_bad_subscribers():
    bus = EventBus(history=5)
    seen = []
    bus.subscribe(lambda e: 1 / 0)
    unsubscribe = bus.subscribe(seen.append)
    for g in range(8):
        bus.publish(GenerationStarted(generation=g, phase="explore"))
    assert [e.generation for e in seen] == list(range(8))
    assert [e.generation for e in bus.history()] == [3, 4, 5, 6, 7]
    assert len(bus.errors) == 8
    unsubscribe()
    bus.publish(GenerationStarted(generation=9, phase="explore"))
    assert len(seen) == 8
    late = []
    bus.subscribe(late.append, replay=True)
    assert [e.generation for e in late] == [4, 5, 6, 7, 9]


def test_an_agent_that_repeats_the_same_duplicate_is_not_asked_again(tmp_path):
    agent = ScriptedAgent(script={0: "dup", 1: "dup", 2: "dup", 3: "dup"})
    engine, repo, bus = make(tmp_path, agent=agent, generations=3, islands=1)
    summary = engine.run()
    # the fast path is variant 0; generation 1 proposes it again, twice the same: two rejections, then the
    # slot gives up, and a generation that produced nothing ends the search
    dups = [r for r in repo.records() if r.rejected_by == "novelty"]
    assert len(dups) == 2 and len(agent.calls) == 3
    assert summary.reason == "agent exhausted"


def test_a_failing_fast_path_is_retried_with_feedback_then_the_slow_path_starts(tmp_path):
    agent = ScriptedAgent()
    engine, repo, bus = make(tmp_path, agent=agent, evaluator=FakeEvaluator(fail={1, 2}), generations=1,
                             fast_path_attempts=2)
    engine.run()
    fast = [r for r in repo.records() if r.kind == "fast_path"]
    assert [r.status for r in fast] == ["compile_error", "compile_error"]
    assert agent.calls[1].kind == "fast_path" and fast[0].id in agent.calls[1].feedback
    assert [r.kind for r in agent.calls[2:]] and all(r.kind != "fast_path" for r in agent.calls[2:])


def test_a_real_session_is_written_and_resumed_from_its_folder(tmp_path):
    pytest.importorskip("cuco_tui.lineage", reason="the lineage store has not landed yet")
    from cuco_tui.search.sessions import create_session

    def engine_kwargs():
        return dict(evaluate_fn=FakeEvaluator(), gpu_pool=GpuPool([GpuGroup(0, (0, 1))]), compile_ahead=False,
                    design_context=lambda point: "")

    config = SearchConfig(workload="gemm_allgather", generations=2, islands=2, max_concurrent_builds=2)
    repo = create_session(W, config, tmp_path / "s")
    first = SearchEngine(W, ScriptedAgent(), repo, config, **engine_kwargs()).run()
    repo.close()

    engine = SearchEngine.from_session(tmp_path / "s", lambda workload, cfg: ScriptedAgent(offset=100),
                                       {"generations": 3}, **engine_kwargs())
    assert engine.config.islands == 2 and engine.config.generations == 3
    summary = engine.run()
    with engine.repo as repo:
        records = repo.records(with_source=True)
        assert len(records) == first.candidates + 2 == summary.candidates
        assert [r.generation for r in records[-2:]] == [3, 3]
        assert repo.best() == summary.best == max(records, key=lambda r: r.speedup).id
        assert set(repo.island_heads()) == {0, 1}
        assert all(r.source for r in records)


def test_risky_mode_holds_a_design_line_that_contradicts_the_code(tmp_path):
    # the code is the sequential seed, but its line claims chunked, interleaved communication on two
    # streams; the backend is the parent's, so only the L0 findings (the classifier) make it risky
    lie = "backend=nccl_host placement=interleaved sync=per_chunk issuer=host chunk=4 streams=2 comm_sms=0"
    agent = ScriptedAgent(script={0: ("design", lie)})
    engine, repo, bus = make(tmp_path, agent=agent, review_mode="risky", generations=1, fast_path=False, islands=1)
    held = []

    def on_event(e):
        if isinstance(e, AwaitingReview):
            held.append(e)
            threading.Thread(target=engine.review, args=(e.candidate, "reject", "the line lies")).start()

    bus.subscribe(on_event)
    engine.run()
    assert len(held) == 1 and "the static checks warn" in held[0].why
    assert repo.records()[-1].review == "rejected: the line lies"
