"""Strategy templates of cp_attention for the offline agent: each covers a region of the design
space; its knobs pick the point. Loaded by cuco_tui.agents.offline. Templates that cut attention by
the keys' source run each piece through the harness attention (cuDNN) with stats and merge them by
log-sum-exp (lse_merge.cuh.j2, included); host_flash, and ring and ipc_pull with
attention=blockwise, run the templates' own blockwise kernel (flash_attention.cuh.j2) instead."""

from cuco_tui.agents.offline.strategy import Strategy, chunk, comm_sms
from cuco_tui.design.space import DesignPoint


def _ipc_pull(k: dict) -> DesignPoint:
    ce = k["mover"] == "copy_engine"
    return DesignPoint(
        backend="copy_engine" if ce else "cuda_ipc",
        placement="interleaved",
        sync="per_chunk" if k["chunks"] > 1 else "per_peer",
        issuer="host" if ce else "multi_cta",
        chunk=chunk(k["chunks"]),
        streams="2",
        comm_sms="0" if ce else comm_sms(k["mover_blocks"]),
    )


def _ipc_pull_normalize(k: dict) -> dict:
    if k.get("mover") == "copy_engine":
        k["mover_blocks"] = 16  # the copy engines need no load kernel: its size changes nothing
    return k


def _balance_overlap(k: dict) -> DesignPoint:
    # per_source: one NCCL group per ring step, an event per source rank, a call per landed chunk;
    # grouped: one group and one event for every chunk the rank needs.
    return DesignPoint("nccl_host", "interleaved", "per_peer", "host", "shard", "2", "0")


STRATEGIES = [
    Strategy(
        name="host_sequential",
        template="host_sequential.cu.j2",
        description="NCCL all-gathers of K and V, then attention by query blocks with cuBLAS batched GEMMs around "
                    "a softmax kernel, on one stream (the seed before the harness attention library)",
        knobs={},
        design=lambda k: DesignPoint("nccl_host", "before", "global", "host", "full", "1", "0"),
    ),
    Strategy(
        name="host_attn",
        template="host_attn.cu.j2",
        description="NCCL all-gathers of K and V, then one call of the harness attention (cuDNN's SDPA) over every "
                    "visible key, bottom-right causal mask (the seed: the reference in C)",
        knobs={},
        design=lambda k: DesignPoint("nccl_host", "before", "global", "host", "full", "1", "0"),
    ),
    Strategy(
        name="host_flash",
        template="host_flash.cu.j2",
        description="NCCL all-gathers of K and V, then one fused blockwise attention kernel (online softmax, "
                    "tensor cores) over every visible key: the kernel's gain without overlap",
        knobs={},
        design=lambda k: DesignPoint("nccl_host", "before", "global", "host", "full", "1", "0"),
    ),
    Strategy(
        name="ring",
        template="ring.cu.j2",
        description="ring attention: K/V blocks passed around the ring by NCCL send/recv on a communication "
                    "stream, double-buffered, while the block already held is attended to: one harness attention "
                    "call (cuDNN) with stats per block and a log-sum-exp merge at the end, or the templates' "
                    "blockwise kernel merging by online-softmax statistics; causal ranks skip the blocks after them",
        knobs={"attention": ("cudnn", "blockwise"), "comm_priority": ("high", "same")},
        design=lambda k: DesignPoint("nccl_host", "interleaved", "per_peer", "host", "shard", "2", "0"),
    ),
    Strategy(
        name="attn_overlap",
        template="attn_overlap.cu.j2",
        description="the harness attention (cuDNN) on the own chunk first while NCCL send/recv on a communication "
                    "stream brings in only the K/V chunks the rank's queries need (causal: earlier ranks') as one "
                    "contiguous buffer; a second call over them, and a merge kernel by log-sum-exp",
        knobs={"comm_priority": ("high", "same")},
        design=lambda k: DesignPoint("nccl_host", "interleaved", "per_peer", "host", "shard", "2", "0"),
    ),
    Strategy(
        name="attn_balance",
        template="attn_balance.cu.j2",
        description="causal load balance: queries cut into 2W half-chunks, rank r computes half-chunks r and "
                    "2W-1-r (equal work on every rank) with the harness attention (cuDNN) after an all-gather of "
                    "K/V; queries of half-chunks owned elsewhere travel there and their outputs travel back by "
                    "NCCL send/recv on a communication stream, the first computed half-chunk's output while the "
                    "second is computed",
        knobs={"first": ("remote", "local"), "comm_priority": ("high", "same")},
        design=lambda k: DesignPoint("nccl_host", "before", "per_peer", "host", "shard", "2", "0"),
    ),
    Strategy(
        name="balance_overlap",
        template="balance_overlap.cu.j2",
        description="causal load balance with overlap: rank r computes its own first half-chunk and its mirror's "
                    "(rank W-1-r) second half (equal work at every world size, one peer to trade queries and "
                    "outputs with); attention cut by the source rank of the keys, one harness attention call with "
                    "stats per piece (the own chunk's at once, each peer's as its K/V lands from NCCL send/recv on a "
                    "communication stream, or all at once), merged by log-sum-exp in one kernel per half-chunk",
        knobs={"order": ("remote_first", "local_first"), "exchange_first": ("queries", "kv"),
               "kv_pieces": ("per_source", "grouped"), "comm_priority": ("high", "same")},
        design=_balance_overlap,
    ),
    Strategy(
        name="ipc_pull",
        template="ipc_pull.cu.j2",
        description="no NCCL in the iteration: each rank publishes its K/V in CUDA-IPC memory with a flag per "
                    "reader, the readers pull the blocks they need in chunks (a load kernel or the copy engines) "
                    "on a second stream while the own block is attended to, then each chunk as it lands (a "
                    "harness attention call with stats per piece and a log-sum-exp merge at the end, or the "
                    "templates' blockwise kernel); causal ranks pull only the blocks before them",
        knobs={"mover": ("ipc", "copy_engine"), "chunks": (1, 2, 4), "mover_blocks": (16, 8, 32),
               "comm_priority": ("high", "same"), "attention": ("cudnn", "blockwise")},
        design=_ipc_pull,
        normalize=_ipc_pull_normalize,
        fast_path=True,
    ),
]
