"""Where evaluations run: the GPUs split into disjoint groups of `world` GPUs (NVLink-adjacent
GPUs together when the topology is known), each lent to one evaluation at a time; and a pool of
CPU threads that compiles proposals ahead while the GPUs are busy."""

from __future__ import annotations

import itertools
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping

from cuco_tui.toolchain import BuildCache, BuildResult, compile_candidate
from cuco_tui.toolchain.toolchain import Toolchain

# GPU index -> {peer GPU index: active NVLink links}, as GpuInfo.nvlink_peers gives it.
Topology = Mapping[int, Mapping[int, int]]

EXHAUSTIVE_LIMIT = 8  # up to this many GPUs every partition is scored; above, a greedy one


class PlacementError(ValueError):
    """The GPUs given cannot host one evaluation of the workload."""


@dataclass(frozen=True)
class GpuGroup:
    index: int
    gpus: tuple[int, ...]  # () on a machine without GPUs: the evaluation compiles only

    def label(self) -> str:
        return ",".join(map(str, self.gpus)) if self.gpus else "cpu"


def topology_of(inventory) -> dict[int, dict[int, int]]:
    """The topology dict from a cuco_tui.harness.gpus.GpuInventory."""
    return {g.index: dict(g.nvlink_peers) for g in inventory.gpus}


def _links(topology: Topology | None, a: int, b: int) -> int:
    if not topology:
        return 0
    return max(topology.get(a, {}).get(b, 0), topology.get(b, {}).get(a, 0))


def _group_score(group: tuple[int, ...], topology: Topology | None) -> tuple[int, int]:
    """(pairs connected by NVLink, total links): a group whose every pair talks over NVLink first."""
    pairs = list(itertools.combinations(group, 2))
    return (sum(1 for a, b in pairs if _links(topology, a, b) > 0), sum(_links(topology, a, b) for a, b in pairs))


def _partitions(gpus: tuple[int, ...], world: int) -> Iterator[list[tuple[int, ...]]]:
    """Every way to cut `gpus` into groups of `world` (the lowest remaining GPU anchors each group)."""
    if not gpus:
        yield []
        return
    first, rest = gpus[0], gpus[1:]
    for mates in itertools.combinations(rest, world - 1):
        group = (first, *mates)
        left = tuple(g for g in rest if g not in mates)
        for tail in _partitions(left, world):
            yield [group, *tail]


def _score(partition: list[tuple[int, ...]], topology: Topology | None) -> tuple[int, int]:
    scores = [_group_score(g, topology) for g in partition]
    return (sum(s[0] for s in scores), sum(s[1] for s in scores))


def plan_groups(gpus: list[int] | tuple[int, ...], world: int, topology: Topology | None = None) -> list[GpuGroup]:
    """Disjoint groups of `world` GPUs, as many as fit. With a topology, the cut that puts the
    most NVLink-connected pairs (then the most links) inside groups; ties and no topology keep
    neighbours in index order together. GPUs that make no full group stay idle."""
    if world < 1:
        raise PlacementError(f"a group needs at least one GPU, not {world}")
    gpus = tuple(sorted(dict.fromkeys(gpus)))
    if len(gpus) < world:
        raise PlacementError(f"a {world}-rank evaluation needs {world} GPUs; {len(gpus)} given ({list(gpus)})")
    usable = len(gpus) - len(gpus) % world
    if not topology or not any(_links(topology, a, b) for a, b in itertools.combinations(gpus, 2)):
        chosen = [gpus[i:i + world] for i in range(0, usable, world)]
    elif len(gpus) <= EXHAUSTIVE_LIMIT:
        chosen = _best_partition(gpus, world, topology)
    else:
        chosen = _greedy_partition(gpus, world, topology)
    return [GpuGroup(i, tuple(g)) for i, g in enumerate(sorted(chosen))]


def _best_partition(gpus: tuple[int, ...], world: int, topology: Topology) -> list[tuple[int, ...]]:
    spare = len(gpus) % world
    best: list[tuple[int, ...]] | None = None
    best_score = (-1, -1)
    # With spare GPUs, try leaving out each possible set of them; first found wins ties (index order).
    for idle in itertools.combinations(reversed(gpus), spare):
        used = tuple(g for g in gpus if g not in idle)
        for partition in _partitions(used, world):
            score = _score(partition, topology)
            if score > best_score:
                best, best_score = partition, score
    assert best is not None
    return best


def _greedy_partition(gpus: tuple[int, ...], world: int, topology: Topology) -> list[tuple[int, ...]]:
    left = list(gpus)
    out = []
    while len(left) >= world:
        group = [left.pop(0)]
        while len(group) < world:
            mate = max(left, key=lambda g: (sum(_links(topology, g, m) > 0 for m in group),
                                            sum(_links(topology, g, m) for m in group), -g))
            left.remove(mate)
            group.append(mate)
        out.append(tuple(sorted(group)))
    return out


class GpuPool:
    """Lends each group to one evaluation at a time; a group is never lent twice at once, and
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


class BuildPool:
    """Compiles candidates on CPU threads, into the same content-keyed cache the evaluator
    reads, so its own compile step finds the library ready."""

    def __init__(self, workers: int, toolchain: Toolchain | None = None, cache: BuildCache | None = None) -> None:
        self._executor = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="cuco-build")
        self._toolchain = toolchain
        self._cache = cache
        self._lock = threading.Lock()

    def _tools(self) -> Toolchain:
        with self._lock:
            if self._toolchain is None:
                from cuco_tui.toolchain.toolchain import discover

                self._toolchain = discover()
            return self._toolchain

    def submit(self, source: Path) -> Future[BuildResult]:
        return self._executor.submit(lambda: compile_candidate(source, self._tools(), self._cache or BuildCache()))

    def shutdown(self, wait: bool = True) -> None:
        self._executor.shutdown(wait=wait, cancel_futures=not wait)
