"""The Slurm executor: every evaluation is one batch job that runs the cascade for its candidate
on a node of the cluster (`python -m cuco_tui.evaluate.remote JOBDIR`), with the GPUs Slurm
gave it. The job's folder (request, progress, result, Slurm's output) lies in the session's
scratch folder, which the nodes must share with the search's host, and so must the build cache
(CUCO_CACHE_DIR: the search compiles ahead into it; the job finds its library there).

The job's life is the candidate's: its time limit is the cascade's own limits for the
workload's shapes (or --time-limit), rounded up to minutes by Slurm, and the search cancels it
itself once it has run that long (Slurm's limit is coarse). A job that ends with its node,
is preempted or is cancelled by someone else is lost (`EvaluationLost`): the scheduler runs the
proposal again. When the search stops, every job of the session is cancelled; `close` waits
until squeue lists none; `open` cancels what an earlier, killed run of the session left.

One thread (the monitor) asks squeue about all of the session's jobs at once every `poll_s`,
tells each evaluation its job's state changes and its cascade's progress, and ends it."""

from __future__ import annotations

import json
import math
import re
import shlex
import sys
import tempfile
import threading
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from cuco_tui.core.result import CascadeResult, Level
from cuco_tui.core.workload import Workload
from cuco_tui.evaluate.cascade import EvalOptions, Progress
from cuco_tui.evaluate.remote import ERROR, PROGRESS, RESULT, RemoteRequest, evaluation_limit_s
from cuco_tui.executors.base import (
    EvaluationCancelled, EvaluationFailed, EvaluationLost, EvaluationRequest, GpuGroup, JobResult, JobRun,
    JobUpdate, ProgressFn, UpdateFn,
)
from cuco_tui.executors.local import GpuPool
from cuco_tui.executors.slurm_client import SlurmClient
from cuco_tui.executors.slurm_settings import SlurmSettings
from cuco_tui.executors.slurm_types import JobInfo, JobSpec, JobState, SlurmError, candidate_of, job_name
from cuco_tui.harness.env import NO_MULTICAST

OUTPUT = "job.out"  # Slurm's stdout and stderr of the job
MISSING_POLLS = 3  # polls a job may be unknown to squeue (and sacct) before it counts as gone
UNREACHABLE_S = 300.0  # the controller silent this long: the evaluations waiting on it fail
CLOSE_WAIT_S = 60.0  # close(): how long to wait for squeue to forget the session's cancelled jobs
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def session_token(session: str) -> str:
    """The session's part of its jobs' names: the folder name, characters Slurm job names of
    ours may not hold replaced by '_'."""
    return _UNSAFE.sub("_", session) or "session"


def lost_reason(info: JobInfo, nodes: Sequence[str]) -> str:
    """Why a job ended without its candidate being at fault, in Slurm's words too."""
    where = ",".join(nodes) or info.node_list or "its node"
    said = f"Slurm: {info.slurm_state}" + (f", {info.reason}" if info.reason else "")
    if info.state is JobState.NODE_FAIL:
        return f"its node {where} failed ({said})"
    if info.state is JobState.PREEMPTED:
        return f"preempted on {where} ({said})"
    return f"cancelled outside the search ({said})"


def limit_seconds(text: str) -> float | None:
    """A time limit as Slurm prints it in seconds: "90" (minutes), "30:00" (MM:SS), "2:00:00",
    "1-00:00:00", "1-12" (days-hours); None for "infinite" or a form this does not know."""
    text = text.strip()
    days = 0
    if "-" in text:
        head, _, text = text.partition("-")
        if not head.isdigit():
            return None
        days, units = int(head), [3600, 60, 1]  # after the days: hours[:minutes[:seconds]]
    else:
        units = {1: [60], 2: [60, 1], 3: [3600, 60, 1]}.get(text.count(":") + 1, [])
    parts = text.split(":")
    if len(parts) > len(units) or not all(p.isdigit() for p in parts):
        return None
    return float(days * 86400 + sum(int(p) * u for p, u in zip(parts, units)))


def _tail(path: Path, limit: int = 4000) -> str:
    try:
        return path.read_bytes()[-limit:].decode(errors="replace")
    except OSError:
        return ""


@dataclass
class _Job:
    """One submitted job, as the monitor follows it; also the evaluation's handle on it."""

    candidate: str
    job: str
    folder: Path
    limit_s: float
    progress: ProgressFn
    update: UpdateFn
    state: tuple[str, str, str] = ("PENDING", "", "")  # (state, reason, node list) last told
    nodes: tuple[str, ...] = ()
    running_since: float | None = None
    cancelled: str = ""  # why the search cancelled it: "stopped", "overran", "never starts"
    missing: int = 0
    offset: int = 0  # into progress.jsonl
    outcome: JobResult | BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def result(self) -> JobResult:
        self.done.wait()
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        assert self.outcome is not None
        return self.outcome


class SlurmExecutor:
    """Implements JobExecutor. `size` (max_jobs) evaluations are out at once, each a job of
    one node with `world` GPUs; an exclusive lease (a finalist's re-measurement) waits until no
    other job of the search is out and asks Slurm for the node to itself."""

    def __init__(self, settings: SlurmSettings, world: int, client: SlurmClient | None = None,
                 python: str | None = None) -> None:
        self.settings = settings
        self.world = world
        self.gpus_per_node = settings.gpus_for(world)  # SlurmSettingsError: not one node's worth
        self.client = client or SlurmClient(env=settings.env())
        self.python = python or settings.python or sys.executable
        self.max_lost = settings.max_lost
        self._slots = GpuPool.cpu_only(settings.max_jobs)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._jobs: dict[str, _Job] = {}  # job id -> job, while not concluded
        self._hosts: dict[str, tuple[str, ...]] = {}  # Slurm's node list -> host names
        self._token = ""
        self._folder: Path | None = None
        self._stopping = False
        self._closing = False
        self._monitor: threading.Thread | None = None

    # -- the Executor protocol: slots bound how many jobs are out -----------------------------

    @property
    def groups(self) -> Sequence[GpuGroup]:
        return self._slots.groups

    @property
    def size(self) -> int:
        return self._slots.size

    @property
    def can_measure(self) -> bool:
        return True  # each job gets its GPUs from Slurm; the slots only bound how many are out

    def lease(self, exclusive: bool = False) -> AbstractContextManager[GpuGroup]:
        return self._slots.lease(exclusive)

    def describe(self) -> str:
        s = self.settings
        return (f"Slurm ({s.summary()}): up to {self.size} jobs at once, each {self.gpus_per_node} "
                f"GPU{'s' if self.gpus_per_node != 1 else ''} on one node")

    # -- before the search ---------------------------------------------------------------------

    def check(self, limit_s: float | None = None) -> None:
        """The cluster can run the search's jobs at all: the partition exists and is up, one of
        its nodes has the GPUs an evaluation asks for, and it allows jobs of `limit_s` (what an
        evaluation may take, see limit_s()). SlurmError (one sentence) when not."""
        info = self.client.cluster()
        name = self.settings.partition
        part = info.partition(name)
        if part is None:
            if name is None:
                raise SlurmError(f"this cluster has no default partition: name one with --partition "
                                 f"(partitions: {info.names()})")
            raise SlurmError(f"no partition '{name}' on this cluster (partitions: {info.names()})")
        if not part.available:
            raise SlurmError(f"partition '{part.name}' is not up (sinfo says it is unavailable)")
        if part.nodes_up == 0:
            raise SlurmError(f"partition '{part.name}' has no node up ({part.nodes_down} down)")
        if part.gpus_per_node < self.gpus_per_node:
            raise SlurmError(f"partition '{part.name}' has at most {part.gpus_per_node} GPU(s) per node; an "
                             f"evaluation of {self.world} ranks needs {self.gpus_per_node} on one node")
        allowed = limit_seconds(part.time_limit)
        if limit_s is not None and allowed is not None and math.ceil(limit_s / 60) * 60 > allowed:
            raise SlurmError(f"partition '{part.name}' allows jobs of at most {part.time_limit}; an evaluation may take "
                             f"{math.ceil(limit_s / 60)} minutes (ask for less with --time-limit, or name another "
                             f"partition)")

    def open(self, session: str, folder: Path) -> list[JobUpdate]:
        """Bind to a session (its jobs are named `cuco:<session>:<candidate>`, their folders go
        under `folder`), cancel the jobs an earlier run of it left, wait until squeue lists
        none, and start following jobs. Returns the cancelled leftovers."""
        self._token = session_token(session)
        self._folder = Path(folder)
        self._folder.mkdir(parents=True, exist_ok=True)
        left = self.client.session_jobs(self._token)
        self.client.cancel([j.job_id for j in left])
        self._wait_gone(CLOSE_WAIT_S)
        self._monitor = threading.Thread(target=self._follow, name="cuco-slurm", daemon=True)
        self._monitor.start()
        return [JobUpdate(candidate=candidate_of(j.name, self._token) or "", job=j.job_id, state="cancelled",
                          reason=f"left over by an earlier run of this session ({j.slurm_state.lower()})")
                for j in left]

    # -- evaluations -------------------------------------------------------------------------

    def limit_s(self, request: EvaluationRequest) -> float:
        """How long the evaluation's job may run: --time-limit, else the cascade's own limits."""
        return self.limit_for(request.workload, request.options)

    def limit_for(self, workload: Workload, options: EvalOptions) -> float:
        if self.settings.time_limit_min is not None:
            return 60.0 * self.settings.time_limit_min
        return evaluation_limit_s(workload, options)

    def script(self, folder: Path) -> str:
        lines = ["#!/bin/bash", "# cuco: one candidate's evaluation (cuco_tui.evaluate.remote)", *self.settings.setup,
                 f"exec {shlex.quote(self.python)} -m cuco_tui.evaluate.remote {shlex.quote(str(folder))}"]
        return "\n".join(lines) + "\n"

    def spec(self, request: EvaluationRequest, folder: Path, limit_s: float | None = None) -> JobSpec:
        """The job's sbatch request; `limit_s`: `self.limit_s(request)`, when the caller has it."""
        from cuco_tui.toolchain import BuildCache  # the search host's cache: the one it compiles ahead into

        s = self.settings
        env = {**NO_MULTICAST, "CUCO_CACHE_DIR": str(BuildCache().root.resolve())}
        extra = s.sbatch_args + (("--exclusive",) if request.exclusive else ())
        return JobSpec(script=self.script(folder), name=job_name(self._token, request.candidate),
                       partition=s.partition, account=s.account,
                       time_limit_s=self.limit_s(request) if limit_s is None else limit_s,
                       constraint=s.constraint, gpus_per_node=self.gpus_per_node, nodes=1, ntasks=1,
                       cpus_per_task=self.world, output=str(folder / OUTPUT), workdir=str(folder), env=env,
                       extra_args=extra)

    def submit(self, request: EvaluationRequest, progress: ProgressFn, update: UpdateFn) -> _Job:
        """Submit the evaluation as a job; its handle. EvaluationCancelled once stopping,
        SlurmError when sbatch refuses it."""
        if self._folder is None:
            raise RuntimeError("SlurmExecutor.submit before open(): the executor knows no session yet")
        with self._lock:
            if self._stopping:
                raise EvaluationCancelled("the search is stopping: no new job is submitted")
        folder = Path(tempfile.mkdtemp(prefix=f"{request.candidate}-", dir=self._folder))
        RemoteRequest.of(request.source, request.workload, request.options).write(folder)
        limit = self.limit_s(request)  # the cascade's plan over every shape: once
        job_id = self.client.submit(self.spec(request, folder, limit))
        job = _Job(request.candidate, job_id, folder, limit, progress, update)
        self._tell(job, JobUpdate(request.candidate, job_id, "pending", "submitted"))  # before the monitor's word
        with self._lock:
            self._jobs[job_id] = job  # a stop that came meanwhile cancels it on the next poll
        self._wake.set()
        return job

    def stop(self) -> None:
        """Cancel every job of the search and submit no more. Returns at once: the monitor
        cancels them and ends each evaluation (EvaluationCancelled)."""
        with self._lock:
            self._stopping = True
        self._wake.set()

    def close(self, wait: bool = True) -> None:
        """Stop, and with `wait` see the monitor conclude every job and squeue forget them (at
        most CLOSE_WAIT_S); without, cancel what is out with one scancel and return."""
        self.stop()
        with self._lock:
            self._closing = True
            out = list(self._jobs.values())
        try:
            if not wait:
                for job in out:
                    job.cancelled = "stopped"  # the monitor ends them as cancelled, not lost
                self.client.cancel([job.job for job in out])
                return
            if self._monitor is not None:
                self._monitor.join(CLOSE_WAIT_S)
            if self._token:
                self._wait_gone(CLOSE_WAIT_S)
        except SlurmError:
            pass  # the controller does not answer: `--resume` cancels whatever is left

    def _wait_gone(self, limit_s: float) -> None:
        deadline = time.monotonic() + limit_s
        while self.client.session_jobs(self._token) and time.monotonic() < deadline:
            time.sleep(min(0.5, self.settings.poll_s))

    # -- the monitor -------------------------------------------------------------------------

    def _follow(self) -> None:
        silent_since: float | None = None
        while True:
            with self._lock:
                jobs = list(self._jobs.values())
                stopping, closing = self._stopping, self._closing
            if closing and not jobs:
                return
            if stopping:
                self._cancel([j for j in jobs if not j.cancelled], "stopped")
            try:
                infos = self.client.status([j.job for j in jobs]) if jobs else {}
                silent_since = None
            except SlurmError as exc:
                silent_since = silent_since or time.monotonic()
                if time.monotonic() - silent_since > UNREACHABLE_S:
                    for j in jobs:
                        self._conclude(j, EvaluationFailed(
                            f"Slurm did not answer about job {j.job} for {UNREACHABLE_S:.0f} s: {exc}",
                            JobRun(j.job, "UNKNOWN", j.nodes)))
                infos = None
            if infos is not None:
                for j in jobs:
                    self._observe(j, infos.get(j.job))
            self._wake.wait(self.settings.poll_s)
            self._wake.clear()

    def _cancel(self, jobs: list[_Job], why: str) -> None:
        if not jobs:
            return
        for j in jobs:
            j.cancelled = why
        try:
            self.client.cancel([j.job for j in jobs])
        except SlurmError:
            for j in jobs:
                j.cancelled = ""  # asked again on the next poll

    def _tell(self, job: _Job, update: JobUpdate) -> None:
        try:
            job.update(update)
        except Exception:  # a watcher's bug must not stop the monitor
            pass

    def _observe(self, job: _Job, info: JobInfo | None) -> None:
        self._read_progress(job)
        if info is None:
            job.missing += 1
            if (job.folder / RESULT).exists() or job.missing >= MISSING_POLLS:
                self._conclude(job, self._gone(job))
            return
        job.missing = 0
        if info.node_list and not job.nodes:
            job.nodes = self._hostnames(info.node_list)
        if info.state is JobState.RUNNING and job.running_since is None:
            job.running_since = time.monotonic()
        seen = (info.state.value, info.reason, info.node_list)
        if info.finished and job.state[0] != JobState.RUNNING.value and info.node_list:
            # it started and ended between two polls: its watchers still learn where it ran
            seen = (JobState.RUNNING.value, "", info.node_list)
        if seen != job.state and seen[0] in (JobState.PENDING.value, JobState.RUNNING.value):
            job.state = seen
            if seen[0] == JobState.PENDING.value:
                self._tell(job, JobUpdate(job.candidate, job.job, "pending", info.reason))
            else:
                self._tell(job, JobUpdate(job.candidate, job.job, "running", "", job.nodes))
        if info.finished:
            self._read_progress(job)
            self._conclude(job, self._ended(job, info))
        elif not job.cancelled and info.never_starts:
            self._cancel([job], f"never starts: Slurm says {info.reason}")
        elif (not job.cancelled and job.running_since is not None
              and time.monotonic() - job.running_since > job.limit_s):
            self._cancel([job], "overran")

    def _hostnames(self, node_list: str) -> tuple[str, ...]:
        if node_list not in self._hosts:
            try:
                self._hosts[node_list] = tuple(self.client.hostnames(node_list))
            except SlurmError:
                return (node_list,)
        return self._hosts[node_list]

    def _read_progress(self, job: _Job) -> None:
        path = job.folder / PROGRESS
        try:
            with open(path, "rb") as f:
                f.seek(job.offset)
                data = f.read()
        except OSError:
            return
        complete = data[:data.rfind(b"\n") + 1]  # a line still being written waits for the next poll
        job.offset += len(complete)
        for line in complete.splitlines():
            try:
                step = json.loads(line)
                job.progress(Progress(Level(int(step["level"])), str(step["message"])))
            except Exception:  # a garbled line or a watcher's bug: the evaluation goes on
                continue

    def _run(self, job: _Job, info: JobInfo | None, reason: str = "") -> JobRun:
        seconds = time.monotonic() - job.running_since if job.running_since is not None else 0.0
        return JobRun(job.job, info.slurm_state if info else "GONE", job.nodes or
                      (self._hostnames(info.node_list) if info and info.node_list else ()),
                      info.partition if info else "", reason or (info.reason if info else ""), seconds)

    def _result(self, job: _Job, run: JobRun) -> JobResult | None:
        """The cascade's result when the job wrote one (whatever happened to the job after)."""
        try:
            data = json.loads((job.folder / RESULT).read_text())
        except (OSError, ValueError):
            return None
        return JobResult(CascadeResult.from_dict(data), run)

    def _gone(self, job: _Job) -> JobResult | BaseException:
        run = self._run(job, None, f"Slurm no longer knows job {job.job}")
        found = self._result(job, run)
        if found is not None:
            return found
        if job.cancelled == "stopped":
            return EvaluationCancelled(f"job {job.job} was cancelled: the search stopped", job.job)
        return EvaluationLost(run)

    def _ended(self, job: _Job, info: JobInfo) -> JobResult | BaseException:
        """What a finished job means for its evaluation."""
        run = self._run(job, info)
        found = self._result(job, run)
        if found is not None:
            return found
        where = f" on {','.join(run.nodes)}" if run.nodes else ""
        log = _tail(job.folder / OUTPUT)
        if job.cancelled == "stopped":
            return EvaluationCancelled(f"job {job.job} was cancelled: the search stopped", job.job)
        if job.cancelled == "overran":
            return EvaluationFailed(f"the evaluation job {job.job}{where} ran past its limit of {job.limit_s:.0f} s "
                                    f"and was cancelled", run, log)
        if job.cancelled:
            return EvaluationFailed(f"the evaluation job {job.job} was cancelled: it {job.cancelled}", run, log)
        if info.state in (JobState.NODE_FAIL, JobState.PREEMPTED, JobState.CANCELLED):
            return EvaluationLost(JobRun(run.job, run.state, run.nodes, run.partition,
                                         lost_reason(info, run.nodes), run.seconds))
        if info.state is JobState.TIMEOUT:
            return EvaluationFailed(f"the evaluation job {job.job}{where} ran past its Slurm time limit", run, log)
        try:
            error = json.loads((job.folder / ERROR).read_text())
            return EvaluationFailed(f"the evaluator failed in job {job.job}{where}: {error['error']}", run,
                                    str(error.get("traceback", "")))
        except (OSError, ValueError, KeyError):
            pass
        code = f" (exit code {info.exit_code})" if info.exit_code else ""
        last = (log.strip().splitlines() or [""])[-1]
        return EvaluationFailed(f"the evaluation job {job.job}{where} ended {info.slurm_state}{code} without a "
                                f"result" + (f": {last}" if last else ""), run, log)

    def _conclude(self, job: _Job, outcome: JobResult | BaseException) -> None:
        with self._lock:
            if self._jobs.pop(job.job, None) is None:
                return
        if isinstance(outcome, JobResult):
            update = JobUpdate(job.candidate, job.job, "finished", outcome.run.state, outcome.run.nodes)
        elif isinstance(outcome, EvaluationLost):
            update = JobUpdate(job.candidate, job.job, "lost", outcome.run.reason, outcome.run.nodes)
        elif isinstance(outcome, EvaluationCancelled):
            update = JobUpdate(job.candidate, job.job, "cancelled", "the search stopped", job.nodes)
        else:
            update = JobUpdate(job.candidate, job.job, "finished", str(outcome), job.nodes)
        self._tell(job, update)
        job.outcome = outcome
        job.done.set()
