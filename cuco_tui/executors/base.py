"""What every executor offers the search's scheduler: places to run one evaluation each, lent
one at a time, with a way to ask for one while nothing else runs (a finalist's re-measurement).

An executor whose evaluations run elsewhere (a cluster: `slurm.py`) is also a `JobExecutor`:
the scheduler still leases a slot from it (that bounds how many jobs are out), then hands it
the evaluation (`submit`) and waits on the `JobHandle` it gets back, instead of calling the
cascade in its own process. That is the whole seam; the local pool is not a JobExecutor and
the scheduler treats it exactly as before."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol, Sequence, runtime_checkable

from cuco_tui.core.result import CascadeResult
from cuco_tui.core.workload import Workload
from cuco_tui.evaluate.cascade import EvalOptions, Progress


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

    @property
    def can_measure(self) -> bool:
        """Whether its evaluations run on GPUs (verified and timed), not only compiled."""
        ...

    def lease(self, exclusive: bool = False) -> AbstractContextManager[GpuGroup]: ...


# ---------------------------------------------------------------------------- evaluations as jobs


@dataclass(frozen=True)
class EvaluationRequest:
    """One candidate's evaluation, to be run as a job: the candidate's file (on a filesystem the
    job's nodes share), the workload, the cascade's options (GPUs are the job's own: `gpus` is
    ignored), and whether it must run alone (a finalist's re-measurement)."""

    candidate: str  # the candidate's id: it names the job
    source: Path
    workload: Workload
    options: EvalOptions
    exclusive: bool = False


@dataclass(frozen=True)
class JobUpdate:
    """A job's state changed. `state`: "pending" (with Slurm's reason), "running" (on `nodes`),
    "finished", "lost" (ended by its node, a preemption or someone else's cancel: the reason
    says which; the proposal is run again), "cancelled" (by the search: it stopped, or the job
    was left over by an earlier run of the session)."""

    candidate: str
    job: str
    state: str
    reason: str = ""
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True)
class JobRun:
    """Where one evaluation's job ran and how it ended, as the commit records it."""

    job: str
    state: str  # Slurm's word: COMPLETED, FAILED, NODE_FAIL, PREEMPTED, CANCELLED, ...
    nodes: tuple[str, ...] = ()
    partition: str = ""
    reason: str = ""
    seconds: float = 0.0  # from running to finished, as the search saw it

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.job, "state": self.state, "nodes": list(self.nodes), "partition": self.partition,
                "reason": self.reason, "seconds": round(self.seconds, 3)}


@dataclass(frozen=True)
class JobResult:
    """A job that ran the cascade to its end: the cascade's result and the job's facts."""

    result: CascadeResult
    run: JobRun


class EvaluationLost(Exception):
    """The job ended for a reason that is not the candidate's (its node failed, it was
    preempted, someone cancelled it): nothing is known about the candidate; run it again."""

    def __init__(self, run: JobRun) -> None:
        super().__init__(f"job {run.job} was lost: {run.reason}")
        self.run = run


class EvaluationFailed(Exception):
    """The job ended without a result for a reason of its own making (the evaluator raised,
    it ran past its time limit, it can never start): `run` says which job, `log` its last words."""

    def __init__(self, message: str, run: JobRun, log: str = "") -> None:
        super().__init__(message)
        self.run = run
        self.log = log
        self.lost: tuple[JobRun, ...] = ()  # the jobs of the same evaluation lost before this one


class EvaluationCancelled(Exception):
    """The search cancelled the job (it is stopping): there is no result, and none is committed.
    `job` is "" when it was refused before any job was submitted."""

    def __init__(self, message: str, job: str = "") -> None:
        super().__init__(message)
        self.job = job


class JobHandle(Protocol):
    job: str

    def result(self) -> JobResult:
        """Blocks until the job ended. Raises EvaluationLost, EvaluationFailed or EvaluationCancelled."""
        ...


ProgressFn = Callable[[Progress], None]
UpdateFn = Callable[[JobUpdate], None]


@runtime_checkable
class JobExecutor(Executor, Protocol):
    """An executor that runs each evaluation as a job somewhere else. `open` binds it to a
    session (its jobs' folders go under `folder`, on a filesystem the nodes share) and cancels
    the jobs an earlier, killed run of that session left behind, returning them; `submit` starts one
    evaluation (raising EvaluationCancelled once stopping); `stop` cancels every job of the
    session and refuses new ones (quick: it may be called from a signal handler or a UI
    thread); `close` stops and waits until the cluster lists none of the session's jobs (wait
    False: cancel and leave at once). An evaluation whose job is lost `max_lost` times is
    given up (committed as a runtime error) rather than run again."""

    max_lost: int

    def describe(self) -> str: ...

    def open(self, session: str, folder: Path) -> list[JobUpdate]: ...

    def submit(self, request: EvaluationRequest, progress: ProgressFn, update: UpdateFn) -> JobHandle: ...

    def stop(self) -> None: ...

    def close(self, wait: bool = True) -> None: ...

