"""Timings of one candidate: per bench shape the reference and the candidate (median and the
middle half, p25-p75, of the per-iteration times of the slowest rank), the speedup, what the
time means (TFLOP/s and GB/s of one rank, % of the session's perfect-overlap bound), and each
rank's own median and spread, as ShapeTiming stores them."""

from __future__ import annotations

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from cuco_tui.core.bounds import ShapeFigures, format_figure, mean_pct_of_bound
from cuco_tui.core.result import ShapeTiming, Spread


def _ms(x: float) -> str:
    return f"{x:.3f}"


def _iqr(s: Spread) -> str:
    return f"{s.p25:.3f}-{s.p75:.3f}"


def shape_table(timings: list[ShapeTiming], geomean: float | None,
                figures: tuple[ShapeFigures, ...] = ()) -> Table:
    pct = mean_pct_of_bound(figures)
    caption = f"geometric mean speedup {geomean:.2f}x" if geomean is not None else None
    if caption and pct is not None:
        caption += f", {pct:.0f}% of the bound"
    if figures and all(f.pct_of_bound is None for f in figures):
        caption = (caption + "; " if caption else "") + "no bound: the session measured none (it needs a GPU)"
    table = Table(title="Per shape (ms): per repetition the slowest rank's time; median and p25-p75",
                  title_justify="left", caption=caption, caption_justify="left", box=box.SIMPLE_HEAD, expand=False)
    for name in ("shape", "reference", "ref p25-p75", "candidate", "cand p25-p75", "IQR %", "n", "speedup",
                 "TFLOP/s", "GB/s", "bound", "% bound"):
        table.add_column(name, justify="left" if name == "shape" else "right", no_wrap=True)
    by_shape = {f.shape: f for f in figures}
    for t in timings:
        tone = "green" if t.speedup >= 1.0 else "red"
        f = by_shape.get(t.shape)
        table.add_row(t.shape, _ms(t.reference.median), _iqr(t.reference), _ms(t.candidate.median), _iqr(t.candidate),
                      f"{t.spread_pct:.1f}", str(t.candidate.n), Text(f"{t.speedup:.2f}x", style=f"bold {tone}"),
                      *figure_cells(f))
    return table


def figure_cells(f: ShapeFigures | None) -> tuple[str, str, str, str]:
    """TFLOP/s, GB/s, the bound as a speedup, % of it ('-' where unknown)."""
    if f is None:
        return ("-", "-", "-", "-")
    return (format_figure(f.tflops, ".0f"), format_figure(f.gbps, ".0f"), format_figure(f.bound_speedup, ".2f", "x"),
            format_figure(f.pct_of_bound, ".0f", "%"))


def rank_table(timings: list[ShapeTiming]) -> Table | None:
    """Each rank's candidate time per shape; None when the result holds no per-rank spreads."""
    if not any(t.per_rank for t in timings):
        return None
    table = Table(title="Per rank (ms): * the slowest rank",
                  title_justify="left", box=box.SIMPLE_HEAD, expand=False)
    for name in ("shape", "rank", "median", "p25-p75", "min-max", "n"):
        table.add_column(name, justify="left" if name == "shape" else "right", no_wrap=True)
    for t in timings:
        slowest = max(range(len(t.per_rank)), key=lambda r: t.per_rank[r].median, default=-1)
        for rank, s in enumerate(t.per_rank):
            mark = "*" if rank == slowest and len(t.per_rank) > 1 else ""
            table.add_row(t.shape if rank == 0 else "", str(rank), _ms(s.median) + mark, _iqr(s),
                          f"{s.min:.3f}-{s.max:.3f}", str(s.n))
    return table


def timings_renderable(timings: list[ShapeTiming], geomean: float | None,
                       figures: tuple[ShapeFigures, ...] = ()) -> Group:
    parts: list = [shape_table(timings, geomean, figures)]
    ranks = rank_table(timings)
    parts.append(ranks if ranks is not None else Text("Per-rank timings are not stored in this result.", style="dim"))
    return Group(*parts)
