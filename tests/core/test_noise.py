"""The one test of "larger beyond noise" (core/noise.py), on figures a search recorded: the same
code measured twice is within noise, clearly different candidates keep their order, a time's
band is its interquartile range."""

from __future__ import annotations

from cuco_tui.core.bounds import all_figures
from cuco_tui.core.noise import Band, exceeds, read_timings, record_speedup, speedup_band, time_band, within_noise
from recorded_noise import SAME_SOURCE, bounds, records


def test_the_same_source_measured_twice_is_within_noise():
    recs = records()
    for first, again in SAME_SOURCE:
        a, b = record_speedup(recs[first]), record_speedup(recs[again])
        assert a is not None and b is not None and a.value != b.value
        assert within_noise(a, b), (first, a, again, b)
        by_shape = {t.shape: t for t in read_timings(recs[again].result)}
        for t in read_timings(recs[first].result):  # every shape too, up to 8 % apart
            assert within_noise(speedup_band(t), speedup_band(by_shape[t.shape])), (first, t.shape)


def test_candidates_whose_bands_do_not_overlap_keep_their_order():
    recs = records()
    speed = {cid: record_speedup(r) for cid, r in recs.items()}
    assert speed["c0017"].label() == "1.34x ±5%" and speed["c0005"].label() == "1.23x ±3%"
    assert exceeds(speed["c0017"], speed["c0005"]) and not exceeds(speed["c0005"], speed["c0017"])
    assert exceeds(speed["c0017"], speed["c0013"]) and exceeds(speed["c0001"], speed["c0000"])
    # 1.34x and 1.24x, each ±5%: a 7 % gap within the noise
    assert speed["c0001"].label() == "1.24x ±5%" and within_noise(speed["c0017"], speed["c0001"])


def test_a_time_is_within_noise_when_its_interquartile_ranges_overlap():
    recs = records()
    figs = {cid: {f.shape: f for f in all_figures(read_timings(r.result), bounds())} for cid, r in recs.items()}
    shape = "mlp-down-70b"
    gbps = {cid: round(figs[cid][shape].gbps) for cid in ("c0013", "c0019", "c0000", "c0004")}
    assert gbps == {"c0013": 24, "c0019": 22, "c0000": 22, "c0004": 24}
    times = {cid: time_band(next(t for t in read_timings(recs[cid].result) if t.shape == shape).candidate)
             for cid in gbps}
    assert within_noise(times["c0013"], times["c0019"])  # 2.789-2.848 ms and 2.841-3.132 ms
    assert exceeds(times["c0000"], times["c0004"])  # 2.944-3.022 ms and 2.772-2.814 ms: c0000 is slower


def test_a_figure_recorded_without_its_spread_compares_plainly():
    recs = records()
    bare = recs["c0001"].__class__(**{**recs["c0001"].__dict__, "result": None})
    band = record_speedup(bare)
    assert band == Band.exact(recs["c0001"].speedup) and band.label() == "1.24x"
    assert exceeds(Band.exact(1.2451), Band.exact(1.245)) and within_noise(Band.exact(1.0), Band.exact(1.0))


def test_a_test_at_the_medians_standard_error_would_call_re_measures_changes():
    """Why the bands are the repetitions' spread (the module's docstring): the standard error of a
    median of n, about 1.25 sigma / sqrt(n) with sigma = IQR / 1.35, would tell the same code
    measured twice apart in three of the four recorded pairs."""
    import math

    recs = records()
    told_apart = 0
    for first, again in SAME_SOURCE:
        a, b = record_speedup(recs[first]), record_speedup(recs[again])
        n = read_timings(recs[first].result)[0].candidate.n
        se = [1.25 * (2 * math.log1p(x.spread)) / 1.35 / math.sqrt(n) for x in (a, b)]
        told_apart += abs(math.log(a.value / b.value)) > math.hypot(*se)
    assert told_apart == 3
