"""Scheduling: when and where each candidate is evaluated. A launched candidate is written to
the scratch folder, compiled ahead on a CPU thread (toolchain.BuildPool) while the GPUs are
busy, then evaluated by the cascade on a GPU group leased from the executor, and its outcome
committed (through the engine's commit, given as a callable).

Where the executor runs evaluations as jobs elsewhere (executors.JobExecutor: Slurm), the lease
is a slot, and the evaluation is handed to the executor (`_run_as_job`) instead of calling the
cascade in this process: a lost job (its node failed, it was preempted or cancelled from
outside) is run again, and the commit carries the job's id and nodes. A stop cancels the jobs;
an evaluation whose job the search cancelled is not committed. A candidate that failed to
compile ahead is not sent anywhere: the cascade stops at L1 here, from the cache.

A candidate timed while other groups ran evaluations, whose figure would lead or nearly lead,
is a finalist (`is_finalist`): it is re-measured alone on an exclusive lease (`confirm`), and
only that figure can make it the best (`ranking_view`)."""

from __future__ import annotations

import threading
import time
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from cuco_tui.core.records import CandidateRecord, RecordStatus, id_number
from cuco_tui.core.result import CascadeResult, Level
from cuco_tui.core.workload import Workload
from cuco_tui.evaluate.cascade import EvalOptions, Progress
from cuco_tui.harness.kept import KeptWorkers
from cuco_tui.harness.launcher import wait_released
from cuco_tui.executors import Executor, local_pool
from cuco_tui.executors.base import (
    EvaluationCancelled, EvaluationFailed, EvaluationLost, EvaluationRequest, JobExecutor, JobRun, JobUpdate,
)
from cuco_tui.search import outcomes
from cuco_tui.search.config import SearchConfig
from cuco_tui.search.events import (
    BuildQueued, BuildStarted, EngineError, Event, JobChanged, ProposalReady, StageFinished, StageStarted,
)
from cuco_tui.search.proposing import Drafts
from cuco_tui.toolchain import BuildPool, BuildResult

EvaluateFn = Callable[..., CascadeResult]  # evaluate(path, workload, options, progress=...)
Ran = tuple[JobRun, tuple[JobRun, ...]]  # the job that gave the result, and those lost before it


def ranking_view(record: CandidateRecord) -> CandidateRecord:
    """The record as the population ranks it: a finalist's figure, timed beside other
    evaluations, is withheld (speedup None), so neither the best, nor an island's head, nor an
    archive cell is decided by it; its confirmation, the same source measured alone, ranks
    instead. The lineage keeps the figure as measured."""
    if record.finalist and record.speedup is not None:
        return replace(record, speedup=None)
    return record


def is_finalist(record: CandidateRecord, best: CandidateRecord | None, config: SearchConfig) -> bool:
    """Measured while other evaluations ran, and faster than the best or within
    confirm_margin of it: its figure may owe something to the interference."""
    if not config.confirm_alone or record.status is not RecordStatus.MEASURED or record.speedup is None:
        return False
    if not record.concurrent:
        return False
    return best is None or best.speedup is None or record.speedup > best.speedup * (1.0 - config.confirm_margin)


def plan_executor(workload: Workload, config: SearchConfig, executor: Executor | None = None) -> Executor:
    """Where a search's evaluations run, checked before anything starts (a session included):
    the world against the workload (WorkloadError), and, without `executor`, this machine's
    GPUs cut into groups of the world (PlacementError when they cannot host one evaluation)."""
    world = config.world or min(workload.world_sizes)
    workload.check_world(world)
    if executor is not None:
        return executor
    return local_pool(world, tuple(config.gpus), config.max_concurrent_builds)


class _Abandoned(Exception):
    """The run was interrupted while this evaluation waited: it starts nothing more."""


class Scheduler:
    def __init__(self, workload: Workload, config: SearchConfig, evaluate_fn: EvaluateFn, *,
                 executor: Executor | None, compile_ahead: bool, scratch: Path, cond: threading.Condition,
                 publish: Callable[[Event], None], commit: Callable[[CandidateRecord], CandidateRecord],
                 drafts: Drafts) -> None:
        self.workload = workload
        self.config = config
        self._evaluate = evaluate_fn
        self._executor = executor  # None: the local GPU pool, planned when the run starts
        self._compile_ahead = compile_ahead
        self.scratch = scratch
        self._cond = cond
        self._publish = publish
        self._commit = commit
        self._drafts = drafts
        self._builds: BuildPool | None = None
        self._threads: ThreadPoolExecutor | None = None
        self._in_flight: dict[str, Future] = {}
        self.sent = 0  # candidates launched for evaluation by this run, re-measures aside (config.evaluations)
        self._abandoned = False  # abandon(): an interrupted run commits nothing more
        self._on_gpu: dict[str, set[str]] = {}  # evaluation holding a GPU group -> those that overlapped it
        self._kept: dict[tuple[int, ...], KeptWorkers] = {}  # a GPU group's kept rank workers (config.keep_workers)

    @property
    def world(self) -> int:
        return self.config.world or min(self.workload.world_sizes)

    def start(self) -> Executor:
        """Ready to launch: the world checked against the workload, the GPU groups planned
        (PlacementError when they cannot host one evaluation), the CPU builders started."""
        cfg = self.config
        self._executor = plan_executor(self.workload, cfg, self._executor)
        self.scratch.mkdir(parents=True, exist_ok=True)
        jobs = self._jobs()
        if jobs is not None:  # the session's folder names its jobs; its leftovers are cancelled first
            for left in jobs.open(self.scratch.parent.name, self.scratch / "jobs"):
                self._job_changed(left)
        if self._compile_ahead:
            self._builds = BuildPool(cfg.max_concurrent_builds)
        self._threads = ThreadPoolExecutor(max_workers=self._executor.size + cfg.max_concurrent_builds,
                                           thread_name_prefix="cuco-eval")
        return self._executor

    def abandon(self) -> None:
        """The run was interrupted: leave without waiting. Evaluations still in flight end
        uncommitted (a kill loses at most those; --resume proposes again) and start nothing more
        (no compile, no GPU run once their build or their GPU group comes), and say nothing once
        the lineage is closed; builds and evaluations not started are dropped, a Slurm search's
        jobs cancelled. The processes already running are the caller's to kill (see
        toolchain.process.kill_child_groups), as only it knows that the whole process is leaving."""
        with self._cond:
            self._abandoned = True
        self.shutdown(wait=False)

    def _go_on(self) -> None:
        """Between an evaluation's steps: raise _Abandoned once the run was interrupted."""
        with self._cond:
            if self._abandoned:
                raise _Abandoned()

    def describe_executor(self) -> str:
        """Where evaluations run, when not on this machine's GPU groups ("" when they do)."""
        jobs = self._jobs()
        return jobs.describe() if jobs is not None else ""

    def stop(self) -> None:
        """The search is stopping: an executor of jobs cancels them (the local pool's
        evaluations finish and are committed)."""
        jobs = self._jobs()
        if jobs is not None:
            jobs.stop()

    def shutdown(self, wait: bool = True) -> None:
        jobs = self._jobs()
        if jobs is not None and not wait:
            jobs.close(wait=False)  # leaving at once: cancel the jobs before anything else
        if self._threads is not None:
            self._threads.shutdown(wait=wait, cancel_futures=not wait)
        if self._builds is not None:
            self._builds.shutdown(wait=wait)
        with self._cond:
            kept = list(self._kept.values())
        for workers in kept:  # leaving at once: killed, and an evaluation still running keeps none
            workers.close(wait=wait)
        if jobs is not None and wait:
            jobs.close(wait=True)  # squeue lists none of the session's jobs after this

    def _jobs(self) -> JobExecutor | None:
        return self._executor if isinstance(self._executor, JobExecutor) else None

    def in_flight(self) -> bool:
        return self.in_flight_count() > 0

    def working(self) -> bool:
        """Whether a build or an evaluation of this run still runs (after abandon(): until the
        processes the caller kills are gone and their threads have seen it)."""
        with self._cond:  # an evaluation abandon() cancelled before it started never leaves _in_flight
            if any(not f.done() for f in self._in_flight.values()):
                return True
        return self._builds is not None and self._builds.running > 0

    def in_flight_count(self) -> int:
        with self._cond:
            return len(self._in_flight)

    @property
    def groups(self) -> int:
        """How many evaluations can run at once (GPU groups, or job slots); 1 before start()."""
        return self._executor.size if self._executor is not None else 1

    def launch(self, record: CandidateRecord, exclusive: bool = False) -> None:
        """Write the candidate, start its compile on a CPU thread, queue its evaluation
        (`exclusive`: on a GPU group lent while no other is, see Executor.lease)."""
        path = self.scratch / f"{record.id}.cu"
        path.write_text(record.source)
        if record.kind not in outcomes.REMEASURES:
            with self._cond:
                self.sent += 1
        build: Future[BuildResult] | None = None
        if self._builds is not None:  # watchers see it wait for a builder, then compile from a known time
            build = self._builds.submit(
                path, queued=lambda n: self._publish(BuildQueued(candidate=record.id, queued=n)),
                started=lambda n: self._publish(BuildStarted(candidate=record.id, queued=n)))
            build.add_done_callback(lambda done: self._built(record.id, done))
        assert self._threads is not None
        with self._cond:
            future = self._threads.submit(self._evaluate_and_commit, record, path, build, exclusive)
            self._in_flight[record.id] = future

    def _built(self, candidate: str, build: Future[BuildResult]) -> None:
        """A compile ahead ended (on its builder's thread): said at once, not when the evaluation's
        thread gets to it (it may wait for a thread of its own)."""
        if build.cancelled() or build.exception() is not None:  # shut down, or the evaluation says it crashed
            return
        with self._cond:
            if self._abandoned:  # killed as the run left: no verdict to report
                return
        b = build.result()
        self._publish(StageFinished(candidate=candidate, level=int(Level.COMPILE),
                                    status="" if b.ok else "compile_error", seconds=0.0 if b.cached else b.seconds))

    def confirm_left_over(self, records: list[CandidateRecord]) -> None:
        """On resume: the finalists whose confirmation never ran (the search was killed or
        stopped between the two) are re-measured alone now; until then they do not rank."""
        confirmed = {r.confirm_of for r in records if r.kind == "confirm"}
        for r in sorted(records, key=lambda r: id_number(r.id)):
            if r.finalist and r.id not in confirmed:
                self.confirm(r)

    def confirm(self, finalist: CandidateRecord) -> None:
        """Re-measure a finalist alone: the same source, evaluated on a group lent while no other
        evaluation runs, committed as its child (kind "confirm"). Only that figure can make the
        code the best (see ranking_view)."""
        record = self._drafts.confirmation_of(finalist)
        self._publish(ProposalReady(candidate=record.id, generation=record.generation, island=record.island,
                                    kind=record.kind, parents=record.parents, design=record.design,
                                    rationale=record.rationale, agent=record.agent))
        self.launch(record, exclusive=True)

    def _evaluate_and_commit(self, record: CandidateRecord, path: Path, build: Future[BuildResult] | None,
                             exclusive: bool = False) -> None:
        try:
            try:
                result, beside, job = self._evaluate_on_gpus(record, path, build, exclusive)
                done = outcomes.evaluated(record, result)
                if beside is not None and self._executor is not None and self._executor.size > 1:
                    done = outcomes.timed_beside(done, beside)
                if job is not None:
                    done = outcomes.ran_as_job(done, *job)
            except _Abandoned:
                return
            except EvaluationCancelled as exc:  # the search stopped and cancelled its job: nothing to commit
                if not exc.job:  # refused before a job existed (a cancelled job's watchers were told)
                    self._publish(JobChanged(candidate=record.id, job="", state="cancelled", reason=str(exc)))
                return
            except EvaluationFailed as exc:
                done = outcomes.ran_as_job(outcomes.job_failed(record, str(exc), exc.log), exc.run, exc.lost)
                self._publish(StageFinished(candidate=record.id, level=int(Level.COMPILE), status=done.status))
            except Exception as exc:
                done = outcomes.crashed(record, exc)
                self._publish(StageFinished(candidate=record.id, level=int(Level.COMPILE), status=done.status))
            with self._cond:
                if self._abandoned:
                    return
            committed = self._commit(done)
        except Exception as exc:  # the commit itself failed: say so, keep the search going
            self._publish(EngineError(message=f"could not commit {record.id}: {type(exc).__name__}: {exc}",
                                      candidate=record.id))
        else:
            if committed.finalist:  # launched before this one leaves _in_flight: a drain waits for it
                try:
                    self.confirm(committed)
                except Exception as exc:  # e.g. the run was interrupted: the finalist stays unconfirmed
                    self._publish(EngineError(message=f"could not re-measure {record.id} alone: "
                                                      f"{type(exc).__name__}: {exc}", candidate=record.id))
        finally:
            with self._cond:
                self._in_flight.pop(record.id, None)
                self._cond.notify_all()

    def _evaluate_on_gpus(self, record: CandidateRecord, path: Path, build: Future[BuildResult] | None,
                          exclusive: bool = False) -> tuple[CascadeResult, set[str] | None, Ran | None]:
        """The cascade's result, the evaluations that held another GPU group at some time
        while this one held its own (None when it needed no GPU), and, when it ran as a job,
        the job and those lost before it."""
        built_ok = True
        if build is not None:  # its end was published as it came (_built)
            try:
                built_ok = build.result().ok
            except CancelledError:  # dropped by abandon() before it started
                raise _Abandoned() from None
            self._go_on()  # a compile killed as the run left ends here, uncommitted and uncached
        assert self._executor is not None
        if not built_ok:  # the cascade will stop at L1 (from the cache): no GPU needed
            return self._run_cascade(record, path, ())[0], None, None
        self._go_on()
        with self._executor.lease(exclusive) as group:
            self._go_on()  # the group came after the run was interrupted: it runs nothing
            with self._cond:
                others = set(self._on_gpu)
                for other in others:
                    self._on_gpu[other].add(record.id)
                self._on_gpu[record.id] = others
            try:
                result, job = self._run_cascade(record, path, group.gpus, self._jobs(), exclusive)
            finally:
                with self._cond:
                    beside = self._on_gpu.pop(record.id)
        return result, beside, job

    def _run_cascade(self, record: CandidateRecord, path: Path, gpus: tuple[int, ...],
                     jobs: JobExecutor | None = None, exclusive: bool = False) -> tuple[CascadeResult, Ran | None]:
        """The cascade on `gpus` in this process, or with `jobs`, as a job of that executor."""
        stage: dict[str, Any] = {"level": None, "t": time.monotonic(), "last": None}

        def progress(p: Progress) -> None:
            level = int(p.level)
            if stage["last"] == (level, p.message):  # every rank reports each step: say it once
                return
            stage["last"] = (level, p.message)
            if stage["level"] is not None and stage["level"] != level:
                self._publish(StageFinished(candidate=record.id, level=stage["level"],
                                            seconds=time.monotonic() - stage["t"]))
                stage["t"] = time.monotonic()
            stage["level"] = level
            self._publish(StageStarted(candidate=record.id, level=level, gpus=gpus, message=p.message))

        options = EvalOptions(gpus=list(gpus) or None, world=self.world, run_root=self.scratch / "runs")
        job: Ran | None = None
        if jobs is None:
            kept = self._kept_workers(gpus, exclusive)
            result = self._evaluate(path, self.workload, options, progress=progress,
                                    **({"kept": kept} if kept is not None else {}))
        else:
            request = EvaluationRequest(record.id, path, self.workload, options, exclusive)
            result, job = self._run_as_job(jobs, request, progress)
        self._publish(StageFinished(candidate=record.id, level=int(result.level), status=result.status.value,
                                    seconds=time.monotonic() - stage["t"]))
        return result, job

    def _kept_workers(self, gpus: tuple[int, ...], exclusive: bool = False) -> KeptWorkers | None:
        """The rank workers `gpus` keep between evaluations (None: started for each one). A
        re-measure alone (`exclusive`), the figure that can make a candidate the best, runs in
        fresh workers on GPUs no kept worker holds, as every evaluation did before."""
        if not self.config.keep_workers or not gpus:
            return None
        with self._cond:
            kept = self._kept.setdefault(gpus, KeptWorkers())
        if exclusive:
            if ended := kept.end_kept():
                wait_released(list(gpus), set(ended))
            return None
        return kept

    def _run_as_job(self, jobs: JobExecutor, request: EvaluationRequest,
                    progress: Callable[[Progress], None]) -> tuple[CascadeResult, Ran]:
        """Submit the evaluation and wait for its job; a lost job is submitted again, up to the
        executor's max_lost times. Raises EvaluationCancelled (the search stopped) and
        EvaluationFailed (no result: carrying the jobs lost before)."""
        lost: list[JobRun] = []
        while True:
            handle = jobs.submit(request, progress, self._job_changed)
            try:
                done = handle.result()
            except EvaluationLost as exc:
                lost.append(exc.run)
                if len(lost) < jobs.max_lost:
                    continue
                failed = EvaluationFailed(f"its evaluation job was lost {len(lost)} times, the last: "
                                          f"{exc.run.reason}", exc.run)
                failed.lost = tuple(lost[:-1])
                raise failed from None
            except EvaluationFailed as exc:
                exc.lost = tuple(lost)
                raise
            return done.result, (done.run, tuple(lost))

    def _job_changed(self, update: JobUpdate) -> None:
        self._publish(JobChanged(candidate=update.candidate, job=update.job, state=update.state,
                                 reason=update.reason, nodes=update.nodes))
