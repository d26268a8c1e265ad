"""The vocabulary the classifier reads: which calls move data, set up, signal, wait or
synchronize for each backend, and the shapes of compute, stores, streams and cooperation groups.
Every pattern is matched against blanked code (comments and literals gone)."""

from __future__ import annotations

import re

# (regex, backend, role): the calls of each backend's API and what they are for.
API_PATTERNS: list[tuple[re.Pattern[str], str, str]] = [
    (re.compile(r"\bnccl(AllGather|AllReduce|ReduceScatter|Broadcast|Bcast|Reduce|AlltoAll|Gather|Scatter)\s*\("),
     "nccl_host", "data"),
    (re.compile(r"\bnccl(Send|Recv)\s*\("), "nccl_host", "data"),
    (re.compile(r"\bnccl(GetLsaPointer|GetPeerPointer|GetLsaMultimemPointer|GetMultimemPointer|"
                r"GetResourceBufferLsaPointer|GetResourceBufferPeerPointer)\b|\.(lsaPtr|peerPtr|lsaMultimemPtr)\s*\("),
     "nccl_lsa", "data"),
    (re.compile(r"\bncclLsaBarrierSession\b|\blsa_barrier_sync\b"), "nccl_lsa", "barrier"),
    (re.compile(r"\bsymmetric_alloc\b|\blsa_devcomm_create\b|\bncclCommWindowRegister\b|\bncclDevCommCreate\b|"
                r"\bncclMemAlloc\b"), "nccl_lsa", "setup"),
    (re.compile(r"\bncclGin\b|\bncclGin_(?:SignalInc|SignalAdd|CounterInc|BackendMask)\b"), "nccl_gin", "data"),
    (re.compile(r"\bncclGinBarrierSession\b|\bncclBarrierSession\b"), "nccl_gin", "barrier"),
    (re.compile(r"\.(waitSignal|waitCounter|waitSignalMeetShadow|waitSignalFollowShadow)\s*\("), "nccl_gin", "wait"),
    (re.compile(r"\b(ginSignalCount|ginCounterCount|ginContextCount|ginForceEnable|railGinBarrierCount)\b"),
     "nccl_gin", "setup"),
    (re.compile(r"\bpeer_alloc\b|\bcudaIpcOpenMemHandle\b|\bcudaIpcGetMemHandle\b"), "cuda_ipc", "setup"),
    (re.compile(r"\bcudaMemcpyPeer(?:Async)?\s*\("), "copy_engine", "data"),
    (re.compile(r"\bnvshmemx?_\w*(?:put|get)\w*\s*\(|\bnvshmemx?_\w+_[pg]\s*\("), "nvshmem", "data"),
    (re.compile(r"\bnvshmemx?_\w*(?:barrier|sync_all|quiet|fence)\w*\s*\("), "nvshmem", "barrier"),
    (re.compile(r"\bnvshmemx?_\w*(?:wait|test)\w*\s*\("), "nvshmem", "wait"),
    (re.compile(r"\bnvshmemx?_\w*signal_op\w*\s*\("), "nvshmem", "signal"),
    (re.compile(r"\bnvshmemx?_(?:init|malloc|calloc|align|free|finalize|my_pe|n_pes|team)\w*\s*\("),
     "nvshmem", "setup"),
    (re.compile(r"\bwait_geq\b|\bcudaStreamWaitValue(?:32|64)\b|\bcuStreamWaitValue(?:32|64)\b"), "", "wait"),
]
HOST_COLLECTIVE = re.compile(r"^nccl(AllGather|AllReduce|ReduceScatter|Broadcast|Bcast|Reduce|AlltoAll|Gather|"
                             r"Scatter)")
ACQUIRE_LOAD = re.compile(r"\.load\s*\(\s*(?:cuda::(?:std::)?)?memory_order_acquire\b|\b(?:ld|load)_acquire\w*\s*\(")
EVENT_WAIT = re.compile(r"\bcudaStreamWaitEvent\s*\(|\bcudaEventSynchronize\s*\(")
MEMCPY = re.compile(r"\bcudaMemcpy(?:2D|3D)?(?:Async)?\s*\(")
MEMCPY_ANY = re.compile(r"\bcudaMemcpy\w*\s*\(")
PEER_TABLE = re.compile(r"\bpeers\b(?!\s*\[)")
STREAM_CREATE = re.compile(r"\bcudaStreamCreate(?:WithFlags|WithPriority)?\s*\(")
BLAS_SET_STREAM = re.compile(r"\bcublas(?:Lt)?SetStream\s*\(")
BLAS_COMPUTE = re.compile(r"\bcublas(?:Lt)?\w*?(?:Gemm|Matmul|gemm)(?!Desc|Preference|Algo)\w*\s*\(")
DEVICE_COMPUTE = re.compile(r"\b(?:wmma|wgmma|mma_sync|mma|__hfma2?|__hmul2?|__fmaf_rn|fmaf|cute::gemm|"
                            r"cutlass::\w+)\b|\w\s*\[[^\]]+\]\s*\*\s*\w+\s*\[|\b\w+\s*\+=\s*[^;]*\w\s*\[[^\]]+\]\s*\*")
INDEXED_STORE = re.compile(r"(?:\]|\))(?:\.\w+)*\s*[-+*/|&^]?=(?!=)|\*\s*\(\s*[A-Za-z_][\w>.-]*\s*\+[^;=]*\)\s*=(?!=)|"
                           r"\b__st(?:cg|cs|wt|wb|_global)\s*\(|\bmemcpy\s*\(")
PEER_EXPR = re.compile(r"\bpeers\s*\[")
# Cooperation groups, finest first: who inside a kernel issues a transfer.
COOPS = [
    ("thread", re.compile(r"\bncclCoopThread\b|\bncclCoopTile\s*<\s*1\s*>")),
    ("warp", re.compile(r"\bncclCoopWarp\b|\bncclCoopTile\s*<\s*32\s*>|\btiled_partition\s*<\s*32\s*>|"
                        r"\bncclCoopLanes\b")),
    ("cta", re.compile(r"\bncclCoopCta\b|\bthread_block\b|\bthis_thread_block\b|\bncclCoopWarpSpan\b")),
    ("multi_cta", re.compile(r"\bgrid_group\b|\bthis_grid\b|\bcluster_group\b")),
]
COOP_ORDER = ["thread", "warp", "cta", "multi_cta"]
