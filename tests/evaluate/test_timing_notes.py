"""A timed repetition that started before its rank's host had enqueued what it times (the ranks'
alignment pause ran out first) holds host launch latency: the result says where, in a note, and
says nothing when every repetition started on time. An older rank's timing line, without the
counts, still reads."""

from cuco_tui.evaluate.cascade import late_start_notes
from cuco_tui.harness.launcher import RankOutcome
from cuco_tui.harness.rank_events import Timed, from_json


def _timed(rank: int, late_c: int, late_r: int) -> Timed:
    return Timed(rank=rank, shape="long-seq", dims={"M": 1}, candidate_ms=(0.4,) * 30, reference_ms=(0.7,) * 30,
                 late_candidate=late_c, late_reference=late_r)


def test_repetitions_that_started_late_are_a_note_per_rank_and_shape():
    on_time = RankOutcome(0, 0, 100, 0, [_timed(0, 0, 0)])
    late = RankOutcome(1, 1, 101, 0, [_timed(1, 3, 0)])
    assert late_start_notes([on_time]) == []
    (note,) = late_start_notes([on_time, late])
    assert note.severity == "note" and note.rank == 1
    assert note.message == ("long-seq, rank 1: 3 of 30 candidate and 0 of 30 reference repetitions started before "
                            "the host had enqueued them (the 300 µs alignment pause ran out): those times hold host "
                            "launch latency")


def test_a_timing_line_without_the_counts_reads_as_none_late():
    line = {"event": "timing", "rank": 0, "shape": "s", "dims": {"M": 1}, "candidate_ms": [1.0], "reference_ms": [1.0]}
    event = from_json(line)
    assert isinstance(event, Timed) and event.late_candidate == 0 and event.late_reference == 0
