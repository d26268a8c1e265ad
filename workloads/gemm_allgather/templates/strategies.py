"""Strategy templates of gemm_allgather for the offline agent: each covers a region of the
design space; its knobs pick the point. Loaded by cuco_tui.agents.offline."""

from cuco_tui.agents.offline.strategy import Strategy, chunk, comm_sms
from cuco_tui.design.space import DesignPoint


def _peer_pipeline(k: dict) -> DesignPoint:
    ce = k["mover"] == "copy_engine"
    return DesignPoint(
        backend="copy_engine" if ce else "cuda_ipc",
        placement="interleaved",
        sync="per_chunk" if k["chunks"] > 1 else "per_peer",
        issuer="host" if ce else "multi_cta",
        chunk=chunk(k["chunks"]),
        streams="3" if k["own_rows"] == "parallel" else "2",
        comm_sms="0" if ce else comm_sms(k["mover_blocks"]),
    )


def _peer_pipeline_normalize(k: dict) -> dict:
    if k.get("mover") == "copy_engine":
        k["mover_blocks"] = 16  # the copy engines need no store kernel: its size changes nothing
    return k


def _fused_tile(k: dict) -> DesignPoint:
    ce = k["mover"] == "copy_engine"
    return DesignPoint(
        backend="copy_engine" if ce else "cuda_ipc",
        placement="fused",
        sync="per_chunk" if k["chunks"] > 1 or k.get("k_slices", 1) > 1 else "per_peer",
        issuer="host" if ce else "multi_cta",
        # one row chunk cut along K is that many pieces; more row chunks keep their count
        chunk=chunk(k["chunks"] if k["chunks"] > 1 else k.get("k_slices", 1)),
        # fanout=all with the copy engines: a copy stream per peer (W - 1 of them) beside the
        # harness's and the join stream: "4" is the dimension's "4 or more".
        streams="4" if ce and k.get("fanout") == "all" else "2",
        comm_sms="0" if ce else comm_sms(k["mover_blocks"]),
    )


def _fused_tile_normalize(k: dict) -> dict:
    if k.get("mover") == "copy_engine":
        k["mover_blocks"] = 16  # no store kernel: its size changes nothing
    else:
        k["k_slices"] = 1  # the store kernel moves a chunk whole: K slices would only add flags
        if k.get("fanout") == "paced":
            k["fanout"] = "ring"  # the pacing is a copy stream's wait: the store kernel has none
    return k


STRATEGIES = [
    Strategy(
        name="host_sequential",
        template="host_sequential.cu.j2",
        description="NCCL all-gather, then one cuBLAS GEMM, on one stream (the seed)",
        knobs={},
        design=lambda k: DesignPoint("nccl_host", "before", "global", "host", "full", "1", "0"),
    ),
    Strategy(
        name="host_chunked",
        template="host_chunked.cu.j2",
        description="chunked NCCL all-gathers on a second stream, a strided-batched GEMM per landed chunk",
        knobs={"chunks": (4, 2, 8)},
        design=lambda k: DesignPoint("nccl_host", "interleaved", "per_chunk", "host", chunk(k["chunks"]), "2", "0"),
    ),
    Strategy(
        name="lsa_gather",
        template="lsa_gather.cu.j2",
        description="device-initiated all-gather by LSA stores into symmetric windows between two LSA barriers, then cuBLAS",
        knobs={"copy_blocks": (64, 16, 32, 128), "copy_threads": (512, 256, 1024)},
        design=lambda k: DesignPoint("nccl_lsa", "before", "global", "multi_cta", "full", "1", comm_sms(k["copy_blocks"])),
        fast_path=True,
    ),
    Strategy(
        name="peer_pipeline",
        template="peer_pipeline.cu.j2",
        description="push shards to peers through CUDA-IPC (copy engines or a store kernel) in chunks with per-peer "
                    "flags; own rows multiplied at once, each peer chunk as soon as it lands",
        knobs={"mover": ("copy_engine", "ipc"), "chunks": (1, 2, 4, 8), "own_rows": ("first", "parallel"),
               "mover_blocks": (16, 8, 32)},
        design=_peer_pipeline,
        normalize=_peer_pipeline_normalize,
    ),
    Strategy(
        name="fused_tile",
        template="fused_tile.cu.j2",
        description="one persistent Hopper GEMM (CUTLASS wgmma + TMA, cuco_tile_gemm.cuh) whose tiles run in arrival "
                    "order and wait per row chunk on flags that the mover (copy engines + stream-ordered flag writes, "
                    "or a store kernel on reserved SMs) posts in peer memory; with k_slices > 1 the copy engines cut "
                    "each shard's last chunk along K, a flag per slice, so its tiles start before it has all landed",
        knobs={"chunks": (4, 2, 8, 16, 1), "mover": ("copy_engine", "sm_store"), "mover_blocks": (16, 8, 32),
               "tile": ("128x256", "256x128"), "cluster": ("2x1", "1x2"), "tile_order": ("auto", "arrival", "square"),
               "fanout": ("ring", "all", "paced"), "k_slices": (1, 2, 4, 8)},
        design=_fused_tile,
        normalize=_fused_tile_normalize,
        # each tile x cluster is a CUTLASS library of its own (a minute of nvcc the first time)
        build_knobs=("tile", "cluster"),
        # at W = 2 there is one ring step: paced waits for nothing and runs as the ring does
        applies=lambda k, caps: k.get("fanout") != "paced" or caps.world > 2,
    ),
]
