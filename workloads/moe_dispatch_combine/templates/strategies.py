"""Strategy templates of moe_dispatch_combine for the offline agent: each covers a region of the
design space; its knobs pick the point. Loaded by cuco_tui.agents.offline."""

from cuco_tui.agents.offline.strategy import Strategy, chunk, comm_sms
from cuco_tui.design.space import DesignPoint


def _peer_transport(k: dict, sync: str, pieces: str, streams: str = "2") -> DesignPoint:
    """The design point of a template that moves rows over CUDA-IPC, by the copy engines or a
    store kernel of k["mover_blocks"] CTAs."""
    ce = k["mover"] == "copy_engine"
    return DesignPoint(
        backend="copy_engine" if ce else "cuda_ipc",
        placement="interleaved",
        sync=sync,
        issuer="host" if ce else "multi_cta",
        chunk=pieces,
        streams=streams,
        comm_sms="0" if ce else comm_sms(k["mover_blocks"]),
    )


# How the expert phase runs its grouped GEMMs: CUTLASS's ptr-array grouped GEMM prebuilt per machine
# (cutlass_grouped.cuh.j2, cuco_grouped_gemm_lib.h: one persistent launch per projection, sizes
# filled on the device from the counts) with 1x1 or 1x2 clusters of 128x256 tiles, or cuBLAS
# (grouped_gemm.cuh.j2: one grouped call or one GEMM per expert, sizes planned on the host). CUTLASS
# first: on one H100 it was 103-142 % of the faster cuBLAS way on every expert problem of the bench
# shapes at W=2 and W=4 (docs/grouped_gemm.md, 2026-12-07).
GEMMS = ("cutlass_grouped", "cublas", "cutlass_grouped_1x2")


def _ipc_dispatch_normalize(k: dict) -> dict:
    if k.get("mover") == "copy_engine":
        k["mover_blocks"] = 16  # the copy engines need no store kernel: its size changes nothing
    return k


STRATEGIES = [
    Strategy(
        name="host_sequential",
        template="host_sequential.cu.j2",
        description="sort rows by expert, NCCL counts exchange, grouped NCCL send/recv dispatch, one cuBLAS grouped "
                    "GEMM per projection (one GEMM per expert when they average many rows), grouped send/recv "
                    "combine, weighted sum; one stream (the seed)",
        knobs={},
        design=lambda k: DesignPoint("nccl_host", "before", "per_peer", "host", "shard", "1", "0"),
    ),
    Strategy(
        name="dispatch_overlap",
        template="dispatch_overlap.cu.j2",
        description="the rows routed to this rank's own experts are computed on the harness's stream straight from "
                    "the send buffer while a second stream moves, computes and returns the remote rows with NCCL",
        knobs={"comm_priority": ("high", "same")},
        design=lambda k: DesignPoint("nccl_host", "interleaved", "per_peer", "host", "shard", "2", "0"),
    ),
    Strategy(
        name="chunked_pipeline",
        template="chunked_pipeline.cu.j2",
        description="local experts split into groups; each group's rows dispatched by its own NCCL send/recv on a "
                    "communication stream, computed as soon as they land, and combined back group by group",
        knobs={"chunks": (4, 2, 8)},
        design=lambda k: DesignPoint("nccl_host", "interleaved", "per_chunk", "host", str(k["chunks"]), "2", "0"),
    ),
    Strategy(
        name="ipc_dispatch",
        template="ipc_dispatch.cu.j2",
        description="no NCCL in the iteration: counts into every peer's inbox, rows pushed into every peer's receive "
                    "slot over CUDA-IPC (a store kernel or the copy engines) with per-peer counters; own rows computed "
                    "at once, each peer's rows as they land, results pushed back the same way",
        knobs={"mover": ("ipc", "copy_engine"), "mover_blocks": (16, 8, 32, 64)},
        design=lambda k: _peer_transport(k, "per_peer", "shard"),
        normalize=_ipc_dispatch_normalize,
        fast_path=True,
    ),
    Strategy(
        name="expert_pipeline",
        template="expert_pipeline.cu.j2",
        description="ipc_dispatch's transport by groups of experts: each group's rows pushed into every peer's "
                    "receive slot over CUDA-IPC (the copy engines or a store kernel) with a counter per (peer, group); "
                    "each group computed once all its rows have landed, every expert in one GEMM pair over its rows "
                    "from all ranks (its weights read once), its results pushed back while the next group computes "
                    "(on the copy stream, or on a results stream of their own); the GEMMs cuBLAS's or one CUTLASS ptr-array "
                    "grouped launch per projection and group, sizes filled on the device",
        knobs={"mover": ("copy_engine", "ipc"), "groups": (4, 2, 8, 16), "mover_blocks": (16, 64),
               "results": ("shared", "separate"), "gemm": GEMMS},
        design=lambda k: _peer_transport(k, "per_chunk", chunk(k["groups"]), "3" if k["results"] == "separate" else "2"),
        normalize=_ipc_dispatch_normalize,
    ),
    Strategy(
        name="arrival_pipeline",
        template="arrival_pipeline.cu.j2",
        description="Comet's token-arrival order over CUDA-IPC: own rows computed first, then every peer's rows "
                    "chunk by chunk as they land (chunks of about equal rows cut on 128-row tiles, a counter per "
                    "(peer, chunk), pushed chunk-major by the copy engines or a store kernel), each chunk one grouped "
                    "GEMM per projection over the experts it holds (cuBLAS's, or one CUTLASS ptr-array grouped "
                    "launch whose sizes are filled on the device), its results pushed back on a results stream "
                    "while the next chunk computes",
        knobs={"mover": ("copy_engine", "ipc"), "chunks": (4, 1, 2, 8), "mover_blocks": (16, 32, 64),
               "gemm": GEMMS},
        design=lambda k: _peer_transport(k, "per_chunk" if k["chunks"] > 1 else "per_peer", chunk(k["chunks"]), "3"),
        normalize=_ipc_dispatch_normalize,
    ),
]
