"""Each kind of hang diagnosis, from wait-trace dumps in the form the rank workers write them
(one real dump, recorded on the 2 x H200 host, in tests/data/runs/hang)."""

from cuco_tui.harness.deadlock import analyze
from cuco_tui.harness.launcher import RankOutcome


def slot(site, kind, peer, ident, expected=1, observed=0, state="waiting", completed=0, i=0):
    return {"slot": i, "state": state, "site": site, "kind": kind, "peer": peer, "id": ident,
            "expected": expected, "observed": observed, "completed": completed}


def timed_out(rank, trace, what="candidate launch (check 1)", event="timeout"):
    return RankOutcome(rank, rank, 100 + rank, 124, [{"event": event, "rank": rank, "what": what,
                                                       "phase": "verify:verify", "trace": trace}])


def finished(rank):
    return RankOutcome(rank, rank, 100 + rank, 0, [{"event": "done", "rank": rank}])


def test_two_ranks_waiting_on_each_other_is_a_cycle():
    d = analyze([timed_out(0, [slot(40, "flag", 1, 3)]), timed_out(1, [slot(40, "flag", 0, 3)])])
    assert d.kind == "cycle" and set(d.cycle) == {0, 1}
    assert "rank 0 waits on rank 1 (line 40, flag 3: wants 1, saw 0)" in d.summary


def test_a_cycle_through_three_ranks_of_four():
    ranks = [timed_out(0, [slot(50, "signal", 1, 2, 4, 3)]), timed_out(1, [slot(51, "signal", 2, 2, 4, 3)]),
             timed_out(2, [slot(52, "signal", 0, 2, 4, 3)]), timed_out(3, [], what="harness barrier", event="aborted")]
    d = analyze(ranks)
    assert d.kind == "cycle" and sorted(d.cycle) == [0, 1, 2]
    assert "rank 2 waits on rank 0 (line 52" in d.summary


def test_missing_signal_from_a_rank_that_finished():
    d = analyze([timed_out(0, [slot(61, "signal", 1, 5, expected=4, observed=3)]),
                 timed_out(1, [slot(61, "signal", 0, 5, expected=4, observed=4, state="done", completed=4)],
                           what="agreeing on the outcome", event="aborted")])
    assert d.kind == "missing_signal"
    assert "rank 0 still waits at line 61 for signal 5 from rank 1 (seen 3 of 4)" in d.summary
    assert "rank 1 finished its launch" in d.summary


def test_missing_signal_from_a_rank_that_exited():
    exited = RankOutcome(1, 1, 101, -11, [])
    d = analyze([timed_out(0, [slot(70, "flag", 1, 0)]), exited])
    assert d.kind == "missing_signal" and "died of SIGSEGV" in d.summary


def test_one_rank_skipping_a_barrier():
    d = analyze([timed_out(0, [slot(88, "barrier", -1, b, i=b) for b in range(4)]),
                 timed_out(1, [], what="harness barrier", event="aborted")])
    assert d.kind == "short_barrier"
    assert "1 of 2 (ranks 0) wait at line 88" in d.summary and "rank 1 finished its launch" in d.summary


def test_a_barrier_that_one_rank_of_four_skips():
    ranks = [timed_out(r, [slot(90, "barrier", -1, 0)]) for r in range(3)]
    ranks.append(timed_out(3, [], what="harness barrier", event="aborted"))
    d = analyze(ranks)
    assert d.kind == "short_barrier" and "3 of 4 (ranks 0, 1, 2)" in d.summary


def test_every_rank_in_the_barrier_points_at_a_count_mismatch():
    d = analyze([timed_out(0, [slot(95, "barrier", -1, 7)]), timed_out(1, [slot(95, "barrier", -1, 7)])])
    assert d.kind == "short_barrier" and "count" in d.summary


def test_a_hang_with_no_wait_is_an_endless_loop():
    d = analyze([timed_out(0, []), timed_out(1, [])])
    assert d.kind == "no_wait" and "rank(s) 0, 1" in d.summary


def test_completed_waits_are_not_counted_as_waiting():
    d = analyze([timed_out(0, [slot(10, "flag", 1, 0, state="done", completed=9)]), timed_out(1, [])])
    assert d.kind == "no_wait"


def test_the_recorded_hang_from_the_gpu_host(tmp_path):
    import json
    from pathlib import Path

    runs = Path(__file__).parent / "data" / "runs" / "hang"
    outcomes = []
    for r in range(2):
        events = [json.loads(line) for line in (runs / f"rank{r}.jsonl").read_text().splitlines() if line.strip()]
        outcomes.append(RankOutcome(r, r, 0, 124, events))
    d = analyze(outcomes)
    assert d.kind == "cycle" and "line 13" in d.summary
