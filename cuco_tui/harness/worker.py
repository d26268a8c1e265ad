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
This module holds the entry and the per-shape steps that call them."""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path

from cuco_tui.core.reference import Env, RankReference, load_reference
from cuco_tui.harness import abi
from cuco_tui.harness.candidate_calls import CandidateCalls, CandidateFailed
from cuco_tui.harness.plan import RunPlan, ShapePlan
from cuco_tui.harness.rank_checks import RankChecks
from cuco_tui.harness.rank_events import (EXIT_FAILED, EXIT_OK, BaselineMeasured, Done, EventLog, Failed, Launched,
                                          PlanStarted, ReferenceWarning, ShapeStarted, Timed)
from cuco_tui.harness.rank_group import RankGroup
from cuco_tui.harness.rank_reference import buffers
from cuco_tui.harness.rank_steps import VerifiedShape, rank_steps
from cuco_tui.harness.timing import Timing
from cuco_tui.harness.verify import poison
from cuco_tui.harness.watchdog import Watchdog


class Rank:
    def __init__(self, plan: RunPlan, rank: int) -> None:
        self.plan = plan
        self.rank = rank
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
        self.watchdog = Watchdog(self.log, rundir / "abort", plan.limits.time_scale)
        self.watchdog.start()
        self.group = RankGroup(cupy, nccl, plan, rank, self.log, self.watchdog)
        self.reference = load_reference(Path(plan.reference))
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
        library = abi.CandidateLibrary(Path(plan.library)) if plan.library else None
        if library is not None:
            for step in self.steps:
                step.loaded(library)
        self.candidate = CandidateCalls(self.group, library)
        self.timing = Timing(self.group)
        self.checks = RankChecks(self.group, self.reference, self.candidate, self.timing)

    def run(self) -> int:
        self.group.join()
        self.log.emit(PlanStarted(shapes=tuple(s.name for s in self.plan.shapes), mode=self.plan.mode))
        for shape in self.plan.shapes:
            self.watchdog.phase = f"{shape.level}:{shape.name}"
            if self.plan.mode == "baseline":
                self.baseline_shape(shape)
                continue
            if not self.candidate_shape(shape):
                break
        self.log.emit(Done())
        self.group.close()
        return EXIT_OK

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
                                reference_ms=tuple(ref_times)))
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
        reference_ms = timing.time(lambda: reference.run(inputs, outputs), "the reference", 120.0)
        parts_ms = {name: tuple(timing.time(part, name, 120.0))
                    for name, part in reference.parts(inputs, outputs).items()}
        self.report_reference(reference)
        comm_bytes = reference.comm_bytes()
        peer_copy_ms: tuple[float, ...] = ()
        if comm_bytes is not None:
            peer_copy_ms = tuple(timing.peer_copy_times(comm_bytes // max(g.world - 1, 1)))
        self.log.emit(BaselineMeasured(shape=shape.name, dims=dims, reference_ms=tuple(reference_ms), parts_ms=parts_ms,
                                       comm_bytes=comm_bytes, peer_copy_ms=peer_copy_ms))

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
    args = parser.parse_args(argv)
    try:
        plan = RunPlan.from_json(json.loads(args.plan.read_text()))
    except (OSError, ValueError) as exc:  # no run folder to report into: the launcher keeps stderr
        print(f"cannot read the run plan {args.plan}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    log = EventLog(Path(plan.rundir) / f"rank{args.rank}.jsonl", args.rank)
    try:
        return Rank(plan, args.rank).run()
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
