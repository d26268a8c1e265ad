"""A session's ids and its end, as a resumed search and `cuco sessions` see them: an id is never
handed out twice, not even one whose evaluation a kill cut short (a resume names it once and
keeps its source); every way a search ends is recorded, and the engine, its summary and the
session listing say the same state."""

from __future__ import annotations

import pytest
from engine_helpers import W, FakeEvaluator, ScriptedAgent, make, variant

from cuco_tui.core.ending import end_state
from cuco_tui.core.records import CandidateRecord
from cuco_tui.executors import GpuGroup, GpuPool
from cuco_tui.lineage import list_sessions
from cuco_tui.search.config import SearchConfig
from cuco_tui.search.engine import SearchEngine
from cuco_tui.search.events import EventBus, ProposalReady, SearchFinished, SessionRestored
from cuco_tui.search.sessions import create_session


def committed(n: int) -> list[CandidateRecord]:
    """A session's first `n` candidates, measured: the seed, then variants of it in generation 1."""
    out = []
    for i in range(n):
        out.append(CandidateRecord(
            id=f"c{i:04d}", generation=0 if i < 2 else 1, island=0, kind="seed" if i == 0 else "diff",
            parents=() if i == 0 else ("c0000",), source=variant(100 + i), design={}, rationale="", agent="scripted",
            status="measured", result={"reason": "measured"}, speedup=1.0 + i / 10))
    return out


def test_a_resume_never_reuses_the_id_of_an_evaluation_a_kill_cut_short(tmp_path):
    # what a SIGKILL during c0004's evaluation leaves: four commits, and c0004's scratch source
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    cut_short = "// c0004 as the killed run wrote it\n" + variant(104)
    (scratch / "c0004.cu").write_text(cut_short)
    engine, repo, bus = make(tmp_path, records=committed(4), generations=2, islands=1, fast_path=False)
    engine.run()
    [restored] = bus.history(SessionRestored)
    assert restored.lost == ("c0004",) and restored.next_id == "c0005"
    new = [e.candidate for e in bus.history(ProposalReady)]
    assert new and min(new) == "c0005"
    assert "c0004" not in {r.id for r in repo.records()}
    assert (scratch / "c0004.cu").read_text() == cut_short  # its source is kept as it was

    # a second resume does not report it again, and still never hands it out
    again, repo2, bus2 = make(tmp_path, records=repo.records(), generations=3, islands=1, fast_path=False)
    again.run()
    assert bus2.history(SessionRestored)[0].lost == ()
    assert min(e.candidate for e in bus2.history(ProposalReady)) > max(new)


def test_an_id_handed_out_is_not_handed_out_again_even_without_a_source(tmp_path):
    """The agent's budget ran out while it was asked for c0002: nothing was committed or written
    under that id, and a resume still goes on from c0003 (nothing is reported lost either)."""
    engine, repo, bus = make(tmp_path, agent=ScriptedAgent(script={1: "budget"}), generations=3, islands=1,
                             fast_path=False)
    assert engine.run().reason == "budget"
    assert [r.id for r in repo.records()] == ["c0000", "c0001"]
    resumed, repo2, bus2 = make(tmp_path, records=repo.records(), generations=3, islands=1, fast_path=False)
    resumed.run()
    assert bus2.history(SessionRestored)[0].lost == ()
    assert min(e.candidate for e in bus2.history(ProposalReady)) == "c0003"


@pytest.mark.parametrize("script, generations, reason, state", [
    ({}, 2, "done", "finished"),
    ({3: "budget"}, 5, "budget", "stopped"),
    ({3: "exhausted"}, 5, "agent exhausted", "exhausted"),
])
def test_every_end_is_recorded_and_read_the_same_everywhere(tmp_path, script, generations, reason, state):
    config = SearchConfig(workload="gemm_allgather", generations=generations, islands=2, max_concurrent_builds=2)
    repo = create_session(W, config, tmp_path / "sessions" / "s")
    bus = EventBus()
    summary = SearchEngine(W, ScriptedAgent(script=script), repo, config, evaluate_fn=FakeEvaluator(), events=bus,
                           gpu_pool=GpuPool([GpuGroup(0, (0, 1))]), compile_ahead=False,
                           design_context=lambda point: "").run()
    assert repo.ended() == reason
    repo.close()
    [finished] = bus.history(SearchFinished)
    [listed] = list_sessions(tmp_path / "sessions")
    assert summary.reason == reason and finished.state == end_state(reason) == state
    assert summary.to_dict()["state"] == listed.state == state
    assert f"ended     {state}" in summary.render()


def test_a_search_of_no_generation_after_the_seed_lists_as_finished(tmp_path):
    """The engine's own API takes generations=0 (the seed and the fast path only; the CLI refuses
    it as a search of nothing): what it ran is all it was asked, so it is finished everywhere."""
    config = SearchConfig(workload="gemm_allgather", generations=0, islands=1, max_concurrent_builds=2)
    repo = create_session(W, config, tmp_path / "sessions" / "s")
    summary = SearchEngine(W, ScriptedAgent(), repo, config, evaluate_fn=FakeEvaluator(),
                           gpu_pool=GpuPool([GpuGroup(0, (0, 1))]), compile_ahead=False,
                           design_context=lambda point: "").run()
    repo.close()
    assert summary.reason == "done"
    assert list_sessions(tmp_path / "sessions")[0].state == "finished"


def test_a_stopped_search_lists_as_stopped_even_past_its_last_generation(tmp_path):
    config = SearchConfig(workload="gemm_allgather", generations=1, islands=1, max_concurrent_builds=2,
                          review_mode="review", fast_path=False)
    repo = create_session(W, config, tmp_path / "sessions" / "s")
    bus = EventBus()
    engine = SearchEngine(W, ScriptedAgent(), repo, config, evaluate_fn=FakeEvaluator(), events=bus,
                          gpu_pool=GpuPool([GpuGroup(0, (0, 1))]), compile_ahead=False,
                          design_context=lambda point: "")
    bus.subscribe(lambda e: isinstance(e, ProposalReady) and engine.stop())  # held in review: stop now
    summary = engine.run()
    repo.close()
    [listed] = list_sessions(tmp_path / "sessions")
    assert summary.reason == "stopped" and listed.generations_done == 1  # the held proposal: unreviewed
    assert listed.state == "stopped"  # a resume reviews it again: not finished
