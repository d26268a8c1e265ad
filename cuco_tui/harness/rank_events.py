"""How a rank reports: one JSON object a line in `rank{R}.jsonl` of the run folder, and its exit code.

The launcher and the cascade read nothing else, so these events are the contract with them: one
frozen dataclass per kind, written by `EventLog.emit` (which stamps the rank and the time) as
`{"event": KIND, "rank": R, "t": ..., field: value, ...}` and read back by `parse_line`. Sequences
travel as JSON lists and come back as tuples, so an event reads back equal to what was written.

A line that is not JSON (a rank killed in the middle of writing it, a stray print) reads back as
`Garbled`, with its text; a line of a kind this version does not know (a stand-in rank of a test)
as `Unrecognized`, with its fields. Readers pass over both."""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, ClassVar, TypeVar

EXIT_OK = 0
EXIT_FAILED = 2  # the candidate failed (init error, CUDA error, wrong answer): reported
EXIT_TIMEOUT = 124
EXIT_ABORTED = 125

GARBLED_TEXT = 500  # characters of a garbled line that are kept


def _frozen(value: Any) -> Any:
    """A JSON value with its lists as tuples (the events' sequences are tuples)."""
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return {k: _frozen(v) for k, v in value.items()}
    return value


@dataclass(frozen=True, kw_only=True)
class RankEvent:
    KIND: ClassVar[str] = ""
    rank: int = 0  # stamped by EventLog.emit
    t: float = 0.0  # time.time() when it was written

    def to_json(self) -> dict[str, Any]:
        return {"event": self.KIND, **{f.name: getattr(self, f.name) for f in fields(self)}}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RankEvent:
        """The event of `data` (its "event" key already matched to this class); a field the line
        lacks takes its default, a field this version does not know is dropped."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: _frozen(v) for k, v in data.items() if k in names})


# -- a rank's progress ---------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class Joined(RankEvent):
    """The rank joined the harness's NCCL group on its GPU."""

    KIND: ClassVar[str] = "joined"
    pid: int  # the worker's own (under compute-sanitizer, the tool's child)
    device: int = -1
    name: str = ""  # the GPU's
    plans: int = 0  # the plans this process ran before this one (a kept worker: harness/kept.py)


@dataclass(frozen=True, kw_only=True)
class PlanStarted(RankEvent):
    KIND: ClassVar[str] = "plan"
    shapes: tuple[str, ...]
    mode: str


@dataclass(frozen=True, kw_only=True)
class ShapeStarted(RankEvent):
    KIND: ClassVar[str] = "shape_start"
    shape: str
    level: str  # "verify" | "bench"
    dims: dict[str, int]


@dataclass(frozen=True, kw_only=True)
class Launched(RankEvent):
    """A candidate launch (or two back to back) is being enqueued, with its time limit."""

    KIND: ClassVar[str] = "launch"
    shape: str
    check: int
    limit_s: float
    back_to_back: bool = False
    label: str = ""


@dataclass(frozen=True, kw_only=True)
class Verified(RankEvent):
    """One output of one check compared with the reference's (harness/verify.py), `ok` or not."""

    KIND: ClassVar[str] = "verify"
    shape: str
    level: str
    check: int
    output: str
    ok: bool
    elements: int
    unwritten: int
    nonfinite: int
    max_rel_error: float
    sum_sq_diff: float
    sum_sq_ref: float
    worst_index: tuple[int, ...]
    worst_got: float
    worst_want: float
    rtol: float
    floor: float = 0.0
    l2_rel_error: float = 0.0
    label: str = ""  # "back to back, 2nd", "perturbed, seed 7, 1st"; "" for an ordinary check
    perturb_seed: int | None = None  # the perturbed round's seed


@dataclass(frozen=True, kw_only=True)
class Timed(RankEvent):
    """A bench shape's repetitions on this rank, candidate and reference interleaved, in ms."""

    KIND: ClassVar[str] = "timing"
    shape: str
    dims: dict[str, int]
    candidate_ms: tuple[float, ...]
    reference_ms: tuple[float, ...]
    # Repetitions whose start came before this rank's host had enqueued the timed call (the
    # alignment pause ran out first: the time holds some host launch latency, as with a host
    # barrier alone). Always 0 under --align host, where it is not looked at.
    late_candidate: int = 0
    late_reference: int = 0


@dataclass(frozen=True, kw_only=True)
class TraceTimed(RankEvent):
    """The candidate timed with its wait trace on and off, interleaved (EvalOptions.trace_ab)."""

    KIND: ClassVar[str] = "trace_ab"
    shape: str
    on_ms: tuple[float, ...]
    off_ms: tuple[float, ...]


@dataclass(frozen=True, kw_only=True)
class BaselineMeasured(RankEvent):
    """`cuco baseline` at one shape: the reference, each of its parts alone, and the copy engine."""

    KIND: ClassVar[str] = "baseline"
    shape: str
    dims: dict[str, int]
    reference_ms: tuple[float, ...]
    parts_ms: dict[str, tuple[float, ...]]  # {"gemm": [...], "allgather": [...]}
    comm_bytes: int | None = None  # bytes each rank receives (None: the reference counts none)
    peer_copy_ms: tuple[float, ...] = ()  # that share copied to a peer by the copy engine
    # what was timed ("the reference", a part's name) -> its repetitions that started after the
    # alignment pause had run out (as Timed's late counts)
    late: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class ReferenceSaved(RankEvent):
    """`cuco workload check --gpu` at one verify shape: the reference ran alone on this rank's GPU,
    its inputs and outputs written to `file` (NumPy .npz in the run folder: "in.NAME", "out.NAME")
    for the launching side to compare with the workload's float64 expected()."""

    KIND: ClassVar[str] = "reference_saved"
    shape: str
    dims: dict[str, int]
    file: str


@dataclass(frozen=True, kw_only=True)
class PerturbStarted(RankEvent):
    """A perturbed round begins (harness/rank_steps.py): what its seed does on this rank."""

    KIND: ClassVar[str] = "perturb"
    shape: str
    round: int
    seed: int
    kind: str
    target: int
    description: str
    unit_us: int
    start_delay_us: int


@dataclass(frozen=True, kw_only=True)
class PerturbEnded(RankEvent):
    KIND: ClassVar[str] = "perturb_stats"
    shape: str
    round: int
    seed: int
    ok: bool
    seconds: float
    calls: int  # ordering points seen while enabled
    delayed: int
    delayed_us: int
    skipped: int
    errors: int
    per_class: dict[str, int]


@dataclass(frozen=True, kw_only=True)
class ProfileCaptured(RankEvent):
    """The rank's timeline of `launches` launches at `shape` (plan.profile): `activities` records
    written to `file` (in the run folder), or `problem`, one sentence, when none could be taken."""

    KIND: ClassVar[str] = "profile"
    shape: str
    launches: int
    file: str = ""
    activities: int = 0
    dropped: int = 0  # records past the rank's cap, not written
    problem: str = ""


@dataclass(frozen=True, kw_only=True)
class Done(RankEvent):
    """Every shape of the plan reported; the rank closes the group next."""

    KIND: ClassVar[str] = "done"


@dataclass(frozen=True, kw_only=True)
class Idle(RankEvent):
    """A kept worker (harness/kept.py) finished the plan, and every rank found its process as
    the plan found it (the device idle, no memory or thread left behind by the candidate): it
    waits on its stdin for the next plan of its group, with its NCCL group open."""

    KIND: ClassVar[str] = "idle"
    plans: int  # the plans this process has run


@dataclass(frozen=True, kw_only=True)
class Leaving(RankEvent):
    """A kept worker will not take another plan: `reason` says what a rank found left behind (the
    results of the plan stand; the next plan starts fresh workers)."""

    KIND: ClassVar[str] = "leaving"
    reason: str


# -- warnings: the results stand -----------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class ReferenceWarning(RankEvent):
    """What makes the reference weaker than it should be (speedups against it overstate)."""

    KIND: ClassVar[str] = "reference_warning"
    message: str = ""


@dataclass(frozen=True, kw_only=True)
class PerturbWarning(RankEvent):
    KIND: ClassVar[str] = "perturb_warning"
    message: str = ""


@dataclass(frozen=True, kw_only=True)
class CloseWarning(RankEvent):
    """Closing the harness's NCCL group after the results went wrong."""

    KIND: ClassVar[str] = "close_warning"
    message: str = ""


# -- how a rank ends early -----------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class Failed(RankEvent):
    """The candidate or the harness failed: `kind` is "init", "launch", "teardown", "cuda", "abi" or
    "harness" (a bug of ours, with its traceback)."""

    KIND: ClassVar[str] = "error"
    message: str
    kind: str = ""
    phase: str = ""
    traceback: str = ""
    trace: tuple[dict[str, Any], ...] = ()  # the wait trace, when the watchdog saw a sticky CUDA error


@dataclass(frozen=True, kw_only=True)
class Stopped(RankEvent):
    """The watchdog ended the rank in `phase` ("verify:small") during `what`, with its wait trace."""

    phase: str = ""
    what: str = ""
    limit_s: float = 0.0
    message: str = ""
    trace: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True, kw_only=True)
class TimedOut(Stopped):
    KIND: ClassVar[str] = "timeout"


@dataclass(frozen=True, kw_only=True)
class Aborted(Stopped):
    """The launcher stopped the group after another rank failed."""

    KIND: ClassVar[str] = "aborted"


# -- lines that are not one of the above ---------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class Garbled(RankEvent):
    """A line that is not a JSON object, or one of a known kind without the fields it needs."""

    KIND: ClassVar[str] = "garbled"
    text: str


@dataclass(frozen=True, kw_only=True)
class Unrecognized(RankEvent):
    """A JSON object of a kind this version does not know: kept with its fields, read by nobody."""

    kind: str
    fields: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"event": self.kind, **self.fields}


KINDS: dict[str, type[RankEvent]] = {cls.KIND: cls for cls in (
    Joined, PlanStarted, ShapeStarted, Launched, Verified, Timed, TraceTimed, BaselineMeasured, ReferenceSaved,
    PerturbStarted,
    PerturbEnded, ProfileCaptured, Done, Idle, Leaving, ReferenceWarning, PerturbWarning, CloseWarning, Failed,
    TimedOut, Aborted, Garbled,
)}

E = TypeVar("E", bound=RankEvent)


def from_json(data: Any) -> RankEvent:
    """The event a decoded line holds."""
    if not isinstance(data, dict):
        return Garbled(text=json.dumps(data)[:GARBLED_TEXT])
    cls = KINDS.get(str(data.get("event")))
    if cls is None:
        rest = {k: v for k, v in data.items() if k != "event"}
        return Unrecognized(kind=str(data.get("event")), fields=rest)
    try:
        return cls.from_json(data)
    except TypeError:  # a field it needs is missing
        return Garbled(text=json.dumps(data)[:GARBLED_TEXT])


def parse_line(line: bytes | str) -> RankEvent:
    text = line.decode(errors="replace") if isinstance(line, bytes) else line
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return Garbled(text=text[:GARBLED_TEXT])
    return from_json(data)


def read_events(path: Path) -> list[RankEvent]:
    """Every event of a rank's file (a run folder kept for later, a recorded run)."""
    return [parse_line(line) for line in path.read_text().splitlines() if line.strip()]


class EventLog:
    def __init__(self, path: Path, rank: int) -> None:
        self.file = open(path, "a", buffering=1)
        self.rank = rank
        self.lock = threading.Lock()

    def emit(self, event: RankEvent) -> None:
        line = json.dumps(replace(event, rank=self.rank, t=time.time()).to_json())
        with self.lock:
            self.file.write(line + "\n")
            self.file.flush()
            os.fsync(self.file.fileno())
