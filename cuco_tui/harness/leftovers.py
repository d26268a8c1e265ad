"""What a candidate may leave behind in a rank worker's process once its plan is done: threads of
its own still running, GPU memory it never freed, kernels still running on the device. A kept
worker (harness/kept.py) takes the next plan only when none is found; otherwise its group leaves
and the next plan starts in fresh processes, as every plan did before workers were kept."""

from __future__ import annotations

import ctypes
import gc
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
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
LIMIT_NAMES = ("stack size", "printf FIFO", "malloc heap", "L2 fetch granularity", "persisting-L2 size")
# The runtime itself raises the per-thread stack when it loads a kernel that needs more (cuBLAS's,
# NCCL's: seen on every H200 evaluation of the seed) and never lowers it; a larger stack changes no
# later result, and the memory it takes counts in the free-memory check. Only a smaller one is named.
GROWS_BY_ITSELF = frozenset({0})


# Threads a candidate's libraries start and leave idle (the driver's, NCCL's) cost nothing to the
# next plan's timings; one that keeps running does. Idle ones are tolerated up to this many more
# than before the group's first candidate.
IDLE_THREADS = 32
BUSY_SAMPLE_S = 0.1  # how long threads are watched for CPU use
BUSY_TICKS = 2  # clock ticks (10 ms each) of CPU in that window that make a thread busy


@dataclass(frozen=True)
class ProcessState:
    free_bytes: int  # the device's free memory, CuPy's pools (and PyTorch's cache) emptied first
    threads: tuple[int, ...]  # this process's thread ids (/proc/self/task)
    busy: dict[int, str] = field(default_factory=dict)  # thread id -> name, of those that used CPU when sampled
    limits: tuple[int | None, ...] = ()  # the device's LIMITS, in order (None: not supported here)


def snapshot(cupy: Any, quiet: tuple[int, ...] = ()) -> ProcessState:
    """This process's state on its current device, with the allocators' cached blocks given back
    first (a pool's cache is not a leak) and what nothing refers to any more collected. `quiet`:
    thread ids whose CPU use is the harness's own (the watchdog); the calling thread is too."""
    gc.collect()
    cupy.get_default_memory_pool().free_all_blocks()
    cupy.get_default_pinned_memory_pool().free_all_blocks()
    if (torch := sys.modules.get("torch")) is not None and torch.cuda.is_initialized():
        torch.cuda.empty_cache()  # a PyTorch program's reference caches its blocks
    free, _total = cupy.cuda.runtime.memGetInfo()
    return ProcessState(free_bytes=int(free), threads=thread_ids(),
                        busy=busy_threads(set(quiet) | {threading.get_native_id()}),
                        limits=tuple(_limit(cupy, limit) for limit in LIMITS))


def _limit(cupy: Any, limit: int) -> int | None:
    try:
        return int(cupy.cuda.runtime.deviceGetLimit(limit))
    except Exception:  # noqa: BLE001 - a limit this GPU or CuPy does not know
        return None


def thread_ids() -> tuple[int, ...]:
    try:
        return tuple(sorted(int(t) for t in os.listdir("/proc/self/task")))
    except OSError:  # no procfs: no thread counts as left behind
        return ()


def _cpu_ticks(tid: int) -> int | None:
    try:
        fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime
    except (OSError, IndexError, ValueError):
        return None


def _name(tid: int) -> str:
    try:
        return Path(f"/proc/self/task/{tid}/comm").read_text().strip()
    except OSError:
        return "?"


def busy_threads(quiet: set[int], sample_s: float = BUSY_SAMPLE_S) -> dict[int, str]:
    """The threads (not `quiet`) that used at least BUSY_TICKS of CPU over `sample_s`, by name."""
    before = {tid: _cpu_ticks(tid) for tid in thread_ids() if tid not in quiet}
    time.sleep(sample_s)
    busy = {}
    for tid, ticks in before.items():
        now = _cpu_ticks(tid)
        if ticks is not None and now is not None and now - ticks >= BUSY_TICKS:
            busy[tid] = _name(tid)
    return busy


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
    started = set(after.threads) - set(before.threads)
    running = sorted(name for tid, name in after.busy.items() if tid in started)
    if running:
        found.append(f"{len(running)} thread(s) started since the group's first candidate still running "
                     f"({', '.join(running)})")
    if len(after.threads) - len(before.threads) > IDLE_THREADS:
        found.append(f"{len(after.threads) - len(before.threads)} more threads than before the group's first "
                     f"candidate")
    lost = before.free_bytes - after.free_bytes
    if lost > slack_bytes:
        found.append(f"{lost / (1 << 20):.0f} MiB of GPU memory less free than before the group's first candidate")
    pairs = enumerate(zip(LIMIT_NAMES, before.limits, after.limits))
    changed = [f"{name} {was} -> {now}" for i, (name, was, now) in pairs
               if was != now and not (i in GROWS_BY_ITSELF and was is not None and now is not None and now > was)]
    if changed:
        found.append(f"a device limit changed ({', '.join(changed)})")
    return "; ".join(found)
