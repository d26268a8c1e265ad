"""The typed result of evaluating one candidate: what the TUI shows, the lineage stores and
the agents read back. Everything here round-trips through JSON (to_dict / from_dict)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from cuco_tui.core.profile import Profile


class Status(str, Enum):
    REJECTED = "rejected"  # L0: static checks refused it before compiling
    COMPILE_ERROR = "compile_error"  # L1
    NO_GPU = "no_gpu"  # compiled, but this machine cannot run it
    RUNTIME_ERROR = "runtime_error"  # L2/L3: init error, CUDA error, crashed rank
    DEADLOCK = "deadlock"  # L2/L3: a launch did not finish within its time limit
    INCORRECT = "incorrect"  # L2/L3: output differs from the reference
    # L2 passed and nothing was timed: its ranks shared one GPU (--share-gpu), or no benchmark was
    # asked for. Correct as far as it was run, with no speed: never ranked among the measured.
    VERIFIED = "verified"
    MEASURED = "measured"  # L3 passed: verified on every shape and timed

    @property
    def ok(self) -> bool:
        return self in (Status.MEASURED, Status.VERIFIED, Status.NO_GPU)

    @classmethod
    def read(cls, value: str, timed: bool) -> "Status":
        """A stored status. Results recorded before VERIFIED existed say "measured" for a
        candidate that was verified and never timed (`timed` False): they read back as verified."""
        status = cls(value)
        return cls.VERIFIED if status is cls.MEASURED and not timed else status


# Fine as far as they were run, with nothing known of their speed: ranked after every measured
# candidate, in this order (a verified one ran correctly on GPUs; a no_gpu one only compiled).
UNTIMED_OK: tuple[Status, ...] = (Status.VERIFIED, Status.NO_GPU)


class Level(int, Enum):
    STATIC = 0
    COMPILE = 1
    VERIFY = 2
    BENCHMARK = 3


@dataclass(frozen=True)
class Diagnostic:
    """One message a person should read: a compiler error, a static-check finding, a CUDA error.
    `file`/`line`/`column` point into the candidate where known; `source_line` is that line."""

    level: int
    severity: str  # "error" | "warning" | "note"
    message: str
    file: str = ""
    line: int = 0
    column: int = 0
    source_line: str = ""
    rank: int | None = None
    code: str = ""  # a short machine-readable kind, e.g. "frozen-region", "nvcc", "cuda", "timeout"

    def location(self) -> str:
        if not self.line:
            return self.file
        return f"{self.file}:{self.line}:{self.column}" if self.column else f"{self.file}:{self.line}"

    def render(self) -> str:
        head = f"{self.location()}: " if self.location() else ""
        who = f"[rank {self.rank}] " if self.rank is not None else ""
        text = f"{who}{head}{self.severity}: {self.message}"
        if self.source_line:
            text += f"\n    {self.source_line.rstrip()}"
            if self.column:
                text += "\n    " + " " * (self.column - 1) + "^"
        return text


@dataclass(frozen=True)
class StaticVerdict:
    """L0's word on one source (evaluate/l0.py's `check_l0`, the one L0 that the cascade, the
    search's review gate and the Claude agent's screen all ask): every finding, in order. A finding
    of severity "error" rejects the source; warnings do not."""

    diagnostics: tuple[Diagnostic, ...] = ()

    @property
    def errors(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity == "error")

    @property
    def warnings(self) -> tuple[Diagnostic, ...]:
        return tuple(d for d in self.diagnostics if d.severity == "warning")

    @property
    def rejected(self) -> bool:
        return bool(self.errors)

    @property
    def reason(self) -> str:
        """The cascade's reason for a rejected source (its first error), or "" when it passes."""
        return f"rejected by static checks: {self.errors[0].message}" if self.errors else ""


@dataclass(frozen=True)
class Spread:
    """Summary of repeated timings in milliseconds."""

    median: float
    min: float
    max: float
    p25: float
    p75: float
    n: int

    @classmethod
    def of(cls, values: list[float]) -> "Spread":
        if not values:
            raise ValueError("no timings to summarize")
        v = sorted(values)
        n = len(v)

        def q(p: float) -> float:
            pos = p * (n - 1)
            lo = int(pos)
            hi = min(lo + 1, n - 1)
            return v[lo] + (v[hi] - v[lo]) * (pos - lo)

        return cls(median=q(0.5), min=v[0], max=v[-1], p25=q(0.25), p75=q(0.75), n=n)

    @property
    def iqr_pct(self) -> float:
        return 100.0 * (self.p75 - self.p25) / self.median if self.median else 0.0


@dataclass(frozen=True)
class Verification:
    shape: str
    ok: bool
    max_rel_error: float  # max |y - ref| / (|ref| + atol), over every element of every rank
    rel_fro_error: float  # ||y - ref|| / ||ref|| over all ranks
    unwritten: int  # elements still NaN after the run (the harness poisons outputs)
    nonfinite: int  # NaN or inf elements, unwritten ones included
    elements: int
    worst: str = ""  # where the worst element is, e.g. "rank 1, y[513, 7]: got 3.1, want 2.9"
    tolerance: float = 0.0


@dataclass(frozen=True)
class ShapeTiming:
    shape: str
    dims: dict[str, int]
    candidate: Spread  # per iteration: the slowest rank's time
    reference: Spread
    per_rank: list[Spread]
    speedup: float  # reference median / candidate median, both measured in this run
    # How the ranks started each repetition (harness/plan.py ALIGNS): "device", lined up on the
    # GPUs, or "host", a host barrier alone. A result recorded without it (before 2026-11-27) was
    # timed by the host barrier. Times of the two differ; speedups, each against its own run's
    # reference, compare across them.
    align: str = "host"

    @property
    def spread_pct(self) -> float:
        return self.candidate.iqr_pct

    @classmethod
    def from_dict(cls, t: dict[str, Any]) -> "ShapeTiming":
        return cls(shape=t["shape"], dims=dict(t["dims"]), candidate=Spread(**t["candidate"]),
                   reference=Spread(**t["reference"]), per_rank=[Spread(**r) for r in t["per_rank"]],
                   speedup=t["speedup"], align=str(t.get("align", "host")))


@dataclass(frozen=True)
class CascadeResult:
    candidate: str  # path of the .cu
    workload: str
    status: Status
    level: Level  # the highest level entered
    reason: str  # one sentence for people: why it stopped, or what it achieved
    diagnostics: list[Diagnostic] = field(default_factory=list)
    verifications: list[Verification] = field(default_factory=list)
    timings: list[ShapeTiming] = field(default_factory=list)
    world: int = 0
    gpus: list[int] = field(default_factory=list)
    build_seconds: float = 0.0
    build_cached: bool = False
    run_seconds: float = 0.0
    source_sha: str = ""
    deadlock_report: str = ""
    logs: dict[str, str] = field(default_factory=dict)  # name -> tail of the log
    profile: Profile | None = None  # the timeline of one shape, when asked for (core/profile.py)

    @property
    def speedup(self) -> float | None:
        """Geometric mean of the per-shape speedups, when measured."""
        if not self.timings:
            return None
        prod = 1.0
        for t in self.timings:
            prod *= t.speedup
        return prod ** (1.0 / len(self.timings))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = self.status.value
        d["level"] = int(self.level)
        d["speedup"] = self.speedup
        if self.profile is None:
            del d["profile"]  # a result without one reads as before
        else:
            d["profile"] = self.profile.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CascadeResult":
        timings = [ShapeTiming.from_dict(t) for t in d.get("timings", [])]
        return cls(
            candidate=d["candidate"],
            workload=d["workload"],
            status=Status.read(d["status"], timed=bool(timings)),
            level=Level(d["level"]),
            reason=d["reason"],
            diagnostics=[Diagnostic(**x) for x in d.get("diagnostics", [])],
            verifications=[Verification(**x) for x in d.get("verifications", [])],
            timings=timings,
            world=d.get("world", 0),
            gpus=list(d.get("gpus", [])),
            build_seconds=d.get("build_seconds", 0.0),
            build_cached=d.get("build_cached", False),
            run_seconds=d.get("run_seconds", 0.0),
            source_sha=d.get("source_sha", ""),
            deadlock_report=d.get("deadlock_report", ""),
            logs=dict(d.get("logs", {})),
            profile=Profile.from_dict(d["profile"]) if d.get("profile") else None,
        )
