"""A workload's reference as every tool sees it: what the harness asks of one (`Reference`, and
`RankReference` for one rank at one shape), and the one loader of a workload's reference.py.

The harness asks a reference for its buffers (`io_spec`), fresh inputs (`fill_inputs`), one
iteration on a rank (`on_rank(env).run`), its pieces alone for the ceilings (`parts`), the float64
answer the tests compare with (`expected`) and the work it counts (`flops`, `comm_bytes`). How it
computes is its own: today every reference is a Python module whose `Reference` class enqueues
CuPy/NCCL work (`ModuleReference`); another kind (a PyTorch program under torch.distributed)
meets the same protocol. docs/workloads.md describes the module's names."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Protocol

from cuco_tui.core.workload import DTYPES

CONTRACT = ("io_spec", "fill_inputs", "expected", "Reference")  # the names a reference module must define
RANK_METHODS = ("run", "parts")  # ... and its Reference class


class ReferenceContractError(ValueError):
    """A reference answered outside its contract (a malformed io_spec)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class Buffer:
    name: str
    shape: tuple[int, ...]
    dtype: str  # one of core.workload.DTYPES (bf16 buffers hold raw uint16 bits)


@dataclass(frozen=True)
class IoSpec:
    """One rank's buffers at one shape, in the order the candidate's context lists them."""

    inputs: tuple[Buffer, ...]
    outputs: tuple[Buffer, ...]

    @property
    def dtypes(self) -> dict[str, str]:
        return {b.name: b.dtype for b in self.inputs + self.outputs}


def spec_problems(spec: Any, where: str = "") -> list[str]:
    """What is wrong with an io_spec's answer (`where`: "(verify, world 2, rank 0)" in messages)."""
    if not isinstance(spec, dict) or set(spec) - {"inputs", "outputs"}:
        return [f"io_spec{where} must return {{'inputs': [...], 'outputs': [...]}}, not {spec!r:.80}"]
    out, names = [], set()
    for kind in ("inputs", "outputs"):
        for entry in spec.get(kind, []):
            if not (isinstance(entry, (tuple, list)) and len(entry) == 3):
                out.append(f"io_spec{where}: each {kind} entry is (name, shape, dtype), not {entry!r:.80}")
                continue
            name, shape, dtype = entry
            if name in names:
                out.append(f"io_spec{where}: buffer {name!r} is named twice")
            names.add(name)
            if dtype not in DTYPES:
                out.append(f"io_spec{where}: buffer {name!r} has dtype {dtype!r}; use one of {', '.join(DTYPES)}")
            if not all(isinstance(n, int) and n > 0 for n in shape):
                out.append(f"io_spec{where}: buffer {name!r} has shape {tuple(shape)}; every extent must be a "
                           f"positive integer")
    return out


def parse_io_spec(spec: Any, where: str = "") -> IoSpec:
    problems = spec_problems(spec, where)
    if problems:
        raise ReferenceContractError(problems)
    return IoSpec(*(tuple(Buffer(str(n), tuple(int(x) for x in s), str(d)) for n, s, d in spec.get(kind, []))
                    for kind in ("inputs", "outputs")))


@dataclass
class Env:
    """What the harness gives a reference on one rank: the group's communicator and stream (the
    harness's CuPy objects), the world, this rank and the shape's dims."""

    cupy: Any
    comm: Any
    stream: Any
    world: int
    rank: int
    dims: dict[str, int]


class RankReference(Protocol):
    """The reference in one rank's process at one shape."""

    def run(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        """Enqueue one iteration on the env's stream, without a host synchronization."""

    def parts(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> dict[str, Callable[[], None]]:
        """Each piece alone (compute, communication): their times are the ceilings."""

    def comm_bytes(self) -> int | None:
        """Bytes this rank receives over the links in one iteration; None when it does not count them."""

    def warnings(self) -> list[str]:
        """What makes it weaker than it should be (a failed graph capture, a slower fallback)."""


class Reference(Protocol):
    path: Path

    def io_spec(self, dims: dict[str, int], world: int, rank: int) -> IoSpec: ...

    def fill_inputs(self, xp: Any, inputs: dict[str, Any], dims: dict[str, int], world: int, rank: int,
                    seed: int) -> None:
        """Fresh random inputs from `seed` into `inputs` (arrays of `xp`: NumPy or CuPy)."""

    def expected(self, all_inputs: list[dict[str, Any]], dims: dict[str, int], world: int) -> list[dict[str, Any]]:
        """The float64 answer of every rank, computed on the CPU from every rank's inputs."""

    def flops(self, dims: dict[str, int], world: int) -> int | None:
        """One rank's floating-point operations in one iteration; None when not counted."""

    def comm_bytes(self, dims: dict[str, int], world: int) -> int | None: ...

    def on_rank(self, env: Env) -> RankReference: ...


def reference_module(path: Path) -> ModuleType:
    """Import a reference file (or a helper beside one) by its path, under a name of its own."""
    spec = importlib.util.spec_from_file_location(f"cuco_reference_{path.parent.name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_reference(path: Path) -> ModuleReference:
    """The workload's reference at `path` (its reference.py): whatever its module raises on import
    comes out of here."""
    return ModuleReference(reference_module(Path(path)), Path(path))


class ModuleRankReference:
    """An instance of a reference module's `Reference` class as a RankReference."""

    def __init__(self, instance: Any) -> None:
        self.instance = instance

    def run(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        self.instance.run(inputs, outputs)

    def parts(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> dict[str, Callable[[], None]]:
        return self.instance.parts(inputs, outputs)

    def comm_bytes(self) -> int | None:
        count = getattr(self.instance, "comm_bytes", None)  # optional in the module's contract
        return count() if callable(count) else None

    def warnings(self) -> list[str]:
        return list(getattr(self.instance, "warnings", None) or [])


class ModuleReference:
    """A reference.py module (docs/workloads.md) as a Reference: the one place that knows which of
    its names are optional."""

    def __init__(self, module: ModuleType, path: Path) -> None:
        self.module = module
        self.path = path

    def missing(self) -> list[str]:
        """The names of the contract the module does not define."""
        return [n for n in CONTRACT if not hasattr(self.module, n)]

    def missing_methods(self) -> list[str]:
        """The methods its Reference class lacks (none when it has no Reference class)."""
        cls = getattr(self.module, "Reference", None)
        return [m for m in RANK_METHODS if cls is not None and not callable(getattr(cls, m, None))]

    def counts_rank_bytes(self) -> bool:
        """Whether its Reference class counts the bytes a rank receives (for the baseline's bound)."""
        return callable(getattr(getattr(self.module, "Reference", None), "comm_bytes", None))

    def spec_problems(self, dims: dict[str, int], world: int, rank: int, where: str) -> list[str]:
        """What is wrong with the module's io_spec at these dims (what it raises comes out)."""
        return spec_problems(self.module.io_spec(dims, world, rank), where)

    def io_spec(self, dims: dict[str, int], world: int, rank: int) -> IoSpec:
        return parse_io_spec(self.module.io_spec(dims, world, rank), f"(world {world}, rank {rank})")

    def fill_inputs(self, xp: Any, inputs: dict[str, Any], dims: dict[str, int], world: int, rank: int,
                    seed: int) -> None:
        self.module.fill_inputs(xp, inputs, dims, world, rank, seed)

    def expected(self, all_inputs: list[dict[str, Any]], dims: dict[str, int], world: int) -> list[dict[str, Any]]:
        return self.module.expected(all_inputs, dims, world)

    def flops(self, dims: dict[str, int], world: int) -> int | None:
        count = getattr(self.module, "flops", None)
        return int(count(dims, world)) if callable(count) else None

    def comm_bytes(self, dims: dict[str, int], world: int) -> int | None:
        count = getattr(self.module, "comm_bytes", None)
        return int(count(dims, world)) if callable(count) else None

    def on_rank(self, env: Env) -> ModuleRankReference:
        return ModuleRankReference(self.module.Reference(env))
