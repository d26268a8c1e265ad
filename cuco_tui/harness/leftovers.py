"""What a candidate may leave behind in a rank worker's process once its plan is done: threads of
its own still running, GPU memory it never freed, kernels still running on the device. A kept
worker (harness/kept.py) takes the next plan only when none is found; otherwise its group leaves
and the next plan starts in fresh processes, as every plan did before workers were kept."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

# The driver's own bookkeeping moves free memory by a few MiB between two readings (module loads,
# a communicator's buffers registered and released); a candidate that leaks leaks buffers of its
# shapes, megabytes at least.
MEMORY_SLACK_BYTES = 64 << 20


@dataclass(frozen=True)
class ProcessState:
    free_bytes: int  # the device's free memory, CuPy's pools emptied first
    threads: int  # this process's threads (/proc/self/task)


def snapshot(cupy: Any) -> ProcessState:
    """This process's state on its current device, with CuPy's cached blocks given back first
    (a pool's cache is not a leak)."""
    cupy.get_default_memory_pool().free_all_blocks()
    cupy.get_default_pinned_memory_pool().free_all_blocks()
    free, _total = cupy.cuda.runtime.memGetInfo()
    return ProcessState(free_bytes=int(free), threads=thread_count())


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
        found.append(f"{lost / (1 << 20):.0f} MiB of GPU memory not given back")
    return "; ".join(found)
