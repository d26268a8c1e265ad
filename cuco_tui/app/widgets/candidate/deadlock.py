"""The deadlock diagnosis as a table: per rank, each group of blocks waiting at one site, for
what (flag, signal or barrier; id; from which peer; the value expected) and the last value seen.

A CascadeResult stores the diagnosis as the text cuco_tui.harness.deadlock renders (summary,
then one `  rank R: ...` line per rank, each wait in `Wait.describe()`'s words), not the wait
records themselves. The table is read back from that text; tests render waits with
deadlock.py's own code and parse them here, so the two cannot drift apart unnoticed. Text that
does not parse still shows, as it is."""

from __future__ import annotations

import re
from dataclasses import dataclass

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from cuco_tui.harness.deadlock import Wait

_RANK = re.compile(r"^  rank (\d+): (.*)$")
_FLAG = re.compile(r"(\d+) block\(s\) at line (\d+) wait for (\w+) (-?\d+) from rank (-?\d+) to reach (-?\d+), "
                   r"last seen (-?\d+)")
_BARRIER = re.compile(r"(\d+) block\(s\) in a barrier of the whole team at line (\d+) \(barrier (-?\d+)\)")


@dataclass(frozen=True)
class RankState:
    rank: int
    activity: str  # deadlock.py's words for what the rank was doing
    waits: tuple[Wait, ...] = ()


@dataclass(frozen=True)
class DeadlockView:
    summary: str
    ranks: tuple[RankState, ...]


def parse_waits(rank: int, activity: str) -> tuple[Wait, ...]:
    if not activity.startswith("waits: "):
        return ()
    waits = []
    for part in activity[len("waits: "):].split("; "):
        if m := _FLAG.fullmatch(part):
            blocks, site, kind, ident, peer, expected, observed = m.groups()
            waits.append(Wait(rank, int(site), kind, int(peer), int(ident), int(expected), int(observed), int(blocks)))
        elif m := _BARRIER.fullmatch(part):
            blocks, site, ident = m.groups()
            waits.append(Wait(rank, int(site), "barrier", -1, int(ident), 0, 0, int(blocks)))
    return tuple(waits)


def parse_report(report: str) -> DeadlockView:
    summary: list[str] = []
    ranks: list[RankState] = []
    for line in report.strip("\n").splitlines():
        m = _RANK.match(line)
        if m:
            rank, activity = int(m.group(1)), m.group(2)
            ranks.append(RankState(rank, activity, parse_waits(rank, activity)))
        elif not ranks:
            summary.append(line)
        else:  # a line after the rank lines that is not one: keep it with the last rank
            last = ranks[-1]
            ranks[-1] = RankState(last.rank, f"{last.activity}\n{line.strip()}", last.waits)
    return DeadlockView("\n".join(summary).strip(), tuple(ranks))


SOURCE_WIDTH = 44  # characters of the waiting line shown: the table then fits 120 columns


def _source(lines: list[str], site: int) -> str:
    line = lines[site - 1].strip() if 0 < site <= len(lines) else ""
    return line if len(line) <= SOURCE_WIDTH else line[: SOURCE_WIDTH - 1] + "…"


def waits_table(view: DeadlockView, source_lines: list[str]) -> Table:
    table = Table(title="Waits at the time of the hang (per rank, blocks grouped by what they wait for)",
                  title_justify="left", box=box.SIMPLE_HEAD, expand=False)
    for name, justify in (("rank", "right"), ("blocks", "right"), ("line", "right"), ("waits for", "left"),
                          ("from", "left"), ("expected", "right"), ("last seen", "right"), ("source", "left")):
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for r in view.ranks:
        for w in r.waits:
            if w.kind == "barrier":
                row = (f"barrier {w.id}", "whole team", "", "")
            else:
                short = w.observed < w.expected
                row = (f"{w.kind} {w.id}", f"rank {w.peer}", str(w.expected),
                       Text(str(w.observed), style="bold red" if short else ""))
            table.add_row(str(r.rank), str(w.blocks), str(w.site), *row, Text(_source(source_lines, w.site)))
    return table


def deadlock_renderable(report: str, source_lines: list[str]) -> Group:
    view = parse_report(report)
    parts: list = [Text(view.summary or "(no summary)", style="bold"), Text("")]
    if any(r.waits for r in view.ranks):
        parts.append(waits_table(view, source_lines))
    elif view.ranks:
        parts.append(Text("No traced wait was recorded on any rank; what each rank was doing:", style="dim"))
    for r in view.ranks:
        if not r.waits:
            parts.append(Text(f"rank {r.rank}: {r.activity}"))
    if not view.ranks:
        parts.append(Text(report.strip()))  # not in deadlock.py's shape: shown as stored
    return Group(*parts)
