"""Strategy templates of kv_transfer for the offline agent."""

from cuco_tui.agents.offline.strategy import Strategy
from cuco_tui.design.space import DesignPoint


def _chunk(groups: int) -> str:
    return "full" if groups == 1 else str(groups)


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
        knobs={"groups": (4, 2, 8, 16)},
        design=lambda k: DesignPoint("nccl_host", "interleaved", "per_chunk", "host", _chunk(k["groups"]), "2", "0"),
    ),
    Strategy(
        name="ce_pull",
        template="ce_pull.cu.j2",
        description="rank 1 pulls each computed layer group from rank 0's memory with the copy engines (CUDA-IPC), "
                    "signalled by per-group counters",
        knobs={"groups": (4, 2, 8, 16)},
        design=lambda k: DesignPoint("copy_engine", "interleaved", "per_chunk", "host", _chunk(k["groups"]), "2", "0"),
    ),
]
