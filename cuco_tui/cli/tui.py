"""`cuco-tui`: the Textual app, opened on a new search of a workload (its dashboard), on the
evaluate screen, resuming a session, or (`cuco-tui open`) browsing a session or a bundle. A bad
argument ends with one sentence on stderr and exit code 2, before the app starts."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cuco_tui.agents.factory import AGENT_KINDS
from cuco_tui.cli.common import (
    DEFAULT_GENERATIONS, WORKLOAD_HELP, add_executor_options, add_pacing_options, check_pacing_options,
    config_overrides, dollars, gpu_list, make_executor,
    package_version, workload_named,
)
from cuco_tui.core.errors import UsageError
from cuco_tui.core.workload import DEFAULT_WORKLOAD


def build_tui_parser() -> argparse.ArgumentParser:
    """`cuco-tui`'s options (`cuco-tui open` has its own: build_open_parser)."""
    parser = argparse.ArgumentParser(
        prog="cuco-tui", description="supervise the co-design of multi-GPU kernels: opens on a new search of the "
        "workload (its dashboard), on every local GPU; `cuco-tui open SESSION_OR_BUNDLE` browses a session")
    parser.add_argument("--version", action="version", version=f"cuco-tui {package_version()}")
    parser.add_argument("--workload", "-w", help=WORKLOAD_HELP + "; with --resume, the session's own")
    parser.add_argument("--gpus", help="GPU indices, e.g. 0,1 or 0-3 (default: every GPU)")
    parser.add_argument("--agent", choices=AGENT_KINDS,
                        help="who proposes: offline (templates steered by results), claude, or random (uniform random "
                        "sampling of the offline agent's space, a yardstick; default: claude when "
                        "ANTHROPIC_API_KEY is set, else offline)")
    parser.add_argument("--model", help="the Claude model (with --agent claude)")
    parser.add_argument("--resume", metavar="SESSION", help="continue a session (a folder, or a name in the sessions folder)")
    parser.add_argument("--generations", "-g", type=int,
                        help="the session's total number of generations after the seed's generation 0, 1 or more "
                             "(default 10)")
    parser.add_argument("--review", choices=("auto", "review", "risky"),
                        help="review mode: auto, hold each proposal (review), or only the risky ones")
    parser.add_argument("--budget", type=dollars, help="dollar cap for the agent (claude default $5)")
    parser.add_argument("--evaluate", action="store_true",
                        help="open on the evaluate screen (the workload's candidates) instead of a new search")
    add_pacing_options(parser)
    add_executor_options(parser)
    return parser


def build_open_parser() -> argparse.ArgumentParser:
    """`cuco-tui open SESSION_OR_BUNDLE`."""
    opener = argparse.ArgumentParser(prog="cuco-tui open",
                                     description="open a session's lineage (a session folder or a .bundle)")
    opener.add_argument("session", help="a session folder, or a .bundle (imported into a temporary folder)")
    opener.add_argument("--workload", "-w", default=DEFAULT_WORKLOAD,
                        help="the workload of the app's other screens, such as evaluate (a name or a folder; "
                             f"default {DEFAULT_WORKLOAD})")
    return opener


def tui_main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["open"]:
        return _open(argv[1:])
    args = build_tui_parser().parse_args(argv)
    try:
        return _run(args)
    except UsageError as exc:
        print(f"cuco-tui: {exc}", file=sys.stderr)
        return 2


def _open(argv: list[str]) -> int:
    """`cuco-tui open SESSION_OR_BUNDLE`."""
    opened = build_open_parser().parse_intermixed_args(argv)
    from cuco_tui.lineage import SessionError, SessionRepo
    from cuco_tui.search.sessions import resolve_session

    target: Path | SessionRepo = Path(opened.session)
    if target.is_file() and target.suffix == ".bundle":
        from cuco_tui.lineage import open_session_or_bundle

        try:  # a bundle that is not one of a session's is refused here, not inside the app
            target = open_session_or_bundle(target)  # imported once: the app is handed it
        except SessionError as exc:
            print(f"cuco-tui: {exc}", file=sys.stderr)
            return 2
    else:
        try:  # a folder made by a search (or a session's name in the sessions folder), nothing else
            target = resolve_session(opened.session)
        except SessionError:
            what = ("is a file, neither a session (a folder a search makes, with .git inside) nor a .bundle"
                    if target.is_file() else
                    "is a folder, but no session (a search makes one, with .git inside)" if target.exists()
                    else "does not exist")
            print(f"cuco-tui: no session or bundle at {opened.session}: it {what}; `cuco sessions` lists the sessions",
                  file=sys.stderr)
            return 2
    from cuco_tui.app.app import CucoApp

    try:
        workload_named(opened.workload)
        CucoApp(workload_name=opened.workload, open_session=target).run()
    except UsageError as exc:
        print(f"cuco-tui: {exc}", file=sys.stderr)
        return 2
    finally:
        if isinstance(target, SessionRepo):  # its lineage screen closes it; not when the app ended first
            target.close()
    return 0


# The flags that set up the search (--evaluate opens on the evaluate screen instead): attribute,
# and the flag as typed for each value an action stores.
SEARCH_FLAGS = (("resume", "--resume"), ("generations", "--generations"), ("review", "--review"),
                ("budget", "--budget"), ("agent", "--agent"), ("model", "--model"),
                ("evaluations", "--evaluations"), ("lookahead", "--no-lookahead"),
                ("keep_workers", {True: "--keep-workers", False: "--no-keep-workers"}))


def check_evaluate_options(args: argparse.Namespace) -> None:
    """With --evaluate, the search's flags are refused, not left to a search the engineer may
    never start (and that was not checked here: the agent, the world, the GPU groups)."""
    if not args.evaluate:
        return
    given = [flag if isinstance(flag, str) else flag[value]
             for name, flag in SEARCH_FLAGS if (value := getattr(args, name)) is not None]
    if given:
        them = given[0] if len(given) == 1 else ", ".join(given[:-1]) + " and " + given[-1]
        raise UsageError(f"{them} set{'s' if len(given) == 1 else ''} up a search, and --evaluate opens on the "
                         f"evaluate screen instead: drop {'it' if len(given) == 1 else 'them'} or --evaluate")


def _run(args: argparse.Namespace) -> int:
    from cuco_tui.agents.factory import default_agent_kind
    from cuco_tui.cli.search import check_claude_options
    from cuco_tui.search.config import ConfigError, SearchConfig

    check_evaluate_options(args)
    gpus = gpu_list(args.gpus)
    agent = args.agent or default_agent_kind()
    check_claude_options(args, agent)
    check_pacing_options(args)
    overrides = config_overrides(args, agent, ("generations", "lookahead", "keep_workers", "evaluations"))
    if args.review:
        overrides["review_mode"] = args.review
    resume = None
    workload_name = args.workload or DEFAULT_WORKLOAD
    resumed = None  # the resumed session's config, with the command line's changes
    if args.resume:
        from cuco_tui.cli.search import open_resumed

        target = open_resumed(args.resume, None, overrides, args.generations, args.workload)
        target.close()  # the app reopens it in its own thread
        resume, resumed = Path(target.repo.path), target.config
        workload_name = str(target.workload.root)
    workload = workload_named(workload_name)
    if not args.evaluate:  # refused here, in one line, before the app opens or a session exists
        from cuco_tui.agents.factory import AgentUnavailable, check_agent

        try:
            check_agent(agent, workload)
        except AgentUnavailable as exc:
            raise UsageError(str(exc)) from exc
    try:
        config = SearchConfig(workload=Path(workload_name).name, **{"generations": DEFAULT_GENERATIONS, **overrides})
    except ConfigError as exc:
        raise UsageError(str(exc)) from exc
    if args.evaluate and args.executor == "slurm":
        raise UsageError("--executor slurm runs a search's evaluations; --evaluate evaluates on this machine")
    searched = resumed or config
    executor = make_executor(args, workload, searched.world or min(workload.world_sizes))
    if not args.evaluate:  # the world and the GPU groups, as the search will plan them
        from cuco_tui.cli.search import placement_hint
        from cuco_tui.core.workload import WorkloadError
        from cuco_tui.executors import PlacementError
        from cuco_tui.search.scheduling import plan_executor

        try:
            executor = plan_executor(workload, searched, executor)  # the app's search runs on what was planned here
        except (PlacementError, WorkloadError) as exc:
            raise UsageError(placement_hint(str(exc), workload, searched)) from exc
    from cuco_tui.app.app import CucoApp

    CucoApp(workload_name=workload_name, gpus=gpus, start_search=not args.evaluate, search_config=config,
            agent=agent, model=args.model, resume=resume, resume_overrides=overrides,
            executor=executor).run()
    return 0
