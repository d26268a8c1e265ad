"""What an evaluation level does inside a rank worker (its side of evaluate/levels.py): a
`RankStep` that the level's entry in the run plan turns on. The worker builds the plan's steps
before it imports CuPy and calls every step's hooks at fixed points; a hook a step does not need
keeps the default, which does nothing.

  - `PerturbedRounds` (plan.perturb, evaluate/races.py): the interposer loaded before CuPy and bound
    to the candidate, then the back-to-back check again under each seed's perturbed schedule;
  - `UnderSanitizer` (plan.sanitize, evaluate/sanitizer.py): CuPy's memory pool off;
  - `ProfiledLaunches` (plan.profile, evaluate/profiling.py): at one bench shape, once it is timed, a
    few launches back to back with CUPTI recording what the GPU runs (harness/profile_capture.py)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from cuco_tui.core.profile import KERNEL, Activity
from cuco_tui.core.reference import RankReference
from cuco_tui.harness import abi
from cuco_tui.harness.perturb import PerturbError, PerturbLibrary
from cuco_tui.harness.plan import PERTURBED_CHECK, PerturbPlan, ProfilePlan, RunPlan, ShapePlan
from cuco_tui.harness.profile_capture import ActivityRecorder, CaptureUnavailable
from cuco_tui.harness.rank_checks import RankChecks
from cuco_tui.harness.rank_group import SETTLE_NAME
from cuco_tui.harness.rank_events import EventLog, PerturbEnded, PerturbStarted, PerturbWarning, ProfileCaptured


@dataclass(frozen=True)
class VerifiedShape:
    """A shape whose checks passed on every rank (at a verify shape: the ordinary and back-to-back
    checks; at a bench shape: its check, and it has been timed): what a step needs to launch and
    check it again."""

    shape: ShapePlan
    launch: Callable[[], None]
    reference: RankReference
    inputs: dict[str, Any]
    outputs: dict[str, Any]
    expected: dict[str, Any]
    dtypes: dict[str, str]


class RankStep:
    def started(self, cupy: Any) -> None:
        """CuPy is imported; nothing is allocated yet."""

    def loaded(self, library: abi.CandidateLibrary) -> None:
        """The candidate's library is loaded."""

    def warm(self, stream_ptr: int) -> None:
        """A kept worker, before its first candidate: start what the step would start lazily
        (threads, allocations) so that it is not taken for what a candidate left behind."""

    def verify(self, run: VerifiedShape, checks: RankChecks) -> bool:
        """More checks at a verify shape (every rank calls it, in step): False when one failed on
        any rank, which ends the run there."""
        return True

    def measured(self, run: VerifiedShape, checks: RankChecks) -> None:
        """A bench shape was verified and timed (every rank calls it, in step)."""


class UnderSanitizer(RankStep):
    def started(self, cupy: Any) -> None:
        # compute-sanitizer knows an allocation by its cudaMalloc: inside a pool's arena an
        # overrun of a harness buffer would land in memory it counts as allocated.
        cupy.cuda.set_allocator(None)


class PerturbedRounds(RankStep):
    def __init__(self, spec: PerturbPlan, perturber: PerturbLibrary) -> None:
        self.spec = spec
        self.perturber = perturber

    @classmethod
    def load(cls, spec: PerturbPlan, log: EventLog) -> PerturbedRounds | None:
        """The step with its interposer loaded (call it before CuPy: the candidate's calls into the
        CUDA runtime, NCCL and cuBLAS bind to it only if no library that defines them is in the
        process's global scope before it, and importing CuPy's NCCL module puts libnccl there; seen
        on the H100 host: every ncclAllGather of a candidate went straight to NCCL, unheld). None
        when it cannot be loaded: the candidate is verified all the same, without perturbed rounds."""
        try:
            return cls(spec, PerturbLibrary(Path(spec.library)))
        except PerturbError as exc:
            log.emit(PerturbWarning(message=f"{exc}; verified without schedule perturbation"))
            return None

    def loaded(self, library: abi.CandidateLibrary) -> None:
        self.perturber.bind(library.lib._handle)

    def warm(self, stream_ptr: int) -> None:
        self.perturber.hold(stream_ptr, 1)  # one hold of 1 us: a host function on the stream

    def verify(self, run: VerifiedShape, checks: RankChecks) -> bool:
        """The back-to-back check again, once per seed of the plan's perturbation (seed, seed + 1,
        ...): the candidate's ordering points held back as the seed says while it enqueues a
        launch, this rank's stream held back first when the seed makes it start late. Each round
        is reported (PerturbStarted, PerturbEnded) so a failure names the seed that replays it.
        Stops at the first round that fails on any rank."""
        g, perturber, spec, shape = checks.group, self.perturber, self.spec, run.shape
        for i in range(spec.rounds):
            seed = spec.seed + i
            p = perturber.configure(seed, g.rank, g.world, spec.unit_us)
            g.log.emit(PerturbStarted(shape=shape.name, round=i, seed=seed, kind=p.kind, target=p.target,
                                      description=p.description, unit_us=p.unit_us, start_delay_us=p.start_delay_us))

            def held() -> None:
                perturber.enable(True)
                try:
                    run.launch()
                finally:
                    perturber.enable(False)

            def late() -> None:
                if p.start_delay_us and not perturber.hold(g.stream.ptr, p.start_delay_us):
                    g.log.emit(PerturbWarning(message=f"its stream could not be held back for its late start "
                                                      f"(perturbation seed {p.seed}): the round ran without it"))

            started = time.monotonic()
            ok = checks.back_to_back(shape, held, run.reference, run.inputs, run.outputs, run.expected, run.dtypes,
                                     label=f"perturbed, seed {seed}", check=shape.checks + 2 + 2 * i,
                                     input_seed=checks.plan.seed(shape, PERTURBED_CHECK + 2 * i), late=late,
                                     perturb_seed=seed)
            st = perturber.stats()
            g.log.emit(PerturbEnded(shape=shape.name, round=i, seed=seed, ok=ok,
                                    seconds=time.monotonic() - started, calls=st.calls, delayed=st.delayed,
                                    delayed_us=st.delayed_us, skipped=st.skipped, errors=st.errors,
                                    per_class=st.per_class))
            if not ok:
                return False
        return True


class ProfiledLaunches(RankStep):
    def __init__(self, spec: ProfilePlan, rundir: Path) -> None:
        self.spec = spec
        self.rundir = rundir

    def measured(self, run: VerifiedShape, checks: RankChecks) -> None:
        """At the plan's profile shape: every rank turns CUPTI's recording on, then (all of them
        able, since the candidate's launches are collective) the ranks align and launch the
        candidate `launches` times back to back, as the timing's warm-up does; each writes what its
        GPU ran from the first launch to the last into profile-rank{R}.json. A rank that cannot
        record says why in its ProfileCaptured event, and then no rank launches."""
        spec, g = self.spec, checks.group
        if run.shape.name != spec.shape:
            return
        recorder: ActivityRecorder | None = None
        problem = ""
        try:
            recorder = ActivityRecorder.load()
            recorder.start()
        except CaptureUnavailable as exc:
            recorder, problem = None, str(exc)
        except Exception as exc:  # a cupti-python without a name this module uses
            recorder, problem = None, f"CUPTI could not be set up: {type(exc).__name__}: {exc}"
        if not g.all_ok(recorder is not None):
            if recorder is not None:
                _stopped(recorder)
                problem = "another rank could not record activities (its own profile event says why)"
            g.log.emit(ProfileCaptured(shape=spec.shape, launches=spec.launches, problem=problem))
            return
        assert recorder is not None
        g.barrier()
        # The agreement and the barrier above ran NCCL kernels on the harness's stream while CUPTI
        # recorded: what started before this moment (the host's clock, which CUPTI stamps with)
        # is theirs, not the candidate's, and is left out.
        since = recorder.now_ns()
        # The launches start as the timed ones do; what precedes the lined-up point is the harness's.
        if g.plan.device_aligned:
            g.align_on_device()
        try:
            for _ in range(spec.launches):
                run.launch()
            g.wait_stream(f"profiled launches ({spec.launches})", checks.timing.limit(run.shape) * spec.launches)
        finally:
            activities, problem = _stopped(recorder)
        checks.candidate.check_cuda("after the profiled launches")
        if problem:
            g.log.emit(ProfileCaptured(shape=spec.shape, launches=spec.launches, problem=problem))
            return
        activities = candidates_own(activities, since, g.world)
        name = f"profile-rank{g.rank}.json"
        (self.rundir / name).write_text(json.dumps({
            "shape": spec.shape, "launches": spec.launches, "dropped": recorder.dropped,
            "unreadable": recorder.unreadable, "activities": [a.to_dict() for a in activities]}))
        g.log.emit(ProfileCaptured(shape=spec.shape, launches=spec.launches, file=name, activities=len(activities),
                                   dropped=recorder.dropped + recorder.unreadable))


def _stopped(recorder: ActivityRecorder) -> tuple[list[Activity], str]:
    """The recorder's activities, or none and why: a profile that cannot be read out is a
    sentence in the result, never the end of the evaluation."""
    try:
        return recorder.stop(), ""
    except CaptureUnavailable as exc:
        return [], str(exc)


def rank_steps(plan: RunPlan, log: EventLog) -> list[RankStep]:
    """The steps the plan turns on, in order. Built before CuPy is imported (the perturber's load)."""
    steps: list[RankStep] = []
    if plan.perturb is not None and plan.library:  # a baseline run launches no candidate
        perturbed = PerturbedRounds.load(plan.perturb, log)
        if perturbed is not None:
            steps.append(perturbed)
    if plan.sanitize:
        steps.append(UnderSanitizer())
    if plan.profile is not None and plan.library:
        steps.append(ProfiledLaunches(plan.profile, Path(plan.rundir)))
    return steps


def candidates_own(activities: list[Activity], since: int, world: int = 2) -> list[Activity]:
    """The activities of the profiled launches: those that started after `since` (the host's
    clock at the barrier) and, on the harness's stream, after the alignment when there was one
    (the pause kernel, then the all-reduce that lines the ranks up: the first all-reduce kernel to
    start there once the pause ended; both the harness's, not the candidate's). What the candidate
    started on a stream of its own during the alignment, not ordered after the harness's stream,
    is kept: it ran ahead of the timed start, and the timeline must show it."""
    pauses = [a for a in activities if a.kind == KERNEL and SETTLE_NAME in a.name]
    cut = max([since] + [a.end_ns for a in pauses])
    harness = {(a.device, a.stream) for a in pauses}
    # At W=1 NCCL's in-place all-reduce launches no kernel: the first one after the pause is the
    # candidate's own. So is any kernel but the first on that stream.
    first = min((a for a in activities if a.kind == KERNEL and a.start_ns >= cut and (a.device, a.stream) in harness),
                key=lambda a: a.start_ns, default=None)
    if world > 1 and first is not None and first.name.startswith("nccl") and "AllReduce" in first.name:
        cut = first.end_ns
    return [a for a in activities
            if a.start_ns >= cut or (a.start_ns >= since and (a.device, a.stream) not in harness)]
