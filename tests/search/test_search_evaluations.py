"""`cuco search --evaluations N` (SearchConfig.evaluations): the session's total of candidates sent
to evaluation. Once reached no more proposals are asked, the evaluations in flight are committed
and the search ends "evaluations" (finished); a resume goes on up to a higher total."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cuco_tui.core.ending import describe_end, end_state
from cuco_tui.search.config import ConfigError, SearchConfig
from cuco_tui.search.events import SearchStarted
from cuco_tui.search.outcomes import is_evaluation
from engine_helpers import ScriptedAgent, make


def evaluated(repo) -> list:
    return [r for r in repo.records() if is_evaluation(r)]


@pytest.mark.parametrize("groups", [1, 2])
def test_the_search_ends_once_it_has_evaluated_as_many_candidates_as_asked(tmp_path, groups):
    engine, repo, bus = make(tmp_path, groups=groups, generations=20, islands=2, evaluations=7)
    summary = engine.run()
    assert summary.reason == "evaluations" and end_state(summary.reason) == "finished"
    assert describe_end(summary.reason) == "finished (evaluations)"
    assert len(evaluated(repo)) == 7  # checked before each proposal: never one more
    assert bus.history(SearchStarted)[0].evaluations == 7


def test_turned_away_proposals_and_re_measures_do_not_count(tmp_path):
    """Duplicates the novelty filter turned away are no evaluations: the search asks again."""
    agent = ScriptedAgent(script={2: "dup", 3: "dup"})  # the second is the first's code again
    engine, repo, _ = make(tmp_path, agent=agent, generations=20, islands=1, evaluations=5)
    engine.run()
    records = repo.records()
    assert len(evaluated(repo)) == 5
    assert any(r.rejected_by == "novelty" for r in records)
    confirm = replace(records[0], id="c0099", kind="confirm", confirm_of=records[0].id)
    assert not is_evaluation(confirm)


def test_a_resume_goes_on_up_to_a_higher_total(tmp_path):
    engine, repo, _ = make(tmp_path, generations=20, islands=1, evaluations=3)
    engine.run()
    assert len(evaluated(repo)) == 3
    resumed, repo2, _ = make(tmp_path, records=repo.records(), generations=20, islands=1, evaluations=6)
    summary = resumed.run()
    assert summary.reason == "evaluations" and len(evaluated(repo2)) == 6


def test_one_evaluation_is_the_seed_alone(tmp_path):
    engine, repo, _ = make(tmp_path, generations=5, islands=1, evaluations=1)
    assert engine.run().reason == "evaluations"
    assert [r.kind for r in evaluated(repo)] == ["seed"]


def test_a_total_below_one_is_refused():
    with pytest.raises(ConfigError, match="1 or more"):
        SearchConfig(workload="gemm_allgather", evaluations=0)
