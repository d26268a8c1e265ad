"""Command line: `cuco <subcommand>` and `cuco-tui`.

Every failure a user can cause (a bad path, an unknown workload, a GPU that is not there)
ends with one sentence on stderr and exit code 2; a candidate that fails evaluation is a
result, printed like any other, with exit code 1."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from cuco_tui.core.result import CascadeResult, Status
from cuco_tui.core.errors import UsageError
from cuco_tui.harness.gpus import parse_gpu_list
from cuco_tui.core.workload import WorkloadError
from cuco_tui.workload.manifest import list_workloads, load_workload

STATUS_STYLE = {
    Status.MEASURED: "bold green",
    Status.NO_GPU: "bold cyan",
    Status.REJECTED: "bold magenta",
    Status.COMPILE_ERROR: "bold red",
    Status.RUNTIME_ERROR: "bold red",
    Status.DEADLOCK: "bold red",
    Status.INCORRECT: "bold yellow",
}


def _gpus(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return parse_gpu_list(text)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def _share_gpu(args: argparse.Namespace) -> bool:
    if not args.share_gpu:
        return False
    if args.gpus and len(_gpus(args.gpus)) > 1:
        raise UsageError("--share-gpu puts every rank on one GPU: name one with --gpus, e.g. --gpus 0")
    if getattr(args, "shapes", None):
        raise UsageError("--share-gpu checks correctness only and times nothing: drop --shapes")
    return True


SHARE_GPU_HELP = ("run every rank on one GPU (the one --gpus names, else 0; --world ranks, else the workload's "
                  "smallest world): checks correctness on a machine with fewer GPUs than ranks; times nothing")
SHARE_GPU_HINT = "with fewer GPUs, --share-gpu checks correctness with every rank on one GPU (nothing timed)"


def _share_hint(workload, options) -> str:
    """The --share-gpu hint, where this machine has GPUs but fewer than the group asked for."""
    from cuco_tui.harness.gpus import inventory

    if options.share_gpu:
        return ""
    needed = len(options.gpus) if options.gpus else (options.world or min(workload.world_sizes))
    return SHARE_GPU_HINT if 0 < inventory().count < needed else ""


def _workload(name: str):
    try:
        return load_workload(name)
    except WorkloadError as exc:
        raise UsageError(str(exc)) from exc


def render_result(result: CascadeResult) -> Group:
    head = Table.grid(padding=(0, 2))
    head.add_row("candidate", result.candidate)
    head.add_row("status", Text(result.status.value, style=STATUS_STYLE[result.status]))
    head.add_row("level", f"L{int(result.level)} ({result.level.name.lower()})")
    head.add_row("reason", result.reason)
    build = f"{result.build_seconds:.1f} s" + (" (cached)" if result.build_cached else "")
    head.add_row("build", build)
    if result.gpus:
        head.add_row("GPUs", f"{','.join(map(str, result.gpus))} (world {result.world}), run {result.run_seconds:.1f} s")
    parts: list = [head]
    if result.diagnostics:
        parts.append(Panel("\n\n".join(d.render() for d in result.diagnostics), title="diagnostics", expand=False))
    if result.verifications:
        t = Table(title="verification", title_justify="left")
        for col in ("shape", "ok", "max rel err", "rel fro err", "unwritten", "non-finite", "worst element"):
            t.add_column(col)
        for v in result.verifications:
            t.add_row(v.shape, "yes" if v.ok else "NO", f"{v.max_rel_error:.3g}", f"{v.rel_fro_error:.3g}",
                      str(v.unwritten), str(v.nonfinite), v.worst)
        parts.append(t)
    if result.timings:
        t = Table(title="timings (ms, median of the slowest rank per repetition)", title_justify="left")
        for col in ("shape", "M,K,N", "reference", "candidate", "IQR %", "per-rank medians", "speedup"):
            t.add_column(col, justify="right" if col not in ("shape",) else "left")
        for s in result.timings:
            dims = ",".join(str(v) for v in s.dims.values())
            ranks = " ".join(f"{r.median:.3f}" for r in s.per_rank)
            t.add_row(s.shape, dims, f"{s.reference.median:.3f}", f"{s.candidate.median:.3f}",
                      f"{s.spread_pct:.1f}", ranks, f"{s.speedup:.2f}x")
        parts.append(t)
    if result.deadlock_report:
        parts.append(Panel(result.deadlock_report, title="deadlock report", expand=False))
    return Group(*parts)


def _stdout() -> Console:
    """Rich output for stdout; when it is a file or a pipe (a log of a GPU run), wide enough that
    tables keep one line per row instead of wrapping into the 80 columns rich assumes."""
    return Console() if sys.stdout.isatty() else Console(width=200)


def cmd_eval(args: argparse.Namespace) -> int:
    from cuco_tui.evaluate.cascade import EvalOptions, evaluate

    path = Path(args.file)
    if not path.is_file():
        raise UsageError(f"no such candidate file: {path}")
    workload = _workload(args.workload)
    options = EvalOptions(
        gpus=_gpus(args.gpus), world=args.world, bench=not args.no_bench,
        shapes=tuple(s for s in (args.shapes or "").split(",") if s), share_gpu=_share_gpu(args),
    )
    err = Console(stderr=True)
    progress = None if args.json else (lambda p: err.print(f"[dim]L{int(p.level)}[/dim] {p.message}"))
    result = evaluate(path, workload, options, progress=progress)
    if args.json:
        print(json.dumps(result.to_dict(), indent=1))
    else:
        _stdout().print(render_result(result))
    hint = "" if result.status.ok else _share_hint(workload, options)
    if hint:
        print(f"hint: {hint}", file=sys.stderr)
    return 0 if result.status.ok else 1


def cmd_baseline(args: argparse.Namespace) -> int:
    from cuco_tui.evaluate.baseline import BaselineError, measure_baseline
    from cuco_tui.evaluate.cascade import EvalOptions

    workload = _workload(args.workload)
    options = EvalOptions(gpus=_gpus(args.gpus), world=args.world)
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
    _stdout().print(t)
    for w in base.warnings:
        print(f"warning: the reference: {w}", file=sys.stderr)
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from cuco_tui.doctor import render_checks, run_checks, summary

    checks = run_checks()
    console = _stdout()
    console.print(render_checks(checks))
    console.print(summary(checks))
    return 0


def cmd_selftest(args: argparse.Namespace) -> int:
    from cuco_tui.evaluate.cascade import EvalOptions, choose_gpus
    from cuco_tui.evaluate.faults import run_fault_suite

    if not args.faults:
        raise UsageError("say what to test: --faults")
    workload = _workload(args.workload)
    options = EvalOptions(gpus=_gpus(args.gpus), world=args.world,
                          first_launch_timeout_s=args.launch_timeout, share_gpu=_share_gpu(args))
    gpus, why = choose_gpus(workload, options)
    if not gpus:
        hint = _share_hint(workload, options)
        raise UsageError(f"the fault suite runs candidates on GPUs: {why.removeprefix('no_gpu: ')}"
                         + (f"; {hint}" if hint else ""))
    err = Console(stderr=True)
    only = tuple(s for s in (args.only or "").split(",") if s)
    checks = run_fault_suite(workload, options, only, say=lambda s: err.print(f"[dim]{s}[/dim]"))
    t = Table(title=f"fault suite of {workload.name}", title_justify="left")
    for col in ("candidate", "expected", "got", "detected after", "GPUs fine after", "verdict", "diagnosis"):
        t.add_column(col)
    for c in checks:
        det = f"{c.detection_s:.1f} s (limit {c.limit_s:.0f} s)" if c.detection_s is not None else "-"
        verdict = (Text("skipped", style="dim") if c.skipped else Text("pass", style="green") if c.ok
                   else Text("FAIL: " + "; ".join(c.problems), style="red"))
        diagnosis = (c.report.splitlines()[0] if c.report else c.reason)[:160]
        t.add_row(c.name, c.expected, c.got, det, "yes" if c.healthy_after else "NO", verdict, diagnosis)
    _stdout().print(t)
    run = [c for c in checks if not c.skipped]
    passed = sum(c.ok for c in run)
    print(f"{passed} passed, {len(run) - passed} failed, {len(checks) - len(run)} skipped")
    return 0 if passed == len(run) else 1


def cmd_workloads(args: argparse.Namespace) -> int:
    for name in list_workloads():
        w = load_workload(name)
        print(f"{name}: {w.title}; world sizes {', '.join(map(str, w.world_sizes))}; "
              f"{len(w.bench_shapes)} bench shapes")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="cuco", description="co-design of computation and communication in multi-GPU CUDA kernels")
    sub = p.add_subparsers(dest="command", required=True)

    e = sub.add_parser("eval", help="run the evaluation cascade (static checks, compile, verify, benchmark) on a candidate")
    e.add_argument("file", help="the candidate .cu")
    e.add_argument("--workload", "-w", default="gemm_allgather")
    e.add_argument("--gpus", help="GPU indices, e.g. 0,1 or 0-3 (default: the first GPUs the workload can use)")
    e.add_argument("--world", type=int, help="number of ranks when --gpus is not given, or with --share-gpu")
    e.add_argument("--shapes", help="comma-separated bench shape names to measure (default: all)")
    e.add_argument("--no-bench", action="store_true", help="stop after verification (L2)")
    e.add_argument("--json", action="store_true", help="print the result as JSON")
    e.add_argument("--share-gpu", action="store_true", help=SHARE_GPU_HELP)
    e.set_defaults(fn=cmd_eval)

    b = sub.add_parser("baseline", help="measure the workload's reference and its ceilings")
    b.add_argument("--workload", "-w", default="gemm_allgather")
    b.add_argument("--gpus")
    b.add_argument("--world", type=int)
    b.add_argument("--json", action="store_true")
    b.set_defaults(fn=cmd_baseline)

    d = sub.add_parser("doctor", help="say what this machine has and lacks for compiling and running candidates")
    d.set_defaults(fn=cmd_doctor)

    st = sub.add_parser("selftest", help="run the deliberately broken candidates and check each diagnosis (GPU)")
    st.add_argument("--faults", action="store_true", help="the fault suite of the workload")
    st.add_argument("--workload", "-w", default="gemm_allgather")
    st.add_argument("--gpus")
    st.add_argument("--world", type=int)
    st.add_argument("--only", help="comma-separated fault names")
    st.add_argument("--share-gpu", action="store_true", help=SHARE_GPU_HELP)
    st.add_argument("--launch-timeout", type=float, default=10.0,
                    help="time limit of a candidate's first launch, in seconds (default 10)")
    st.set_defaults(fn=cmd_selftest)

    w = sub.add_parser("workloads", help="list the workloads")
    w.set_defaults(fn=cmd_workloads)

    from cuco_tui import cli_search

    cli_search.add_parsers(sub)  # search, sessions, show, export
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        rc = args.fn(args)
        sys.stdout.flush()  # inside the try: a reader that left shows here, not at exit
        return rc
    except UsageError as exc:
        print(f"cuco: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `cuco show ... | head`: the reader left, which is no error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("cuco: interrupted", file=sys.stderr)
        return 130


def tui_main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["open"]:
        opener = argparse.ArgumentParser(prog="cuco-tui open",
                                         description="open a session's lineage (a session folder or a .bundle)")
        opener.add_argument("session", help="a session folder, or a .bundle (imported into a temporary folder)")
        opener.add_argument("--workload", "-w", default="gemm_allgather")
        opened = opener.parse_args(argv[1:])
        if not Path(opened.session).exists():
            print(f"cuco-tui: no session or bundle at {opened.session}", file=sys.stderr)
            return 2
        try:
            _workload(opened.workload)
        except UsageError as exc:
            print(f"cuco-tui: {exc}", file=sys.stderr)
            return 2
        from cuco_tui.app.app import CucoApp

        CucoApp(workload_name=opened.workload, open_session=Path(opened.session)).run()
        return 0
    parser = argparse.ArgumentParser(
        prog="cuco-tui", description="supervise the co-design of multi-GPU kernels: opens on a new search of the "
        "workload (its dashboard), on every local GPU; `cuco-tui open SESSION_OR_BUNDLE` browses a session")
    parser.add_argument("--workload", "-w", default="gemm_allgather")
    parser.add_argument("--gpus", help="GPU indices, e.g. 0,1 or 0-3 (default: every GPU)")
    parser.add_argument("--agent", choices=("offline", "claude"),
                        help="who proposes (default: claude when ANTHROPIC_API_KEY is set, else offline)")
    parser.add_argument("--model", help="the Claude model (with --agent claude)")
    parser.add_argument("--resume", metavar="SESSION", help="continue a session (a folder, or a name under sessions/)")
    parser.add_argument("--generations", "-g", type=int, help="the session's total number of generations (default 10)")
    parser.add_argument("--review", choices=("auto", "review", "risky"),
                        help="review mode: auto, hold each proposal (review), or only the risky ones")
    parser.add_argument("--budget", type=float, help="dollar cap for the agent (claude default $5)")
    parser.add_argument("--evaluate", action="store_true",
                        help="open on the evaluate screen (the workload's candidates) instead of a new search")
    args = parser.parse_args(argv)
    try:
        return _run_tui(args)
    except UsageError as exc:
        print(f"cuco-tui: {exc}", file=sys.stderr)
        return 2


def _run_tui(args: argparse.Namespace) -> int:
    from cuco_tui.agents.factory import default_agent_kind
    from cuco_tui.search.config import ConfigError, SearchConfig

    from cuco_tui.cli_search import DEFAULT_GENERATIONS, config_overrides

    gpus = _gpus(args.gpus)
    agent = args.agent or default_agent_kind()
    overrides = config_overrides(args, agent, ("generations",))
    if args.review:
        overrides["review_mode"] = args.review
    resume = None
    workload_name = args.workload
    if args.resume:
        from cuco_tui.lineage import SessionError
        from cuco_tui.search.sessions import open_session, resolve_session

        try:
            resume = resolve_session(args.resume)
            repo, workload, _ = open_session(resume)
            repo.close()
        except SessionError as exc:
            raise UsageError(str(exc)) from exc
        workload_name = str(workload.root)
    _workload(workload_name)
    try:
        config = SearchConfig(workload=Path(workload_name).name, **{"generations": DEFAULT_GENERATIONS, **overrides})
    except ConfigError as exc:
        raise UsageError(str(exc)) from exc
    from cuco_tui.app.app import CucoApp

    CucoApp(workload_name=workload_name, gpus=gpus, start_search=not args.evaluate, search_config=config,
            agent=agent, model=args.model, resume=resume, resume_overrides=overrides).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
