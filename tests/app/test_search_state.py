"""The dashboard's state reducer (cuco_tui.app.search_state.apply), without a screen: one test
per event type, a hand-written search replayed event by event, and the real engine's event
history (scripted agent, fake evaluator, review by a subscriber) replayed and checked against
what the engine committed."""

from __future__ import annotations

import inspect
import threading

import pytest

from cuco_tui.app.search_state import (EVENT_TYPES, BoardEntry, DashboardState, Evaluation, PendingProposal, RunPhase, apply,
                                       strategy_label)
from cuco_tui.core.bounds import Bounds, ShapeBound, Work
from cuco_tui.core.records import CandidateRecord, id_number
from cuco_tui.search import events as ev
from cuco_tui.search.summary import SearchSummary
from engine_helpers import FakeEvaluator, make

SEED_SOURCE = "__global__ void k() {}\n"
CHILD_SOURCE = "__global__ void k() { /* chunked */ }\n"


def record(cid: str, status: str = "measured", speedup: float | None = None, review: str = "",
           source: str = SEED_SOURCE, parents: tuple[str, ...] = ()) -> CandidateRecord:
    return CandidateRecord(id=cid, generation=0, island=0, kind="seed" if not parents else "diff", parents=parents,
                           source=source, design={"backend": "nccl_host"}, rationale="", agent="offline",
                           status=status, speedup=speedup, review=review)


def started(**kw) -> ev.SearchStarted:
    fields = dict(session="/tmp/sessions/gemm-1", workload="gemm_allgather", agent="offline", resumed=False,
                  start_generation=1, generations=5, islands=2, gpu_groups=((0, 1),), review_mode="review",
                  budget_usd=3.0)
    fields = {**fields, **kw}
    fields.setdefault("can_measure", any(fields["gpu_groups"]))  # as a local pool says: a group with GPUs
    return ev.SearchStarted(**fields)


def awaiting(cid: str, parents: tuple[str, ...] = ("c0000",), source: str = CHILD_SOURCE) -> ev.AwaitingReview:
    return ev.AwaitingReview(candidate=cid, kind="diff", parents=parents, source=source,
                             design={"backend": "nccl_lsa", "knobs": {"chunks": 4}}, rationale="overlap the copy",
                             why="review mode")


def replay(events, state: DashboardState | None = None) -> DashboardState:
    state = state or DashboardState()
    for e in events:
        state = apply(state, e)
    return state


# ---------------------------------------------------------------------------- one event type at a time


def test_every_event_type_of_the_engine_is_known():
    kinds = {cls for _, cls in inspect.getmembers(ev, inspect.isclass)
             if issubclass(cls, ev.Event) and cls is not ev.Event}
    assert kinds == EVENT_TYPES


def test_an_event_type_it_does_not_know_leaves_the_state_as_it_was():
    class Newer(ev.Event):
        pass

    s = DashboardState(run=RunPhase.RUNNING, generation=2)
    assert apply(s, Newer()) is s


def test_search_started():
    s = apply(DashboardState(), started())
    assert (s.run, s.islands, s.generations, s.review_mode, s.budget) == ("running", 2, 5, "review", 3.0)
    assert (s.session, s.workload, s.agent, s.resumed_at) == ("/tmp/sessions/gemm-1", "gemm_allgather", "offline",
                                                             None)
    again = apply(DashboardState(), started(resumed=True, start_generation=4, budget_usd=None))
    assert again.resumed_at == 4 and again.budget is None


def test_generation_started():
    s = apply(DashboardState(), ev.GenerationStarted(generation=3, phase="exploit"))
    assert (s.generation, s.phase) == (3, "exploit")


def test_proposal_ready_shows_nothing_until_held_or_evaluated():
    s = DashboardState(run=RunPhase.RUNNING)
    ready = ev.ProposalReady(candidate="c0001", generation=1, island=0, kind="diff", parents=("c0000",), design={},
                             rationale="", agent="offline", cost_usd=0.2)
    assert apply(s, ready) is s


def test_awaiting_review_queues_the_proposal_with_its_diff_against_the_parent():
    s = apply(DashboardState(), ev.CandidateCommitted(record=record("c0000"), sha="a"))
    s = apply(s, awaiting("c0001"))
    assert s.held == 1
    p = s.proposals[0]
    assert isinstance(p, PendingProposal)
    assert (p.candidate, p.kind, p.parents, p.why, p.source) == ("c0001", "diff", ("c0000",), "review mode",
                                                                 CHILD_SOURCE)
    assert p.design["knobs"] == {"chunks": 4}
    assert p.diff.startswith("--- c0000/candidate.cu\n+++ c0001/candidate.cu\n@@ ")
    assert "-__global__ void k() {}\n+__global__ void k() { /* chunked */ }" in p.diff
    assert apply(s, awaiting("c0001")) is s  # held once, however often it is said


def test_awaiting_review_of_an_unknown_parent_or_none():
    s = apply(DashboardState(), awaiting("c0005", parents=("c0004",)))
    assert s.proposals[0].diff == "(the source of c0004 is not known to the dashboard)"
    s = apply(s, awaiting("c0006", parents=()))
    assert s.proposals[1].diff.startswith("--- (none)/candidate.cu\n+++ c0006/candidate.cu")
    assert [p.candidate for p in s.proposals] == ["c0005", "c0006"]  # in the order they came


def test_review_decided_takes_the_proposal_off_the_queue():
    s = replay([awaiting("c0001"), awaiting("c0002")])
    s = apply(s, ev.ReviewDecided(candidate="c0001", decision="accept"))
    assert [p.candidate for p in s.proposals] == ["c0002"] and s.held == 1
    assert apply(s, ev.ReviewDecided(candidate="c0009", decision="reject")).proposals == s.proposals


def test_stage_started_adds_then_updates_the_evaluation():
    s = apply(DashboardState(), ev.StageStarted(candidate="c0001", level=0, message="static"))
    assert s.evaluations == (Evaluation("c0001", 0, (), "static"),) and s.in_flight == 1
    s = apply(s, ev.StageStarted(candidate="c0001", level=2, gpus=(2, 3), message="verify"))
    s = apply(s, ev.StageStarted(candidate="c0002", level=1, message="compile"))
    s = apply(s, ev.StageStarted(candidate="c0001", level=3, message="bench square-8k"))
    # a stage that names no GPUs keeps the group shown; rows stay in the order they started
    assert s.evaluations == (Evaluation("c0001", 3, (2, 3), "bench square-8k"), Evaluation("c0002", 1, (), "compile"))


def test_stage_finished_removes_only_the_last_stage():
    s = apply(DashboardState(), ev.StageStarted(candidate="c0001", level=1, message="compile"))
    assert apply(s, ev.StageFinished(candidate="c0001", level=1, seconds=2.0)) is s  # it goes on
    assert apply(s, ev.StageFinished(candidate="c0001", level=1, status="compile_error")).evaluations == ()


def job(cid: str, state: str, job_id: str = "4711", reason: str = "", nodes: tuple[str, ...] = ()) -> ev.JobChanged:
    return ev.JobChanged(candidate=cid, job=job_id, state=state, reason=reason, nodes=nodes)


def test_job_changed_shows_the_job_pending_then_running_on_its_nodes():
    s = apply(DashboardState(), ev.StageStarted(candidate="c0001", level=1, message="compiling ahead"))
    s = apply(s, job("c0001", "pending", reason="submitted"))
    s = apply(s, job("c0001", "pending", reason="Resources"))
    assert s.evaluations == (Evaluation("c0001", 1, (), "compiling ahead", "4711", "pending", "Resources"),)
    s = apply(s, job("c0001", "running", nodes=("gpu07",)))
    s = apply(s, ev.StageStarted(candidate="c0001", level=2, message="verify square-8k"))  # the job's progress
    assert s.evaluations == (Evaluation("c0001", 2, (), "verify square-8k", "4711", "running", "", ("gpu07",)),)
    s = apply(s, job("c0001", "finished", reason="COMPLETED", nodes=("gpu07",)))
    assert s.in_flight == 1 and s.evaluations[0].job_state == "finished"  # until its stage or commit ends it
    assert apply(s, ev.StageFinished(candidate="c0001", level=1, status="no_gpu")).evaluations == ()


def test_a_lost_job_stays_in_flight_and_its_next_job_replaces_it():
    s = replay([job("c0002", "pending"), job("c0002", "running", nodes=("gpu01",))])
    assert s.evaluations == (Evaluation("c0002", 1, (), "", "4711", "running", "", ("gpu01",)),)  # no stage yet: L1
    s = apply(s, job("c0002", "lost", reason="its node gpu01 failed (Slurm: NODE_FAIL, NodeDown)", nodes=("gpu01",)))
    assert (s.evaluations[0].job_state, s.evaluations[0].job_reason) == (
        "lost", "its node gpu01 failed (Slurm: NODE_FAIL, NodeDown)")
    s = apply(s, job("c0002", "pending", job_id="4712", reason="submitted"))
    assert s.evaluations == (Evaluation("c0002", 1, (), "", "4712", "pending", "submitted"),)


def test_a_job_cancelled_by_the_search_leaves_the_table_and_leftovers_never_join_it():
    s = replay([job("c0003", "pending"), job("c0004", "running", job_id="4712", nodes=("n1",))])
    s = apply(s, job("c0003", "cancelled", reason="the search stopped"))
    assert [e.candidate for e in s.evaluations] == ["c0004"]
    s = apply(s, ev.JobChanged(candidate="c0004", job="", state="cancelled", reason="the search is stopping"))
    assert s.evaluations == ()
    left = job("c0009", "cancelled", job_id="4000", reason="left over by an earlier run of this session (running)")
    assert apply(s, left) is s
    assert apply(s, job("c0009", "finished", reason="COMPLETED")) is s


def test_candidate_committed_counts_it_and_clears_it_everywhere():
    s = replay([awaiting("c0001", parents=()), ev.StageStarted(candidate="c0001", level=3, gpus=(0, 1))])
    before = s
    s = apply(s, ev.CandidateCommitted(record=record("c0001", speedup=1.25, source=CHILD_SOURCE), sha="b"))
    assert dict(s.statuses) == {"measured": 1}
    assert s.proposals == () and s.evaluations == ()
    assert s.points == ((1, 1.25),)
    assert dict(s.sources) == {"c0001": CHILD_SOURCE}
    assert dict(before.statuses) == {} and dict(before.sources) == {}  # the old state is left as it was
    s = apply(s, ev.CandidateCommitted(record=record("c0002", status="compile_error"), sha="c"))
    s = apply(s, ev.CandidateCommitted(record=record("c0003", status="rejected", review="rejected: too risky"),
                                       sha="d"))
    s = apply(s, ev.CandidateCommitted(record=record("c0004", status="measured", speedup=0.9,
                                                     review="rejected: stopped before review"), sha="e"))
    assert dict(s.statuses) == {"measured": 1, "compile_error": 1, "rejected": 2}  # a rejection counts as one
    assert s.points == ((1, 1.25), (4, 0.9))  # every measured speedup, in commit order
    with pytest.raises(TypeError):
        s.statuses["measured"] = 5  # type: ignore[index]  # frozen: the dashboard cannot change it behind apply


def test_best_improved():
    s = apply(DashboardState(), ev.BestImproved(record=record("c0003", speedup=1.4), previous="c0000",
                                                 previous_speedup=1.0))
    assert (s.best_id, s.best_speedup) == ("c0003", 1.4)


def test_budget_spent():
    s = apply(DashboardState(budget=5.0), ev.BudgetSpent(spent=1.25, cap=None))
    assert (s.spent, s.budget) == (1.25, None)


def test_hint_added():
    s = replay([ev.HintAdded(text="try chunked overlap"), ev.HintAdded(text="fewer SMs")])
    assert s.hints == 2


def test_paused_and_resumed():
    s = apply(DashboardState(run=RunPhase.RUNNING), ev.Paused())
    assert s.run is RunPhase.PAUSED and s.run_text == "paused" and not s.over
    assert apply(s, ev.Resumed()).run is RunPhase.RUNNING


def test_search_finished():
    s = apply(DashboardState(run=RunPhase.STOPPING), ev.SearchFinished(summary=SearchSummary.of([]), reason="stopped"))
    assert s.run is RunPhase.ENDED and s.end == "stopped" and s.run_text == "stopped" and s.ended and s.over
    failed = DashboardState(run=RunPhase.FAILED)
    assert failed.over and not failed.ended and failed.run_text == "failed"
    # how it ended is the session's state, with the reason where that says more (core/ending.py)
    for reason, shown in (("done", "finished"), ("agent exhausted", "exhausted"), ("budget", "stopped (budget)")):
        s = apply(DashboardState(run=RunPhase.RUNNING), ev.SearchFinished(summary=SearchSummary.of([]), reason=reason))
        assert (s.run, s.end, s.run_text, s.ended) == (RunPhase.ENDED, shown, shown, True)
    assert [p.value for p in RunPhase] == ["starting", "running", "paused", "stopping", "ended", "failed"]


def test_engine_error_is_kept_in_order():
    s = replay([ev.EngineError(message="OSError: disk full"), ev.EngineError(message="RuntimeError: x",
                                                                             candidate="c0002")])
    assert s.errors == ("OSError: disk full", "RuntimeError: x")


def test_the_board_ranks_every_committed_candidate_best_first():
    from engine_helpers import timing

    t = timing(1.4)
    result = {"candidate": "c0001.cu", "workload": "w", "status": "measured", "level": 3, "reason": "",
              "timings": [{"shape": "square-8k", "dims": {}, "candidate": t.candidate.__dict__,
                           "reference": t.reference.__dict__, "per_rank": [], "speedup": 1.4}]}
    measured = CandidateRecord(**{**record("c0001", speedup=1.4).__dict__, "result": result})
    s = replay([ev.CandidateCommitted(record=record("c0000", speedup=1.0), sha="a"),
                ev.CandidateCommitted(record=record("c0002", status="no_gpu"), sha="b"),
                ev.CandidateCommitted(record=measured, sha="c"),
                ev.CandidateCommitted(record=record("c0003", status="compile_error"), sha="d"),
                ev.CandidateCommitted(record=record("c0004", status="unreviewed", review="unreviewed"), sha="e"),
                ev.CandidateCommitted(record=record("c0005", status="rejected", review="rejected: no"), sha="f")])
    assert [(b.candidate, b.status) for b in s.board] == [
        ("c0001", "measured"), ("c0000", "measured"), ("c0002", "no_gpu"), ("c0005", "rejected"),
        ("c0004", "unreviewed"), ("c0003", "compile_error")]
    assert s.board[0].timings[0].shape == "square-8k" and s.board[0].measured and not s.board[2].measured
    assert dict(s.statuses)["unreviewed"] == 1  # its own count, apart from the rejected


def test_strategy_label():
    assert strategy_label({"backend": "nccl_lsa", "sync": "per_chunk", "knobs": {"strategy": "lsa_gather"}}) == \
        "lsa_gather"
    assert strategy_label({"backend": "nccl_lsa", "sync": "per_chunk"}) == "nccl_lsa/per_chunk"
    assert strategy_label({}) == "-"


def test_search_started_says_whether_it_can_measure():
    assert apply(DashboardState(), started()).can_measure is True
    assert apply(DashboardState(), started(gpu_groups=((), ()))).can_measure is False


def test_bounds_measuring_then_known():
    bounds = Bounds("gemm_allgather", 2, (0, 1), (ShapeBound("square-8k", 2.0, 1.0, work=Work(5, 7)),))
    s = apply(DashboardState(), ev.MeasuringBounds(gpus=(0, 1)))
    assert s.bounds_note == "measuring on GPUs 0,1…" and s.bounds is None
    s = apply(s, ev.BoundsKnown(bounds=bounds, work={"square-8k": Work(5, 7)}))
    assert s.bounds == bounds and dict(s.work) == {"square-8k": Work(5, 7)} and s.bounds_note == ""
    s = apply(DashboardState(), ev.BoundsKnown(bounds=None, work={}, why="no GPU on this machine: nothing is timed"))
    assert s.bounds is None and s.bounds_note.startswith("no GPU")


def test_a_reference_that_differs_from_float64_stays_in_the_bound_fact():
    from dataclasses import replace as with_

    from cuco_tui.app.widgets.search.state_panel import bound_fact

    bounds = Bounds("gemm_allgather", 2, (0, 1), (ShapeBound("square-8k", 2.0, 1.0, work=Work(5, 7)),))
    s = apply(DashboardState(), ev.BoundsKnown(bounds=bounds, work={"square-8k": Work(5, 7)}))
    assert bound_fact(s) == "2.00x"
    wrong = apply(DashboardState(), ev.BoundsKnown(bounds=with_(bounds, reference_ok=False, reference_check="differs"),
                                                   work={"square-8k": Work(5, 7)}))
    assert bound_fact(wrong) == "2.00x · the reference differs from float64 on these GPUs"
    assert bound_fact(wrong, short=True) == "2.00x · reference ≠ float64"


def test_plateau_notices_are_kept_in_order():
    s = replay([ev.Plateau(stage="warn", generations=3, best_speedup=1.2, message="plateau: a"),
                ev.Plateau(stage="diversify", generations=4, best_speedup=1.2, message="plateau: b")])
    assert s.notices == ("plateau: a", "plateau: b")
    assert apply(s, ev.SearchFinished(summary=SearchSummary.of([]), reason="plateau")).run_text == "stopped (plateau)"


# ---------------------------------------------------------------------------- a search, replayed


def test_a_reviewed_search_replayed_event_by_event():
    seed = record("c0000", speedup=1.0)
    child = record("c0001", speedup=1.3, source=CHILD_SOURCE, parents=("c0000",), review="accepted")
    rejected = record("c0002", status="rejected", review="rejected: too risky", source=CHILD_SOURCE + "//2\n",
                      parents=("c0001",))
    events = [
        started(),
        ev.StageStarted(candidate="c0000", level=0, message="static"),
        ev.StageFinished(candidate="c0000", level=0),
        ev.StageStarted(candidate="c0000", level=1, message="compile"),
        ev.StageStarted(candidate="c0000", level=3, gpus=(0, 1), message="bench square-8k"),
        ev.StageFinished(candidate="c0000", level=3, status="measured"),
        ev.CandidateCommitted(record=seed, sha="s0"),
        ev.BestImproved(record=seed, previous=None, previous_speedup=None),
        ev.GenerationStarted(generation=1, phase="explore"),
        ev.ProposalReady(candidate="c0001", generation=1, island=0, kind="diff", parents=("c0000",), design={},
                         rationale="overlap the copy", agent="offline", cost_usd=0.5),
        ev.BudgetSpent(spent=0.5, cap=3.0),
        awaiting("c0001"),
        ev.HintAdded(text="try chunked overlap"),
        ev.ReviewDecided(candidate="c0001", decision="accept"),
        ev.StageStarted(candidate="c0001", level=3, gpus=(0, 1), message="bench square-8k"),
        ev.Paused(),
    ]
    mid = replay(events)
    assert mid.run is RunPhase.PAUSED and mid.held == 0 and mid.in_flight == 1
    assert mid.evaluations[0] == Evaluation("c0001", 3, (0, 1), "bench square-8k")
    assert mid.generation == 1 and mid.phase == "explore" and mid.spent == 0.5 and mid.hints == 1

    end = replay([
        ev.StageFinished(candidate="c0001", level=3, status="measured"),
        ev.CandidateCommitted(record=child, sha="s1"),
        ev.BestImproved(record=child, previous="c0000", previous_speedup=1.0),
        ev.Resumed(),
        ev.GenerationStarted(generation=2, phase="exploit"),
        awaiting("c0002", parents=("c0001",), source=rejected.source),
        ev.ReviewDecided(candidate="c0002", decision="reject", reason="too risky"),
        ev.CandidateCommitted(record=rejected, sha="s2"),
        ev.EngineError(message="OSError: the launcher lost its run folder", candidate="c0003"),
        ev.SearchFinished(summary=SearchSummary.of([seed, child, rejected], reason="stopped"), reason="stopped"),
    ], mid)
    assert end == DashboardState(
        run=RunPhase.ENDED, end="stopped", phase="exploit", generation=2, generations=5, islands=2, review_mode="review",
        statuses={"measured": 2, "rejected": 1}, best_id="c0001", best_speedup=1.3, spent=0.5, budget=3.0, hints=1,
        proposals=(), evaluations=(), points=((0, 1.0), (1, 1.3)),
        sources={"c0000": SEED_SOURCE, "c0001": CHILD_SOURCE, "c0002": rejected.source},
        session="/tmp/sessions/gemm-1", workload="gemm_allgather", agent="offline",
        errors=("OSError: the launcher lost its run folder",),
        board=(BoardEntry("c0001", "diff", "nccl_host", "measured", 1.3),
               BoardEntry("c0000", "seed", "nccl_host", "measured", 1.0),
               BoardEntry("c0002", "diff", "nccl_host", "rejected", None)),
        can_measure=True)


def test_the_engines_own_events_replayed_match_what_it_committed(tmp_path):
    """A real run (review mode: odd proposals accepted, even ones rejected; variant 3 does not
    compile): its whole event history, folded, says what the lineage holds."""
    engine, repo, bus = make(tmp_path, evaluator=FakeEvaluator(fail={3}), generations=3, islands=2,
                             review_mode="review", fast_path=False)

    def decide(e: ev.Event) -> None:
        if isinstance(e, ev.AwaitingReview):
            decision = "accept" if id_number(e.candidate) % 2 else "reject"
            threading.Thread(target=engine.review, args=(e.candidate, decision, "even")).start()

    bus.subscribe(decide)
    summary = engine.run()
    assert not bus.errors, bus.errors

    history = bus.history()
    state = replay(history)
    records = repo.records()
    counted: dict[str, int] = {}
    for r in records:
        status = "rejected" if r.review.startswith("rejected") else r.status
        counted[status] = counted.get(status, 0) + 1
    assert state.run is RunPhase.ENDED and state.end == "finished" and state.generation == 3
    assert dict(state.statuses) == counted and counted.get("rejected") and counted.get("compile_error")
    assert state.proposals == () and state.evaluations == ()  # nothing left waiting or running
    assert set(state.sources) == {r.id for r in records}
    assert state.points == tuple((id_number(r.id), r.speedup) for r in records if r.speedup is not None)
    assert (state.best_id, state.best_speedup) == (summary.best, summary.best_speedup)
    assert state.errors == ()

    # Every held proposal was on the queue until its decision, and in order.
    held = [e.candidate for e in history if isinstance(e, ev.AwaitingReview)]
    assert held
    state = DashboardState()
    for e in history:
        state = apply(state, e)
        if isinstance(e, ev.AwaitingReview):
            assert state.proposals[-1].candidate == e.candidate


def test_a_resumed_search_shows_its_earlier_candidates():
    seed = record("c0000", speedup=1.0)
    child = record("c0001", speedup=1.3, source=CHILD_SOURCE, parents=("c0000",))
    left = record("c0002", status="unreviewed", review="unreviewed", source=CHILD_SOURCE + "//2\n", parents=("c0001",))
    s = apply(DashboardState(), ev.SessionRestored(records=(child, left, seed), best=child))
    assert dict(s.statuses) == {"measured": 2, "unreviewed": 1}
    assert (s.best_id, s.best_speedup) == ("c0001", 1.3) and s.points == ((0, 1.0), (1, 1.3))
    assert [b.candidate for b in s.board] == ["c0001", "c0000", "c0002"]
    s = apply(s, awaiting("c0003", parents=("c0001",), source=left.source))
    assert s.proposals[0].diff.startswith("--- c0001/candidate.cu")  # the parent's code is known


# ---------------------------------------------------------------------------- issue 36: verified, placeholders, builds


def test_a_verified_candidate_ranks_after_every_measured_one_and_before_the_compiled_only():
    """Verified with its ranks sharing one GPU: no speed, so below the slowest measured candidate;
    correct on a GPU, so above one only compiled. Its missing speed breaks no comparison."""
    s = replay([ev.CandidateCommitted(record=record("c0000", speedup=0.5), sha="a"),
                ev.CandidateCommitted(record=record("c0001", status="no_gpu"), sha="b"),
                ev.CandidateCommitted(record=record("c0002", status="verified"), sha="c"),
                ev.CandidateCommitted(record=record("c0003", status="incorrect"), sha="d"),
                ev.CandidateCommitted(record=record("c0004", status="verified", speedup=9.0), sha="e"),
                ev.CandidateCommitted(record=record("c0005", speedup=1.2), sha="f")])
    assert [(b.candidate, b.status) for b in s.board] == [
        ("c0005", "measured"), ("c0000", "measured"), ("c0004", "verified"), ("c0002", "verified"),
        ("c0001", "no_gpu"), ("c0003", "incorrect")]
    assert not any(b.measured for b in s.board if b.status == "verified")
    assert dict(s.statuses) == {"measured": 2, "verified": 2, "no_gpu": 1, "incorrect": 1}


def placeholder(cid: str) -> CandidateRecord:
    """As an older engine committed an exhausted offline agent's empty proposal, read back."""
    reason = "no candidate: the offline agent has proposed every valid combination of its strategy templates"
    return CandidateRecord.from_dict({
        **record(cid, source="", parents=("c0000",)).to_dict(), "status": "rejected", "design": {},
        "result": {"status": "rejected", "level": 0, "reason": reason, "candidate": f"{cid}.cu", "workload": ""},
        "extra": {"rejected_by": "agent"}})


def test_an_exhausted_agents_placeholders_in_a_resumed_session_are_no_candidates():
    seed = record("c0000", speedup=1.0)
    novelty = CandidateRecord.from_dict({**record("c0001", status="rejected", parents=("c0000",)).to_dict(),
                                         "result": {"status": "rejected", "reason": "novelty filter: the same code"},
                                         "extra": {"rejected_by": "novelty"}})
    assert placeholder("c0002").placeholder and not novelty.placeholder
    s = apply(DashboardState(), ev.SessionRestored(records=(seed, novelty, placeholder("c0002"),
                                                            placeholder("c0003")), best=seed))
    assert [b.candidate for b in s.board] == ["c0000", "c0001"]
    assert dict(s.statuses) == {"measured": 1, "rejected": 1}


def test_a_compile_ahead_shows_its_queue_then_when_it_began_then_that_it_waits_for_gpus():
    s = replay([ev.BuildQueued(candidate="c0004", queued=1, at=100.0),
                ev.BuildStarted(candidate="c0004", queued=0, at=101.0),
                ev.BuildQueued(candidate="c0005", queued=1, at=102.0),
                ev.BuildQueued(candidate="c0006", queued=2, at=103.0)])
    assert [(e.candidate, e.level, e.step, e.since) for e in s.evaluations] == [
        ("c0004", 1, "compiling", 101.0), ("c0005", 1, "build queued", 102.0), ("c0006", 1, "build queued", 103.0)]
    assert s.builds_queued == 2 and s.in_flight == 3
    s = replay([ev.StageFinished(candidate="c0004", level=1, seconds=44.0, at=145.0),
                ev.BuildStarted(candidate="c0005", queued=1, at=145.0)], s)
    assert [(e.step, e.since) for e in s.evaluations[:2]] == [("built, waits its turn", 145.0), ("compiling", 145.0)]
    assert s.builds_queued == 1
    s = replay([ev.StageStarted(candidate="c0004", level=0, message="static checks", at=150.0),
                ev.StageStarted(candidate="c0004", level=2, gpus=(0, 1), message="verify", at=151.0),
                ev.StageStarted(candidate="c0004", level=2, gpus=(0, 1), message="verify hot", at=152.0),
                ev.StageFinished(candidate="c0005", level=1, status="compile_error", at=160.0)], s)
    assert [(e.candidate, e.step, e.since) for e in s.evaluations] == [
        ("c0004", "verify hot", 151.0), ("c0006", "build queued", 103.0)]


def test_the_agent_that_reads_no_hints_is_known_from_the_start():
    assert apply(DashboardState(), started()).hints_unread == ""
    said = "the offline agent does not read hints"
    assert apply(DashboardState(), started(hints_unread=said)).hints_unread == said
