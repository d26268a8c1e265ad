"""Every rank of a group on one GPU: a correctness check for a machine with fewer GPUs than
ranks. NCCL refuses two ranks on one GPU of one host, so each rank is given a host id of its
own (see harness/launcher.py) and NCCL joins them through its socket transport; nothing is
timed, because ranks that share a GPU time-slice it."""

from __future__ import annotations

import re

from cuco_tui.core.result import Diagnostic, Level
from cuco_tui.core.workload import Workload

# Device-initiated communication that cannot reach a peer when the ranks are separate hosts to NCCL.
_DEVICE_INITIATED = re.compile(r"\bncclDevComm\b|ncclGetLsaPointer|ncclGetPeerPointer|\bnvshmem")


def device_initiated(source: str) -> bool:
    return bool(_DEVICE_INITIATED.search(source))


def shared_group(workload: Workload, gpu: int, world: int | None, gpu_count: int) -> tuple[list[int], str]:
    """`world` ranks (default: the workload's smallest world) on GPU `gpu`, or ([], why not)."""
    if gpu >= gpu_count:
        return [], f"GPU {gpu} does not exist: this machine has {gpu_count} (0-{gpu_count - 1})"
    world = min(workload.world_sizes) if world is None else world
    if world not in workload.world_sizes:
        allowed = ", ".join(map(str, workload.world_sizes))
        return [], f"{workload.name} runs with {allowed} ranks, not {world}"
    return [gpu] * world, ""


def note(gpus: list[int]) -> Diagnostic:
    where = ", ".join(sorted({str(g) for g in gpus}))
    return Diagnostic(
        level=int(Level.VERIFY), severity="note", code="shared_gpu",
        message=(f"{len(gpus)} ranks shared GPU {where}: a correctness check only. NCCL treats the ranks as "
                 "separate hosts and moves their data through host sockets, so nothing was timed, and "
                 "device-initiated communication (NCCL LSA or GIN, NVSHMEM) cannot reach a peer: a candidate "
                 "that relies on it fails here and needs one GPU per rank."))


def failure_hint(source: str) -> str:
    """What to add to the reason of a failed shared run, if the candidate's kind explains it."""
    if device_initiated(source):
        return (" (the candidate communicates from the device through NCCL LSA/GIN or NVSHMEM, which cannot "
                "reach a peer when ranks share a GPU: evaluate it with one GPU per rank)")
    return ""
