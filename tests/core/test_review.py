"""A record's review, typed (core/records.py Review), reads every string sessions on disk hold and
writes them back the same; a review decision is one of three."""

from __future__ import annotations

import pytest

from cuco_tui.core.records import CandidateRecord, Review, ReviewDecision, ReviewOutcome


@pytest.mark.parametrize("stored, outcome, reason", [
    ("", ReviewOutcome.NONE, ""),
    ("accepted", ReviewOutcome.ACCEPTED, ""),
    ("edited", ReviewOutcome.EDITED, ""),
    ("unreviewed", ReviewOutcome.UNREVIEWED, ""),
    ("rejected: too risky: it reads peers early", ReviewOutcome.REJECTED, "too risky: it reads peers early"),
])
def test_a_stored_review_reads_typed_and_writes_back_the_same(stored, outcome, reason):
    review = Review.parse(stored)
    assert (review.outcome, review.reason) == (outcome, reason)
    assert str(review) == stored
    record = CandidateRecord("c0001", 1, 0, "diff", ("c0000",), "", {}, "", "offline", "rejected", review=stored)
    assert CandidateRecord.from_dict(record.to_dict()).reviewed == review
    assert review.rejected == (outcome is ReviewOutcome.REJECTED)


def test_a_review_decision_is_one_of_three():
    assert [d.value for d in ReviewDecision] == ["accept", "reject", "edit"]
    with pytest.raises(ValueError):
        ReviewDecision("maybe")
