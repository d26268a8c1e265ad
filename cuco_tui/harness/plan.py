"""The run plan: what the cascade asks of a group of rank workers, one frozen record.

The cascade builds it (evaluate/cascade.py make_plan), an evaluation level changes it with
`dataclasses.replace` (the perturbed schedules add their `perturb`, compute-sanitizer its tool and
wider limits), the launcher places it (GPUs, run folder) and writes it as `plan.json` in the run
folder; every rank reads it back with `RunPlan.from_json`. Each default is written once, here.

plan.json is JSON with a `version`: a plan is read back exactly by the version that wrote it, and
a file of another version is refused in one sentence rather than half understood. The file is the
records' fields under their own names (`dataclasses.asdict`), read back by the types the fields
declare (str, int, float, bool, `X | None`, `tuple[X, ...]`, dict, and records of those): a new
field needs no code here, only PLAN_VERSION raised."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, is_dataclass, replace
from types import UnionType
from typing import Any, Union, get_args, get_origin, get_type_hints

PLAN_VERSION = 3  # 2: `profile`; 3: `align`

# The seeds of the fresh inputs (RunPlan.seed): the checks of a shape are 0, 1, ...; the back-to-back
# launches and the perturbed rounds draw theirs from their own ranges, unlike any check's.
BACK_TO_BACK_CHECK = 8
PERTURBED_CHECK = 500

TRACE_SLOTS = 4096  # wait-trace slots per rank (0: tracing off, to measure what it costs)

# How the ranks start each timed repetition together (harness/timing.py). "device": after the host
# barrier, a fixed pause and an all-reduce on each rank's stream, so every rank's start event fires
# within the all-reduce's own skew and no rank's time holds another's host launch latency. "host":
# the host barrier alone, as every figure before 2026-11-27 was timed (to compare with them).
ALIGNS = ("device", "host")
# The pause before the aligning all-reduce: longer than a host takes to enqueue the all-reduce and a
# candidate's launch (tens of µs), so that the launch is queued when the ranks are lined up; it is
# outside the timed events. A repetition where the stream got there first is counted
# (Timed.late_candidate, late_reference).
SETTLE_US = 300


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


@dataclass(frozen=True)
class PerturbPlan:
    """L2's perturbed schedules (evaluate/races.py): the interposer, the first seed, how many rounds
    (seed, seed + 1, ...) and the unit of the holds."""

    library: str
    seed: int
    rounds: int
    unit_us: int


@dataclass(frozen=True)
class ProfilePlan:
    """A timeline of the candidate at one bench shape (evaluate/profiling.py): after that shape is
    timed, the ranks record what their GPUs run (CUPTI's activity API) over `launches` launches
    back to back, each into profile-rank{R}.json of the run folder."""

    shape: str
    launches: int = 5


@dataclass(frozen=True)
class RunPlan:
    # "evaluate" (the candidate) | "baseline" (the reference alone, its parts, the ceilings) |
    # "reference" (the reference alone at the verify shapes, its buffers saved: `cuco workload check --gpu`)
    mode: str
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
    profile: ProfilePlan | None = None
    align: str = "device"  # one of ALIGNS
    gpus: tuple[int, ...] = ()  # one per rank; set by the launcher
    rundir: str = ""  # the run folder; set by the launcher

    @property
    def world(self) -> int:
        return len(self.gpus)

    @property
    def device_aligned(self) -> bool:
        """Whether timed (and profiled) launches start after RankGroup.align_on_device."""
        return self.align != "host"

    def seed(self, shape: ShapePlan, check: int) -> int:
        """The seed of the inputs of `check` at `shape` (BACK_TO_BACK_CHECK and PERTURBED_CHECK + n
        for the launches after the ordinary checks)."""
        return self.nonce * 1000 + shape.index * 10 + check

    def placed(self, gpus: list[int], rundir: str) -> RunPlan:
        """This plan for a group on `gpus` (one rank each) writing into `rundir`."""
        return replace(self, gpus=tuple(gpus), rundir=rundir)

    def to_json(self) -> dict[str, Any]:
        """plan.json's content: the version, then every field under its own name, nested records
        as objects and tuples as lists."""
        return {"version": PLAN_VERSION, **asdict(self, dict_factory=_json_object)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunPlan:
        version = data.get("version") if isinstance(data, dict) else None
        if version != PLAN_VERSION:
            raise PlanError(f"a run plan of version {version!r}; this harness reads version {PLAN_VERSION}")
        try:
            return _read(cls, data)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise PlanError(f"a run plan this harness cannot read: {type(exc).__name__}: {exc}") from exc


def _json_object(items: list[tuple[str, Any]]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in items}


def _read(kind: Any, value: Any) -> Any:
    """`value` from plan.json as the type a field declares: every field of a record must be there
    (a default is what the cascade starts from, not what a missing key means), names and numbers
    converted as the record types them."""
    if is_dataclass(kind):
        hints = get_type_hints(kind)
        return kind(**{f.name: _read(hints[f.name], value[f.name]) for f in fields(kind)})
    origin, args = get_origin(kind), get_args(kind)
    if origin in (Union, UnionType):  # X | None
        (inner,) = [a for a in args if a is not type(None)]
        return None if value is None else _read(inner, value)
    if origin is tuple:  # tuple[X, ...]
        return tuple(_read(args[0], v) for v in value)
    if origin is dict:
        return {_read(args[0], k): _read(args[1], v) for k, v in value.items()}
    return kind(value)  # str, int, float, bool
