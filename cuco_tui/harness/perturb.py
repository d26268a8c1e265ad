"""The schedule perturber in a rank worker: the interposer library of perturb_lib/, through ctypes.

It must be loaded (RTLD_GLOBAL) before the candidate, so that the candidate's calls into the CUDA
runtime, NCCL and cuBLAS bind to it; `bind` then tells it where the real functions are (the
candidate's own dependencies). Between `configure` calls it draws the holds of one seed's
perturbation (perturb_lib/cuco_perturb.h); it acts only while enabled."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

VERSION = 1
OP_CLASSES = ("copy", "event", "kernel", "nccl", "gemm")  # enum cuco_op_class
KINDS = ("copies_late", "rank_late", "compute_late", "scatter")  # enum cuco_perturb_kind, seed % 4


class PerturbError(RuntimeError):
    """The perturber cannot be loaded or used."""


class CStats(ctypes.Structure):
    _fields_ = [
        ("calls", ctypes.c_uint64),
        ("delayed", ctypes.c_uint64),
        ("delayed_us", ctypes.c_uint64),
        ("skipped", ctypes.c_uint64),
        ("errors", ctypes.c_uint64),
        ("per_class", ctypes.c_uint64 * len(OP_CLASSES)),
    ]


@dataclass(frozen=True)
class Perturbation:
    """One seed's perturbation as this rank sees it."""

    seed: int
    kind: str
    target: int  # the rank it aims at
    description: str  # the same sentence on every rank
    unit_us: int
    start_delay_us: int  # this rank's late start, 0 when it starts on time


@dataclass(frozen=True)
class Stats:
    calls: int  # ordering points seen while enabled
    delayed: int  # ... the policy held back (those skipped below included)
    delayed_us: int
    skipped: int  # holds not enqueued: a stream being captured, a CUDA error pending
    errors: int  # holds the runtime refused
    per_class: dict[str, int]


class PerturbLibrary:
    def __init__(self, path: Path) -> None:
        try:
            self.lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
        except OSError as exc:
            raise PerturbError(f"cannot load the schedule perturber {path}: {exc}") from exc
        lib = self.lib
        lib.cuco_perturb_version.restype = ctypes.c_int
        if lib.cuco_perturb_version() != VERSION:
            raise PerturbError(f"{path.name} is version {lib.cuco_perturb_version()}, the harness wants {VERSION}")
        lib.cuco_perturb_bind.argtypes = [ctypes.c_void_p]
        lib.cuco_perturb_bind.restype = ctypes.c_int
        lib.cuco_perturb_configure.argtypes = [ctypes.c_uint64, ctypes.c_int, ctypes.c_int, ctypes.c_uint32]
        lib.cuco_perturb_configure.restype = None
        lib.cuco_perturb_enable.argtypes = [ctypes.c_int]
        lib.cuco_perturb_enable.restype = None
        lib.cuco_perturb_draw_next.argtypes = [ctypes.c_int]
        lib.cuco_perturb_draw_next.restype = ctypes.c_uint32
        lib.cuco_perturb_hold.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
        lib.cuco_perturb_hold.restype = ctypes.c_int
        lib.cuco_perturb_start_delay_us.restype = ctypes.c_uint32
        lib.cuco_perturb_target.restype = ctypes.c_int
        lib.cuco_perturb_kind.restype = ctypes.c_char_p
        lib.cuco_perturb_describe_into.argtypes = [ctypes.c_char_p, ctypes.c_int]
        lib.cuco_perturb_describe_into.restype = ctypes.c_int
        lib.cuco_perturb_get_stats.argtypes = [ctypes.POINTER(CStats)]
        lib.cuco_perturb_get_stats.restype = None

    def bind(self, handle: int) -> None:
        """Where the real functions are: the dlopen handle of the candidate (ctypes' `_handle`)."""
        if self.lib.cuco_perturb_bind(ctypes.c_void_p(handle)) != 0:
            raise PerturbError("the schedule perturber was given no library to pass calls on to")

    def configure(self, seed: int, rank: int, world: int, unit_us: int) -> Perturbation:
        """A new round: seed's perturbation, counters and budget reset (disabled until `enable`)."""
        self.lib.cuco_perturb_enable(0)
        self.lib.cuco_perturb_configure(seed, rank, world, unit_us)
        buf = ctypes.create_string_buffer(512)
        self.lib.cuco_perturb_describe_into(buf, len(buf))
        return Perturbation(seed, self.lib.cuco_perturb_kind().decode(), self.lib.cuco_perturb_target(),
                            buf.value.decode(), unit_us, self.lib.cuco_perturb_start_delay_us())

    def enable(self, on: bool) -> None:
        self.lib.cuco_perturb_enable(1 if on else 0)

    def draw(self, op: str) -> int:
        """The policy's next hold for an ordering point of class `op` (enqueues nothing)."""
        return int(self.lib.cuco_perturb_draw_next(OP_CLASSES.index(op)))

    def hold(self, stream_ptr: int, us: int) -> bool:
        """Hold the stream back `us` microseconds (a host function that sleeps). False: not enqueued."""
        return self.lib.cuco_perturb_hold(ctypes.c_void_p(stream_ptr), us) == 0

    def stats(self) -> Stats:
        s = CStats()
        self.lib.cuco_perturb_get_stats(ctypes.byref(s))
        return Stats(s.calls, s.delayed, s.delayed_us, s.skipped, s.errors,
                     {name: int(s.per_class[i]) for i, name in enumerate(OP_CLASSES)})


def kind_of(seed: int) -> str:
    """The kind of perturbation a seed gives (perturb_lib/cuco_perturb.h)."""
    return KINDS[seed % len(KINDS)]


def target_of(seed: int, world: int) -> int:
    return (seed // len(KINDS)) % max(world, 1)
