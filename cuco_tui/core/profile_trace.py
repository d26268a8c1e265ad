"""A profile's activities as a Chrome trace (JSON, the "Trace Event Format"), which ui.perfetto.dev
and chrome://tracing open: one process per rank, one thread per stream, each kernel, copy or
memset a complete event ("ph": "X") in the category "compute" or "communication" (core/profile.py
`is_communication`), so either can be picked out in the viewer.

Times are microseconds (the format's unit) from the earliest activity of any rank: CUPTI stamps
every rank's activities with the host's clock, so the ranks line up. The file is kept under a size
(a session stores it with the candidate): activities are dropped from the end of each rank's time,
evenly between ranks, until it fits, and the trace and `kept` say how many were left out."""

from __future__ import annotations

import json
from dataclasses import dataclass

from cuco_tui.core.profile import Activity, is_communication

MAX_TRACE_BYTES = 5 * 1000 * 1000  # under 5 MB
NAME_CHARS = 240  # a CUTLASS kernel's mangled name runs to thousands of characters


@dataclass(frozen=True)
class Trace:
    text: str  # the JSON
    kept: int  # activities in it
    total: int  # activities given
    limit: int = MAX_TRACE_BYTES  # the size it was kept under

    @property
    def note(self) -> str:
        """What was left out, in one sentence ("" when nothing was)."""
        if self.kept >= self.total:
            return ""
        return (f"the trace keeps the first {self.kept} of {self.total} activities (each rank's earliest) to stay "
                f"under {self.limit / 1e6:g} MB; the summary counts them all")


def _name(a: Activity) -> str:
    return a.name if len(a.name) <= NAME_CHARS else a.name[:NAME_CHARS - 1] + "…"


def trace_events(per_rank: dict[int, list[Activity]], keep: int | None = None,
                 gpus: dict[int, int] | None = None) -> list[dict]:
    """The trace's events: names of processes (ranks) and threads (streams), then each rank's first
    `keep` activities in time (all when None)."""
    everything = [a for acts in per_rank.values() for a in acts]
    origin = min((a.start_ns for a in everything), default=0)
    events: list[dict] = []
    for rank in sorted(per_rank):
        acts = sorted(per_rank[rank], key=lambda a: (a.start_ns, a.end_ns))[:keep]
        gpu = (gpus or {}).get(rank)
        events.append({"ph": "M", "name": "process_name", "pid": rank, "tid": 0,
                       "args": {"name": f"rank {rank}" + (f" (GPU {gpu})" if gpu is not None else "")}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": rank, "tid": 0, "args": {"sort_index": rank}})
        for stream in sorted({a.stream for a in acts}):
            events.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": stream,
                           "args": {"name": f"stream {stream}"}})
        for a in acts:
            args: dict = {"kind": a.kind, "device": a.device}
            if a.copy_kind:
                args["copy_kind"] = a.copy_kind
            if a.bytes:
                args["bytes"] = a.bytes
            events.append({"ph": "X", "name": _name(a), "cat": "communication" if is_communication(a) else "compute",
                           "pid": rank, "tid": a.stream, "ts": (a.start_ns - origin) / 1000.0,
                           "dur": a.duration_ns / 1000.0, "args": args})
    return events


def chrome_trace(per_rank: dict[int, list[Activity]], gpus: dict[int, int] | None = None,
                 max_bytes: int = MAX_TRACE_BYTES) -> Trace:
    """The trace of every rank's activities, as JSON under `max_bytes`."""
    total = sum(len(acts) for acts in per_rank.values())
    keep: int | None = None  # per rank
    while True:
        events = trace_events(per_rank, keep, gpus)
        kept = sum(1 for e in events if e["ph"] == "X")
        body = {"traceEvents": events, "displayTimeUnit": "ns",
                "otherData": {"activities": total, "kept": kept}}
        text = json.dumps(body, separators=(",", ":"))
        longest = max((len(acts) for acts in per_rank.values()), default=0)
        if len(text.encode()) <= max_bytes or not longest or keep == 0:
            return Trace(text, kept, total, max_bytes)
        # Shrink in proportion to the excess, a little more, so one or two passes fit.
        current = longest if keep is None else keep
        keep = max(0, min(current - 1, int(current * max_bytes / len(text.encode()) * 0.95)))
