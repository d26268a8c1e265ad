"""Why a group hung, in plain words: the ranks' wait traces merged into a wait-for graph.

Each rank that timed out (or was stopped after another failed) dumped, per block, the wait it
was in: a flag or signal from a peer (an edge rank -> peer in the wait-for graph), or a barrier
of the whole team. From the graph and from what the other ranks were doing:
  - a cycle: rank 0 waits on rank 1, which waits on rank 0;
  - a missing signal: a rank waits on a peer that is not waiting on anyone (it finished the
    launch, or exited), so the signal will never come;
  - a short barrier: fewer ranks in a barrier than the team has;
  - no wait recorded: a kernel that spins or computes outside the traced waits.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from cuco_tui.harness.launcher import RankOutcome


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

    def describe(self) -> str:
        where = f"line {self.site}"
        if self.kind == "barrier":
            return f"{self.blocks} block(s) in a barrier of the whole team at {where} (barrier {self.id})"
        return (f"{self.blocks} block(s) at {where} wait for {self.kind} {self.id} from rank {self.peer} to reach "
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


def _waits(rank: int, trace: list[dict[str, Any]]) -> tuple[Wait, ...]:
    grouped: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for slot in trace:
        if slot.get("state") == "waiting":
            key = (slot["site"], slot["kind"], slot["peer"], slot["id"] if slot["kind"] != "barrier" else 0,
                   slot["expected"])
            grouped[key].append(slot)
    out = []
    for (site, kind, peer, ident, expected), slots in sorted(grouped.items()):
        observed = min(s["observed"] for s in slots)
        ident = slots[0]["id"] if kind != "barrier" else min(s["id"] for s in slots)
        out.append(Wait(rank, site, kind, peer, ident, expected, observed, len(slots)))
    return tuple(out)


def rank_views(outcomes: list[RankOutcome]) -> list[RankView]:
    views = []
    for o in outcomes:
        event = o.last("timeout") or o.last("aborted") or o.last("error")
        if event is None:
            state = "done" if o.last("done") else "exited"
            views.append(RankView(o.rank, state, o.describe_exit()))
            continue
        what = str(event.get("what") or event.get("phase") or "")
        in_launch = what.startswith("candidate launch") or what.startswith("cuco_")
        views.append(RankView(o.rank, "in_launch" if in_launch else "past_launch", what,
                              _waits(o.rank, event.get("trace", []))))
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


def analyze(outcomes: list[RankOutcome], world: int | None = None) -> HangDiagnosis:
    views = rank_views(outcomes)
    world = world or len(views)
    by_rank = {v.rank: v for v in views}
    details = tuple(f"rank {v.rank}: {_activity(v)}" for v in views)
    flag_waits = [w for v in views for w in v.waits if w.kind != "barrier" and w.peer >= 0]
    edges: dict[int, set[int]] = defaultdict(set)
    for w in flag_waits:
        edges[w.rank].add(w.peer)

    cycle = _find_cycle(edges)
    if cycle:
        hops = []
        for a, b in zip(cycle, cycle[1:] + cycle[:1]):
            w = next(w for w in flag_waits if w.rank == a and w.peer == b)
            hops.append(f"rank {a} waits on rank {b} (line {w.site}, {w.kind} {w.id}: wants {w.expected}, "
                        f"saw {w.observed})")
        summary = "Deadlock: a cycle of waits. " + "; ".join(hops) + "; so none of them can go on."
        return HangDiagnosis("cycle", summary, details, cycle, tuple(views))

    for w in flag_waits:
        peer = by_rank.get(w.peer)
        if peer is None or not any(pw.peer >= 0 or pw.kind == "barrier" for pw in peer.waits):
            doing = _activity(peer) if peer else "is not part of the group"
            got = f"{w.observed} of {w.expected}" if w.observed < w.expected else str(w.observed)
            summary = (f"Missing signal: rank {w.rank} still waits at line {w.site} for {w.kind} {w.id} from rank "
                       f"{w.peer} (seen {got}), but rank {w.peer} {doing}: the signal it should send never came.")
            return HangDiagnosis("missing_signal", summary, details, (), tuple(views))

    barrier_waits = [w for v in views for w in v.waits if w.kind == "barrier"]
    if barrier_waits:
        inside = sorted({w.rank for w in barrier_waits})
        outside = [r for r in range(world) if r not in inside]
        sites = sorted({w.site for w in barrier_waits})
        if outside:
            others = "; ".join(f"rank {r} {_activity(by_rank[r])}" if r in by_rank else f"rank {r} reported nothing"
                               for r in outside)
            summary = (f"Barrier entered by fewer ranks than the team has: {len(inside)} of {world} "
                       f"(ranks {', '.join(map(str, inside))}) wait at line {', '.join(map(str, sites))}; {others}.")
            return HangDiagnosis("short_barrier", summary, details, (), tuple(views))
        summary = (f"Every rank waits in a barrier (lines {', '.join(map(str, sites))}) yet none is released: "
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


def describe_hang(outcomes: list[RankOutcome]) -> str:
    """The deadlock report stored in a CascadeResult."""
    return analyze(outcomes).render()
