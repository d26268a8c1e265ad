"""Strategy templates of gemm_reducescatter for the offline agent: each covers a region of the
design space; its knobs pick the point. Loaded by cuco_tui.agents.offline."""

from cuco_tui.agents.offline.strategy import Strategy, chunk
from cuco_tui.design.space import DesignPoint


def _host_chunked(k: dict) -> DesignPoint:
    # A reduce-scatter per chunk carries every owner's piece at once (the chunks cut the whole
    # partial); a reduce per owner and chunk carries one owner's piece.
    whole = "shard" if k["collective"] == "reduce" else "full"
    return DesignPoint("nccl_host", "interleaved", "per_chunk", "host", chunk(k["chunks"], whole), "2", "0")


def _ce_push(k: dict) -> DesignPoint:
    return DesignPoint(
        backend="copy_engine",
        placement="interleaved",
        sync="per_chunk" if k["chunks"] > 1 else "per_peer",
        issuer="host",
        chunk=chunk(k["chunks"]),
        # A copy stream per peer: W streams in all, "4" standing for 4 or more (2 at W = 2).
        streams="4" if k["movers"] == "per_peer" else "2",
        comm_sms="0",
    )


STRATEGIES = [
    Strategy(
        name="host_sequential",
        template="host_sequential.cu.j2",
        description="one cuBLAS GEMM of the whole partial, then one NCCL reduce-scatter, on one stream (the seed)",
        knobs={},
        design=lambda k: DesignPoint("nccl_host", "after", "global", "host", "full", "1", "0"),
    ),
    Strategy(
        name="host_chunked",
        template="host_chunked.cu.j2",
        description="the GEMM in row chunks on the main stream; each chunk's NCCL reduce-scatter (or one NCCL "
                    "reduce per owner and chunk) on a second stream while the next chunk is multiplied",
        knobs={"chunks": (4, 2, 8), "collective": ("reduce_scatter", "reduce")},
        design=_host_chunked,
    ),
    Strategy(
        name="ce_push",
        template="ce_push.cu.j2",
        description="per owner, next peer first and own rows last, a cuBLAS GEMM of the owner's rows, pushed by the "
                    "copy engines into the owner's staging slot for this rank (CUDA-IPC, two slots by launch parity) "
                    "with a stream-ordered flag per chunk; the owner sums the W partials in one kernel that waits "
                    "on the flags; the copies on one stream or on a stream per peer (run at once)",
        knobs={"chunks": (1, 2, 4), "reduce_blocks": (128, 64, 256), "movers": ("one", "per_peer")},
        design=_ce_push,
    ),
    Strategy(
        name="ce_fold",
        template="ce_fold.cu.j2",
        description="the peers' rows as ce_push (per owner, next peer first, cuBLAS GEMM per chunk pushed by the copy "
                    "engines into the owner's staging slot, two slots by launch parity, a stream-ordered flag per "
                    "chunk); the own rows last, chunk by chunk: a one-thread kernel waits for the chunk's flags, "
                    "then one cuBLASLt matmul folds the received partial in as C (y = A_own B + C; at W > 2 the "
                    "received partials summed first): no summing pass over the slots and y after the GEMMs",
        knobs={"chunks": (4, 2, 8), "movers": ("one", "per_peer")},
        design=_ce_push,
    ),
]
