"""Is one measured figure larger than another beyond the noise of its measurement: the one test
the leaderboard, compare, `cuco show`, `cuco eval`, the search's best and its plateau all use.

What there is to go on: per bench shape, the candidate and the reference are timed in the same
run, interleaved, 30 repetitions each (the manifest's `repetitions`), every repetition the
slowest rank's time; each series is kept as its median and quartiles (`Spread`). From those,
every figure gets a band, the values its noise allows:

- a time's band is its interquartile range as measured, [p25, p75]; TFLOP/s and GB/s (work /
  time) take the same band (work / p75, work / p25);
- a shape's speedup (reference median / candidate median) has as its noise the half-IQR of
  each series relative to its median, h = (p75 - p25) / (2 median), combined in quadrature
  (two independent series of one run): h = sqrt(h_candidate^2 + h_reference^2); its band is
  speedup * e^(+-h);
- a geometric-mean speedup's band is the geometric mean of its shapes' bands (the mean of
  their h): the shapes' noise is not assumed to cancel.

`±N%` beside a figure is the band's half-width, sqrt(high / low) - 1 (e^h - 1 for a speedup).

The test (`exceeds`): A is larger than B beyond noise when A's band lies wholly above B's.
Otherwise they are within noise of each other, a tie, and nothing that decides or shows
"better" treats A as better. Why the spread of single repetitions and not the far smaller
standard error of a median of 30: a figure is compared with one from another run, and runs
differ by more than one run's sampling error. The same source measured twice (the
confirmations in docs/data/2026-11-26-gemm_reducescatter-offline-h100x4.bundle: c0004 and c0006,
c0005 and c0007, c0010 and c0012, c0015 and c0017) differed by 0.9-3.3 % in geometric mean and
by up to 8 % on one shape, about the half-IQR of the repetitions, and within it; a test at
the median's standard error would call three of the four a change (tests/core/test_noise.py
checks both on the recorded figures). A figure recorded without its timings has a band of zero width: the test is
then a plain comparison."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from cuco_tui.core.records import CandidateRecord
from cuco_tui.core.result import ShapeTiming, Spread


@dataclass(frozen=True)
class Band:
    """A figure and the band of values its measurement's noise allows (low <= value <= high).
    A band of zero width: a figure recorded without its spread (no ± is shown)."""

    value: float
    low: float
    high: float

    @classmethod
    def exact(cls, value: float) -> "Band":
        return cls(value, value, value)

    @classmethod
    def around(cls, value: float, h: float) -> "Band":
        """value * e^(+-h): a band symmetric on a log scale."""
        return cls(value, value * math.exp(-h), value * math.exp(h))

    @property
    def spread(self) -> float:
        """The half-width as a fraction of the figure (0.03: ±3%)."""
        return math.sqrt(self.high / self.low) - 1.0 if self.low > 0 else 0.0

    def label(self, spec: str = ".2f", unit: str = "x") -> str:
        """'1.48x ±3%' (no ± where no spread was recorded)."""
        return figure_label(self.value, self.spread, spec, unit)


def figure_label(value: float, spread: float, spec: str = ".2f", unit: str = "x") -> str:
    """A figure with its spread as every reader shows it: '1.48x ±3%'; no ± for a spread of 0
    (not recorded). For a figure kept as value and spread (the search's summary), not a Band."""
    return f"{value:{spec}}{unit}" + (f" {spread_label(spread)}" if spread > 0 else "")


def spread_label(spread: float) -> str:
    """'±3%'; a spread under 1% keeps a decimal ('±0.4%')."""
    pct = 100.0 * spread
    return f"±{pct:.0f}%" if pct >= 0.95 else f"±{pct:.1f}%"


def exceeds(a: Band, b: Band) -> bool:
    """True when `a` is larger than `b` beyond noise: a's band lies wholly above b's. For
    speedups, 'a is faster than b'; for times, 'a is slower than b'."""
    return a.low > b.high


def within_noise(a: Band, b: Band) -> bool:
    """Neither exceeds the other: a tie."""
    return not exceeds(a, b) and not exceeds(b, a)


def half_iqr(s: Spread) -> float:
    """Half the interquartile range, as a fraction of the median."""
    return (s.p75 - s.p25) / (2.0 * s.median) if s.median > 0 else 0.0


def time_band(s: Spread) -> Band:
    """A time's band: its interquartile range as measured."""
    return Band(s.median, min(s.p25, s.median), max(s.p75, s.median))


def speedup_band(t: ShapeTiming) -> Band:
    """A shape's speedup with the candidate's and the reference's noise combined."""
    return Band.around(t.speedup, math.hypot(half_iqr(t.candidate), half_iqr(t.reference)))


def geomean_band(bands: Iterable[Band]) -> Band | None:
    """The geometric mean of figures, its band the geometric mean of theirs."""
    bs = [b for b in bands if b.value > 0 and b.low > 0]
    if not bs:
        return None

    def g(values: list[float]) -> float:
        return math.exp(sum(math.log(v) for v in values) / len(values))

    return Band(g([b.value for b in bs]), g([b.low for b in bs]), g([b.high for b in bs]))


def speedup_of(value: float, timings: Iterable[ShapeTiming]) -> Band:
    """A candidate's speedup `value` (the geometric mean over its shapes, as recorded) with the
    band of its shapes' speedups; no timings: a band of zero width."""
    band = geomean_band(speedup_band(t) for t in timings)
    if band is None:
        return Band.exact(value)
    return Band.around(value, math.log1p(band.spread))


def record_speedup(record: CandidateRecord) -> Band | None:
    """The record's speedup with its band; None when it has none. Timings this version cannot
    read leave a band of zero width (a plain comparison)."""
    if record.speedup is None:
        return None
    return speedup_of(record.speedup, read_timings(record.result))


def read_timings(result: Mapping[str, Any] | None) -> tuple[ShapeTiming, ...]:
    if not result or not result.get("timings"):
        return ()
    try:
        return tuple(ShapeTiming.from_dict(t) for t in result["timings"])
    except (TypeError, ValueError, KeyError):
        return ()
