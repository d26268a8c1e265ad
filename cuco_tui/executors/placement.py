"""Placement: this machine's GPUs cut into disjoint groups of `world` GPUs, as many as fit, with
NVLink-connected GPUs together when the topology is known."""

from __future__ import annotations

import itertools
from typing import Iterator, Mapping

from cuco_tui.executors.base import GpuGroup, PlacementError

# GPU index -> {peer GPU index: active NVLink links}, as GpuInfo.nvlink_peers gives it.
Topology = Mapping[int, Mapping[int, int]]

EXHAUSTIVE_LIMIT = 8  # up to this many GPUs every partition is scored; above, a greedy one

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
