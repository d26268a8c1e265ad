"""The backend dimension: the calls that move the data, against those that only set up, signal
or synchronize, and peer-memory copies on the copy engines (the runtime's `tg::ce_copy` too)."""

from __future__ import annotations

from cuco_tui.design.classify.evidence import Evidence, Finding, cite
from cuco_tui.design.classify.patterns import API_PATTERNS, MEMCPY
from cuco_tui.design.classify.reading import Reading
from cuco_tui.design.classify.tile_gemm import COPIES
from cuco_tui.design.space import BACKENDS, DesignPoint


def read_api_calls(r: Reading) -> None:
    """A site for every call of a backend's API (and every generic wait)."""
    for pattern, backend, role in API_PATTERNS:
        for m in pattern.finditer(r.text):
            r.add(m.group(0).rstrip("( \t\n").lstrip("."), m.start(), role, backend)


def read_peer_copies(r: Reading) -> None:
    """A data site of the copy engines for every cudaMemcpy* into or out of peer memory."""
    for m in MEMCPY.finditer(r.text):
        args = r.args(m.end() - 1)
        if len(args) >= 2 and (r.touches_peer(args[0]) or r.touches_peer(args[1])):
            way = "into" if r.touches_peer(args[0]) else "from"
            r.add(f"{m.group(0).rstrip('( ')} {way} peer memory", m.start(), "data", "copy_engine")


def read_runtime_calls(r: Reading) -> None:
    """The fused GEMM runtime's host calls: `tg::ce_copy` into or out of peer memory is a copy
    on the copy engines (data); a FlagWriter's `.post(stream, &flag, v)` into peer memory is a
    stream-ordered flag write (a signal), never a transfer."""
    tg = r.tile_gemm
    for copy, (dst, src, _, count) in COPIES.items():
        for call in tg.free_calls(copy):
            args = call.texts
            if r.where(call.at) == "host" and len(args) == count and (r.touches_peer(args[dst]) or r.touches_peer(args[src])):
                way = "into" if r.touches_peer(args[dst]) else "from"
                r.add(f"{call.qualified} {way} peer memory", call.at, "data", "copy_engine")
    for call in tg.member_calls("post", tg.writers):
        if r.where(call.at) == "host" and len(call.args) >= 2 and r.touches_peer(call.texts[1]):
            r.add(f"{call.receiver}.post (FlagWriter) into peer memory", call.at, "signal", "cuda_ipc")


def read(r: Reading) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(every backend named, those that move data), each in BACKENDS order."""
    named = {s.backend for _, s in r.found if s.backend}
    data = {s.backend for _, s in r.found if s.backend and s.role == "data"}
    return tuple(b for b in BACKENDS if b in named), tuple(b for b in BACKENDS if b in data)


def check(d: DesignPoint, ev: Evidence) -> list[Finding]:
    if ev.data_backends and d.backend not in ev.data_backends:
        seen = "; ".join(f"{cite(ev.first(backend=b, role='data'))} ({b})" for b in ev.data_backends)
        first = ev.first(backend=ev.data_backends[0], role="data")
        if d.backend in ev.backends:
            used = cite(ev.first(backend=d.backend))
            return [(f"declares backend={d.backend} but the data moves by {seen}; {d.backend} only appears in "
                     f"setup or signalling ({used})", first)]
        return [(f"declares backend={d.backend} but uses {seen}", first)]
    if not ev.data_backends and ev.backends and d.backend not in ev.backends:
        seen = "; ".join(f"{cite(ev.first(backend=b))} ({b})" for b in ev.backends)
        return [(f"declares backend={d.backend} but uses {seen}", ev.first(backend=ev.backends[0]))]
    if not ev.backends:
        return [(f"declares backend={d.backend} but no communication call was found in the EVOLVE blocks", None)]
    return []
