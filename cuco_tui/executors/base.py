"""What every executor offers the search's scheduler: places to run one evaluation each, lent
one at a time, with a way to ask for one while nothing else runs (a finalist's re-measurement)."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol, Sequence, runtime_checkable


class PlacementError(ValueError):
    """The GPUs given cannot host one evaluation of the workload."""


@dataclass(frozen=True)
class GpuGroup:
    """The GPUs one evaluation runs on: `world` of them, lent whole to one evaluation at a time."""

    index: int
    gpus: tuple[int, ...]  # () on a machine without GPUs: the evaluation compiles only

    def label(self) -> str:
        return ",".join(map(str, self.gpus)) if self.gpus else "cpu"


@runtime_checkable
class Executor(Protocol):
    """Lends GPU groups to evaluations. `lease()` blocks until a group is free and gives it back
    when the block ends, whatever happens inside; no group is ever lent twice at once, and no
    two groups share a GPU. `lease(exclusive=True)` lends one while no other group is out, so a
    timing taken on it is not disturbed by other runs; requests after it wait behind it."""

    @property
    def groups(self) -> Sequence[GpuGroup]: ...

    @property
    def size(self) -> int: ...

    def lease(self, exclusive: bool = False) -> AbstractContextManager[GpuGroup]: ...
