"""How close a measured candidate is to what the hardware allows, per bench shape.

The bound of a shape is what a perfect overlap of computation and communication would take:
max(compute ceiling, bytes / peer bandwidth), from the workload's baseline (the reference's
compute parts timed alone, the bytes a rank receives, the copy-engine peer bandwidth; see
evaluate/baseline.py). A search measures it once per session, on a GPU, and stores it in the
session (`Bounds`). The work of a shape (`Work`: one rank's FLOPs and received bytes) comes
from the workload's reference (`flops(dims, world)`, `comm_bytes(dims, world)`).

`figures` turns one ShapeTiming into the row every table of timings is drawn from (the
candidate's Timings tab, the evaluate screen, `cuco eval` and `cuco show`, the search's summary,
the leaderboard and compare; each keeps its own look): the candidate's and the reference's times,
the speedup, TFLOP/s, GB/s and % of the bound, with the bands of the times and the speedup
(core/noise.py: TFLOP/s and GB/s follow the time's, % of the bound the speedup's). The bound is taken as a speedup (reference
time / bound time, both from the baseline run) and compared with the candidate's speedup
(measured against the reference in the candidate's own run), so clocks that drift between the
two runs do not move the figure.
Plain data and arithmetic, nothing else."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from cuco_tui.core.machine import MachineInfo
from cuco_tui.core.noise import Band, speedup_band, time_band
from cuco_tui.core.result import ShapeTiming


@dataclass(frozen=True)
class Work:
    """One rank's work in one iteration of a shape (the busiest rank where they differ)."""

    flops: int = 0
    comm_bytes: int = 0


@dataclass(frozen=True)
class ShapeBound:
    shape: str
    reference_ms: float  # the reference's median in the baseline run
    bound_ms: float  # max(compute, bytes / peer bandwidth), or max(compute, comm) without a bandwidth
    compute_ms: float | None = None  # the reference's compute parts alone, one after another
    comm_ms: float | None = None  # its communication parts alone
    peer_gbps: float | None = None  # copy-engine bandwidth to one peer
    work: Work = field(default_factory=Work)

    @property
    def speedup(self) -> float:
        """The bound as a speedup over the reference: what a perfect overlap would reach."""
        return self.reference_ms / self.bound_ms if self.bound_ms > 0 else math.inf

    def to_dict(self) -> dict[str, Any]:
        return {"shape": self.shape, "reference_ms": self.reference_ms, "bound_ms": self.bound_ms,
                "compute_ms": self.compute_ms, "comm_ms": self.comm_ms, "peer_gbps": self.peer_gbps,
                "flops": self.work.flops, "comm_bytes": self.work.comm_bytes}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ShapeBound":
        return cls(shape=str(d["shape"]), reference_ms=float(d["reference_ms"]), bound_ms=float(d["bound_ms"]),
                   compute_ms=d.get("compute_ms"), comm_ms=d.get("comm_ms"), peer_gbps=d.get("peer_gbps"),
                   work=Work(int(d.get("flops") or 0), int(d.get("comm_bytes") or 0)))


@dataclass(frozen=True)
class Bounds:
    """A session's bounds: one per bench shape, measured on `gpus` (`world` ranks) of `machine`."""

    workload: str
    world: int
    gpus: tuple[int, ...]
    shapes: tuple[ShapeBound, ...]
    machine: MachineInfo | None = None
    measured_at: float = 0.0  # unix time
    # The reference on those GPUs against its float64 answer, measured with them (`cuco workload check
    # --gpu`'s line; "" where not checked): every candidate is verified against that reference.
    reference_check: str = ""
    reference_ok: bool = True

    def of(self, shape: str) -> ShapeBound | None:
        return next((b for b in self.shapes if b.shape == shape), None)

    @property
    def speedup(self) -> float | None:
        """The geometric mean of the shapes' bound speedups, as a candidate's speedup is one."""
        values = [b.speedup for b in self.shapes if math.isfinite(b.speedup) and b.speedup > 0]
        return geomean(values) if values else None

    def to_dict(self) -> dict[str, Any]:
        return {"workload": self.workload, "world": self.world, "gpus": list(self.gpus),
                "shapes": [b.to_dict() for b in self.shapes],
                "machine": self.machine.to_dict() if self.machine is not None else None,
                "measured_at": self.measured_at, "reference_check": self.reference_check,
                "reference_ok": self.reference_ok}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Bounds":
        machine = d.get("machine")
        return cls(workload=str(d.get("workload", "")), world=int(d.get("world", 0)),
                   gpus=tuple(int(g) for g in d.get("gpus", ())),
                   shapes=tuple(ShapeBound.from_dict(s) for s in d.get("shapes", ())),
                   machine=MachineInfo.from_dict(machine) if machine else None,
                   measured_at=float(d.get("measured_at", 0.0)), reference_check=str(d.get("reference_check", "")),
                   reference_ok=bool(d.get("reference_ok", True)))


@dataclass(frozen=True)
class ShapeFigures:
    """One measured shape as every table of timings shows it; None where the figure cannot be
    known. Times are per repetition the slowest rank's, in ms."""

    shape: str
    time_ms: float  # the candidate's median
    speedup: float  # the reference's median / the candidate's, both of this run
    time_band: Band  # the candidate's median and interquartile range (p25-p75)
    speedup_band: Band  # core/noise.py speedup_band
    reference_ms: float  # the reference's median, timed in the same run
    reference_band: Band  # its interquartile range
    iqr_pct: float  # the candidate's interquartile range, % of its median
    samples: int  # repetitions timed
    tflops: float | None = None  # one rank's FLOPs / time, in TFLOP/s
    gbps: float | None = None  # the bytes one rank receives / time, in GB/s
    pct_of_bound: float | None = None  # 100: at the bound
    bound_speedup: float | None = None
    align: str = "host"  # how its ranks started each repetition (ShapeTiming.align): times compare only alike


def figures(timing: ShapeTiming, bound: ShapeBound | None = None, work: Work | None = None) -> ShapeFigures:
    """`work` defaults to the bound's; without either, no TFLOP/s or GB/s."""
    work = work if work is not None else (bound.work if bound is not None else None)
    ms = timing.candidate.median
    tflops = work.flops / (ms * 1e9) if work is not None and work.flops and ms > 0 else None
    gbps = work.comm_bytes / (ms * 1e6) if work is not None and work.comm_bytes and ms > 0 else None
    pct = bound_speedup = None
    if bound is not None and math.isfinite(bound.speedup) and bound.speedup > 0:
        bound_speedup = bound.speedup
        pct = 100.0 * timing.speedup / bound_speedup
    return ShapeFigures(timing.shape, ms, timing.speedup, time_band(timing.candidate), speedup_band(timing),
                        timing.reference.median, time_band(timing.reference), timing.spread_pct, timing.candidate.n,
                        tflops, gbps, pct, bound_speedup, timing.align)


def all_figures(timings: Iterable[ShapeTiming], bounds: Bounds | None = None,
                work: Mapping[str, Work] | None = None) -> tuple[ShapeFigures, ...]:
    """figures() for each shape, with its bound and work where known."""
    out = []
    for t in timings:
        bound = bounds.of(t.shape) if bounds is not None else None
        out.append(figures(t, bound, (work or {}).get(t.shape)))
    return tuple(out)


def mean_pct_of_bound(shapes: Iterable[ShapeFigures]) -> float | None:
    """The geometric mean of the shapes' % of bound (None when any shape lacks one)."""
    values = [f.pct_of_bound for f in shapes]
    if not values or any(v is None or v <= 0 for v in values):
        return None
    return geomean([float(v) for v in values if v is not None])


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def format_figure(value: float | None, spec: str, unit: str = "") -> str:
    """A figure for a table cell: '-' when unknown."""
    return "-" if value is None else f"{value:{spec}}{unit}"
