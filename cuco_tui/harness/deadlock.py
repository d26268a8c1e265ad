"""Why a group hung, in plain words: the ranks' wait traces merged into a wait-for graph.

Each rank that timed out (or was stopped after another failed) dumped, per block, the wait it
was in: a flag or signal from a peer (an edge rank -> peer in the wait-for graph), or a barrier
of the whole team. From the graph and from what the other ranks were doing:
  - a cycle: rank 0 waits on rank 1, which waits on rank 0;
  - a missing signal: a rank waits on a peer that is not waiting on anyone (it finished the
    launch, or exited), so the signal will never come;
  - a short barrier: fewer ranks in a barrier than the team has;
  - no wait recorded: a kernel that spins or computes outside the traced waits.

A wait is named where the host launched it when the candidate passes a cuco::WaitSite
(CUCO_WAIT_SITE("arrived")): the report then gives the handshake's name and the launch line;
an unnamed wait (CUCO_SITE) gives the device line of the wait and the flag's id and, with the
candidate's source at hand, where the candidate launched the kernel that waits, as "c.cu:46 (in
wait_for_neighbour at line 13)": the cascade hands in a `locate` (evaluate/launch_sites.py) that
finds it in the source from the function the trace slot says waits. With the source, the report
also quotes the line of each wait and launch.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from cuco_tui.harness.launcher import RankOutcome
from cuco_tui.harness.rank_events import Aborted, Done, Failed, TimedOut


@dataclass(frozen=True)
class LaunchSite:
    """Where the candidate launched the kernel whose blocks wait. `lines`: the candidate's lines
    that launch it (each launch of it, or of every kernel that runs the waiting function), in
    order; `function`: the function that waits, in words; `line`: the wait's own line in the
    candidate, 0 when it has none there (a wait in the runtime's code, or one whose site the
    host passed at the launch)."""

    lines: tuple[int, ...]
    function: str
    line: int = 0


# (site, function) of an unnamed wait -> its launch in the candidate, or None when not known.
Locate = Callable[[int, str], Optional[LaunchSite]]


@dataclass(frozen=True)
class Wait:
    rank: int
    site: int
    kind: str  # "flag" | "signal" | "barrier"
    peer: int  # -1: the whole team
    id: int
    expected: int
    observed: int
    blocks: int  # how many blocks of this rank wait here
    label: str = ""  # the wait's name (a cuco::WaitSite), "" for an unnamed wait
    file: str = ""  # the candidate's file name, when known: sites read "file.cu:97"
    launch: LaunchSite | None = None  # an unnamed wait's launch, found in the candidate's source

    def where(self) -> str:
        """A named wait's site is the host line that launched it ("ce_overlap.cu:97"); an unnamed
        one's is the device line of the wait ("line 31") or, where the source says, the launch
        of its kernel and the function and line that wait ("c.cu:46 (in wait_for_neighbour at
        line 13)"; "c.cu:46 or 52 (...)" for a kernel launched from two places)."""
        if self.label or self.launch is None:
            return f"{self.file}:{self.site}" if self.file and self.label else f"line {self.site}"
        first, *more = self.launch.lines
        places = (f"{self.file}:{first}" if self.file else f"line {first}") + "".join(f" or {n}" for n in more)
        inside = self.launch.function + (f" at line {self.launch.line}" if self.launch.line else "")
        return f"{places} (in {inside})"

    @property
    def lines(self) -> tuple[int, ...]:
        """The candidate's lines this wait points at: its launches and its own line."""
        if self.label or self.launch is None:
            return (self.site,)
        return tuple(sorted({*self.launch.lines, *((self.launch.line,) if self.launch.line else ())}))

    def what(self) -> str:
        """The awaited flag by name where the candidate gave one: "'arrived' (flag 1)", else "flag 1"."""
        return f"'{self.label}' ({self.kind} {self.id})" if self.label else f"{self.kind} {self.id}"

    def describe(self) -> str:
        if self.kind == "barrier":
            named = f" '{self.label}'" if self.label else ""
            return f"{self.blocks} block(s) in a barrier{named} of the whole team at {self.where()} (barrier {self.id})"
        return (f"{self.blocks} block(s) at {self.where()} wait for {self.what()} from rank {self.peer} to reach "
                f"{self.expected}, last seen {self.observed}")


@dataclass(frozen=True)
class RankView:
    rank: int
    state: str  # "in_launch" | "past_launch" | "done" | "exited" | "no_trace"
    what: str
    waits: tuple[Wait, ...] = ()


@dataclass(frozen=True)
class HangDiagnosis:
    kind: str  # "cycle" | "missing_signal" | "short_barrier" | "no_wait" | "unknown"
    summary: str  # one or two sentences for people and for the agent's next prompt
    details: tuple[str, ...] = ()
    cycle: tuple[int, ...] = ()
    ranks: tuple[RankView, ...] = field(default=())

    def render(self) -> str:
        return "\n".join((self.summary,) + tuple(f"  {d}" for d in self.details))


def _waits(rank: int, trace: tuple[dict[str, Any], ...], file: str = "", locate: Locate | None = None
           ) -> tuple[Wait, ...]:
    grouped: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for slot in trace:
        if slot.get("state") == "waiting":
            # Dumps recorded before waits had names carry no label, before slots named their
            # function no function.
            key = (slot["site"], slot.get("label", ""), slot.get("function", ""), slot["kind"], slot["peer"],
                   slot["id"] if slot["kind"] != "barrier" else 0, slot["expected"])
            grouped[key].append(slot)
    out = []
    for (site, label, function, kind, peer, ident, expected), slots in sorted(grouped.items()):
        observed = min(s["observed"] for s in slots)
        ident = slots[0]["id"] if kind != "barrier" else min(s["id"] for s in slots)
        launch = locate(site, function) if locate is not None and not label else None
        out.append(Wait(rank, site, kind, peer, ident, expected, observed, len(slots), label, file, launch))
    return tuple(out)


def rank_views(outcomes: list[RankOutcome], file: str = "", locate: Locate | None = None) -> list[RankView]:
    """What each rank was doing; `locate` finds where unnamed waits were launched."""
    views = []
    for o in outcomes:
        event = o.last(TimedOut) or o.last(Aborted) or o.last(Failed)
        if event is None:
            state = "done" if o.last(Done) else "exited"
            views.append(RankView(o.rank, state, o.describe_exit()))
            continue
        what = event.phase if isinstance(event, Failed) else event.what or event.phase
        # "candidate launch (check 1)", "two candidate launches back to back (perturbed, seed 7)", "cuco_init"
        in_launch = "candidate launch" in what or what.startswith("cuco_")
        views.append(RankView(o.rank, "in_launch" if in_launch else "past_launch", what,
                              _waits(o.rank, event.trace, file, locate)))
    return views


def _find_cycle(edges: dict[int, set[int]]) -> tuple[int, ...]:
    color: dict[int, int] = {}
    stack: list[int] = []

    def visit(u: int) -> tuple[int, ...]:
        color[u] = 1
        stack.append(u)
        for v in sorted(edges.get(u, ())):
            if color.get(v) == 1:
                return tuple(stack[stack.index(v):])
            if v not in color:
                found = visit(v)
                if found:
                    return found
        stack.pop()
        color[u] = 2
        return ()

    for u in sorted(edges):
        if u not in color:
            found = visit(u)
            if found:
                return found
    return ()


def _activity(view: RankView) -> str:
    if view.state == "done":
        return "finished every step"
    if view.state == "exited":
        return view.what
    if view.state == "past_launch":
        return f"finished its launch and waits for the others in the harness ({view.what})"
    if view.waits:
        return "waits: " + "; ".join(w.describe() for w in view.waits)
    return f"is inside {view.what} but in no traced wait"


def _quotes(views: list[RankView], file: str, source: str) -> tuple[str, ...]:
    """The source line of every wait that is waiting and of its launch, and a hint where unnamed
    waits that differ (another peer or flag) share one line and no one launch tells them apart:
    the line of a helper kernel launched from several places, which says little."""
    waits = [w for v in views for w in v.waits]
    lines = source.splitlines()
    out = []
    for site in sorted({line for w in waits for line in w.lines}):
        if 0 < site <= len(lines):
            out.append(f"{file or 'line'}:{site}: {_statement(lines, site)}")
    shared = defaultdict(set)
    for w in waits:
        if not w.label and w.kind != "barrier" and (w.launch is None or len(w.launch.lines) > 1):
            shared[w.site].add((w.peer, w.id))
    if any(len(v) > 1 for v in shared.values()):
        out.append("waits for different flags are reported at one line, the wait inside a helper kernel: pass "
                   "CUCO_WAIT_SITE(\"name\") from each launch (a cuco::WaitSite) to name them and their launch lines")
    return tuple(out)


def _statement(lines: list[str], site: int) -> str:
    """The statement that line `site` (1-based) belongs to, on one line: a launch whose wait site
    (CUCO_WAIT_SITE) sits on a continuation line is quoted from its start, a wait whose arguments
    go on is quoted to its end. At most 4 lines either way."""
    def ends(line: str) -> bool:
        return not line.strip() or line.rstrip().endswith((";", "{", "}")) or line.lstrip().startswith(("//", "#"))

    start = end = site - 1
    while start > 0 and site - 1 - start < 4 and not ends(lines[start - 1]):
        start -= 1
    while end + 1 < len(lines) and end - (site - 1) < 4 and not ends(lines[end]):
        end += 1
    text = " ".join(line.strip() for line in lines[start:end + 1])
    return text if len(text) <= 240 else text[:237] + "..."


def analyze(outcomes: list[RankOutcome], world: int | None = None, file: str = "", source: str = "",
            locate: Locate | None = None) -> HangDiagnosis:
    """`file` and `source`: the candidate's file name and text, when known, for sites as
    file:line and the quoted lines of the waits and launches; `locate`: where the candidate
    launched an unnamed wait's kernel (evaluate.launch_sites.launch_locator of its source)."""
    views = rank_views(outcomes, file, locate)
    world = world or len(views)
    by_rank = {v.rank: v for v in views}
    details = tuple(f"rank {v.rank}: {_activity(v)}" for v in views) + _quotes(views, file, source)
    flag_waits = [w for v in views for w in v.waits if w.kind != "barrier" and w.peer >= 0]
    edges: dict[int, set[int]] = defaultdict(set)
    for w in flag_waits:
        edges[w.rank].add(w.peer)

    cycle = _find_cycle(edges)
    if cycle:
        hops = []
        for a, b in zip(cycle, cycle[1:] + cycle[:1]):
            w = next(w for w in flag_waits if w.rank == a and w.peer == b)
            hops.append(f"rank {a} waits on rank {b} ({w.where()}, {w.what()}: wants {w.expected}, "
                        f"saw {w.observed})")
        summary = "Deadlock: a cycle of waits. " + "; ".join(hops) + "; so none of them can go on."
        return HangDiagnosis("cycle", summary, details, cycle, tuple(views))

    for w in flag_waits:
        peer = by_rank.get(w.peer)
        if peer is None or not any(pw.peer >= 0 or pw.kind == "barrier" for pw in peer.waits):
            doing = _activity(peer) if peer else "is not part of the group"
            got = f"{w.observed} of {w.expected}" if w.observed < w.expected else str(w.observed)
            summary = (f"Missing signal: rank {w.rank} still waits at {w.where()} for {w.what()} from rank "
                       f"{w.peer} (seen {got}), but rank {w.peer} {doing}: the signal it should send never came.")
            return HangDiagnosis("missing_signal", summary, details, (), tuple(views))

    barrier_waits = [w for v in views for w in v.waits if w.kind == "barrier"]
    if barrier_waits:
        inside = sorted({w.rank for w in barrier_waits})
        outside = [r for r in range(world) if r not in inside]
        sites = ", ".join(dict.fromkeys(w.where() + (f" ('{w.label}')" if w.label else "")
                                        for w in sorted(barrier_waits, key=lambda w: w.site)))
        if outside:
            others = "; ".join(f"rank {r} {_activity(by_rank[r])}" if r in by_rank else f"rank {r} reported nothing"
                               for r in outside)
            summary = (f"Barrier entered by fewer ranks than the team has: {len(inside)} of {world} "
                       f"(ranks {', '.join(map(str, inside))}) wait at {sites}; {others}.")
            return HangDiagnosis("short_barrier", summary, details, (), tuple(views))
        summary = (f"Every rank waits in a barrier ({sites}) yet none is released: "
                   f"a barrier index or count that differs between ranks, or more blocks syncing than the device "
                   f"communicator has barriers for.")
        return HangDiagnosis("short_barrier", summary, details, (), tuple(views))

    stuck = [v for v in views if v.state == "in_launch" and not v.waits]
    if stuck:
        ranks = ", ".join(str(v.rank) for v in stuck)
        summary = (f"Hang with no wait recorded on rank(s) {ranks}: the kernel spins or computes outside cuco's "
                   f"traced waits (an endless loop?), or waits on something without cuco::wait_geq / "
                   f"cuco::lsa_barrier_sync.")
        return HangDiagnosis("no_wait", summary, details, (), tuple(views))
    return HangDiagnosis("unknown", "The group overran its time limit; no rank was inside the candidate's launch.",
                         details, (), tuple(views))


def describe_hang(outcomes: list[RankOutcome], file: str = "", source: str = "", locate: Locate | None = None) -> str:
    """The deadlock report stored in a CascadeResult (`file`, `source`: the candidate's name and
    text; `locate`: see analyze)."""
    return analyze(outcomes, file=file, source=source, locate=locate).render()
