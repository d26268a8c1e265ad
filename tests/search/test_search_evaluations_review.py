"""--evaluations with proposals held for review, and a resume's unreviewed proposals."""
from __future__ import annotations

import threading

from cuco_tui.search.engine import ReviewError
from cuco_tui.search.events import AwaitingReview
from cuco_tui.search.outcomes import is_evaluation
from engine_helpers import make, run_in_thread


def evaluated(repo):
    return [r for r in repo.records() if is_evaluation(r)]


def test_proposals_held_for_review_count_toward_the_total(tmp_path):
    """The engineer decides only while the loop waits: a held proposal holds its place."""
    engine, repo, _ = make(tmp_path, review_mode="review", generations=3, fast_path=False, islands=3,
                           evaluations=2)  # the seed, then one proposal
    t, out = run_in_thread(engine)
    decided: set[str] = set()
    while t.is_alive():
        for record in engine.awaiting_review():
            if record.id not in decided:
                decided.add(record.id)
                try:
                    engine.review(record.id, "accept")
                except ReviewError:  # settled as the run ended
                    pass
        t.join(0.05)
    assert "error" not in out and out["summary"].reason == "evaluations"
    assert len(evaluated(repo)) == 2 and len(decided) == 1


def test_a_rejected_held_proposal_frees_its_place(tmp_path):
    engine, repo, bus = make(tmp_path, review_mode="review", generations=3, fast_path=False, islands=1,
                             evaluations=2)
    decisions = iter(["reject", "accept"])
    bus.subscribe(lambda e: isinstance(e, AwaitingReview)
                  and threading.Thread(target=engine.review, args=(e.candidate, next(decisions), "no")).start())
    assert engine.run().reason == "evaluations"
    assert len(evaluated(repo)) == 2 and sum(r.rejected_by == "review" for r in repo.records()) == 1


def test_a_resume_launches_no_unreviewed_proposal_past_the_total(tmp_path):
    engine, repo, bus = make(tmp_path, review_mode="review", generations=1, fast_path=False, islands=3)
    bus.subscribe(lambda e: isinstance(e, AwaitingReview) and len(bus.history(AwaitingReview)) == 3
                  and threading.Thread(target=engine.stop).start())
    engine.run()
    assert len(evaluated(repo)) == 1 and sum(r.status == "unreviewed" for r in repo.records()) == 3
    resumed, repo2, _ = make(tmp_path, records=repo.records(), review_mode="auto", generations=3, islands=3,
                             fast_path=False, evaluations=2)
    assert resumed.run().reason == "evaluations"
    assert len(evaluated(repo2)) == 2


def test_a_confirmation_takes_no_place_in_the_total(tmp_path):
    """A resume re-measures a finalist a kill left unconfirmed: that run is not counted."""
    from dataclasses import replace

    engine, repo, _ = make(tmp_path, generations=1, islands=1, fast_path=False)
    engine.run()
    seed, cand = repo.records()
    records = [seed, replace(cand, finalist=True, concurrent=1)]
    resumed, repo2, _ = make(tmp_path, records=records, generations=3, islands=1, fast_path=False, evaluations=3)
    assert resumed.run().reason == "evaluations"
    kinds = [r.kind for r in repo2.records()]
    assert kinds.count("confirm") == 1 and len(evaluated(repo2)) == 3, kinds
