"""The local executor: this machine's GPU groups, each lent to one evaluation at a time."""

from __future__ import annotations

import threading
from collections import deque
from contextlib import contextmanager
from typing import Iterator

from cuco_tui.executors.base import GpuGroup, PlacementError
from cuco_tui.executors.placement import plan_groups, topology_of


class GpuPool:
    """The local Executor. Lends each group to one evaluation at a time; a group is never lent twice at once, and
    groups are disjoint, so no GPU ever hosts two runs. Requests are served first come, first
    served; an exclusive one (`acquire_exclusive`) takes a group while no other group is lent,
    and the requests after it wait behind it, so it cannot starve."""

    def __init__(self, groups: list[GpuGroup]) -> None:
        if not groups:
            raise PlacementError("no GPU group to run evaluations on")
        seen: set[int] = set()
        for g in groups:
            if seen & set(g.gpus):
                raise PlacementError(f"GPU groups overlap: {[x.gpus for x in groups]}")
            seen |= set(g.gpus)
        self.groups = list(groups)
        self._free = list(groups)
        self._queue: deque[object] = deque()  # waiting requests, in arrival order
        self._exclusive: GpuGroup | None = None  # the group lent alone, while it is
        self._cond = threading.Condition()

    @classmethod
    def cpu_only(cls, slots: int) -> "GpuPool":
        """For a machine without GPUs: `slots` empty groups (evaluations stop after compiling)."""
        return cls([GpuGroup(i, ()) for i in range(max(1, slots))])

    @property
    def size(self) -> int:
        return len(self.groups)

    @property
    def can_measure(self) -> bool:
        return any(g.gpus for g in self.groups)

    def busy(self) -> int:
        with self._cond:
            return len(self.groups) - len(self._free)

    @property
    def exclusive(self) -> GpuGroup | None:
        """The group lent by acquire_exclusive(), while it is out."""
        with self._cond:
            return self._exclusive

    def acquire(self, timeout: float | None = None) -> GpuGroup | None:
        """Wait for a free group (the lowest-numbered one); None when `timeout` passes first."""
        return self._take(False, timeout)

    def acquire_exclusive(self, timeout: float | None = None) -> GpuGroup | None:
        """One group (the lowest-numbered), lent while no other group is: waits until every
        lent group is back; requests made after this one wait until it is released. None when
        `timeout` passes first."""
        return self._take(True, timeout)

    def _take(self, exclusive: bool, timeout: float | None) -> GpuGroup | None:
        ticket = object()
        with self._cond:
            self._queue.append(ticket)

            def ready() -> bool:
                if self._queue[0] is not ticket or self._exclusive is not None:
                    return False
                return len(self._free) == len(self.groups) if exclusive else bool(self._free)

            granted = self._cond.wait_for(ready, timeout)
            self._queue.remove(ticket)
            group = None
            if granted:
                self._free.sort(key=lambda g: g.index)
                group = self._free.pop(0)
                if exclusive:
                    self._exclusive = group
            self._cond.notify_all()  # the next in line may be served now
            return group

    def release(self, group: GpuGroup) -> None:
        with self._cond:
            if group in self._free or group not in self.groups:
                raise ValueError(f"group {group.label()} is not lent out")
            if group == self._exclusive:
                self._exclusive = None
            self._free.append(group)
            self._cond.notify_all()

    @contextmanager
    def lease(self, exclusive: bool = False) -> Iterator[GpuGroup]:
        group = self.acquire_exclusive() if exclusive else self.acquire()
        assert group is not None
        try:
            yield group
        finally:
            self.release(group)


def local_pool(world: int, gpus: tuple[int, ...] = (), cpu_slots: int = 1) -> GpuPool:
    """The pool for this machine: `gpus` (empty: every GPU it has) cut into groups of `world`,
    NVLink-aware; on a machine without GPUs, `cpu_slots` empty groups (evaluations stop after
    compiling). PlacementError names a GPU that does not exist or too few GPUs."""
    from cuco_tui.harness.gpus import inventory  # NVML is asked only when a search starts

    inv = inventory()
    if inv.count == 0:
        return GpuPool.cpu_only(cpu_slots)
    chosen = list(gpus) or [g.index for g in inv.gpus]
    missing = [g for g in chosen if g >= inv.count]
    if missing:
        raise PlacementError(f"GPU {missing[0]} does not exist: this machine has {inv.count} (0-{inv.count - 1})")
    return GpuPool(plan_groups(chosen, world, topology_of(inv)))
