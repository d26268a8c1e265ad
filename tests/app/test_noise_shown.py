"""Noise as the screens show it, on figures a search recorded (tests/data/noise): every speedup
with its spread; the leaderboard gives candidates within noise of each other one place ('≈');
compare marks a figure that reads differently within noise as a tie, not as a change."""

from __future__ import annotations

from dataclasses import replace

from cuco_tui.app.search_state import board_entry, board_key
from cuco_tui.app.widgets.candidate.model import CandidateView, parse_result
from cuco_tui.app.widgets.lineage.compare import DIFFERS, TIE, UNCOMPARABLE, compare_rows, compare_table
from cuco_tui.app.widgets.search.leaderboard import FIXED, places, row
from recorded_noise import bounds, records


def board(*ids: str):
    recs = records()
    return tuple(sorted((board_entry(recs[cid]) for cid in ids), key=board_key))


def test_the_leaderboard_shares_a_place_within_noise_and_shows_each_speedup_with_its_spread():
    shown = board("c0000", "c0001", "c0005", "c0013", "c0017", "c0019")
    assert [e.candidate for e in shown] == ["c0017", "c0001", "c0005", "c0013", "c0000", "c0019"]
    # 1.34x ±5% opens place 1; 1.24x ±5% overlaps it; 1.23x ±3% and 1.20x ±5% do not; nor 1.04x
    # and 0.95x (±6%, ±7%) overlap the 1.23x
    assert places(shown) == ["1", "≈1", "3", "≈3", "5", "≈5"]
    shapes = ["mlp-down-8b", "mlp-down-70b", "long-seq", "short-seq"]
    work = {b.shape: b.work for b in bounds().shapes}
    cells = dict(zip((*FIXED, *shapes), row(shown[0], shapes, bounds(), work, "1")))
    assert cells["#"] == "1" and cells["speedup"] == "1.34x ±5%" and cells["% bound"] == "90%"
    assert cells["long-seq"] == "1.60x ±1%" and cells["short-seq"] == "1.44x ±12%"


def view(cid: str, align: str | None = None) -> CandidateView:
    """`align`: the candidate as if its shapes had been timed under that discipline (these were
    recorded before 2026-11-27, under a host barrier alone)."""
    record = records()[cid]
    if align is not None:
        timings = [dict(t, align=align) for t in record.result["timings"]]
        record = replace(record, result=dict(record.result, timings=timings))
    result, _ = parse_result(record)
    return CandidateView("recorded", record, result, (), (), bounds=bounds())


def _marks(rows) -> list[tuple[str, str, str]]:
    return [(r.section, r.label, r.mark) for r in rows]


def test_compare_shows_22_and_24_gbps_with_overlapping_spreads_as_unchanged():
    rows = {(r.section, r.label): r for r in compare_rows(view("c0019"), view("c0013"))}
    gbps, time = rows[("mlp-down-70b", "GB/s")], rows[("mlp-down-70b", "time ms")]
    assert (gbps.a, gbps.b) == ("22", "24") and (time.a, time.b) == ("3.015", "2.833")
    assert not gbps.differs and gbps.mark == TIE  # 2.841-3.132 ms and 2.789-2.848 ms overlap
    assert not time.differs and not rows[("mlp-down-70b", "TFLOP/s")].differs
    speed = rows[("", "speedup")]
    assert (speed.a, speed.b) == ("0.947x ±7%", "1.204x ±5%") and speed.differs and speed.mark == DIFFERS
    assert rows[("", "% bound")].differs


def test_compare_marks_22_and_24_gbps_a_change_where_the_spreads_are_narrow():
    rows = {(r.section, r.label): r for r in compare_rows(view("c0000"), view("c0004"))}
    gbps = rows[("mlp-down-70b", "GB/s")]
    assert (gbps.a, gbps.b) == ("22", "24") and gbps.differs and gbps.mark == DIFFERS


def test_compare_says_which_times_were_taken_under_different_disciplines_and_weighs_only_speedups():
    # c0000 and c0004 at mlp-down-70b: 22 and 24 GB/s with narrow spreads, a change when both were
    # timed alike; with c0004's ranks lined up on the GPUs and c0000's by the host, no change at all
    rows = compare_rows(view("c0000"), view("c0004", align="device"))
    by = {(r.section, r.label): r for r in rows}
    aligned = by[("mlp-down-70b", "ranks aligned")]
    assert (aligned.a, aligned.b) == ("host", "GPUs") and aligned.differs
    assert [r.label for r in rows if r.section == "mlp-down-70b"][:2] == ["ranks aligned", "time ms"]
    for label in ("time ms", "TFLOP/s", "GB/s"):
        assert not by[("mlp-down-70b", label)].differs and by[("mlp-down-70b", label)].mark == UNCOMPARABLE
    assert (by[("mlp-down-70b", "GB/s")].a, by[("mlp-down-70b", "GB/s")].b) == ("22", "24")
    # speedups, each against the reference of its own run, are weighed as before
    alike = {(r.section, r.label): r.mark for r in compare_rows(view("c0000"), view("c0004"))}
    for (section, label), compared in by.items():
        if label in ("speedup", "% bound"):
            assert compared.mark == alike[(section, label)], (section, label)
    title = compare_table(view("c0000"), view("c0004", align="device")).title
    assert f"{UNCOMPARABLE}: timed differently, not comparable" in str(title)


def test_compare_of_two_timed_alike_adds_no_row_and_no_mark():
    host = compare_rows(view("c0000"), view("c0004"))
    device = compare_rows(view("c0000", align="device"), view("c0004", align="device"))
    assert _marks(device) == _marks(host)
    assert not any(r.label == "ranks aligned" or r.mark == UNCOMPARABLE for r in device)
    assert {(r.section, r.label): r for r in device}[("mlp-down-70b", "GB/s")].mark == DIFFERS
    assert UNCOMPARABLE not in str(compare_table(view("c0000", align="device"), view("c0004", align="device")).title)


def test_compare_calls_the_same_code_measured_twice_unchanged():
    rows = {(r.section, r.label): r for r in compare_rows(view("c0015"), view("c0017"))}
    speed = rows[("", "speedup")]
    assert (speed.a, speed.b) == ("1.302x ±6%", "1.338x ±5%") and speed.mark == TIE
    assert not any(r.differs for r in rows.values() if r.label in ("speedup", "% bound"))


def test_the_dashboard_shows_the_searchs_best_with_its_spread_among_its_ties():
    from cuco_tui.app.search_state import DashboardState, apply
    from cuco_tui.app.widgets.search.state_panel import render_compact, render_facts
    from cuco_tui.search import events as ev

    recs = records()
    s = DashboardState()
    for cid in ("c0000", "c0001", "c0017"):  # c0017 is no new best: within noise of c0001
        s = apply(s, ev.CandidateCommitted(record=recs[cid], sha=f"sha-{cid}"))
    s = apply(s, ev.BestImproved(record=recs["c0001"], previous="c0000", previous_speedup=recs["c0000"].speedup))
    assert "1.245x ±5% (c0001)" in render_facts(s).plain and "1.24x ±5% c0001" in render_compact(s).plain
    assert places(s.board) == ["1", "≈1", "3"]  # c0017, c0001 (the best), c0000
