"""The random-sampling agent (issue 34's yardstick): uniform draws from exactly the offline agent's
space, without repeats, the same sequence for the same seed whatever the results, and
AgentExhausted once every point is proposed. Real templates, real rendering, no stand-ins."""

from __future__ import annotations

import pytest

from cuco_tui.agents.base import AgentExhausted, ProposalRequest
from cuco_tui.agents.factory import AGENT_KINDS, AgentUnavailable, check_agent, make_agent
from cuco_tui.agents.offline import OfflineAgent, RandomSampleAgent
from cuco_tui.agents.offline.points import point_key, valid_points
from cuco_tui.core.records import CandidateRecord
from cuco_tui.design.space import Capabilities, parse_design, violations
from cuco_tui.source.regions import design_of
from cuco_tui.workload.manifest import load_workload
from cuco_tui.workload.scaffold import new_workload

W = load_workload("gemm_allgather")
SEED_RECORD = CandidateRecord(id="c0000", generation=0, island=0, kind="seed", parents=(), source=W.seed.read_text(),
                              design={}, rationale="seed", agent="workload", status="measured", speedup=1.0)


def _req(kind: str, workload=W, parents=(SEED_RECORD,)) -> ProposalRequest:
    return ProposalRequest(kind=kind, workload=workload, parents=tuple(parents))


def _point(p) -> str:
    knobs = dict(p.design["knobs"])
    return point_key(knobs.pop("strategy"), knobs)


def _record(cid: str, p, status: str, speedup: float | None) -> CandidateRecord:
    return CandidateRecord(id=cid, generation=1, island=0, kind=p.kind, parents=p.parents, source=p.source,
                           design=p.design, rationale=p.rationale, agent=p.agent, status=status, speedup=speedup)


@pytest.fixture
def small(tmp_path):
    """A workload of 9 points: the scaffold's seed with a second knob (3 x 3 values)."""
    made = new_workload("smallspace", tmp_path)
    seed = made.root / "seed.cu"
    text = seed.read_text()
    knob = "constexpr int kChunks = 1;  // cuco-knob: 1 2 4\n"
    assert knob in text
    seed.write_text(text.replace(knob, knob + "constexpr int kRepeat = 1;  // cuco-knob: 1 2 3\n"))
    return load_workload(made.root)


def test_it_proposes_valid_distinct_points_of_the_offline_space_only():
    caps = Capabilities(lsa=False, world=2)  # a machine without LSA: no nccl_lsa point is valid
    agent = RandomSampleAgent(W, caps, seed=5)
    space = {point_key(s.name, k) for s, k in valid_points(OfflineAgent(W, caps).book, caps)}
    seen = set()
    for _ in range(30):
        p = agent.propose(_req("full"))
        key = _point(p)
        assert key in space and key not in seen
        seen.add(key)
        declared = parse_design(design_of(p.source))
        assert declared.backend != "nccl_lsa" and not violations(declared, caps)
        assert p.agent == "random" and p.rationale.startswith("Random sample: ")
        assert "drawn uniformly at random" in p.rationale
    # uniform over points, not strategies: fused_tile holds most of gemm_allgather's points
    strategies = {k[:k.index("{")] for k in seen}
    assert "fused_tile" in strategies


def test_the_same_seed_gives_the_same_sequence_and_another_seed_another():
    def sequence(seed: int) -> list[str]:
        agent = RandomSampleAgent(W, seed=seed)
        return [_point(agent.propose(_req("full"))) for _ in range(12)]

    assert sequence(3) == sequence(3)
    assert sequence(3) != sequence(4)


def test_results_and_request_kinds_change_nothing():
    """One agent is told nothing; the other is asked for every kind the engine sends, with
    parents measured fast or failed and a summary of them: the points proposed are the same."""
    quiet, told = RandomSampleAgent(W, seed=11), RandomSampleAgent(W, seed=11)
    kinds = ["fast_path", "full", "diff", "crossover", "diff", "full"] * 3
    history = [SEED_RECORD]
    for i, kind in enumerate(kinds):
        a = quiet.propose(_req("full"))
        told.summarize(history)
        parents = history[-2:] if kind == "crossover" and len(history) > 1 else history[-1:]
        b = told.propose(_req(kind, parents=parents))
        assert _point(a) == _point(b) and a.source == b.source
        status, speedup = ("measured", 3.0 - i / 10) if i % 3 else ("deadlock", None)
        history.append(_record(f"c{i + 1:04d}", b, status, speedup))
    assert "results are not read" in told.summarize(history)


def test_every_point_once_then_agent_exhausted(small):
    agent = RandomSampleAgent(small, seed=2)
    space = {point_key(s.name, k) for s, k in valid_points(agent.book, agent.caps)}
    assert len(space) == 9
    seen = [_point(agent.propose(_req("full", small, ()))) for _ in range(8)]
    seed_point = point_key("seed", {"kChunks": 1, "kRepeat": 1})  # the seed's own: in the session already
    assert sorted(seen) == sorted(space - {seed_point})
    with pytest.raises(AgentExhausted, match="every valid combination"):
        agent.propose(_req("full", small, ()))


def test_a_resumed_search_proposes_none_of_the_points_the_session_holds(small):
    first = RandomSampleAgent(small, seed=0)
    held = [first.propose(_req("full", small, ())) for _ in range(5)]
    again = RandomSampleAgent(small, seed=0)
    again.summarize([_record(f"c{i + 1:04d}", p, "no_gpu", None) for i, p in enumerate(held)])
    rest = {_point(again.propose(_req("full", small, ()))) for _ in range(3)}
    assert rest.isdisjoint(_point(p) for p in held)
    with pytest.raises(AgentExhausted):
        again.propose(_req("full", small, ()))


def test_the_factory_builds_it_and_refuses_it_where_the_offline_agent_is_refused(tmp_path):
    assert "random" in AGENT_KINDS
    agent = make_agent("random", W, world=2)
    assert isinstance(agent, RandomSampleAgent) and agent.name == "random" and agent.uses_hints is False
    bare = new_workload("bare", tmp_path)
    seed = bare.root / "seed.cu"
    seed.write_text(seed.read_text().replace("  // cuco-knob: 1 2 4", ""))
    with pytest.raises(AgentUnavailable, match="cuco-knob"):
        check_agent("random", load_workload(bare.root))
