"""The candidate view's Profile tab: per rank, the exposed communication (the time its GPU only
moved data) against the span, compute and communication busy time and their overlap, then each
rank's longest activities and how to open the trace (core/profile.py, lineage/profiles.py)."""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

from cuco_tui.core.profile import Profile

NAME_CHARS = 60  # a kernel's mangled name, cut for the table


def _ms(ns: int) -> str:
    return f"{ns / 1e6:.3f}"


def profile_parts(p: Profile, candidate_id: str) -> tuple[Any, ...]:
    head = Text(f"profile of {p.launches} launches at {p.shape}", style="bold")
    if not p.ok:
        return head, Text(f"none taken: {p.problem or 'no rank reported activities'}", style="yellow")
    table = Table(title="per rank (ms)", title_justify="left")
    for col in ("rank", "exposed comm", "% of span", "span", "compute", "comm", "overlap"):
        table.add_column(col, justify="right")
    for r in p.ranks:
        overlap = "-" if r.overlap is None else f"{100 * r.overlap:.0f}%"
        table.add_row(str(r.rank), _ms(r.exposed_ns), f"{r.exposed_pct:.1f}%", _ms(r.span_ns), _ms(r.compute_ns),
                      _ms(r.communication_ns), overlap)
    longest = Table(title="longest activities", title_justify="left")
    for col, justify in (("rank", "right"), ("ms", "right"), ("what", "left"), ("stream", "right"), ("name", "left")):
        longest.add_column(col, justify=justify)
    for r in p.ranks:
        for x in r.longest:
            name = x.name if len(x.name) <= NAME_CHARS else x.name[:NAME_CHARS - 1] + "…"
            what = "communication" if x.communication else "compute"
            longest.add_row(str(r.rank), _ms(x.duration_ns), what, str(x.stream), name)
    parts: list[Any] = [head, table, longest]
    parts += [Text(f"note: {n}", style="dim") for n in p.notes]
    if p.trace:
        parts.append(Text(f"trace: git show refs/profiles/{candidate_id}:{p.trace} > trace.json in the session's "
                          "folder, then open it in https://ui.perfetto.dev"))
    return tuple(parts)
