"""The sync dimension: per-peer or per-piece flag waits (`cuco::wait_geq`, acquire loads that
poll, GIN/NVSHMEM signal waits, event waits in loops) against team barriers and collectives."""

from __future__ import annotations

from typing import Iterable

from cuco_tui.design.classify.evidence import Evidence, Finding, KernelLaunch, cite
from cuco_tui.design.classify.patterns import ACQUIRE_LOAD, EVENT_WAIT, HOST_COLLECTIVE
from cuco_tui.design.classify.reading import Reading
from cuco_tui.design.space import DesignPoint


def read_wait_sites(r: Reading) -> None:
    """Waits no API pattern names: event waits inside loops are per-piece (or per-peer) waits
    (outside loops they fork and join), and acquire loads that poll in device code."""
    for m in EVENT_WAIT.finditer(r.text):
        if r.loops_around(m.start()):
            r.add(m.group(0).rstrip("( "), m.start(), "wait")
    for m in ACQUIRE_LOAD.finditer(r.text):
        if r.where(m.start()) != "host" and r.in_loop(m.start()):
            r.add("acquire load in a loop", m.start(), "wait")


def read(r: Reading, launches: Iterable[tuple[int, KernelLaunch]]) -> tuple[int, int, int]:
    """(flag waits, those inside a loop over pieces, barriers and host collectives). A launch of a
    kernel that waits without communicating itself is a flag wait, per piece when it waits on
    several pieces of each shard one at a time (the fused GEMM on its row chunks)."""
    waits = [off for off, s in r.found if s.role == "wait" or s.what in ("ncclSend", "ncclRecv")]
    waiting = [(off, k) for off, k in launches if k.waits and not k.backend]
    waits += [off for off, _ in waiting]
    chunk_waits = sum(1 for off in waits if any(r.is_piece_loop(lp) for lp in r.loops_around(off)))
    chunk_waits += sum(1 for off, k in waiting if (k.pieces or 0) >= 2
                       and not any(r.is_piece_loop(lp) for lp in r.loops_around(off)))
    barriers = sum(1 for _, s in r.found if s.role == "barrier" or HOST_COLLECTIVE.match(s.what))
    return len(waits), chunk_waits, barriers


def check(d: DesignPoint, ev: Evidence) -> list[Finding]:
    if d.sync == "global" and ev.flag_waits and not ev.barriers:
        site = next((s for s in ev.sites if s.role == "wait"), None)
        return [(f"declares sync=global but waits on per-peer flags{' (' + cite(site) + ')' if site else ''} and "
                 f"has no barrier or collective", site)]
    if d.sync in ("per_peer", "per_chunk") and not ev.flag_waits and ev.barriers:
        return [(f"declares sync={d.sync} but synchronizes only through barriers or collectives "
                 f"({cite(ev.first(role='barrier')) or 'a host collective'}); no per-peer wait was found",
                 ev.first(role="barrier"))]
    return []
