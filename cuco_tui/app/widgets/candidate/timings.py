"""Timings of one candidate: per bench shape the reference and the candidate (median and the
middle half, p25-p75, of the per-iteration times of the slowest rank), the speedup with its
spread (the half-width of its band of noise, core/noise.py), what the time means (TFLOP/s and
GB/s of one rank, % of the session's perfect-overlap bound), and each rank's own median and
spread, as ShapeTiming stores them."""

from __future__ import annotations

from rich import box
from rich.table import Table
from rich.text import Text

from cuco_tui.core.bounds import ShapeFigures, format_figure, mean_pct_of_bound
from cuco_tui.core.noise import speedup_of
from cuco_tui.core.result import ShapeTiming


def _ms(x: float) -> str:
    return f"{x:.3f}"


def _range(low: float, high: float) -> str:
    return f"{low:.3f}-{high:.3f}"


def summary_text(geomean: float | None, figures: tuple[ShapeFigures, ...] = (), no_bound: str = "",
                 timings: list[ShapeTiming] | None = None) -> Text:
    """The line above the tables (it wraps): the geometric mean speedup, the mean % of the bound,
    or why there is none."""
    pct = mean_pct_of_bound(figures)
    text = Text()
    if geomean is not None:
        speedup = speedup_of(geomean, timings or []).label()
        text.append(f"geometric mean speedup {speedup} over {len(figures) or 'the'} shape(s)", style="bold")
    if pct is not None:
        text.append(f", {pct:.0f}% of the bound")
    elif no_bound:
        text.append(("; " if text else "") + no_bound, style="dim")
    return text


# Two spaces between columns, none at the edges.
TABLE_STYLE = dict(box=box.SIMPLE_HEAD, expand=False, show_edge=False, pad_edge=False, collapse_padding=True)
# Two tables, each narrower than a pane of 80 columns (one of twelve columns was cut after
# "reference" there): what the time is worth first, then its spread and what it means as rates.
SHAPE_COLUMNS = ("shape", "speedup", "% bound", "bound", "candidate", "reference")
SPREAD_COLUMNS = ("shape", "cand p25-p75", "ref p25-p75", "IQR %", "n", "TFLOP/s", "GB/s")


def _table(title: str, columns: tuple[str, ...]) -> Table:
    table = Table(title=title, title_justify="left", **TABLE_STYLE)
    for name in columns:
        table.add_column(name, justify="left" if name == "shape" else "right", no_wrap=True)
    return table


def shape_table(figures: tuple[ShapeFigures, ...]) -> Table:
    table = _table("Per shape (ms): median of the slowest rank's time", SHAPE_COLUMNS)
    for f in figures:
        tone = "green" if f.speedup >= 1.0 else "red"
        _, _, bound, pct = figure_cells(f)
        table.add_row(f.shape, Text(f.speedup_band.label(), style=f"bold {tone}"), Text(pct, style="bold"), bound,
                      _ms(f.time_ms), _ms(f.reference_ms))
    return table


def spread_table(figures: tuple[ShapeFigures, ...]) -> Table:
    table = _table("Spread (ms, p25-p75 of n repetitions) and rates of one rank", SPREAD_COLUMNS)
    for f in figures:
        tflops, gbps, _, _ = figure_cells(f)
        table.add_row(f.shape, _range(f.time_band.low, f.time_band.high),
                      _range(f.reference_band.low, f.reference_band.high), f"{f.iqr_pct:.1f}", str(f.samples),
                      tflops, gbps)
    return table


def figure_cells(f: ShapeFigures) -> tuple[str, str, str, str]:
    """TFLOP/s, GB/s, the bound as a speedup, % of it ('-' where unknown)."""
    return (format_figure(f.tflops, ".0f"), format_figure(f.gbps, ".0f"), format_figure(f.bound_speedup, ".2f", "x"),
            format_figure(f.pct_of_bound, ".0f", "%"))


def rank_table(timings: list[ShapeTiming]) -> Table | None:
    """Each rank's candidate time per shape; None when the result holds no per-rank spreads."""
    if not any(t.per_rank for t in timings):
        return None
    table = Table(title="Per rank (ms): * the slowest rank", title_justify="left", **TABLE_STYLE)
    for name in ("shape", "rank", "median", "p25-p75", "min-max", "n"):
        table.add_column(name, justify="left" if name == "shape" else "right", no_wrap=True)
    for t in timings:
        slowest = max(range(len(t.per_rank)), key=lambda r: t.per_rank[r].median, default=-1)
        for rank, s in enumerate(t.per_rank):
            mark = "*" if rank == slowest and len(t.per_rank) > 1 else ""
            table.add_row(t.shape if rank == 0 else "", str(rank), _ms(s.median) + mark, _range(s.p25, s.p75),
                          _range(s.min, s.max), str(s.n))
    return table


def timings_parts(timings: list[ShapeTiming], geomean: float | None, figures: tuple[ShapeFigures, ...],
                  no_bound: str = "") -> tuple[Text | Table, ...]:
    """The Timings tab: the summary line, the per-shape tables (a row of `figures`, all_figures of
    `timings`, per shape), the per-rank table (or why none)."""
    ranks = rank_table(timings)
    return (summary_text(geomean, figures, no_bound, timings), shape_table(figures), spread_table(figures),
            ranks if ranks is not None else Text("Per-rank timings are not stored in this result.", style="dim"))
