"""The deadlock diagnosis as a table: per rank, each group of blocks waiting at one place, for
what (a named handshake, or a flag, signal or barrier and its id; from which peer; the value
expected) and the last value seen.

A CascadeResult stores the diagnosis as the text cuco_tui.harness.deadlock renders (summary,
then one `  rank R: ...` line per rank, each wait in `Wait.describe()`'s words, then the source
line of each wait), not the wait records themselves. The table is read back from that text;
tests render waits of every shape (named and unnamed, flags and barriers) with deadlock.py's
own code and parse them here, so the two cannot drift apart unnoticed. Text that does not parse
still shows, as it is, and is never called "no traced wait"."""

from __future__ import annotations

import re
from dataclasses import dataclass

from rich.table import Table
from rich.text import Text

from cuco_tui.app.widgets.candidate.timings import TABLE_STYLE
from cuco_tui.harness.deadlock import LaunchSite, Wait

_RANK = re.compile(r"^  rank (\d+): (.*)$")
# Wait.describe()'s ways of naming a place and a flag: a named wait (a cuco::WaitSite) is "at
# c0004.cu:46" and "'neighbour go' (flag 7)", an unnamed one "at line 46" and "flag 7", or, where
# the report found the launch of its kernel, "at c0004.cu:46 (in wait_for_neighbour at line 13)"
# ("c0004.cu:46 or 52 (...)" for several launches, "(in the fused GEMM's wait_rows)" with no line).
_WHERE = (r"(?:line (?P<line>\d+)|(?P<file>\S+):(?P<fline>\d+))(?P<more>(?: or \d+)*)"
          r"(?: \(in (?P<inside>[^()]+?)(?: at line (?P<wline>\d+))?\))?")
_END = r"(?:; |$)"  # waits are joined by "; " (which a wait's name may hold too)
_FLAG = re.compile(r"(?P<blocks>\d+) block\(s\) at " + _WHERE + r" wait for "
                   r"(?:'(?P<label>.*?)' \((?P<lkind>\w+) (?P<lid>-?\d+)\)|(?P<kind>\w+) (?P<id>-?\d+)) "
                   r"from rank (?P<peer>-?\d+) to reach (?P<expected>-?\d+), last seen (?P<observed>-?\d+)" + _END)
_BARRIER = re.compile(r"(?P<blocks>\d+) block\(s\) in a barrier(?: '(?P<label>.*?)')? of the whole team at "
                      + _WHERE + r" \(barrier (?P<id>-?\d+)\)" + _END)
_QUOTE = re.compile(r"^\S+?:(\d+): ")
WAITS = "waits: "  # how deadlock.py starts the activity of a rank caught in traced waits


@dataclass(frozen=True)
class RankState:
    rank: int
    activity: str  # deadlock.py's words for what the rank was doing
    waits: tuple[Wait, ...] = ()

    @property
    def all_read(self) -> bool:
        """Every wait of the rank's line was read into `waits` (none in words unknown here)."""
        return self.activity == (WAITS + "; ".join(w.describe() for w in self.waits) if self.waits else self.activity)

    @property
    def in_traced_wait(self) -> bool:
        """deadlock.py says the rank waits in traced waits (parsed or not)."""
        return self.activity.startswith(WAITS)


@dataclass(frozen=True)
class DeadlockView:
    summary: str
    ranks: tuple[RankState, ...]
    notes: tuple[str, ...] = ()  # the lines after the ranks': each wait's source line, hints

    @property
    def quoted_sites(self) -> set[int]:
        """The lines whose source the report quotes itself ("c0004.cu:46: ...", "line:46: ...")."""
        return {int(m.group(1)) for note in self.notes if (m := _QUOTE.match(note))}


def _site(m: re.Match) -> tuple[int, str, LaunchSite | None]:
    """The site, the file and the launch of a wait's place. An unnamed wait at its launch has its
    own line inside the parentheses (when it has one in the candidate)."""
    first, file = (int(m["line"]), "") if m["line"] is not None else (int(m["fline"]), m["file"])
    if m["inside"] is None:
        return first, file, None
    lines = (first, *(int(n) for n in m["more"].split(" or ")[1:]))
    line = int(m["wline"]) if m["wline"] else 0
    return line or first, file, LaunchSite(lines, m["inside"], line)


def parse_waits(rank: int, activity: str) -> tuple[Wait, ...]:
    """The waits of one rank line, read in order up to the first in no shape known here."""
    if not activity.startswith(WAITS):
        return ()
    waits = []
    text, at = activity[len(WAITS):], 0
    while at < len(text):
        if m := _FLAG.match(text, at):
            site, file, launch = _site(m)
            label = m["label"] or ""
            kind, ident = (m["lkind"], m["lid"]) if m["label"] is not None else (m["kind"], m["id"])
            waits.append(Wait(rank, site, kind, int(m["peer"]), int(ident), int(m["expected"]), int(m["observed"]),
                              int(m["blocks"]), label, file, launch))
        elif m := _BARRIER.match(text, at):
            site, file, launch = _site(m)
            waits.append(Wait(rank, site, "barrier", -1, int(m["id"]), 0, 0, int(m["blocks"]), m["label"] or "", file,
                              launch))
        else:  # a wait in words this version does not know: the rest is not read
            break
        at = m.end()
    return tuple(waits)


def parse_report(report: str) -> DeadlockView:
    summary: list[str] = []
    ranks: list[RankState] = []
    notes: list[str] = []
    for line in report.strip("\n").splitlines():
        m = _RANK.match(line)
        if m and not notes:
            rank, activity = int(m.group(1)), m.group(2)
            ranks.append(RankState(rank, activity, parse_waits(rank, activity)))
        elif not ranks:
            summary.append(line)
        else:  # after the rank lines: the quoted source line of each wait, a hint
            notes.append(line.strip())
    return DeadlockView("\n".join(summary).strip(), tuple(ranks), tuple(notes))


SOURCE_WIDTH = 44  # characters of the waiting line shown: the table then fits 120 columns


def _source(lines: list[str], site: int) -> str:
    line = lines[site - 1].strip() if 0 < site <= len(lines) else ""
    return line if len(line) <= SOURCE_WIDTH else line[: SOURCE_WIDTH - 1] + "…"


def waits_table(view: DeadlockView, source_lines: list[str]) -> Table:
    """One row per group of waiting blocks; the source column only when the report does not
    quote the lines itself (reports made before it did)."""
    quoted = {line for r in view.ranks for w in r.waits for line in w.lines} <= view.quoted_sites
    table = Table(title="Waits at the time of the hang (blocks grouped by what they wait for)",
                  title_justify="left", **TABLE_STYLE)
    # Most telling first: a narrow pane shows who waits where, for what, and what it last saw.
    columns = [("rank", "right"), ("at", "left"), ("waits for", "left"), ("from", "left"), ("expected", "right"),
               ("last seen", "right"), ("blocks", "right")] + ([] if quoted else [("source", "left")])
    for name, justify in columns:
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for r in view.ranks:
        for w in r.waits:
            at = w.where().removeprefix("line ")
            if w.kind == "barrier":
                row = (at, f"'{w.label}' (barrier {w.id})" if w.label else f"barrier {w.id}", "whole team", "", "")
            else:
                short = w.observed < w.expected
                row = (at, w.what(), f"rank {w.peer}", str(w.expected),
                       Text(str(w.observed), style="bold red" if short else ""))
            cells = [str(r.rank), *row, str(w.blocks)]
            if not quoted:
                cells.append(Text(_source(source_lines, w.site)))
            table.add_row(*cells)
    return table


def deadlock_parts(report: str, source_lines: list[str]) -> tuple[Text | Table, ...]:
    """The diagnosis as the Deadlock tab shows it: the summary, the table of traced waits, what
    each other rank was doing, then the report's own notes (each wait's source line, hints).
    "No traced wait" is said only when deadlock.py recorded none on any rank."""
    view = parse_report(report)
    if not view.ranks:
        return (Text(report.strip()),)  # not in deadlock.py's shape: shown as stored
    parts: list[Text | Table] = [Text(view.summary or "(no summary)", style="bold")]
    if any(r.waits for r in view.ranks):
        parts.append(waits_table(view, source_lines))
    elif not any(r.in_traced_wait for r in view.ranks):
        parts.append(Text("No traced wait was recorded on any rank; what each rank was doing:", style="dim"))
    for r in view.ranks:
        if not r.waits or not r.all_read:  # waits this version cannot read keep deadlock.py's words
            parts.append(Text(f"rank {r.rank}: {r.activity}"))
    parts.extend(Text(note, style="dim") for note in view.notes)
    return tuple(parts)
