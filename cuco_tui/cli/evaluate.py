"""`cuco eval`, `cuco baseline`, `cuco selftest` and `cuco workloads`: one candidate through the
cascade, the workload's reference and its ceilings, the fault suite, the list of workloads."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from rich.table import Table
from rich.text import Text

from cuco_tui.cli.common import (SHARE_GPU_HELP, WORKLOAD_HELP, bench_shapes, check_group, gpu_list, render_result,
                                 positive_seconds, share_gpu_asked, share_gpu_hint, stderr_console, stdout_console,
                                 workload_named, workload_of_file, workload_root)
from cuco_tui.cli.profile import (SessionCandidate, add_profile_arguments, keep_in_session, profile_lines,
                                  profile_shape, session_candidate)
from cuco_tui.core.errors import UsageError
from cuco_tui.core.result import CascadeResult, Level, Status
from cuco_tui.core.workload import DEFAULT_WORKLOAD, Workload
from cuco_tui.evaluate.sanitizer import TOOLS
from cuco_tui.harness.plan import ALIGNS
from cuco_tui.evaluate.static_checks import source_too_large
from cuco_tui.workload.manifest import list_workloads, load_workload


def cmd_eval(args: argparse.Namespace) -> int:
    with session_candidate(args) as from_session:
        return evaluate_file(args, from_session)


def evaluate_file(args: argparse.Namespace, from_session: SessionCandidate | None) -> int:
    from cuco_tui.evaluate.cascade import EvalOptions, evaluate

    path = Path(args.file) if from_session is None else from_session.file
    if path.is_dir():
        seed = " (a workload's seed is its folder's seed.cu)" if (path / "seed.cu").is_file() else ""
        raise UsageError(f"{path} is a folder, not a candidate file: give the candidate's .cu{seed}")
    if not path.is_file():
        raise UsageError(f"no such candidate file: {path}")
    too_large = source_too_large(path.stat().st_size, str(path))  # before a byte of it is read
    if too_large:
        raise UsageError(too_large)
    inside = None
    if from_session is not None:
        recorded = from_session.workload or DEFAULT_WORKLOAD
        workload = workload_named(recorded if args.workload is None else args.workload)
        # another workload's frozen regions would only reject the candidate at L0, saying nothing of why
        if args.workload is not None and not _is_workload(recorded, workload):
            raise UsageError(f"session {from_session.session.name} searches {Path(recorded).name}, not "
                             f"{args.workload}: drop --workload to evaluate {from_session.candidate_id} against the "
                             f"session's workload")
    elif args.workload is not None:
        workload = workload_named(args.workload)
    else:
        inside = workload_of_file(path)
        workload = workload_named(str(inside) if inside is not None else DEFAULT_WORKLOAD)
    if args.sanitize and (args.perturb_seed is not None or args.perturb_rounds is not None or args.shapes):
        raise UsageError("--sanitize verifies under compute-sanitizer without perturbed schedules or timing: "
                         "drop --perturb-seed, --perturb-rounds and --shapes")
    if args.align is not None and (args.no_bench or args.share_gpu or args.sanitize):
        raise UsageError("--align says how timed repetitions start, and " + (
            "--no-bench" if args.no_bench else "--share-gpu" if args.share_gpu else "--sanitize") +
            " times nothing: drop --align")
    if args.shapes and args.no_bench:
        raise UsageError("--shapes names the bench shapes to time, and --no-bench times none: drop one of them")
    shapes = bench_shapes(workload, args.shapes)
    check_group(workload, args)
    profile = profile_shape(workload, args, shapes)
    options = EvalOptions(
        gpus=gpu_list(args.gpus, offers_share_gpu=True), world=args.world, bench=not args.no_bench, shapes=shapes,
        share_gpu=share_gpu_asked(args), sanitize=args.sanitize, profile=profile, align=args.align or "device",
        **perturb_options(args),
    )
    err = stderr_console()
    if inside is not None and not args.json:  # said once nothing refuses: a refusal stays one line
        err.print(Text(f"workload {workload.name} (the folder {path} is in; --workload names another)", style="dim"))
    progress = None if args.json else (lambda p: err.print(Text(f"L{int(p.level)}", style="dim"), p.message))
    result = evaluate(path, workload, options, progress=progress)
    if result.profile is not None and from_session is not None:
        result = replace(result, profile=keep_in_session(from_session, result.profile))
    if args.json:
        print(json.dumps(result.to_dict(), indent=1))
    else:
        stdout_console().print(render_result(result))
        if result.profile is not None:
            print("\n".join(profile_lines(result.profile, from_session)))
    hint = "" if result.status.ok else share_gpu_hint(workload, options) or sanitize_hint(args, workload.name, result)
    if hint:
        print(f"hint: {hint}", file=sys.stderr)
    return 0 if result.status.ok else 1


def _is_workload(recorded: str, workload: Workload) -> bool:
    """Whether a session's recorded workload (a name, or a folder) is `workload`: by folder where it
    loads here, else by name (a session made on another machine names a folder this one lacks, and
    --workload then says where its copy is)."""
    root = workload_root(recorded)
    return root == workload.root.resolve() if root is not None else Path(recorded).name == workload.name


def sanitize_hint(args: argparse.Namespace, workload: str, result: CascadeResult) -> str:
    """For a candidate that ran and gave a wrong answer or crashed: the same run under memcheck."""
    if args.sanitize or result.level < Level.VERIFY or result.status not in (Status.INCORRECT, Status.RUNTIME_ERROR):
        return ""
    where = (f" --gpus {args.gpus}" if args.gpus else "") + (" --share-gpu" if args.share_gpu else "") + \
        (f" --world {args.world}" if args.world else "")
    return (f"cuco eval {args.file} --workload {workload}{where} --sanitize memcheck (compute-sanitizer names the "
            f"line, thread and block of a bad memory access)")


def perturb_options(args: argparse.Namespace) -> dict:
    """--no-perturb, --perturb-seed, --perturb-rounds as EvalOptions fields."""
    if args.perturb_rounds is not None and args.perturb_rounds < 1:
        raise UsageError(f"--perturb-rounds must be 1 or more, not {args.perturb_rounds} (--no-perturb turns them off)")
    if args.perturb_seed is not None and args.perturb_seed < 0:
        raise UsageError(f"--perturb-seed must be 0 or more, not {args.perturb_seed}")
    if args.no_perturb and (args.perturb_seed is not None or args.perturb_rounds is not None):
        raise UsageError("--no-perturb turns the perturbed schedules off: drop --perturb-seed and --perturb-rounds")
    out: dict = {"perturb": not args.no_perturb, "perturb_seed": args.perturb_seed}
    if args.perturb_rounds is not None:
        out["perturb_rounds"] = args.perturb_rounds
    return out


def add_perturb_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-perturb", action="store_true",
                   help="verify without the perturbed schedules (L2 runs the back-to-back launches again with the "
                        "candidate's copies, compute or whole streams held back, which racy candidates fail)")
    p.add_argument("--perturb-seed", type=int, metavar="N",
                   help="the first perturbed schedule's seed (default: a random one); a failure names the seed")
    p.add_argument("--perturb-rounds", type=int, metavar="N",
                   help="perturbed schedules to run, seeds N, N+1, ... (default 4: one of each kind)")


def cmd_baseline(args: argparse.Namespace) -> int:
    from cuco_tui.evaluate.baseline import BaselineError, measure_baseline
    from cuco_tui.evaluate.cascade import EvalOptions

    workload = workload_named(args.workload)
    check_group(workload, args)
    options = EvalOptions(gpus=gpu_list(args.gpus), world=args.world, align=args.align or "device")
    try:
        base = measure_baseline(workload, options)
    except BaselineError as exc:
        raise UsageError(f"cannot measure the baseline: {exc}") from exc
    if args.json:
        print(json.dumps(base.to_dict(), indent=1))
        return 0
    t = Table(title=f"{workload.name} reference on GPUs {','.join(map(str, base.gpus))} (ms, median of the slowest rank)",
              title_justify="left")
    part_names = sorted({k for s in base.shapes for k in s.parts})
    for col in ["shape", "dims", "reference", "IQR %"] + [f"{p} alone" for p in part_names] + \
               ["peer copy GB/s", "max(parts)", "max(compute, bytes/peer bw)"]:
        t.add_column(col, justify="left" if col in ("shape", "dims") else "right")
    for s in base.shapes:
        row = [s.shape, ",".join(str(v) for v in s.dims.values()), f"{s.reference.median:.3f}",
               f"{s.reference.iqr_pct:.1f}"]
        row += [f"{s.parts[p].median:.3f}" if p in s.parts else "-" for p in part_names]
        row += [f"{s.peer_gbps:.0f}" if s.peer_gbps else "-", f"{s.overlap_bound_ms:.3f}",
                f"{s.link_bound_ms:.3f}" if s.link_bound_ms else "-"]
        t.add_row(*row)
    stdout_console().print(t)
    for w in base.warnings:
        print(f"warning: the reference: {w}", file=sys.stderr)
    for n in base.notes:
        print(f"note: {n}", file=sys.stderr)
    return 0


def cmd_selftest(args: argparse.Namespace) -> int:
    from cuco_tui.evaluate.cascade import EvalOptions, choose_gpus
    from cuco_tui.evaluate.faults import run_fault_suite

    if not args.faults:
        raise UsageError("say what to test: --faults")
    workload = workload_named(args.workload)
    check_group(workload, args)
    only = fault_names(workload, args.only)
    options = EvalOptions(gpus=gpu_list(args.gpus, offers_share_gpu=True), world=args.world,
                          first_launch_timeout_s=args.launch_timeout, share_gpu=share_gpu_asked(args),
                          **perturb_options(args))
    gpus, why = choose_gpus(workload, options)
    if not gpus:
        hint = share_gpu_hint(workload, options)
        raise UsageError(f"the fault suite runs candidates on GPUs: {why.removeprefix('no_gpu: ')}"
                         + (f"; {hint}" if hint else ""))
    err = stderr_console()
    checks = run_fault_suite(workload, options, only, say=lambda s: err.print(Text(s, style="dim")))
    t = Table(title=f"fault suite of {workload.name}", title_justify="left")
    for col in ("candidate", "expected", "got", "detected after", "replayed", "GPUs fine after", "verdict",
                "diagnosis"):
        t.add_column(col)
    for c in checks:
        det = f"{c.detection_s:.1f} s (limit {c.limit_s:.0f} s)" if c.detection_s is not None else "-"
        replayed = f"seed {c.perturb_seed}: {c.replayed or '-'}" if c.perturb_seed is not None else "-"
        verdict = (Text("skipped", style="dim") if c.skipped else Text("pass", style="green") if c.ok
                   else Text("FAIL: " + "; ".join(c.problems), style="red"))
        diagnosis = (c.report.splitlines()[0] if c.report else c.reason)[:160] + (f" ({c.note})" if c.note else "")
        t.add_row(c.name, c.expected, c.got, det, replayed, "yes" if c.healthy_after else "NO", verdict, diagnosis)
    stdout_console().print(t)
    run = [c for c in checks if not c.skipped]
    passed = sum(c.ok for c in run)
    print(f"{passed} passed, {len(run) - passed} failed, {len(checks) - len(run)} skipped")
    return 0 if passed == len(run) else 1


def fault_names(workload: Workload, text: str | None) -> tuple[str, ...]:
    """--only as fault names of the workload's suite (faults/expected.toml), each one it has."""
    from cuco_tui.evaluate.faults import load_expectations

    try:
        known = list(load_expectations(workload))
    except FileNotFoundError:
        raise UsageError(f"{workload.name} has no fault suite (faults/expected.toml in {workload.root})") from None
    except ValueError as exc:  # tomllib's TOMLDecodeError
        raise UsageError(f"{workload.root / 'faults' / 'expected.toml'} is not valid TOML: {exc}") from exc
    names = tuple(s.strip() for s in (text or "").split(",") if s.strip())
    for name in names:
        if name not in known:
            raise UsageError(f"--only: {workload.name} has no fault {name!r}; its faults are {', '.join(known)}")
    return names


def cmd_workloads(args: argparse.Namespace) -> int:
    for name in list_workloads():
        w = load_workload(name)
        print(f"{name}: {w.title}; world sizes {', '.join(map(str, w.world_sizes))}; "
              f"{len(w.bench_shapes)} bench shapes")
    return 0


def add_eval_parsers(sub: argparse._SubParsersAction) -> None:
    """eval and baseline."""
    e = sub.add_parser("eval", help="run the evaluation cascade (static checks, compile, verify, benchmark) on a candidate")
    e.add_argument("file", help="the candidate .cu (with --session, a candidate id of that session)")
    e.add_argument("--workload", "-w", help=WORKLOAD_HELP.removesuffix(f"(default {DEFAULT_WORKLOAD})")
                   + f"(default: the workload folder the file is in, else {DEFAULT_WORKLOAD})")
    e.add_argument("--gpus", help="GPU indices, e.g. 0,1 or 0-3 (default: the first GPUs the workload can use)")
    e.add_argument("--world", type=int, help="number of ranks when --gpus is not given, or with --share-gpu "
                                             "(one of the workload's world sizes)")
    e.add_argument("--shapes", help="comma-separated bench shape names of the workload to measure (default: all)")
    e.add_argument("--no-bench", action="store_true", help="stop after verification (L2)")
    e.add_argument("--json", action="store_true", help="print the result as JSON")
    e.add_argument("--share-gpu", action="store_true", help=SHARE_GPU_HELP)
    e.add_argument("--sanitize", choices=TOOLS, metavar="TOOL",
                   help=f"verify under compute-sanitizer ({', '.join(TOOLS)}): its findings name the kernel, "
                        "source line, thread and block; launches run 10-100x slower, nothing is timed")
    add_perturb_arguments(e)
    add_profile_arguments(e)
    add_align_argument(e)
    e.set_defaults(fn=cmd_eval)

    b = sub.add_parser("baseline", help="measure the workload's reference and its ceilings")
    b.add_argument("--workload", "-w", default=DEFAULT_WORKLOAD, help=WORKLOAD_HELP)
    b.add_argument("--gpus", help="GPU indices, e.g. 0,1 or 0-3 (default: the first GPUs the workload can use)")
    b.add_argument("--world", type=int, help="number of ranks when --gpus is not given (one of the workload's "
                                             "world sizes; default: the largest this machine's GPUs hold)")
    b.add_argument("--json", action="store_true", help="print the measurements as JSON")
    add_align_argument(b)
    b.set_defaults(fn=cmd_baseline)


def add_align_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--align", choices=ALIGNS, default=None,
                   help="how the ranks start each timed repetition together: device (default: an all-reduce and a "
                        "fixed pause on the GPUs, so no rank's time holds another's host launch latency) or host "
                        "(a host barrier alone, as figures before 2026-11-27 were timed)")


def add_selftest_parsers(sub: argparse._SubParsersAction) -> None:
    """selftest and workloads."""
    st = sub.add_parser("selftest", help="run the deliberately broken candidates and check each diagnosis (GPU)")
    st.add_argument("--faults", action="store_true", help="the fault suite of the workload")
    st.add_argument("--workload", "-w", default=DEFAULT_WORKLOAD, help=WORKLOAD_HELP)
    st.add_argument("--gpus", help="GPU indices, e.g. 0,1 or 0-3 (default: the first GPUs the workload can use)")
    st.add_argument("--world", type=int, help="number of ranks when --gpus is not given, or with --share-gpu "
                                              "(one of the workload's world sizes)")
    st.add_argument("--only", help="comma-separated fault names of the workload's suite (faults/expected.toml; "
                                   "default: all)")
    st.add_argument("--share-gpu", action="store_true", help=SHARE_GPU_HELP)
    st.add_argument("--launch-timeout", type=positive_seconds, default=10.0, metavar="SECONDS",
                    help="time limit of a candidate's first launch, in seconds (default 10)")
    add_perturb_arguments(st)
    st.set_defaults(fn=cmd_selftest)

    w = sub.add_parser("workloads", help="list the workloads")
    w.set_defaults(fn=cmd_workloads)
