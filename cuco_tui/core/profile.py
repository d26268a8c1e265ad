"""A profile of one candidate at one shape: what its GPUs ran, as intervals, and how much of its
communication ran with no computation beside it (the part of the communication that costs time).

The rank worker captures the activities (harness/profile_capture.py, CUPTI's activity API) of a few
launches back to back; `summarize` turns one rank's activities into a `ProfileSummary`:

  - span: first start to last end;
  - compute busy and communication busy: the union of their intervals, on every stream of the rank
    (two kernels at once count once);
  - exposed communication: the communication union minus the compute union, the time the GPU only
    moved data (the candidate's goal is to bring it to zero);
  - overlap: the fraction of the communication that ran under computation.

All of it is interval arithmetic on integers (nanoseconds), with no GPU and no CUPTI: the records
here are what the rank writes and the cascade reads back, and their JSON round-trips."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

KERNEL = "kernel"
MEMCPY = "memcpy"
MEMSET = "memset"
KINDS = (KERNEL, MEMCPY, MEMSET)

# The copy kinds of a memcpy, as CUPTI names them (CUPTI_ACTIVITY_MEMCPY_KIND_*, lower case).
# "dtod" is a copy whose source and destination are device memory: on one GPU a local copy, but a
# copy into a peer's buffer through a CUDA-IPC pointer (cuco::peer_alloc, the copy-engine movers)
# is recorded as dtod too, and that is how candidates move data. "ptop" is a copy CUPTI knows
# crosses devices (its MEMCPY2 record).
COMMUNICATION_COPIES = frozenset({"dtod", "ptop"})

LONGEST = 5  # the longest activities a summary names


@dataclass(frozen=True)
class Activity:
    """One thing a GPU ran: a kernel, a copy or a memset, on one stream of one device."""

    kind: str  # KERNEL | MEMCPY | MEMSET
    name: str  # the kernel's (mangled) name; for a copy its kind, e.g. "memcpy dtod"
    start_ns: int
    end_ns: int
    device: int
    stream: int
    copy_kind: str = ""  # a memcpy's: htod, dtoh, dtod, ptop, ... ("" otherwise)
    bytes: int = 0  # a memcpy's or memset's size

    @property
    def duration_ns(self) -> int:
        return max(0, self.end_ns - self.start_ns)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Activity:
        return cls(kind=str(d["kind"]), name=str(d["name"]), start_ns=int(d["start_ns"]), end_ns=int(d["end_ns"]),
                   device=int(d["device"]), stream=int(d["stream"]), copy_kind=str(d.get("copy_kind", "")),
                   bytes=int(d.get("bytes", 0)))


def is_communication(a: Activity) -> bool:
    """Whether an activity moves data between GPUs (else it counts as compute).

    - A copy between devices (ptop) or from device memory to device memory (dtod: a copy into a
      peer's buffer through an IPC pointer is one) is communication; a copy to or from the host
      is not what a candidate overlaps, and counts as compute, as everything else does.
    - A memset is not: it writes this GPU's own memory (flags, a zeroed output).
    - A kernel is communication when its name says NCCL's (ncclDevKernel_*, ncclKernel_*): a
      collective or point-to-point call. Any other kernel is compute, including a fused kernel
      that computes and moves data at once (device-initiated stores or the NCCL device API inside
      a GEMM): its data movement is hidden inside compute time, so for such candidates the exposed
      communication is a lower bound, and a candidate whose only kernel is fused shows none."""
    if a.kind == MEMCPY:
        return a.copy_kind in COMMUNICATION_COPIES
    if a.kind == KERNEL:
        return "nccl" in a.name.lower()
    return False


# -- intervals -----------------------------------------------------------------------------------

Interval = tuple[int, int]


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """The intervals merged: sorted, disjoint, empty ones dropped (touching ones joined)."""
    merged: list[Interval] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def subtract(a: list[Interval], b: list[Interval]) -> list[Interval]:
    """The parts of `a` that no interval of `b` covers (both sorted and disjoint, as `union` gives)."""
    out: list[Interval] = []
    j = 0
    for start, end in a:
        while j < len(b) and b[j][1] <= start:
            j += 1
        k, cursor = j, start
        while k < len(b) and b[k][0] < end:
            if b[k][0] > cursor:
                out.append((cursor, b[k][0]))
            cursor = max(cursor, b[k][1])
            k += 1
        if cursor < end:
            out.append((cursor, end))
    return out


def total(intervals: Iterable[Interval]) -> int:
    return sum(end - start for start, end in intervals)


# -- summaries -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Longest:
    """One of the longest activities of a rank."""

    name: str
    kind: str
    communication: bool
    duration_ns: int
    stream: int

    @classmethod
    def of(cls, a: Activity) -> Longest:
        return cls(a.name, a.kind, is_communication(a), a.duration_ns, a.stream)


# Most of the communication under a kernel: a fused kernel's waits may hide in its compute.
HIDDEN_SHARE = 0.5


@dataclass(frozen=True)
class ProfileSummary:
    """One rank's profile, in nanoseconds."""

    rank: int
    span_ns: int
    compute_ns: int  # the union of compute intervals
    communication_ns: int  # the union of communication intervals
    exposed_ns: int  # communication with no compute beside it
    activities: int  # how many were summarized
    longest: tuple[Longest, ...] = ()

    @property
    def overlap(self) -> float | None:
        """The fraction of communication time that ran under compute; None without communication."""
        if self.communication_ns <= 0:
            return None
        return (self.communication_ns - self.exposed_ns) / self.communication_ns

    @property
    def exposed_pct(self) -> float:
        """Exposed communication as a percentage of the span."""
        return 100.0 * self.exposed_ns / self.span_ns if self.span_ns > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "longest": [asdict(x) for x in self.longest]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ProfileSummary:
        return cls(rank=int(d["rank"]), span_ns=int(d["span_ns"]), compute_ns=int(d["compute_ns"]),
                   communication_ns=int(d["communication_ns"]), exposed_ns=int(d["exposed_ns"]),
                   activities=int(d["activities"]), longest=tuple(Longest(**x) for x in d.get("longest", ())))


def summarize(activities: Iterable[Activity], rank: int = 0) -> ProfileSummary:
    """One rank's activities as a summary (see the module's docstring)."""
    acts = [a for a in activities if a.end_ns > a.start_ns]
    if not acts:
        return ProfileSummary(rank=rank, span_ns=0, compute_ns=0, communication_ns=0, exposed_ns=0, activities=0)
    compute = union((a.start_ns, a.end_ns) for a in acts if not is_communication(a))
    comm = union((a.start_ns, a.end_ns) for a in acts if is_communication(a))
    span = max(a.end_ns for a in acts) - min(a.start_ns for a in acts)
    longest = sorted(acts, key=lambda a: (-a.duration_ns, a.start_ns))[:LONGEST]
    return ProfileSummary(rank=rank, span_ns=span, compute_ns=total(compute), communication_ns=total(comm),
                          exposed_ns=total(subtract(comm, compute)), activities=len(acts),
                          longest=tuple(Longest.of(a) for a in longest))


@dataclass(frozen=True)
class Profile:
    """A candidate's profile at one shape: a summary per rank, where its trace is, and what is
    missing from it. `problem` is one sentence when no profile could be taken (CUPTI missing on the
    host, the run ended before the shape); the summaries are then empty."""

    shape: str
    launches: int
    ranks: tuple[ProfileSummary, ...] = ()
    problem: str = ""
    trace: str = ""  # the Chrome-trace file, when one was written (a path, or a file of the session)
    notes: tuple[str, ...] = field(default_factory=tuple)  # what was left out (activities past a cap)

    @property
    def ok(self) -> bool:
        return not self.problem and bool(self.ranks)

    def to_dict(self) -> dict[str, Any]:
        return {"shape": self.shape, "launches": self.launches, "ranks": [r.to_dict() for r in self.ranks],
                "problem": self.problem, "trace": self.trace, "notes": list(self.notes)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Profile:
        return cls(shape=str(d["shape"]), launches=int(d["launches"]),
                   ranks=tuple(ProfileSummary.from_dict(r) for r in d.get("ranks", ())),
                   problem=str(d.get("problem", "")), trace=str(d.get("trace", "")),
                   notes=tuple(str(n) for n in d.get("notes", ())))

    def lines(self) -> list[str]:
        """The profile as a person reads it: one line per rank (or the problem), then the notes."""
        head = f"profile of {self.launches} launches at {self.shape}"
        if not self.ok:
            return [f"{head}: none taken: {self.problem or 'no rank reported activities'}"]
        out = [head + ":"]
        for r in self.ranks:
            overlap = "no communication seen" if r.overlap is None else f"{100 * r.overlap:.0f}% of it overlapped"
            out.append(f"  rank {r.rank}: exposed communication {r.exposed_ns / 1e6:.3f} ms "
                       f"({r.exposed_pct:.1f}% of {r.span_ns / 1e6:.3f} ms); compute {r.compute_ns / 1e6:.3f} ms, "
                       f"communication {r.communication_ns / 1e6:.3f} ms, {overlap}")
        out += [f"  note: {n}" for n in self.notes]
        if any(r.overlap is not None and r.overlap >= HIDDEN_SHARE for r in self.ranks):
            out.append("  note: a kernel's whole run counts as compute, its waits for data inside it included: "
                       "little exposed communication here does not mean the candidate is at its bound (its "
                       "speedup against the session's bounds says that; the waits show in the harness's trace points)")
        return out
