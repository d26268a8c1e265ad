"""The evaluation cascade: L0 (evaluate/l0.py), L1 compile, L2 run + verify at the verify
size, L3 benchmark at every bench shape. Each level runs only if the one before passed;
the result says how far the candidate got and why it stopped."""

from __future__ import annotations

import hashlib
import math
import secrets
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from cuco_tui.toolchain import BuildCache, compile_candidate
from cuco_tui.toolchain import grouped_gemm_lib
from cuco_tui.toolchain.attention import ensure_library, uses_attention
from cuco_tui.toolchain.nvcc import ensure_gemm_library
from cuco_tui.toolchain.toolchain import Toolchain, discover
from cuco_tui.evaluate import profiling, races, sanitizer, shared_gpu
from cuco_tui.core.noise import speedup_of
from cuco_tui.core.result import (
    CascadeResult,
    Diagnostic,
    Level,
    ShapeTiming,
    Spread,
    StaticVerdict,
    Status,
    Verification,
)
from cuco_tui.evaluate.launch_sites import launch_locator
from cuco_tui.evaluate.levels import EvaluationLevel, LevelUnavailable, RunFacts, Setup, prepare_all, reading_of
from cuco_tui.evaluate.l0 import check_l0
from cuco_tui.evaluate.static_checks import size_diagnostic
from cuco_tui.harness.deadlock import describe_hang
from cuco_tui.harness.gpus import inventory, is_shared
from cuco_tui.harness.kept import KeptWorkers
from cuco_tui.harness.launcher import GroupRun, RankOutcome, run_group
from cuco_tui.harness.plan import SETTLE_US, TRACE_SLOTS, Limits, RunPlan, ShapePlan
from cuco_tui.harness.leftovers import FAILED_A_CHECK
from cuco_tui.harness.rank_events import (Aborted, CloseWarning, Done, Failed, Leaving, RankEvent, ReferenceWarning,
                                          ShapeStarted, Timed, TimedOut, Verified)
from cuco_tui.core.workload import Workload, WorkloadError


@dataclass(frozen=True)
class Progress:
    """A step of the cascade, for whoever is watching (CLI spinner, TUI)."""

    level: Level
    message: str


@dataclass(frozen=True)
class EvalOptions:
    gpus: list[int] | None = None  # None: the first `world` GPUs (all of them if world is None)
    world: int | None = None
    verify_checks: int = 2
    timeout_floor_s: float = Limits.timeout_floor_s  # a launch may take max(floor, factor x reference time)
    timeout_factor: float = Limits.timeout_factor
    first_launch_timeout_s: float = Limits.first_launch_timeout_s
    run_root: Path | None = None  # where run folders go; default: the build cache's sibling
    bench: bool = True  # False: stop after L2
    shapes: tuple[str, ...] = ()  # restrict L3 to these bench shape names
    trace: bool = True  # wait trace points on (off only to measure what they cost)
    trace_ab: bool = False  # at bench shapes, also time the candidate with tracing on and off, interleaved
    # Every rank on one GPU (the first of `gpus`, else GPU 0): checks correctness on a machine
    # with fewer GPUs than ranks. It never times (ranks sharing one GPU time-slice it).
    share_gpu: bool = False
    # After the ordinary checks, L2 runs the back-to-back launches again under perturbed schedules
    # (evaluate/races.py): `perturb_rounds` seeds from `perturb_seed` (None: a random one), holds in
    # units of `perturb_unit_us` (None: 2 ms, more when ranks share a GPU).
    perturb: bool = True
    perturb_seed: int | None = None
    perturb_rounds: int = races.DEFAULT_ROUNDS
    perturb_unit_us: int | None = None
    # A compute-sanitizer tool (sanitizer.TOOLS): L2 alone, under it, built with -lineinfo.
    sanitize: str | None = None
    # A bench shape to profile once it is timed (evaluate/profiling.py): `profile_launches` launches
    # back to back with CUPTI recording; the result's `profile` holds the summary and the trace's path.
    profile: str | None = None
    profile_launches: int = profiling.DEFAULT_LAUNCHES
    align: str = "device"  # how ranks start a timed repetition together (harness/plan.py ALIGNS)


ProgressFn = Callable[[Progress], None]


def levels_for(options: EvalOptions) -> list[EvaluationLevel]:
    """The levels beyond L0-L3 an evaluation runs, in the order the cascade asks them
    (evaluate/levels.py): compute-sanitizer first, whose narrower options the others then see, and
    L2's perturbed schedules (which read nothing from a run that had none), then a profile when asked."""
    asked: list[EvaluationLevel] = [sanitizer.Sanitizer(options.sanitize)] if options.sanitize else []
    profile = [profiling.Profiling(options.profile, options.profile_launches)] if options.profile else []
    return asked + [races.PerturbedSchedules()] + profile


def runs_root(options: EvalOptions, cache: BuildCache) -> Path:
    """Where run folders (plans, ranks' event files, logs) go: beside the build cache."""
    return options.run_root or cache.root.parent / "runs"


def choose_gpus(workload: Workload, options: EvalOptions) -> tuple[list[int], str]:
    """The GPU group to run on, or ([], reason) when this machine cannot run the workload."""
    inv = inventory()
    if inv.count == 0:
        return [], f"no_gpu: {inv.problem or 'no GPU found'}"
    if options.share_gpu:
        return shared_gpu.shared_group(workload, options.gpus[0] if options.gpus else 0, options.world, inv.count)
    if options.world is not None and options.world < 1:
        return [], f"a group needs at least one rank, not {options.world}"
    if options.gpus and is_shared(options.gpus):
        return [], f"GPUs {options.gpus} name one GPU twice: ranks share a GPU only when asked to (share_gpu)"
    if options.gpus:
        missing = [g for g in options.gpus if g >= inv.count]
        if missing:
            return [], f"GPU {missing[0]} does not exist: this machine has {inv.count} (0-{inv.count - 1})"
        gpus = list(options.gpus)
    else:
        fitting = [w for w in workload.world_sizes if w <= inv.count]
        world = options.world or (max(fitting) if fitting else 0)
        if world == 0:
            return [], (f"{workload.name} needs {min(workload.world_sizes)} GPUs at least; "
                        f"this machine has {inv.count}")
        if world > inv.count:
            return [], f"world size {world} needs {world} GPUs; this machine has {inv.count}"
        gpus = list(range(world))
    return gpus, ""


def new_rundir(root: Path, name: str) -> Path:
    """A run folder of its own: two groups started in the same second on the same source (the
    same candidate at two world sizes, or re-measured beside itself) must not share plan,
    NCCL id and event files."""
    root.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"{time.strftime('%Y%m%d-%H%M%S')}-{name}-", dir=root))


def make_plan(workload: Workload, library: Path | None, options: EvalOptions, mode: str) -> RunPlan:
    shapes: list[ShapePlan] = []
    if mode in ("evaluate", "reference"):
        for i, s in enumerate(workload.verify_shapes):
            shapes.append(ShapePlan(s.name, dict(s.dims), "verify", options.verify_checks, i))
    if mode == "baseline" or (mode == "evaluate" and options.bench and not options.share_gpu):
        for i, s in enumerate(workload.bench_shapes):
            if options.shapes and s.name not in options.shapes:
                continue
            shapes.append(ShapePlan(s.name, dict(s.dims), "bench", 1, 100 + i))
    limits = Limits(first_launch_timeout_s=options.first_launch_timeout_s, timeout_floor_s=options.timeout_floor_s,
                    timeout_factor=options.timeout_factor)
    return RunPlan(
        mode=mode, workload=workload.name, reference=str(workload.reference),
        library=str(library) if library else None, shapes=tuple(shapes), rtol=workload.rtol, floor=workload.floor,
        warmup=workload.warmup, repetitions=workload.repetitions, nonce=secrets.randbelow(1 << 30), limits=limits,
        trace_slots=TRACE_SLOTS if options.trace else 0, trace_ab=bool(options.trace_ab and options.trace),
        shared_gpu=options.share_gpu, align=options.align,
    )


def harness_libraries(workload: Workload, source: str | None, toolchain: Toolchain, cache: BuildCache,
                      say: ProgressFn) -> tuple[list[str], str, str]:
    """(libraries the ranks load before the candidate, why a library the candidate needs is
    missing, why one only the reference wanted is). The attention library is built when the
    workload's reference may use it or the candidate includes it; only a candidate that includes
    it fails without it: the reference falls back, and the note goes into the results. The grouped
    GEMM's reference configuration likewise where the reference may call it (a candidate that
    includes its header links its own configurations at compile time)."""
    preload: list[str] = []
    notes: list[str] = []
    needed = source is not None and uses_attention(source)
    if needed or "attention" in workload.libraries:
        say(Progress(Level.COMPILE, "the harness attention library (built once per machine)"))
        attention = ensure_library(toolchain, cache)
        if attention.ok:
            preload += attention.preload()
        elif needed:
            return [], attention.problem, ""
        else:
            notes.append(f"the harness attention library is missing: {attention.problem}")
    if "grouped_gemm" in workload.libraries:
        say(Progress(Level.COMPILE, "the grouped GEMM library of the reference (built once per machine)"))
        grouped = ensure_gemm_library(grouped_gemm_lib.REFERENCE_CONFIG, toolchain, cache)
        if grouped.ok and grouped.path is not None:
            preload.append(str(grouped.path))
        else:
            notes.append(f"the reference's grouped GEMM library is missing: {grouped.problem}")
    return preload, "", "; ".join(notes)


def run_deadline(plan: RunPlan) -> float:
    """The launcher's backstop for the whole run; each launch has its own, tighter limit. Widened
    by the plan's `time_scale` as the ranks' own limits are (a run under compute-sanitizer)."""
    return (180.0 + 120.0 * len(plan.shapes)) * plan.limits.time_scale


def evaluate(
    candidate: Path,
    workload: Workload,
    options: EvalOptions = EvalOptions(),
    progress: ProgressFn | None = None,
    toolchain: Toolchain | None = None,
    cache: BuildCache | None = None,
    events_out: list[RankEvent] | None = None,
    kept: KeptWorkers | None = None,
) -> CascadeResult:
    """Run the cascade on one candidate. `events_out`, if given, receives every event the
    ranks reported (for tools that look closer, such as the fault self-test); `kept`, the rank
    workers its GPU group keeps between evaluations (harness/kept.py)."""
    say = progress or (lambda p: None)
    candidate = Path(candidate)
    levels = levels_for(options)
    for extra in levels:
        options = extra.narrow(options)
    base = dict(candidate=str(candidate), workload=workload.name)
    try:
        too_large = size_diagnostic(candidate.stat().st_size, candidate.name)
        if too_large:  # refused before a byte is read (see MAX_SOURCE_BYTES): L0's first finding
            return CascadeResult(**base, status=Status.REJECTED, level=Level.STATIC, diagnostics=[too_large],
                                 reason=StaticVerdict((too_large,)).reason)
        source = candidate.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        return CascadeResult(**base, status=Status.REJECTED, level=Level.STATIC,
                             reason=f"cannot read {candidate}: {exc}")
    sha = hashlib.sha256(source.encode()).hexdigest()
    base["source_sha"] = sha

    # L0: static checks, before anything touches a compiler or a GPU.
    say(Progress(Level.STATIC, "static checks"))
    l0 = check_l0(source, workload.seed.read_text(), candidate.name)  # the one L0 (evaluate/l0.py)
    diags = list(l0.diagnostics)
    if l0.rejected:
        return CascadeResult(**base, status=Status.REJECTED, level=Level.STATIC, diagnostics=diags, reason=l0.reason)

    # L1: compile.
    say(Progress(Level.COMPILE, "compiling with nvcc"))
    toolchain = toolchain or discover()
    cache = cache or BuildCache()
    build = compile_candidate(candidate, toolchain, cache,
                              extra_flags=tuple(flag for extra in levels for flag in extra.compile_flags()))
    diags = diags + build.diagnostics
    base.update(build_seconds=build.seconds, build_cached=build.cached, diagnostics=diags,
                logs={"nvcc": build.log[-8000:]})
    if not build.ok or build.library is None:
        errors = [d for d in build.diagnostics if d.severity == "error"]
        where = f" at {errors[0].location()}" if errors and errors[0].line else ""
        what = errors[0].message if errors else "nvcc failed"
        return CascadeResult(**base, status=Status.COMPILE_ERROR, level=Level.COMPILE,
                             reason=f"compile error{where}: {what}")

    gpus, why = choose_gpus(workload, options)
    if not gpus:
        if why.startswith("no_gpu"):
            return CascadeResult(**base, status=Status.NO_GPU, level=Level.COMPILE, reason=why + "; compiled only")
        return CascadeResult(**base, status=Status.RUNTIME_ERROR, level=Level.COMPILE, reason=why)
    try:
        workload.check_world(len(gpus))
    except WorkloadError as exc:
        return CascadeResult(**base, status=Status.RUNTIME_ERROR, level=Level.COMPILE, reason=str(exc))

    preload, problem, note = harness_libraries(workload, source, toolchain, cache, say)
    if problem:
        diag = Diagnostic(level=int(Level.COMPILE), severity="error", file=candidate.name, code="toolchain",
                          message=f"the candidate includes cuco_attn.h, and {problem}")
        return CascadeResult(**base | {"diagnostics": diags + [diag]}, status=Status.RUNTIME_ERROR,
                             level=Level.COMPILE, reason=f"cannot run: the harness attention library is missing: {problem}")

    # L2 + L3 in one group run: the workers verify at the verify size first and stop there
    # on any failure, so L3 is only entered by a candidate that passed L2. Each level adds its part.
    plan = replace(make_plan(workload, build.library, options, "evaluate"), preload=tuple(preload),
                   notes=(note,) if note else ())
    setup = Setup(options, tuple(gpus), toolchain, cache, lambda level, message: say(Progress(level, message)))
    try:
        prepared = prepare_all(levels, plan, setup)
    except LevelUnavailable as exc:
        return CascadeResult(**base, status=Status.RUNTIME_ERROR, level=Level.COMPILE, reason=str(exc))
    diags = diags + ([shared_gpu.note(gpus)] if is_shared(gpus) else []) + list(prepared.diagnostics)
    base["diagnostics"] = diags
    plan = prepared.plan
    rundir = new_rundir(runs_root(options, cache), f"{candidate.stem}-{sha[:8]}")
    say(Progress(Level.VERIFY, f"running on GPUs {','.join(map(str, gpus))}"))

    def on_event(e: RankEvent) -> None:
        if events_out is not None:
            events_out.append(e)
        match e:
            case ShapeStarted(level=level, shape=shape):
                say(Progress(Level.VERIFY if level == "verify" else Level.BENCHMARK, f"{level} {shape}"))

    group = run_group(plan, gpus, rundir, run_deadline(plan), on_event=on_event, worker_argv=prepared.worker_argv,
                      kept=kept)
    result = interpret(group, workload, base | {"world": len(gpus), "gpus": gpus}, source=source, levels=levels,
                       align=plan.align)
    for extra in levels:
        result = extra.finish(result, group)
    if is_shared(gpus) and not result.status.ok:
        result = replace(result, reason=result.reason + shared_gpu.failure_hint(source))
    return result


def _level_reached(outcomes: list[RankOutcome]) -> Level:
    level = Level.VERIFY
    for o in outcomes:
        for e in o.of(ShapeStarted):
            if e.level == "bench":
                level = Level.BENCHMARK
    return level


def _verifications(outcomes: list[RankOutcome], workload: Workload) -> list[Verification]:
    grouped: dict[tuple[str, int, str], list[Verified]] = {}
    for o in outcomes:
        for e in o.of(Verified):
            grouped.setdefault((e.shape, e.check, e.output), []).append(e)
    out = []
    for (shape, check, output), events in grouped.items():
        worst = max(events, key=lambda e: e.max_rel_error)
        ssd = sum(e.sum_sq_diff for e in events)
        ssr = sum(e.sum_sq_ref for e in events)
        idx = ", ".join(str(i) for i in worst.worst_index)
        out.append(Verification(
            shape=f"{shape} {events[0].label or f'#{check + 1}'}",
            ok=all(e.ok for e in events),
            max_rel_error=max(e.max_rel_error for e in events),
            rel_fro_error=math.sqrt(ssd / ssr) if ssr > 0 else (0.0 if ssd == 0 else math.inf),
            unwritten=sum(e.unwritten for e in events),
            nonfinite=sum(e.nonfinite for e in events),
            elements=sum(e.elements for e in events),
            worst=f"rank {worst.rank}, {output}[{idx}]: got {worst.worst_got:.6g}, want {worst.worst_want:.6g}",
            tolerance=workload.rtol,
        ))
    return out


def _timings(outcomes: list[RankOutcome], align: str) -> list[ShapeTiming]:
    """Each bench shape's times over the ranks; `align`: how the plan started its repetitions."""
    by_shape: dict[str, list[Timed]] = {}
    for o in outcomes:
        for e in o.of(Timed):
            by_shape.setdefault(e.shape, []).append(e)
    timings = []
    for shape, events in by_shape.items():
        events.sort(key=lambda e: e.rank)
        # An iteration lasts as long as its slowest rank.
        cand = [max(vals) for vals in zip(*(e.candidate_ms for e in events))]
        ref = [max(vals) for vals in zip(*(e.reference_ms for e in events))]
        c, r = Spread.of(cand), Spread.of(ref)
        timings.append(ShapeTiming(
            shape=shape, dims=events[0].dims, candidate=c, reference=r,
            per_rank=[Spread.of(list(e.candidate_ms)) for e in events], speedup=r.median / c.median, align=align,
        ))
    return timings


def reference_messages(outcomes: list[RankOutcome]) -> list[str]:
    """Each distinct message the ranks' references reported (see worker.report_reference)."""
    messages = dict.fromkeys(e.message for o in outcomes for e in o.of(ReferenceWarning))
    return [m for m in messages if m]


def reference_warnings(outcomes: list[RankOutcome]) -> list[Diagnostic]:
    return [Diagnostic(level=int(Level.VERIFY), severity="warning", code="reference",
                       message=f"the reference: {m} (speedups against it overstate)")
            for m in reference_messages(outcomes)]


def late_start_notes(outcomes: list[RankOutcome]) -> list[Diagnostic]:
    """Bench shapes where some repetitions started before a rank's host had enqueued what was
    timed (the alignment pause ran out first): those hold that host's launch time, as a host
    barrier alone would have. Worth knowing for a host-heavy candidate or reference."""
    notes = []
    for o in outcomes:
        for e in o.of(Timed):
            if e.late_candidate or e.late_reference:
                notes.append(Diagnostic(
                    level=int(Level.BENCHMARK), severity="note", code="timing", rank=o.rank,
                    message=f"{e.shape}, rank {o.rank}: {e.late_candidate} of {len(e.candidate_ms)} candidate and "
                            f"{e.late_reference} of {len(e.reference_ms)} reference repetitions started before the "
                            f"host had enqueued them (the {SETTLE_US} µs alignment pause ran out): those times hold "
                            "host launch latency"))
    return notes


def close_warnings(outcomes: list[RankOutcome]) -> list[Diagnostic]:
    """A rank that reported every result and then could not close the harness's NCCL group:
    the harness's trouble, not the candidate's, and no reason to drop its results."""
    warnings = [Diagnostic(level=int(Level.VERIFY), severity="warning", code="harness", rank=o.rank,
                           message=f"rank {o.rank}: {e.message} (after its results; they stand)")
                for o in outcomes for e in o.of(CloseWarning)]
    warnings += [Diagnostic(level=int(Level.VERIFY), severity="warning", code="harness", rank=o.rank,
                            message=f"rank {o.rank} {o.describe_exit()} after its results while closing the harness's "
                                    "NCCL group (the results stand)")
                 for o in outcomes if o.last(Done) and (o.exit_code not in (0, None) or o.killed)]
    warnings += [Diagnostic(level=int(Level.VERIFY), severity="warning", code="harness", rank=o.rank,
                            message=f"rank {o.rank}: its kept worker ended after this candidate: {e.reason} "
                                    f"(the results stand; the next evaluation starts fresh workers)")
                 for o in outcomes for e in o.of(Leaving) if e.reason != FAILED_A_CHECK]
    return warnings


def interpret(group: GroupRun, workload: Workload, base: dict[str, Any], source: str = "",
              levels: list[EvaluationLevel] | None = None, align: str = "device") -> CascadeResult:
    """Turn what the ranks reported into one status, a reason and diagnostics. `source`: the
    candidate's text, which a deadlock report quotes at each wait; `levels`: those the run had
    (levels_for(EvalOptions()) when not given), whose readings add notes and explanations; `align`:
    the run plan's (RunPlan.align), recorded on each timing: times under the two do not compare."""
    outcomes = group.ranks
    file = Path(str(base.get("candidate", ""))).name
    level = _level_reached(outcomes)
    verifications = _verifications(outcomes, workload)
    logs = dict(base.pop("logs", {}))
    for o in outcomes:
        if o.stderr_tail.strip():
            logs[f"rank{o.rank}.stderr"] = o.stderr_tail
    diags = (list(base.pop("diagnostics", [])) + reference_warnings(outcomes) + close_warnings(outcomes)
             + late_start_notes(outcomes))
    facts = RunFacts(str(base.get("candidate", "")), workload.name, tuple(base.get("gpus", ())))
    reading = reading_of(levels_for(EvalOptions()) if levels is None else levels, outcomes, facts)
    diags += reading.notes
    during = reading.during
    common = dict(base, verifications=verifications, run_seconds=group.seconds, logs=logs)
    released = "" if group.gpus_released else " Warning: the GPUs still showed the group's processes 30 s later."

    errors = [(o, e) for o in outcomes for e in o.of(Failed)]
    if errors:
        o, e = errors[0]
        for ro, re_ in errors:
            diags.append(Diagnostic(level=int(level), severity="error", message=re_.message, rank=ro.rank,
                                    code=re_.kind))
        if e.kind == "harness":
            reason = f"harness error on rank {o.rank} (a bug in cuco-tui, not the candidate): {e.message}"
        else:
            reason = f"rank {o.rank}: {e.message}"
        return CascadeResult(**common, status=Status.RUNTIME_ERROR, level=level, diagnostics=diags,
                             reason=reason + during + released)

    timeouts = [(o, t) for o in outcomes if (t := o.last(TimedOut))]
    if timeouts:
        report = describe_hang(outcomes, file, source, launch_locator(source, file))
        o, timeout = timeouts[0]
        diags.append(Diagnostic(level=int(level), severity="error", message=timeout.message, rank=o.rank,
                                code="timeout"))
        return CascadeResult(**common, status=Status.DEADLOCK, level=level, diagnostics=diags,
                             deadlock_report=report, reason=f"rank {o.rank}: {timeout.message}" + during + released)

    # A rank that reported all its results ("done") and died closing the harness's group is a
    # warning (close_warnings), not the candidate's failure.
    dead = [o for o in outcomes if not o.last(Done)
            and (o.exit_code not in (0, None) or (o.killed and not o.last(Aborted)))]
    if dead:
        o = dead[0]
        tail = o.stderr_tail.strip().splitlines()[-1:] or [""]
        diags.append(Diagnostic(level=int(level), severity="error", rank=o.rank, code="crash",
                                message=f"rank {o.rank} {o.describe_exit()} without reporting an error. {tail[0]}"))
        return CascadeResult(**common, status=Status.RUNTIME_ERROR, level=level, diagnostics=diags,
                             reason=f"rank {o.rank} {o.describe_exit()}" + released)

    failed = [v for v in verifications if not v.ok]
    if failed:
        v = failed[0]
        if v.unwritten:
            what = f"{v.unwritten} of {v.elements} output elements were never written"
        elif v.nonfinite:
            what = f"{v.nonfinite} of {v.elements} output elements are NaN or infinite"
        elif v.max_rel_error <= v.tolerance:  # the norm test of a workload with a tolerance floor
            what = (f"relative L2 error {v.rel_fro_error:.3g} exceeds {v.tolerance:g} (every element is within "
                    f"it; the error is spread over many; largest: {v.worst})")
        else:
            what = f"max relative error {v.max_rel_error:.3g} exceeds {v.tolerance:g} (worst: {v.worst})"
        explained = reading.explain(v, what)  # a level's own failure (a race under a perturbed schedule)
        if explained is not None:
            reason, diag = explained
            return CascadeResult(**common, status=Status.INCORRECT, level=level, diagnostics=diags + [diag],
                                 reason=reason + released)
        diags.append(Diagnostic(level=int(level), severity="error", message=f"{v.shape}: {what}", code="verify"))
        return CascadeResult(**common, status=Status.INCORRECT, level=level, diagnostics=diags,
                             reason=f"wrong output at {v.shape}: {what}" + released)

    if group.deadline_hit:
        report = describe_hang(outcomes, file, source, launch_locator(source, file))
        return CascadeResult(**common, status=Status.DEADLOCK, level=level, diagnostics=diags, deadlock_report=report,
                             reason=f"the run did not finish within its deadline of {group.seconds:.0f} s" + released)

    timings = _timings(outcomes, align)
    wanted = [s for o in outcomes[:1] for s in o.of(ShapeStarted) if s.level == "bench"]
    if not all(o.last(Done) for o in outcomes) or len(timings) < len(wanted):
        return CascadeResult(**common, status=Status.RUNTIME_ERROR, level=level, diagnostics=diags,
                             reason="the run ended before every shape was measured" + released)
    if not timings:
        gpus = list(base.get("gpus", []))
        why = "every rank on one GPU: nothing timed" if is_shared(gpus) else "benchmark not requested"
        # Correct as far as it ran, with no speed to rank it by: its own status, not "measured".
        return CascadeResult(**common, status=Status.VERIFIED, level=Level.VERIFY, diagnostics=diags,
                             reason=f"verified ({why})" + released)
    geo = math.prod(t.speedup for t in timings) ** (1 / len(timings))
    return CascadeResult(**common, status=Status.MEASURED, level=Level.BENCHMARK, diagnostics=diags,
                         timings=timings,
                         reason=f"verified and measured on {len(timings)} shapes: {speedup_of(geo, timings).label()} "
                                f"the reference (geometric mean)" + released)
