"""The chunk dimension: the host loops around the transfers, over peers (shard) or over pieces
of the data (a count of pieces per shard when the loop bounds are constants, or a row layout's
chunks), and the pieces a runtime mover cuts each shard into itself."""

from __future__ import annotations

from typing import Iterable

from cuco_tui.design.classify.evidence import Evidence, Finding, KernelLaunch
from cuco_tui.design.classify.reading import Reading
from cuco_tui.design.space import DesignPoint


def host_transfers(r: Reading, launches: Iterable[tuple[int, KernelLaunch]]) -> list[tuple[int, int | None]]:
    """(offset, pieces) of the host-level transfers: data-moving API calls in host code, then the
    launches of kernels that move data; `pieces` is what a runtime mover cuts each shard into
    itself (None for any other transfer)."""
    out: list[tuple[int, int | None]] = [(offset, None) for offset, site in r.found
                                         if site.role == "data" and site.where == "host"]
    return out + [(offset, launch.pieces) for offset, launch in launches if launch.moves_data]


def read(r: Reading, transfers: Iterable[tuple[int, int | None]]) -> tuple[str, int | None]:
    """(chunking, pieces per shard): "pieces" wins over "shard", "shard" over "full"; "" when no
    transfer is issued from the host. A runtime mover that sends each shard to every peer in
    one piece is "shard"; in several, "pieces"."""
    chunking, chunk_count = "", None
    for off, own in transfers:
        around = [lp for lp in r.loops_around(off) if r.where(lp.start) == "host"]
        counts = [r.loop_count(lp) for lp in around if r.is_piece_loop(lp)]
        if own is not None and own >= 2:
            counts.append(own)
        if counts:
            total: int | None = 1
            for n in counts:
                total = None if total is None or n is None else total * n
            if chunking != "pieces":
                chunking, chunk_count = "pieces", total
            elif total is not None and chunk_count is not None:
                chunk_count = max(chunk_count, total)
        elif own == 1 or any(r.over_peers(lp) for lp in around):
            if chunking != "pieces":
                chunking = "shard"
        elif not chunking:
            chunking = "full"
    return chunking, chunk_count if chunking == "pieces" else None


def check(d: DesignPoint, ev: Evidence) -> list[Finding]:
    """Only where the transfers are issued by the host, so the loops are visible."""
    if ev.issuer != "host":
        return []
    if ev.chunking == "pieces":
        if d.chunk in ("full", "shard") and ev.chunk_count != 1:
            pieces = f"{ev.chunk_count} pieces" if ev.chunk_count else "pieces"
            return [(f"declares chunk={d.chunk} but the transfers are issued in a loop over {pieces} per shard", None)]
        if d.chunk.isdigit() and ev.chunk_count is not None and ev.chunk_count != int(d.chunk):
            return [(f"declares chunk={d.chunk} but the transfers are issued in {ev.chunk_count} pieces per shard",
                     None)]
    elif ev.chunking in ("full", "shard") and d.chunk.isdigit():
        what = "once" if ev.chunking == "full" else "once per peer"
        return [(f"declares chunk={d.chunk} but every transfer is issued {what}, not in pieces", None)]
    return []
