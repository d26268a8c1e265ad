"""The run plan: what the cascade asks of a group of rank workers, one frozen record.

The cascade builds it (evaluate/cascade.py make_plan), an evaluation level changes it with
`dataclasses.replace` (the perturbed schedules add their `perturb`, compute-sanitizer its tool and
wider limits), the launcher places it (GPUs, run folder) and writes it as `plan.json` in the run
folder; every rank reads it back with `RunPlan.from_json`. Each default is written once, here.

plan.json is JSON with a `version`: a plan is read back exactly by the version that wrote it, and
a file of another version is refused in one sentence rather than half understood."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

PLAN_VERSION = 1

# The seeds of the fresh inputs (RunPlan.seed): the checks of a shape are 0, 1, ...; the back-to-back
# launches and the perturbed rounds draw theirs from their own ranges, unlike any check's.
BACK_TO_BACK_CHECK = 8
PERTURBED_CHECK = 500

TRACE_SLOTS = 4096  # wait-trace slots per rank (0: tracing off, to measure what it costs)


class PlanError(ValueError):
    """A plan.json this version cannot read."""


@dataclass(frozen=True)
class Limits:
    """How long a rank's steps may take: its watchdog's limits, in seconds. A later launch may take
    max(timeout_floor_s, timeout_factor x the reference's time); `time_scale` widens every limit
    of the ranks and the launcher's grace and backstop (a run under compute-sanitizer)."""

    first_launch_timeout_s: float = 20.0
    timeout_floor_s: float = 5.0
    timeout_factor: float = 50.0
    setup_timeout_s: float = 120.0  # joining the harness's NCCL group
    init_timeout_s: float = 120.0  # cuco_init
    time_scale: float = 1.0


@dataclass(frozen=True)
class ShapePlan:
    """One shape the ranks run: verified (`level` "verify", `checks` times, then back to back and
    perturbed) or verified once and timed ("bench"). `index` places it among the run's shapes
    (verify shapes from 0, bench shapes from 100) and so in the seeds of its inputs."""

    name: str
    dims: dict[str, int]
    level: str  # "verify" | "bench"
    checks: int
    index: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "dims": dict(self.dims), "level": self.level, "checks": self.checks,
                "index": self.index}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ShapePlan:
        return cls(str(data["name"]), {str(k): int(v) for k, v in data["dims"].items()}, str(data["level"]),
                   int(data["checks"]), int(data["index"]))


@dataclass(frozen=True)
class PerturbPlan:
    """L2's perturbed schedules (evaluate/races.py): the interposer, the first seed, how many rounds
    (seed, seed + 1, ...) and the unit of the holds."""

    library: str
    seed: int
    rounds: int
    unit_us: int

    def to_json(self) -> dict[str, Any]:
        return {"library": self.library, "seed": self.seed, "rounds": self.rounds, "unit_us": self.unit_us}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PerturbPlan:
        return cls(str(data["library"]), int(data["seed"]), int(data["rounds"]), int(data["unit_us"]))


@dataclass(frozen=True)
class RunPlan:
    mode: str  # "evaluate" (the candidate) | "baseline" (the reference alone, its parts, the ceilings)
    workload: str
    reference: str  # the workload's reference.py
    library: str | None  # the candidate's shared library; None in a baseline run
    shapes: tuple[ShapePlan, ...]
    rtol: float
    floor: float
    warmup: int
    repetitions: int
    nonce: int  # per run: with the shape and the check, the seed of every input
    limits: Limits = field(default_factory=Limits)
    trace_slots: int = TRACE_SLOTS
    trace_ab: bool = False  # at bench shapes, also time the candidate with tracing on and off
    shared_gpu: bool = False
    preload: tuple[str, ...] = ()  # libraries the ranks load before the candidate
    notes: tuple[str, ...] = ()  # what the launching side found weakening the reference
    perturb: PerturbPlan | None = None
    sanitize: str | None = None  # the compute-sanitizer tool the ranks run under (CuPy's pool off)
    gpus: tuple[int, ...] = ()  # one per rank; set by the launcher
    rundir: str = ""  # the run folder; set by the launcher

    @property
    def world(self) -> int:
        return len(self.gpus)

    def seed(self, shape: ShapePlan, check: int) -> int:
        """The seed of the inputs of `check` at `shape` (BACK_TO_BACK_CHECK and PERTURBED_CHECK + n
        for the launches after the ordinary checks)."""
        return self.nonce * 1000 + shape.index * 10 + check

    def placed(self, gpus: list[int], rundir: str) -> RunPlan:
        """This plan for a group on `gpus` (one rank each) writing into `rundir`."""
        return replace(self, gpus=tuple(gpus), rundir=rundir)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": PLAN_VERSION, "mode": self.mode, "workload": self.workload, "reference": self.reference,
            "library": self.library, "shapes": [s.to_json() for s in self.shapes], "rtol": self.rtol,
            "floor": self.floor, "warmup": self.warmup, "repetitions": self.repetitions, "nonce": self.nonce,
            "limits": self.limits.__dict__.copy(), "trace_slots": self.trace_slots, "trace_ab": self.trace_ab,
            "shared_gpu": self.shared_gpu, "preload": list(self.preload), "notes": list(self.notes),
            "perturb": self.perturb.to_json() if self.perturb else None, "sanitize": self.sanitize,
            "gpus": list(self.gpus), "rundir": self.rundir,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunPlan:
        version = data.get("version") if isinstance(data, dict) else None
        if version != PLAN_VERSION:
            raise PlanError(f"a run plan of version {version!r}; this harness reads version {PLAN_VERSION}")
        try:
            perturb = data["perturb"]
            return cls(
                mode=str(data["mode"]), workload=str(data["workload"]), reference=str(data["reference"]),
                library=None if data["library"] is None else str(data["library"]),
                shapes=tuple(ShapePlan.from_json(s) for s in data["shapes"]), rtol=float(data["rtol"]),
                floor=float(data["floor"]), warmup=int(data["warmup"]), repetitions=int(data["repetitions"]),
                nonce=int(data["nonce"]), limits=Limits(**{k: float(v) for k, v in data["limits"].items()}),
                trace_slots=int(data["trace_slots"]), trace_ab=bool(data["trace_ab"]),
                shared_gpu=bool(data["shared_gpu"]), preload=tuple(str(p) for p in data["preload"]),
                notes=tuple(str(n) for n in data["notes"]),
                perturb=PerturbPlan.from_json(perturb) if perturb else None,
                sanitize=None if data["sanitize"] is None else str(data["sanitize"]),
                gpus=tuple(int(g) for g in data["gpus"]), rundir=str(data["rundir"]),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise PlanError(f"a run plan this harness cannot read: {type(exc).__name__}: {exc}") from exc
