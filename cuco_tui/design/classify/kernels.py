"""The kernel launches of a candidate as design evidence: grid, stream, and what the kernel
does (the device API it communicates with, stores through peer pointers, waits, computes), with
the fused GEMM runtime's kernels and launcher known by name (tile_gemm)."""

from __future__ import annotations

from cuco_tui.design.classify.evidence import KernelLaunch
from cuco_tui.design.classify.facts import BodyFacts
from cuco_tui.design.classify.peers import mentions
from cuco_tui.design.classify.reading import Reading
from cuco_tui.design.classify.streams import stream_name
from cuco_tui.design.classify.tile_gemm import FUSED_KERNEL


def read_launches(r: Reading) -> list[tuple[int, KernelLaunch]]:
    """(offset, launch) for every launch in the EVOLVE blocks, in file order; a kernel that reaches
    peer memory through CUDA-IPC pointers is recorded as a site too (data when it stores in a
    loop, else a signal)."""
    out = []
    for launch in r.view.launches:
        kernel, offset = launch.kernel, launch.config_at
        f = r.by_name.get(kernel)
        runtime = r.tile_gemm.kernel(launch, r.touches_peer) if f is None else None
        bf = r.facts.get(kernel, runtime.facts if runtime else BodyFacts())
        args = " ".join(a.text for a in launch.args or ())
        backend, moves = bf.api_backend, bf.api_moves_data
        peer_args = (r.touches_peer(args) or mentions(args, r.peer_tables) or bf.peer_index
                     or (bool(r.peer_tables) and mentions(r.body(f), r.peer_tables))
                     or (runtime is not None and runtime.reaches_peer))
        if not backend and peer_args:
            backend, moves = "cuda_ipc", bf.loop_store
        grid = launch.grid
        out.append((offset, KernelLaunch(kernel, r.view.line(offset), grid, launch.block, stream_name(launch.stream),
                                         r.view.constants.blocks(grid) if grid else None,
                                         backend, moves, bf.waits, bf.computes, runtime.pieces if runtime else None)))
        if backend == "cuda_ipc" and (f is not None or runtime is not None):
            r.add(f"{kernel}<<<>>> stores through peer pointers" if moves else f"{kernel}<<<>>> posts to a peer",
                  offset, "data" if moves else "signal", "cuda_ipc")
    out += _fused_gemm_launches(r)
    return sorted(out, key=lambda located: located[0])


def _fused_gemm_launches(r: Reading) -> list[tuple[int, KernelLaunch]]:
    """`gemm.launch(stream, e)` on a FusedGemm or FusedGemmLib, in host code: the runtime launches
    its fused kernel, which waits on the row chunks' arrival flags and computes."""
    out = []
    for call in r.tile_gemm.member_calls("launch", r.tile_gemm.gemms):
        if r.where(call.at) != "host" or not call.args:
            continue
        out.append((call.at, KernelLaunch(FUSED_KERNEL, r.view.line(call.at), "", "", stream_name(call.texts[0]),
                                          waits=True, computes=True, pieces=r.tile_gemm.chunks)))
    return out
