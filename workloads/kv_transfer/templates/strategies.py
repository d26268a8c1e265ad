"""Strategy templates of kv_transfer for the offline agent."""

from cuco_tui.agents.offline.strategy import Strategy, chunk, comm_sms
from cuco_tui.design.space import DesignPoint


def _copy_engine_groups(k: dict) -> DesignPoint:
    """ce_pull and ce_push: layer groups moved by the copy engines, issued from the host."""
    return DesignPoint("copy_engine", "interleaved", "per_chunk", "host", chunk(k["groups"], "full"), "2", "0")


STRATEGIES = [
    Strategy(
        name="host_sequential",
        template="host_sequential.cu.j2",
        description="one batched GEMM for every layer, then one NCCL send of the whole cache (the seed)",
        knobs={},
        design=lambda k: DesignPoint("nccl_host", "before", "per_peer", "host", "full", "1", "0"),
    ),
    Strategy(
        name="host_layered",
        template="host_layered.cu.j2",
        description="layer groups computed by batched GEMMs; each group sent by NCCL on a second stream once computed",
        knobs={"groups": (4, 2, 8, 16, 32)},
        design=lambda k: DesignPoint("nccl_host", "interleaved", "per_chunk", "host", chunk(k["groups"], "full"), "2", "0"),
    ),
    Strategy(
        name="ce_pull",
        template="ce_pull.cu.j2",
        description="rank 1 pulls each computed layer group from rank 0's memory with the copy engines (CUDA-IPC), "
                    "signalled by per-group counters",
        knobs={"groups": (4, 2, 8, 16, 32)},
        design=_copy_engine_groups,
    ),
    Strategy(
        name="ce_push",
        template="ce_push.cu.j2",
        description="rank 0 pushes each computed layer group into rank 1's memory with the copy engines (CUDA-IPC), "
                    "issued on a copy stream as soon as the group's GEMMs are done and followed by a counter; "
                    "rank 1 copies each group out as it lands",
        knobs={"groups": (4, 2, 8, 16, 32)},
        design=_copy_engine_groups,
    ),
    Strategy(
        name="ipc_push",
        template="ipc_push.cu.j2",
        description="rank 0 pushes each computed layer group into rank 1's memory with a store kernel (CUDA-IPC "
                    "peer pointer, NVLink stores from SMs), one arrival count per CTA; rank 1 copies each group "
                    "out as it lands",
        knobs={"groups": (4, 2, 8, 16, 32), "mover_blocks": (16, 8, 32, 64)},
        design=lambda k: DesignPoint("cuda_ipc", "interleaved", "per_chunk" if k["groups"] > 1 else "per_peer",
                                     "multi_cta", chunk(k["groups"], "full"), "2", comm_sms(k["mover_blocks"])),
    ),
]
