"""Two candidates side by side: status, speedup and % of bound, every design coordinate and
knob, and per bench shape the time, speedup, TFLOP/s, GB/s and % of the bound; rows that differ
are marked. A measured figure differs only beyond noise (core/noise.py: the two bands do not
overlap); one that reads differently within noise is marked as a tie, '≈', not as a change.
Speedups carry their spread; TFLOP/s and GB/s (work / time) follow the time's band, % of the
bound the speedup's. A shape whose two sides were timed under different disciplines (the ranks
lined up on the GPUs or by a host barrier alone, ShapeTiming.align) gets a row that says so, and
its time, TFLOP/s and GB/s are marked not comparable, '∦', never a change: start skew is in one
and not the other. Its speedups, each against its own run's reference, still compare.
Built from two CandidateViews (candidate/model.py), so the figures are the
candidate view's own. The code's unified diff is shown below the table by the compare screen."""

from __future__ import annotations

from dataclasses import dataclass

from rich import box
from rich.table import Table
from rich.text import Text

from cuco_tui.app.widgets.candidate.model import CandidateView
from cuco_tui.core.bounds import ShapeFigures, format_figure, mean_pct_of_bound
from cuco_tui.core.noise import Band, record_speedup, within_noise

DIFFERS = "≠"
TIE = "≈"
UNCOMPARABLE = "∦"  # timed under different disciplines: how far apart says nothing
ALIGNED = {"host": "host", "device": "GPUs"}  # the "ranks aligned" row's words for ShapeTiming.align


@dataclass(frozen=True)
class CompareRow:
    label: str
    a: str
    b: str
    section: str = ""  # "" for the facts, "design", "knobs", or a shape's name
    # The bands of a measured figure on both sides: it differs only beyond noise.
    bands: tuple[Band, Band] | None = None
    comparable: bool = True  # False: the two sides were measured differently (UNCOMPARABLE)

    @property
    def differs(self) -> bool:
        if not self.comparable:
            return False
        if self.bands is not None:
            return not within_noise(*self.bands)
        return self.a != self.b

    @property
    def mark(self) -> str:
        """DIFFERS, TIE (reads differently, within noise), UNCOMPARABLE, or ''."""
        if not self.comparable:
            return UNCOMPARABLE
        return DIFFERS if self.differs else TIE if self.a != self.b else ""


def _pair(fa: ShapeFigures | None, fb: ShapeFigures | None, attr: str) -> tuple[Band, Band] | None:
    ba, bb = (getattr(f, attr) if f is not None else None for f in (fa, fb))
    return (ba, bb) if ba is not None and bb is not None else None


def _figure_rows(shape: str, fa: ShapeFigures | None, fb: ShapeFigures | None) -> list[CompareRow]:
    def cell(f: ShapeFigures | None, attr: str, spec: str, unit: str = "") -> str:
        return format_figure(getattr(f, attr) if f is not None else None, spec, unit)

    def speed(f: ShapeFigures | None) -> str:
        band = f.speedup_band if f is not None else None
        return band.label() if band is not None else cell(f, "speedup", ".2f", "x")

    # TFLOP/s and GB/s are the time turned over: they differ exactly when the time does, and
    # compare exactly when it does.
    time, speedup = _pair(fa, fb, "time_band"), _pair(fa, fb, "speedup_band")
    aligned: list[CompareRow] = []
    if fa is not None and fb is not None and fa.align != fb.align:
        aligned.append(CompareRow("ranks aligned", ALIGNED.get(fa.align, fa.align), ALIGNED.get(fb.align, fb.align),
                                  shape))
    alike = not aligned
    return aligned + [
        CompareRow("time ms", cell(fa, "time_ms", ".3f"), cell(fb, "time_ms", ".3f"), shape, time, alike),
        CompareRow("speedup", speed(fa), speed(fb), shape, speedup),
        CompareRow("TFLOP/s", cell(fa, "tflops", ".0f"), cell(fb, "tflops", ".0f"), shape, time, alike),
        CompareRow("GB/s", cell(fa, "gbps", ".0f"), cell(fb, "gbps", ".0f"), shape, time, alike),
        CompareRow("% bound", cell(fa, "pct_of_bound", ".0f", "%"), cell(fb, "pct_of_bound", ".0f", "%"), shape,
                   speedup)]


def compare_rows(a: CandidateView, b: CandidateView) -> list[CompareRow]:
    ra, rb = a.record, b.record
    fa, fb = a.figures(), b.figures()
    sa, sb = record_speedup(ra), record_speedup(rb)
    speedups = (sa, sb) if sa is not None and sb is not None else None
    rows = [
        CompareRow("kind", ra.kind, rb.kind),
        CompareRow("status", ra.status, rb.status),
        CompareRow("speedup", sa.label(".3f") if sa is not None else "-", sb.label(".3f") if sb is not None else "-",
                   bands=speedups),
        CompareRow("% bound", format_figure(mean_pct_of_bound(fa), ".0f", "%"),
                   format_figure(mean_pct_of_bound(fb), ".0f", "%"), bands=speedups),
        CompareRow("parents", ", ".join(ra.parents) or "(seed)", ", ".join(rb.parents) or "(seed)"),
    ]
    dims = [k for k in dict.fromkeys([*ra.design, *rb.design]) if k != "knobs"]
    rows += [CompareRow(k, str(ra.design.get(k, "-")), str(rb.design.get(k, "-")), "design") for k in dims]
    ka, kb = ra.design.get("knobs") or {}, rb.design.get("knobs") or {}
    rows += [CompareRow(k, str(ka.get(k, "-")), str(kb.get(k, "-")), "knobs") for k in dict.fromkeys([*ka, *kb])]
    by_a, by_b = {f.shape: f for f in fa}, {f.shape: f for f in fb}
    for shape in dict.fromkeys([*by_a, *by_b]):
        rows += _figure_rows(shape, by_a.get(shape), by_b.get(shape))
    return rows


def compare_table(a: CandidateView, b: CandidateView) -> Table:
    rows = compare_rows(a, b)
    apart = f"; {UNCOMPARABLE}: timed differently, not comparable" if not all(r.comparable for r in rows) else ""
    table = Table(title=f"{a.id} and {b.id} side by side ({DIFFERS}: they differ; {TIE}: within noise{apart})",
                  title_justify="left",
                  box=box.SIMPLE_HEAD, expand=False)
    table.add_column("", no_wrap=True, style="dim")
    table.add_column("", no_wrap=True)
    table.add_column(a.id, no_wrap=True, justify="right")
    table.add_column(b.id, no_wrap=True, justify="right")
    table.add_column(DIFFERS, no_wrap=True)
    section = None
    for row in rows:
        head = row.section if row.section != section else ""
        if row.section != section and row.section:
            table.add_section()
        section = row.section
        mark = Text(row.mark, style="bold yellow" if row.differs else "dim")
        style = "bold" if row.differs else ""
        table.add_row(head, row.label, Text(row.a, style=style), Text(row.b, style=style), mark)
    if not (a.figures() or b.figures()):
        table.caption = "no timings: neither was measured"
    return table
