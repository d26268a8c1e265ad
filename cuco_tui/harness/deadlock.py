"""Plain-words account of a hang, from the ranks' timeout events and wait traces.

This first version says, per rank, what did not finish and where its blocks wait; the
wait-for graph across ranks (cycles, missing signals, short barriers) builds on it."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from cuco_tui.harness.launcher import RankOutcome


def _site_summary(trace: list[dict[str, Any]]) -> list[str]:
    waiting: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for slot in trace:
        if slot.get("state") == "waiting":
            waiting[(slot["site"], slot["kind"], slot["peer"], slot["expected"])].append(slot)
    lines = []
    for (site, kind, peer, expected), slots in sorted(waiting.items()):
        who = "the whole team" if peer < 0 else f"rank {peer}"
        ids = sorted({s["id"] for s in slots})
        id_text = f"id {ids[0]}" if len(ids) == 1 else f"ids {ids[0]}..{ids[-1]}"
        observed = sorted({s["observed"] for s in slots})
        if kind == "barrier":
            what = f"in a barrier with {who} ({id_text})"
        else:
            seen = ", ".join(str(o) for o in observed[:4])
            what = f"for {kind} {id_text} of {who} to reach {expected} (last seen {seen})"
        done = sum(s["completed"] for s in slots)
        lines.append(f"{len(slots)} block(s) wait at line {site} {what}; {done} earlier wait(s) at these slots completed")
    return lines


def describe_hang(outcomes: list[RankOutcome]) -> str:
    lines = []
    for o in outcomes:
        event = o.last("timeout") or o.last("aborted")
        if event is None:
            if o.last("done"):
                lines.append(f"rank {o.rank}: finished every step")
            else:
                lines.append(f"rank {o.rank}: {o.describe_exit()} (no trace)")
            continue
        verb = "timed out" if event["event"] == "timeout" else "was stopped after another rank failed"
        lines.append(f"rank {o.rank} {verb} during {event.get('what') or event.get('phase')} "
                     f"[{event.get('phase')}]")
        sites = _site_summary(event.get("trace", []))
        if sites:
            lines += [f"  {s}" for s in sites]
        elif event["event"] == "timeout":
            lines.append("  no block was inside a wait helper: the kernel is computing or spinning outside "
                         "cuco's traced waits (an endless loop?), or it waits in code that does not use them")
    return "\n".join(lines)
