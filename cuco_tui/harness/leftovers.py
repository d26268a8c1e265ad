"""What a candidate may leave behind in a rank worker's process once its plan is done: threads of
its own still running, GPU memory it never freed, kernels still running on the device. A kept
worker (harness/kept.py) takes the next plan only when none is found; otherwise its group leaves
and the next plan starts in fresh processes, as every plan did before workers were kept."""

from __future__ import annotations

import ctypes
import gc
import os
import sys
from dataclasses import dataclass
from typing import Any

# The driver's own bookkeeping moves free memory by a few MiB between two readings (module loads,
# a communicator's buffers registered and released); a candidate that leaks leaks buffers of its
# shapes, megabytes at least.
MEMORY_SLACK_BYTES = 64 << 20


# Why a kept worker leaves after a candidate that failed a check (its results say the rest).
FAILED_A_CHECK = "the candidate failed a check"

# cudaLimit values a candidate may set and that outlive it: stack size, printf FIFO, malloc heap,
# L2 fetch granularity, persisting-L2 size (cuda_runtime_api.h's cudaLimit).
LIMITS = (0, 1, 2, 5, 6)


@dataclass(frozen=True)
class ProcessState:
    free_bytes: int  # the device's free memory, CuPy's pools (and PyTorch's cache) emptied first
    threads: int  # this process's threads (/proc/self/task)
    limits: tuple[int, ...] = ()  # the device's LIMITS, in order


def snapshot(cupy: Any) -> ProcessState:
    """This process's state on its current device, with the allocators' cached blocks given back
    first (a pool's cache is not a leak) and what nothing refers to any more collected."""
    gc.collect()
    cupy.get_default_memory_pool().free_all_blocks()
    cupy.get_default_pinned_memory_pool().free_all_blocks()
    if (torch := sys.modules.get("torch")) is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()  # a PyTorch program's reference caches its blocks
    free, _total = cupy.cuda.runtime.memGetInfo()
    get = getattr(cupy.cuda.runtime, "deviceGetLimit", None)
    limits = tuple(int(get(limit)) for limit in LIMITS) if get is not None else ()
    return ProcessState(free_bytes=int(free), threads=thread_count(), limits=limits)


def reset_persisting_l2() -> None:
    """Lines a candidate marked persisting in the L2 stay so into the next plan's timings, the
    reference's included: reset them (the driver API; nothing to do where it is missing)."""
    try:
        ctypes.CDLL("libcuda.so.1").cuCtxResetPersistingL2Cache()
    except (OSError, AttributeError):
        pass


def thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:  # no procfs: count nothing as left behind by threads
        return 0


def left_behind(before: ProcessState, after: ProcessState, slack_bytes: int = MEMORY_SLACK_BYTES) -> str:
    """What `after` holds that `before` did not, in words ("" when nothing)."""
    found = []
    if after.threads > before.threads:
        found.append(f"{after.threads - before.threads} more thread(s) than before the candidate")
    lost = before.free_bytes - after.free_bytes
    if lost > slack_bytes:
        found.append(f"{lost / (1 << 20):.0f} MiB of GPU memory less free than before the group's first candidate")
    if after.limits != before.limits:
        found.append("a device limit changed (stack, printf FIFO, malloc heap, L2 fetch granularity or "
                     "persisting-L2 size)")
    return "; ".join(found)
