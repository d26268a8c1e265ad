"""Each kind of hang diagnosis, from wait-trace dumps in the form the rank workers write them
(one real dump, recorded on the 2 x H200 host, in tests/data/runs/hang)."""

from cuco_tui.harness.deadlock import analyze
from cuco_tui.harness.launcher import RankOutcome
from cuco_tui.harness.rank_events import Done, TimedOut, from_json, read_events
from repo_paths import DATA, REPO


def slot(site, kind, peer, ident, expected=1, observed=0, state="waiting", completed=0, i=0):
    return {"slot": i, "state": state, "site": site, "kind": kind, "peer": peer, "id": ident,
            "expected": expected, "observed": observed, "completed": completed}


def timed_out(rank, trace, what="candidate launch (check 1)", event="timeout"):
    return RankOutcome(rank, rank, 100 + rank, 124, [from_json({"event": event, "rank": rank, "what": what,
                                                                 "phase": "verify:verify", "trace": trace})])


def finished(rank):
    return RankOutcome(rank, rank, 100 + rank, 0, [Done(rank=rank)])


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
    runs = DATA / "runs" / "hang"
    outcomes = [RankOutcome(r, r, 0, 124, read_events(runs / f"rank{r}.jsonl")) for r in range(2)]
    d = analyze(outcomes)
    assert d.kind == "cycle" and "line 13" in d.summary


# Named waits (cuco::WaitSite): dumps in the worker's form, with the site and label the device writes
# for a wait launched with CUCO_WAIT_SITE, checked against the hanging faults' own sources.

FAULTS = REPO / "workloads" / "gemm_allgather" / "faults"


def named(source, label, kind, peer, ident, expected=1, observed=0, state="waiting"):
    """The slot a wait launched with CUCO_WAIT_SITE(label) in `source` records: its line is the macro's."""
    site = next(i + 1 for i, line in enumerate(source.splitlines()) if f'CUCO_WAIT_SITE("{label}")' in line)
    return {**slot(site, kind, peer, ident, expected, observed, state), "label": label}


def test_a_cycle_of_named_waits_names_the_flag_the_launch_line_and_quotes_the_launch():
    src = (FAULTS / "hang.cu").read_text()
    d = analyze([timed_out(0, [named(src, "neighbour go", "flag", 1, 7)]),
                 timed_out(1, [named(src, "neighbour go", "flag", 0, 7)])], file="hang.cu", source=src)
    line = named(src, "neighbour go", "flag", 1, 7)["site"]
    assert d.kind == "cycle"
    assert f"rank 0 waits on rank 1 (hang.cu:{line}, 'neighbour go' (flag 7): wants 1, saw 0)" in d.summary
    quoted = [x for x in d.details if x.startswith(f"hang.cu:{line}: ")]
    assert quoted and quoted[0].startswith(f"hang.cu:{line}: wait_for_neighbour<<<1, 32, 0, stream>>>(")
    assert 'CUCO_WAIT_SITE("neighbour go"));' in quoted[0]
    assert not any("helper kernel" in x for x in d.details)


def test_a_missing_signal_names_the_wait_and_its_launch():
    src = (FAULTS / "missing_signal.cu").read_text()
    w = named(src, "previous posted", "flag", 1, 3, expected=4, observed=3)
    d = analyze([timed_out(0, [w]),
                 timed_out(1, [], what="agreeing on the outcome", event="aborted")], file="missing_signal.cu",
                source=src)
    assert d.kind == "missing_signal"
    assert (f"rank 0 still waits at missing_signal.cu:{w['site']} for 'previous posted' (flag 3) from rank 1 "
            f"(seen 3 of 4)") in d.summary
    assert any(x.startswith(f"missing_signal.cu:{w['site']}: wait_prev<<<") for x in d.details)


def test_unnamed_waits_for_different_flags_at_one_helper_line_get_a_hint():
    # Every wait of a candidate whose helper kernel calls cuco::wait_geq with CUCO_SITE is at one line.
    d = analyze([timed_out(0, [slot(31, "flag", 1, 0, i=0), slot(31, "flag", 1, 1, i=1)]),
                 timed_out(1, [slot(31, "flag", 0, 1)])])
    assert d.kind == "cycle" and "(line 31, flag" in d.summary
    assert any("CUCO_WAIT_SITE" in x and "helper kernel" in x for x in d.details)


def test_a_named_barrier_is_named_in_the_short_barrier_report():
    d = analyze([timed_out(0, [{**slot(12, "barrier", -1, 0), "label": "gathered"}]),
                 timed_out(1, [], what="harness barrier", event="aborted")], file="c.cu")
    assert d.kind == "short_barrier" and "wait at c.cu:12 ('gathered')" in d.summary


def test_dumps_recorded_before_waits_had_names_still_read():
    runs = DATA / "runs" / "hang"
    outcomes = [RankOutcome(r, r, 0, 124, read_events(runs / f"rank{r}.jsonl")) for r in range(2)]
    assert all("label" not in s for o in outcomes for e in o.of(TimedOut) for s in e.trace)
    d = analyze(outcomes, file="hang.cu", source="\n" * 12 + "  cuco::wait_geq<unsigned>(trace, CUCO_SITE, peer, 7, flag, 1u);\n")
    assert d.kind == "cycle" and "(line 13, flag 7" in d.summary
    assert "hang.cu:13: cuco::wait_geq<unsigned>(trace, CUCO_SITE, peer, 7, flag, 1u);" in d.details
