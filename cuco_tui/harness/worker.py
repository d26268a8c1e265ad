"""One rank of an evaluation: `python -m cuco_tui.harness.worker --plan PLAN.json --rank R`.

The launcher starts one per GPU. Each joins the harness's NCCL group, then for every
shape of the plan: builds the workload's buffers, initializes the candidate, verifies it
against the reference on fresh random inputs with poisoned outputs, and (bench shapes)
times candidate and reference with CUDA events, all ranks starting each repetition
together. Everything it learns goes, one JSON object a line, to `rank{R}.jsonl` in the
run folder; the launcher reads nothing else.

Decisions that end a run are taken collectively (an all-reduce of a flag), so no rank
tears down while another still launches into a shared collective. A watchdog thread
enforces each step's time limit: on expiry, or when the launcher asks by creating the
`abort` file, it dumps this rank's wait trace and ends the process at once.

The parts: rank_events (the event file, exit codes), watchdog (Watchdog, TraceMemory),
rank_group (the harness's NCCL group), rank_reference (the buffers of the workload's reference,
which core/reference.py loads), candidate_calls (cuco_init/launch/teardown), rank_checks
(verification), timing, rank_steps (what the plan's evaluation levels add: the perturbed rounds,
the pool off under compute-sanitizer, a profile at one bench shape).
This module holds the entry and the per-shape steps that call them.

With `--serve` the worker is kept (harness/kept.py): after a plan it waits on its stdin for the
path of the next plan of its group, its CuPy, watchdog and NCCL group still up, unless a rank
finds something the candidate left behind (harness/leftovers.py)."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import traceback
from pathlib import Path
from typing import Callable

from cuco_tui.core.reference import Env, ModuleReference, RankReference, load_reference
from cuco_tui.harness import abi
from cuco_tui.harness.candidate_calls import CandidateCalls, CandidateFailed
from cuco_tui.harness.plan import RunPlan, ShapePlan
from cuco_tui.harness.rank_checks import RankChecks
from cuco_tui.harness.leftovers import FAILED_A_CHECK, ProcessState, left_behind, reset_persisting_l2, snapshot
from cuco_tui.harness.rank_events import (EXIT_FAILED, EXIT_OK, BaselineMeasured, Done, EventLog, Failed, Idle,
                                          Launched, Leaving, PlanStarted, ReferenceSaved, ReferenceWarning, ShapeStarted,
                                          Timed)
from cuco_tui.harness.rank_group import RankGroup
from cuco_tui.harness.rank_reference import buffers
from cuco_tui.harness.rank_steps import VerifiedShape, rank_steps
from cuco_tui.harness.timing import CANDIDATE, REFERENCE, Timing
from cuco_tui.harness.verify import poison
from cuco_tui.harness.watchdog import Watchdog


class Process:
    """What a kept worker carries from one plan to the next: its watchdog, its place in the
    harness's NCCL group, how many plans it ran, and its state after the first of them (what
    "nothing left behind" means for the later ones)."""

    def __init__(self, watchdog: Watchdog, group: RankGroup) -> None:
        self.watchdog = watchdog
        self.group = group
        self.plans = 0
        self.settled: ProcessState | None = None
        self._references: dict[tuple[str, int], ModuleReference] = {}

    def reference(self, path: Path) -> ModuleReference:
        """The workload's reference, imported once per process while its file is unchanged: what a
        reference sets up on import (a library handle, a workspace) is set up once, not per plan."""
        key = (str(path), path.stat().st_mtime_ns)
        if key not in self._references:
            self._references[key] = load_reference(path)
        return self._references[key]

    def follow(self, plan: RunPlan, log: EventLog) -> None:
        """The next plan's run folder and event file, for the watchdog and the group."""
        self.watchdog.follow(log, Path(plan.rundir) / "abort")
        self.group.follow(plan, log)


class Rank:
    def __init__(self, plan: RunPlan, rank: int, process: Process | None = None, serving: bool = False) -> None:
        self.plan = plan
        self.rank = rank
        self.passed = True  # every shape's checks passed
        rundir = Path(plan.rundir)
        self.log = EventLog(rundir / f"rank{rank}.jsonl", rank)
        # The levels' steps go first, before CuPy: the schedule perturber must be in the process's
        # global scope before any library that defines what it stands in front of (CuPy's NCCL
        # module puts libnccl there; a reference that imports PyTorch would put a CUDA runtime there).
        self.steps = rank_steps(plan, self.log)
        import cupy
        from cupy.cuda import nccl

        for step in self.steps:
            step.started(cupy)
        self.cupy = cupy
        if process is None:
            watchdog = Watchdog(self.log, rundir / "abort", plan.limits.time_scale)
            watchdog.start()
            process = Process(watchdog, RankGroup(cupy, nccl, plan, rank, self.log, watchdog))
        else:
            process.follow(plan, self.log)
        self.process = process
        self.watchdog, self.group = process.watchdog, process.group
        self.reference = process.reference(Path(plan.reference))
        self.reference_notes: set[str] = set()
        try:
            abi.preload(list(plan.preload))
        except abi.AbiError as exc:
            # Not fatal here: a candidate that needs the library fails to load with a message that
            # names it, and a reference that can do without it falls back and says so.
            self.reference_notes.add(str(exc))
            self.log.emit(ReferenceWarning(message=f"{exc}; the run goes on without it"))
        for note in plan.notes:  # what the launching side found weakening the reference
            self.reference_notes.add(str(note))
            self.log.emit(ReferenceWarning(message=str(note)))
        library = self.load_library(Path(plan.library), serving) if plan.library else None
        if library is not None:
            for step in self.steps:
                step.loaded(library)
        self.candidate = CandidateCalls(self.group, library)
        self.timing = Timing(self.group)
        self.checks = RankChecks(self.group, self.reference, self.candidate, self.timing)

    def load_library(self, library: Path, serving: bool) -> abi.CandidateLibrary:
        """The candidate's library, loaded. A kept worker loads a copy from the run folder, since the
        build cache names a library by its content and the loader would hand back one loaded
        before under the same path, with its static and __device__ state as the last run left it
        (a re-measure of the same candidate, a duplicate proposal); the copy goes once loaded."""
        if not serving:
            return abi.CandidateLibrary(library)
        copy = Path(self.plan.rundir) / f"candidate-rank{self.rank}.so"
        shutil.copyfile(library, copy)  # a failure here (a full disk) is the harness's, not the candidate's
        try:
            return abi.CandidateLibrary(copy, name=library.name)
        finally:
            copy.unlink(missing_ok=True)

    def run(self, serve: bool = False) -> int:
        """The plan's shapes, then Done; `serve` (a kept worker) leaves the NCCL group open and,
        on the process's first plan, first sets what the later plans must come back to."""
        first = self.process.plans == 0
        if first:
            self.group.join()
        else:
            self.group.rejoin(self.process.plans)
        if first and serve and self.plan.mode == "evaluate":
            self.warm_reference()
            self.process.settled = snapshot(self.cupy, quiet=(self.watchdog.native_id,))
        self.log.emit(PlanStarted(shapes=tuple(s.name for s in self.plan.shapes), mode=self.plan.mode))
        for shape in self.plan.shapes:
            self.watchdog.phase = f"{shape.level}:{shape.name}"
            if self.plan.mode == "baseline":
                self.baseline_shape(shape)
                continue
            if self.plan.mode == "reference":
                self.reference_shape(shape)
                continue
            if not self.candidate_shape(shape):
                self.passed = False
                break
        self.log.emit(Done())
        self.process.plans += 1
        if not serve:
            self.group.close()
        return EXIT_OK

    def warm_reference(self) -> None:
        """A kept worker's first plan, before any candidate: the reference once at each of the
        plan's shapes (every rank in step), so that what it sets up lazily (library workspaces and
        plans, a PyTorch program's allocator and threads) is part of the state every later plan of
        the process must come back to, and not taken for what a candidate left behind."""
        g = self.group
        self.watchdog.phase = "setup"
        for shape in self.plan.shapes:
            dims = shape.dims
            env = Env(self.cupy, g.comm, g.stream, g.world, g.rank, dims)
            inputs, _outputs, expected, _dtypes = buffers(self.cupy, self.reference.io_spec(dims, g.world, g.rank))
            reference = self.reference.on_rank(env)  # first, as candidate_shape does (a program sets its device)
            with g.stream:
                self.reference.fill_inputs(self.cupy, inputs, dims, g.world, g.rank, self.plan.seed(shape, 0))
            reference.run(inputs, expected)
            g.wait_stream(f"warming the reference at {shape.name}", 120.0)
        # The driver starts its host-callback thread at the first host function on a stream: the
        # perturbed rounds' holds enqueue them, and that thread is the driver's, not a candidate's.
        g.stream.launch_host_func(lambda _: None, None)
        for step in self.steps:
            step.warm(g.stream.ptr)
        g.wait_stream("a host function on the stream", 30.0)
        g.barrier()

    def stays(self) -> bool:
        """After a plan of a kept worker (every rank calls it, in step): whether every rank passed
        every check and finds its process as it was before its first candidate (the device idle;
        no GPU memory, thread or device limit left behind). False: each rank said why it leaves
        (Leaving) and closed the group. Nothing here changes the plan's results, which are in."""
        process, g, watchdog = self.process, self.group, self.watchdog
        watchdog.phase = "close"  # a device that does not go idle is a warning, and the process leaves
        watchdog.device = None  # no health probe: a sticky error now must not turn the results into a failure
        why = ""
        try:
            watchdog.arm(30.0, "the device going idle after the plan")
            self.cupy.cuda.runtime.deviceSynchronize()
            reset_persisting_l2()
            state = snapshot(self.cupy, quiet=(self.watchdog.native_id,))
            if process.settled is not None:
                why = left_behind(process.settled, state)
        except Exception as exc:  # a sticky error surfacing now: this process cannot be trusted again
            why = f"the device after the plan: {type(exc).__name__}: {exc}"
        finally:
            watchdog.disarm()
        if not why and not self.passed:  # what a wrong candidate wrote may reach past its buffers
            why = FAILED_A_CHECK
        try:
            agreed = g.all_ok(not why, limit=15.0)
        except Exception:  # noqa: BLE001 - the group itself failed: nothing more to agree on
            agreed = False
        if agreed:
            watchdog.phase = ""
            self.log.emit(Idle(plans=process.plans))
            return True
        self.log.emit(Leaving(reason=why or "another rank found something left behind (its own event says what)"))
        g.close()
        return False

    def candidate_shape(self, shape: ShapePlan) -> bool:
        """Verify (and for bench shapes, time) the candidate at one shape. False: stop the run."""
        g, candidate, checks, timing = self.group, self.candidate, self.checks, self.timing
        dims = shape.dims
        env = Env(self.cupy, g.comm, g.stream, g.world, g.rank, dims)
        inputs, outputs, expected, dtypes = buffers(self.cupy, self.reference.io_spec(dims, g.world, g.rank))
        reference = self.reference.on_rank(env)
        self.log.emit(ShapeStarted(shape=shape.name, level=shape.level, dims=dims))
        ctx = candidate.context(dims, inputs, outputs, dtypes)
        state = candidate.init(ctx)
        first_limit = self.plan.limits.first_launch_timeout_s
        launch = lambda: candidate.launch(ctx, state)  # noqa: E731
        ok = True
        for check in range(shape.checks):
            seed = self.plan.seed(shape, check)
            with g.stream:
                self.reference.fill_inputs(self.cupy, inputs, dims, g.world, g.rank, seed)
                for name, arr in outputs.items():
                    poison(self.cupy, arr, dtypes[name])
            reference.run(inputs, expected)
            g.wait_stream("the reference", 120.0)
            self.report_reference(reference)
            g.barrier()
            limit = first_limit if check == 0 else timing.limit(shape)
            self.log.emit(Launched(shape=shape.name, check=check, limit_s=limit))
            launch()
            g.wait_stream(f"candidate launch (check {check + 1})", limit)
            candidate.check_cuda(f"after candidate launch (check {check + 1})")
            verdict = checks.verify(shape, check, outputs, expected, dtypes)
            if not g.all_ok(verdict):
                ok = False
                break
        if ok and shape.level == "verify":
            ok = checks.back_to_back(shape, launch, reference, inputs, outputs, expected, dtypes)
        if ok and shape.level == "verify":
            verified = VerifiedShape(shape, launch, reference, inputs, outputs, expected, dtypes)
            ok = all(step.verify(verified, checks) for step in self.steps)  # stops at the first that fails
        if ok and shape.level == "bench":
            run_reference = lambda: reference.run(inputs, expected)  # noqa: E731
            warm = timing.time(run_reference, "the reference", 120.0, repetitions=3)
            timing.ref_median = sorted(warm)[1]
            ref_times, cand_times = timing.time_pair(run_reference, launch, timing.limit(shape))
            candidate.check_cuda("after timing")
            self.log.emit(Timed(shape=shape.name, dims=dims, candidate_ms=tuple(cand_times),
                                reference_ms=tuple(ref_times), late_candidate=timing.late.get(CANDIDATE, 0),
                                late_reference=timing.late.get(REFERENCE, 0)))
            if self.plan.trace_ab and g.trace is not None and g.trace.slots:
                timing.time_trace_ab(shape, ctx, launch)
            measured = VerifiedShape(shape, launch, reference, inputs, outputs, expected, dtypes)
            for step in self.steps:  # after the timing, which they must not disturb (a profile)
                step.measured(measured, checks)
        # Every rank's last launch done before any rank frees: a peer's final signal or copy may
        # still be on its way into this rank's IPC buffers (seen in a CPU emulation of kv_transfer).
        g.barrier()
        candidate.teardown(state, ctx)
        g.barrier()
        return ok

    def baseline_shape(self, shape: ShapePlan) -> None:
        """The reference alone, its parts, and the copy-engine ceiling (`cuco baseline`)."""
        g, timing = self.group, self.timing
        dims = shape.dims
        env = Env(self.cupy, g.comm, g.stream, g.world, g.rank, dims)
        inputs, outputs, expected, _ = buffers(self.cupy, self.reference.io_spec(dims, g.world, g.rank))
        with g.stream:
            self.reference.fill_inputs(self.cupy, inputs, dims, g.world, g.rank, self.plan.nonce)
        reference = self.reference.on_rank(env)
        timing.late = {}
        reference_ms = timing.time(lambda: reference.run(inputs, outputs), "the reference", 120.0)
        parts_ms = {name: tuple(timing.time(part, name, 120.0))
                    for name, part in reference.parts(inputs, outputs).items()}
        self.report_reference(reference)
        comm_bytes = reference.comm_bytes()
        peer_copy_ms: tuple[float, ...] = ()
        if comm_bytes is not None:
            peer_copy_ms = tuple(timing.peer_copy_times(comm_bytes // max(g.world - 1, 1)))
        self.log.emit(BaselineMeasured(shape=shape.name, dims=dims, reference_ms=tuple(reference_ms), parts_ms=parts_ms,
                                       comm_bytes=comm_bytes, peer_copy_ms=peer_copy_ms, late=dict(timing.late)))

    def reference_shape(self, shape: ShapePlan) -> None:
        """The reference alone at a verify shape, on fresh inputs with poisoned outputs, its buffers
        saved for the launching side to compare with the workload's float64 expected() (`cuco
        workload check --gpu`): what a candidate is verified against must itself be right."""
        import numpy as np

        g, cp = self.group, self.cupy
        dims = shape.dims
        env = Env(cp, g.comm, g.stream, g.world, g.rank, dims)
        inputs, outputs, _, dtypes = buffers(cp, self.reference.io_spec(dims, g.world, g.rank))
        reference = self.reference.on_rank(env)  # first, as candidate_shape does (a program sets its device)
        with g.stream:
            self.reference.fill_inputs(cp, inputs, dims, g.world, g.rank, self.plan.seed(shape, 0))
            for name, arr in outputs.items():
                poison(cp, arr, dtypes[name])
        # The inputs as given, before the reference runs: a program may write into its inputs (an
        # in-place all_reduce), and expected() must start from what it was handed.
        arrays = {f"in.{k}": cp.asnumpy(v, stream=g.stream) for k, v in inputs.items()}
        reference.run(inputs, outputs)
        g.wait_stream("the reference", 120.0)
        self.report_reference(reference)
        name = f"reference-{shape.name}-rank{g.rank}.npz"
        arrays.update({f"out.{k}": cp.asnumpy(v) for k, v in outputs.items()})
        np.savez(Path(self.plan.rundir) / name, **arrays)
        self.log.emit(ReferenceSaved(shape=shape.name, dims=dims, file=name))
        g.barrier()

    def report_reference(self, reference: RankReference) -> None:
        """What the reference says makes it weaker than it should be (a failed graph capture, a
        fallback to a slower attention), once per message: a weak reference inflates speedups,
        so the result must carry it."""
        for message in reference.warnings():
            if message not in self.reference_notes:
                self.reference_notes.add(message)
                self.log.emit(ReferenceWarning(message=str(message)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one rank of a cuco evaluation (started by the launcher)")
    parser.add_argument("--plan", required=True, type=Path)
    parser.add_argument("--rank", required=True, type=int)
    parser.add_argument("--serve", action="store_true",
                        help="after the plan, take the paths of more plans of the same group from stdin, one a line")
    args = parser.parse_args(argv)
    plan = read_plan(args.plan)
    if plan is None:
        return EXIT_FAILED
    if not args.serve:
        return reported(plan, args.rank, lambda: Rank(plan, args.rank).run())
    first, process = plan, None
    while True:
        kept: list[Rank] = []

        def served() -> int:
            rank = Rank(plan, args.rank, process, serving=True)
            rank.run(serve=True)
            if rank.stays():
                kept.append(rank)
            return EXIT_OK

        code = reported(plan, args.rank, served)
        if code != EXIT_OK or not kept:
            return code
        process = kept[0].process
        line = sys.stdin.readline().strip()
        if not line:  # the launcher closed the group (end of input)
            process.group.close()
            return EXIT_OK
        plan = read_plan(Path(line))
        if plan is None:
            return EXIT_FAILED
        if (why := unservable(first, plan)):
            EventLog(Path(plan.rundir) / f"rank{args.rank}.jsonl", args.rank).emit(
                Failed(kind="harness", message=f"a kept worker was given a plan it cannot run: {why}"))
            return EXIT_FAILED


def read_plan(path: Path) -> RunPlan | None:
    try:
        return RunPlan.from_json(json.loads(path.read_text()))
    except (OSError, ValueError) as exc:  # no run folder to report into: the launcher keeps stderr
        print(f"cannot read the run plan {path}: {exc}", file=sys.stderr)
        return None


def unservable(first: RunPlan, plan: RunPlan) -> str:
    """Why a kept worker started for `first` cannot run `plan` ("" when it can): harness/kept.py
    sends a plan only to workers of the same key; this is the worker's own check of it."""
    from cuco_tui.harness.kept import keep_key

    key = keep_key(plan)
    return "" if key is not None and key == keep_key(first) else "its GPUs, perturber, tracing or tools differ"


def reported(plan: RunPlan, rank: int, run: Callable[[], int]) -> int:
    """`run`'s exit code, with what ended it early written to the plan's event file."""
    log = EventLog(Path(plan.rundir) / f"rank{rank}.jsonl", rank)
    try:
        return run()
    except CandidateFailed as exc:
        log.emit(Failed(kind=exc.kind, message=str(exc)))
        return EXIT_FAILED
    except abi.AbiError as exc:
        log.emit(Failed(kind="abi", message=str(exc)))
        return EXIT_FAILED
    except Exception as exc:  # a CUDA error surfacing anywhere, or a bug of ours: report both
        kind = "cuda" if "CUDARuntimeError" in type(exc).__name__ or "cuda" in type(exc).__module__ else "harness"
        log.emit(Failed(kind=kind, message=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc()))
        return EXIT_FAILED


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # os._exit: a rank whose kernel faulted must not hang in CUDA's exit handlers.
    os._exit(code)
