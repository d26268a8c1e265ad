"""Which GPUs this machine has, read through NVML (nvidia-ml-py), and parsing `--gpus`."""

from __future__ import annotations

import os
from dataclasses import dataclass, field


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    memory_mib: int
    sm_count: int | None = None
    nvlink_peers: dict[int, int] = field(default_factory=dict)  # peer index -> active links


@dataclass(frozen=True)
class GpuInventory:
    gpus: tuple[GpuInfo, ...]
    driver: str = ""
    problem: str = ""  # why none were found, in plain words

    @property
    def count(self) -> int:
        return len(self.gpus)


def is_shared(gpus: list[int]) -> bool:
    """True when a group puts two ranks on one GPU (only ever asked for: see --share-gpu)."""
    return len(set(gpus)) < len(gpus)


class GpuNamedTwice(ValueError):
    """A GPU list that names a GPU twice: the command line says how to put ranks on one GPU."""


def parse_gpu_list(text: str) -> list[int]:
    """`0,1,2,3`, `0-3` or `0-1,4-5` -> sorted list of distinct indices; a GPU named twice is
    refused (each rank gets a GPU of its own; --share-gpu is the way to put ranks on one)."""
    out: list[int] = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            if not (lo.isdigit() and hi.isdigit()) or int(lo) > int(hi):
                raise ValueError(f"bad GPU range {part!r}: write it as LOW-HIGH, e.g. 0-3")
            out.extend(range(int(lo), int(hi) + 1))
        elif part.isdigit():
            out.append(int(part))
        else:
            raise ValueError(f"bad GPU index {part!r}: use numbers such as 0,1 or a range 0-3")
    if not out:
        raise ValueError("no GPUs named: use e.g. --gpus 0,1 or --gpus 0-3")
    twice = sorted({g for g in out if out.count(g) > 1})
    if twice:
        raise GpuNamedTwice(f"GPU {twice[0]} is named twice in {text!r}: each rank needs a GPU of its own")
    return sorted(out)


def missing_gpus(gpus: list[int], inv: GpuInventory) -> str:
    """A sentence when `gpus` names GPUs this machine does not have ("" when all are there, or
    when it has no usable GPU at all: then nothing runs and the caller says so)."""
    if not inv.count:
        return ""
    absent = [g for g in gpus if g >= inv.count]
    if not absent:
        return ""
    have = "GPU 0" if inv.count == 1 else f"GPUs 0-{inv.count - 1}"
    return f"no GPU {absent[0]} on this machine: it has {have} (`cuco doctor` lists them)"


def inventory() -> GpuInventory:
    """The GPUs NVML sees. CUCO_NO_GPU=1 hides them (to exercise the compile-only path)."""
    if os.environ.get("CUCO_NO_GPU") == "1":
        return GpuInventory((), problem="GPUs hidden by CUCO_NO_GPU=1")
    try:
        import pynvml
    except ImportError:
        return GpuInventory((), problem="nvidia-ml-py is not installed, so GPUs cannot be listed")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return GpuInventory((), problem=f"no NVIDIA driver answered ({exc}): this machine has no usable GPU")
    try:
        driver = _str(pynvml.nvmlSystemGetDriverVersion())
        n = pynvml.nvmlDeviceGetCount()
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
        pci = [_str(pynvml.nvmlDeviceGetPciInfo(h).busId).lower() for h in handles]
        gpus = []
        for i, h in enumerate(handles):
            mem = pynvml.nvmlDeviceGetMemoryInfo(h).total // (1 << 20)
            gpus.append(GpuInfo(i, _str(pynvml.nvmlDeviceGetName(h)), int(mem), None, _nvlink_peers(pynvml, h, pci, handles)))
        return GpuInventory(tuple(gpus), driver, "" if gpus else "the NVIDIA driver reports no GPUs")
    finally:
        pynvml.nvmlShutdown()


def _str(v: object) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _nvlink_peers(pynvml, handle, pci: list[str], handles: list) -> dict[int, int]:
    """Active NVLink links from this GPU to each other GPU. Inside a VM the remote PCI ids
    NVML reports can be the host's, which match no GPU here; then the links are shared out
    among the GPUs NVML says are reachable over NVLink (P2P status)."""
    active = 0
    peers: dict[int, int] = {}
    for link in range(64):
        try:
            if pynvml.nvmlDeviceGetNvLinkState(handle, link) != pynvml.NVML_FEATURE_ENABLED:
                continue
        except pynvml.NVMLError:
            break
        active += 1
        try:
            remote = _str(pynvml.nvmlDeviceGetNvLinkRemotePciInfo(handle, link).busId).lower()
        except pynvml.NVMLError:
            continue
        for j, bus in enumerate(pci):
            if bus[-12:] == remote[-12:]:
                peers[j] = peers.get(j, 0) + 1
    if peers or not active:
        return peers
    reachable = []
    for j, other in enumerate(handles):
        if other is handle:
            continue
        try:
            status = pynvml.nvmlDeviceGetP2PStatus(handle, other, pynvml.NVML_P2P_CAPS_INDEX_NVLINK)
        except pynvml.NVMLError:
            continue
        if status == pynvml.NVML_P2P_STATUS_OK:
            reachable.append(j)
    return {j: active // len(reachable) for j in reachable} if reachable else {}


def compute_pids(gpu_indices: list[int]) -> set[int]:
    """PIDs of processes holding a compute context on these GPUs (empty if NVML cannot tell)."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        return set()
    try:
        pids: set[int] = set()
        for i in gpu_indices:
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
                pids.add(int(p.pid))
        return pids
    except Exception:
        return set()
    finally:
        pynvml.nvmlShutdown()
