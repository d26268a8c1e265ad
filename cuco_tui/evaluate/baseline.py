"""Measuring a workload's reference and its ceilings on a GPU group, in one run:
the reference (host-driven, sequential), each of its parts alone (for gemm_allgather the
GEMM and the all-gather), and the copy-engine peer bandwidth. From these come the bounds a
perfect overlap approaches: max(T_compute, T_comm) and max(T_compute, bytes / peer bandwidth).
`bound()` is the one a search measures candidates against (core/bounds.py); `bounds_of` makes a
session's Bounds from a Baseline."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from cuco_tui.toolchain import BuildCache
from cuco_tui.toolchain.toolchain import discover
from cuco_tui.evaluate.cascade import (EvalOptions, choose_gpus, harness_libraries, make_plan, new_rundir,
                                      reference_messages, run_deadline, runs_root)
from cuco_tui.core.bounds import Bounds, ShapeBound, Work
from cuco_tui.core.machine import MachineInfo
from cuco_tui.core.result import Spread
from cuco_tui.harness.launcher import GroupRun, run_group
from cuco_tui.harness.plan import SETTLE_US, RunPlan
from cuco_tui.harness.rank_events import BaselineMeasured, Done, Failed, TimedOut
from cuco_tui.core.workload import Workload


# Names of reference parts that move data rather than compute (the rest are compute).
COMM_PARTS = frozenset({"allgather", "allreduce", "reducescatter", "transfer", "alltoall", "dispatch", "combine",
                        "comm"})


class BaselineError(RuntimeError):
    pass


@dataclass(frozen=True)
class ShapeBaseline:
    shape: str
    dims: dict[str, int]
    reference: Spread
    parts: dict[str, Spread]  # e.g. {"gemm": ..., "allgather": ...}
    comm_bytes: int = 0  # bytes each rank receives
    peer_copy: Spread | None = None  # time to copy one rank's share to a peer with the copy engine
    world: int = 2
    # How the ranks started each repetition (harness/plan.py ALIGNS); a baseline recorded without it
    # (before 2026-11-27) was timed by a host barrier alone. The bounds' times follow it.
    align: str = "host"

    @property
    def overlap_bound_ms(self) -> float:
        """max(parts): what perfect overlap of the measured parts would take."""
        return max(p.median for p in self.parts.values()) if self.parts else self.reference.median

    @property
    def peer_gbps(self) -> float | None:
        if not self.peer_copy or not self.comm_bytes:
            return None
        return self.comm_bytes / max(1, self.world - 1) / (self.peer_copy.median * 1e6)

    @property
    def link_bound_ms(self) -> float | None:
        """max(compute, bytes / peer bandwidth): overlap with communication at copy-engine speed."""
        gbps = self.peer_gbps
        compute = [p.median for name, p in self.parts.items() if name not in COMM_PARTS]
        if gbps is None or not compute:
            return None
        return max(max(compute), self.comm_bytes / (gbps * 1e6))

    def to_dict(self) -> dict[str, Any]:
        return {
            "shape": self.shape, "dims": self.dims, "reference": self.reference.__dict__,
            "parts": {k: v.__dict__ for k, v in self.parts.items()}, "comm_bytes": self.comm_bytes,
            "peer_copy": self.peer_copy.__dict__ if self.peer_copy else None,
            "overlap_bound_ms": self.overlap_bound_ms, "peer_gbps": self.peer_gbps,
            "link_bound_ms": self.link_bound_ms, "align": self.align,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any], world: int) -> "ShapeBaseline":
        """A shape of `cuco baseline --json` read back (`world`: the run's rank count, which
        the bandwidth depends on); the figures it derives (bounds, bandwidth) are computed again."""
        peer = d.get("peer_copy")
        return cls(shape=str(d["shape"]), dims={str(k): int(v) for k, v in d["dims"].items()},
                   reference=Spread(**d["reference"]), parts={k: Spread(**v) for k, v in d["parts"].items()},
                   comm_bytes=int(d.get("comm_bytes") or 0), peer_copy=Spread(**peer) if peer else None, world=world,
                   align=str(d.get("align", "host")))


@dataclass(frozen=True)
class Baseline:
    workload: str
    gpus: list[int]
    shapes: list[ShapeBaseline] = field(default_factory=list)
    seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)  # the reference's own (worker.report_reference)
    notes: list[str] = field(default_factory=list)  # how it was timed: repetitions that started late

    def to_dict(self) -> dict[str, Any]:
        return {"workload": self.workload, "gpus": self.gpus, "seconds": self.seconds,
                "shapes": [s.to_dict() for s in self.shapes], "warnings": self.warnings, "notes": self.notes}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Baseline":
        """`cuco baseline --json` read back (benchmarks/eval_table.py)."""
        gpus = [int(g) for g in d["gpus"]]
        return cls(str(d["workload"]), gpus, [ShapeBaseline.from_dict(s, len(gpus)) for s in d["shapes"]],
                   float(d.get("seconds", 0.0)), [str(w) for w in d.get("warnings", [])],
                   [str(n) for n in d.get("notes", [])])


def compute_ms(shape: ShapeBaseline) -> float | None:
    """The reference's compute parts alone, one after another (they run in sequence in it)."""
    compute = [p.median for name, p in shape.parts.items() if name not in COMM_PARTS]
    return sum(compute) if compute else None


def comm_ms(shape: ShapeBaseline) -> float | None:
    comm = [p.median for name, p in shape.parts.items() if name in COMM_PARTS]
    return sum(comm) if comm else None


def bound(shape: ShapeBaseline) -> float:
    """The perfect-overlap bound of a shape, in ms: max(compute ceiling, bytes / peer bandwidth)
    when both are known; else max(compute, communication as the reference moves it); else the
    slowest part; else the reference itself."""
    compute, comm = compute_ms(shape), comm_ms(shape)
    gbps = shape.peer_gbps
    link = shape.comm_bytes / (gbps * 1e6) if gbps and shape.comm_bytes else None
    moved = link if link is not None else comm
    known = [t for t in (compute, moved) if t is not None]
    if known:
        return max(known)
    return shape.overlap_bound_ms


def bounds_of(baseline: Baseline, work: dict[str, Work], machine: MachineInfo | None = None,
              measured_at: float = 0.0) -> Bounds:
    """The session's Bounds from a measured Baseline and the workload's work per shape."""
    shapes = tuple(ShapeBound(shape=s.shape, reference_ms=s.reference.median, bound_ms=bound(s),
                              compute_ms=compute_ms(s), comm_ms=comm_ms(s), peer_gbps=s.peer_gbps,
                              work=work.get(s.shape, Work(0, s.comm_bytes)))
                   for s in baseline.shapes)
    return Bounds(baseline.workload, len(baseline.gpus), tuple(baseline.gpus), shapes, machine, measured_at)


def _slowest(series: list[tuple[float, ...] | None]) -> Spread | None:
    """The slowest rank's time of each repetition (ranks without the series left out)."""
    series = [s for s in series if s]
    if not series:
        return None
    return Spread.of([max(v) for v in zip(*series)])


def measure_baseline(workload: Workload, options: EvalOptions = EvalOptions(), run_root: Path | None = None) -> Baseline:
    gpus, why = choose_gpus(workload, options)
    if not gpus:
        raise BaselineError(why.removeprefix("no_gpu: "))
    workload.check_world(len(gpus))
    group, plan, _ = run_reference_alone(workload, options, "baseline", gpus, run_root)
    return read_baseline(group, workload.name, plan.align)


def run_reference_alone(workload: Workload, options: EvalOptions, mode: str, gpus: list[int],
                        run_root: Path | None = None) -> tuple[GroupRun, RunPlan, Path]:
    """A run of the workload's reference with no candidate on `gpus` (`mode`: "baseline", or
    "reference" for evaluate/reference_check.py), the harness libraries it may use preloaded, in a
    run folder of its own: (the group's run, its plan, the folder)."""
    cache = BuildCache()
    preload, _, note = harness_libraries(workload, None, discover(), cache, lambda p: None)
    plan = replace(make_plan(workload, None, options, mode), preload=tuple(preload),
                   notes=(note,) if note else ())
    rundir = new_rundir(run_root or runs_root(options, cache), f"{mode}-{workload.name}")
    return run_group(plan, gpus, rundir, run_deadline(plan)), plan, rundir


def group_failure(group: GroupRun, unfinished: str) -> str:
    """Why a run of the reference alone failed, in one line (each rank's failure, else `unfinished`
    with the ranks' last words); "" when every rank finished."""
    problems = [f"rank {o.rank}: {e.message}" for o in group.ranks for e in o.of(Failed) + o.of(TimedOut)]
    if not problems and all(o.last(Done) for o in group.ranks):
        return ""
    tails = "; ".join(o.stderr_tail.strip().splitlines()[-1] for o in group.ranks if o.stderr_tail.strip())
    return "; ".join(problems) or f"{unfinished} ({tails or 'no output'})"


def read_baseline(group: GroupRun, workload: str, align: str = "device") -> Baseline:
    """The Baseline the ranks of a `cuco baseline` run reported, or BaselineError when one failed;
    `align`: the run plan's (RunPlan.align), recorded on each shape."""
    gpus = [o.gpu for o in group.ranks]
    failed = group_failure(group, "the baseline run did not finish")
    if failed:
        raise BaselineError(failed)
    shapes = []
    by_shape: dict[str, list[BaselineMeasured]] = {}
    for o in group.ranks:
        for e in o.of(BaselineMeasured):
            by_shape.setdefault(e.shape, []).append(e)
    for name, events in by_shape.items():
        parts = {part: _slowest([e.parts_ms.get(part) for e in events]) for part in events[0].parts_ms}
        shapes.append(ShapeBaseline(
            shape=name, dims=events[0].dims, reference=_slowest([e.reference_ms for e in events]),
            parts={k: v for k, v in parts.items() if v is not None}, comm_bytes=int(events[0].comm_bytes or 0),
            peer_copy=_slowest([e.peer_copy_ms for e in events]), world=len(gpus), align=align,
        ))
    return Baseline(workload, gpus, shapes, group.seconds, reference_messages(group.ranks), late_notes(group))


def late_notes(group: GroupRun) -> list[str]:
    """Where some repetitions started after the alignment pause had run out (that host reached
    the timed call late): those times hold its launch latency, and a bound built on them is high."""
    return [f"{e.shape}, rank {o.rank}: {n} of {len(e.parts_ms.get(what, e.reference_ms))} repetitions of {what} "
            f"started after the {SETTLE_US} µs alignment pause had run out: those times hold host launch latency"
            for o in group.ranks for e in o.of(BaselineMeasured) for what, n in e.late.items() if n]
