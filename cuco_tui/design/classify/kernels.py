"""The kernel launches of a candidate as design evidence: grid, stream, and what the kernel
does (the device API it communicates with, stores through peer pointers, waits, computes)."""

from __future__ import annotations

from cuco_tui.design.classify.evidence import KernelLaunch
from cuco_tui.design.classify.facts import BodyFacts
from cuco_tui.design.classify.peers import mentions
from cuco_tui.design.classify.reading import Reading
from cuco_tui.design.classify.streams import stream_name


def read_launches(r: Reading) -> list[tuple[int, KernelLaunch]]:
    """(offset, launch) for every launch in the EVOLVE blocks; a kernel that reaches peer memory
    through CUDA-IPC pointers is recorded as a site too (data when it stores in a loop, else a
    signal)."""
    out = []
    for launch in r.view.launches:
        kernel, offset = launch.kernel, launch.config_at
        f = r.by_name.get(kernel)
        bf = r.facts.get(kernel, BodyFacts())
        args = " ".join(a.text for a in launch.args or ())
        backend, moves = bf.api_backend, bf.api_moves_data
        peer_args = (r.touches_peer(args) or mentions(args, r.peer_tables) or bf.peer_index
                     or (bool(r.peer_tables) and mentions(r.body(f), r.peer_tables)))
        if not backend and peer_args:
            backend, moves = "cuda_ipc", bf.loop_store
        grid = launch.grid
        out.append((offset, KernelLaunch(kernel, r.view.line(offset), grid, launch.block, stream_name(launch.stream),
                                         r.view.constants.blocks(grid) if grid else None,
                                         backend, moves, bf.waits, bf.computes)))
        if backend == "cuda_ipc" and f is not None:
            r.add(f"{kernel}<<<>>> stores through peer pointers" if moves else f"{kernel}<<<>>> posts to a peer",
                  offset, "data" if moves else "signal", "cuda_ipc")
    return out
