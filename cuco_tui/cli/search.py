"""`cuco search`: the search run headless. Progress goes to stderr, one line per event that
matters; the summary (or JSON with --json) goes to stdout."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, TextIO

from cuco_tui.cli.build_watch import BuildWatch
from cuco_tui.agents.factory import AGENT_KINDS
from cuco_tui.cli.common import (
    DEFAULT_CLAUDE_BUDGET, DEFAULT_GENERATIONS, WORKLOAD_HELP, add_executor_options, add_pacing_options,
    check_pacing_options, config_overrides, dollars, gpu_list,
    make_executor, workload_named, workload_root,
)
from cuco_tui.core.ending import STOPPED, describe_end, end_state
from cuco_tui.core.errors import UsageError
from cuco_tui.core.records import RecordStatus
from cuco_tui.core.workload import DEFAULT_WORKLOAD


# ---------------------------------------------------------------------------- progress lines


class ProgressPrinter:
    """Turns engine events into short lines: `[  12.3s] committed c0004 no_gpu ...`; a compile
    still running says so every 15 s (BuildWatch's timer thread, `watch` to give another)."""

    def __init__(self, stream: TextIO, started: float | None = None,
                 watch: Callable[[Callable[[str], None]], BuildWatch] = BuildWatch) -> None:
        self.stream = stream
        self.started = started if started is not None else time.monotonic()
        self._said: set[str] = set()  # reasons given once already (every no_gpu commit has the same)
        self._writing = threading.Lock()  # the engine's threads and the build watch's write lines
        self.watch = watch(self.say)

    def __call__(self, event: Any) -> None:
        self.say(self.line(event))
        self.watch.observe(event)

    def say(self, line: str) -> None:
        if not line:
            return
        with self._writing:
            self.stream.write(f"[{time.monotonic() - self.started:7.1f}s] {line}\n")
            self.stream.flush()

    def line(self, e: Any) -> str:
        from cuco_tui.search import events as ev

        if isinstance(e, ev.SearchStarted):
            groups = " ".join(",".join(map(str, g)) or "cpu" for g in e.gpu_groups)
            where = e.executor or f"GPU groups [{groups}]"
            how = f"resumed at generation {e.start_generation}" if e.resumed else "new"
            budget = f", budget ${e.budget_usd:.2f}" if e.budget_usd is not None else ""
            up_to = f" (up to {e.evaluations} evaluations)" if e.evaluations is not None else ""
            return (f"session {e.session} ({how}): {e.workload}, agent {e.agent}, {e.islands} islands, "
                    f"{e.generations} generations{up_to}, {where}, review {e.review_mode}{budget}")
        if isinstance(e, ev.GenerationStarted):
            return f"generation {e.generation} ({e.phase})"
        if isinstance(e, ev.ProposalReady):
            parents = ",".join(e.parents) or "-"
            first = (e.rationale.strip().splitlines() or [""])[0]
            return f"proposed {e.candidate} {e.kind} on island {e.island} from {parents}: {shorten(first, 100)}"
        if isinstance(e, ev.AwaitingReview):
            return f"review {e.candidate}: held ({e.why})"
        if isinstance(e, ev.ReviewDecided):
            return f"review {e.candidate}: {e.decision}" + (f" ({e.reason})" if e.reason else "")
        if isinstance(e, ev.StageStarted) and e.level >= 2:
            return f"{e.candidate} L{e.level}: {e.message}"
        if isinstance(e, ev.BuildStarted):
            return f"{e.candidate} L1: compiling" + (f" ({e.queued} more queued)" if e.queued else "")
        if isinstance(e, ev.JobChanged):
            return self.job_line(e)
        if isinstance(e, ev.CandidateCommitted):
            r = e.record
            speed = f" {r.speedup:.3f}x" if r.speedup is not None else ""
            reason = (r.result or {}).get("reason", "")
            if r.status == "no_gpu":  # the same sentence for every candidate: once is enough
                reason = "compiled only" if "no_gpu" in self._said else reason
                self._said.add("no_gpu")
            backend = r.design.get("backend", "?") if r.design else "?"
            return (f"committed {r.id} {r.status}{speed} (gen {r.generation}, island {r.island}, {r.kind}, "
                    f"{backend}, parents {','.join(r.parents) or '-'}): {shorten(reason, 160)}")
        if isinstance(e, ev.BestImproved):
            was = f" (was {e.previous} {e.previous_speedup:.3f}x)" if e.previous and e.previous_speedup else ""
            return f"best {e.record.id} {e.record.speedup:.3f}x{was}"
        if isinstance(e, ev.BudgetSpent):
            cap = f" of ${e.cap:.2f}" if e.cap is not None else ""
            return f"spent ${e.spent:.4f}{cap}"
        if isinstance(e, ev.HintAdded):
            return f"hint: {e.text}"
        if isinstance(e, ev.Paused):
            return "paused"
        if isinstance(e, ev.Resumed):
            return "resumed"
        if isinstance(e, ev.EngineError):
            return f"error: {e.message}"
        if isinstance(e, ev.SessionRestored):
            best = f", best {e.best.id} {e.best.speedup:.3f}x" if e.best is not None and e.best.speedup else ""
            waiting = sum(r.status is RecordStatus.UNREVIEWED for r in e.records)
            lost = ""
            if e.lost:  # what a kill cut short: said once, with where its code is
                them = "its source stays" if len(e.lost) == 1 else "their sources stay"
                lost = (f"; lost when the last run ended, never committed: {', '.join(e.lost)} ({them} in "
                        f"scratch/ of the session); new candidates start at {e.next_id}")
            return (f"restored {len(e.records)} candidates{best}"
                    + (f"; {waiting} unreviewed proposal(s) come back for review" if waiting else "") + lost)
        if isinstance(e, ev.MeasuringBounds):
            return f"measuring the perfect-overlap bounds on GPUs {','.join(map(str, e.gpus))}"
        if isinstance(e, ev.BoundsKnown):
            if e.bounds is None:
                return f"no bounds: {e.why}" if e.why else "no bounds"
            speed = f" (a perfect overlap would be {e.bounds.speedup:.2f}x)" if e.bounds.speedup else ""
            return f"bounds known for {len(e.bounds.shapes)} shapes{speed}"
        if isinstance(e, ev.Plateau):
            return f"plateau ({e.stage}): {e.message}"
        if isinstance(e, ev.SearchFinished):
            return f"ended: {describe_end(e.reason)}"
        return ""

    @staticmethod
    def job_line(e: Any) -> str:
        """A JobChanged event: `job 4711 of c0003: running on gpu07`."""
        if not e.job:
            return f"{e.candidate}: no job submitted ({e.reason})"
        head = f"job {e.job} of {e.candidate or '?'}: {e.state}"
        if e.state == "running":
            return f"{head} on {','.join(e.nodes) or '?'}"
        if e.state == "lost":
            return f"{head}: {e.reason}"
        return f"{head} ({e.reason})" if e.reason else head


def shorten(text: str, width: int) -> str:
    """`text` cut at a word boundary to at most `width` characters, with an ellipsis when cut."""
    text = " ".join(text.split())
    if len(text) <= width:
        return text
    cut = text[:width - 1].rsplit(" ", 1)[0] if " " in text[:width - 1] else text[:width - 1]
    return cut.rstrip(",;:") + "…"


# ---------------------------------------------------------------------------- cuco search


# What `cuco search` exits with (the README says it): the search ended by itself (finished, the
# agent exhausted, the budget spent, a plateau), a usage error (nothing started, nothing made),
# or Ctrl-C (once: stopped after the evaluations in flight; twice: at once). An error of ours is
# a traceback and 1.
EXIT_ENDED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 2, 130


# After a second Ctrl-C: how long to keep killing what the run's threads start as they wind down,
# and how much longer the watchdog of Interrupts gives the normal way out before it ends the process.
LEAVE_S = 10.0
LEAVE_MARGIN_S = 5.0

class Interrupts:
    """SIGINT during a search. The first stops it: nothing new is proposed, the evaluations in
    flight finish and are committed (a Slurm search cancels its jobs instead). The second leaves
    at once (KeyboardInterrupt; the compiles and GPU runs in flight are killed). The handler
    stays ours until the run returns: restoring the one before would lose the second Ctrl-C
    where that one ignores SIGINT (a search started in the background of a script).

    The KeyboardInterrupt of the second Ctrl-C was seen lost (1 run in 10-20 on 2 busy cores: the
    main thread went on looping in the engine's drain, no interrupt raised, the search compiling
    on; the cause is not known). So the second Ctrl-C also wakes a watchdog that, if the process
    is still here once the normal way out has had its time (LEAVE_S and a margin), kills what the
    run started, lets the session's write in progress end (`hold`) and leaves with `leaving`'s
    words and 130."""

    def __init__(self, stop: Any, stream: TextIO, jobs: bool, leaving: str = "",
                 hold: Callable[[], Any] | None = None) -> None:
        self._stop = stop
        self._stream = stream
        self._jobs = jobs
        self._leaving = leaving
        self._hold = hold  # before leaving without unwinding: let the session's write in progress end
        self._second = threading.Event()
        self._said = False
        self._closed = False
        self.count = 0
        # Started here, not in the handler: a thread started inside a signal handler can hang the
        # main thread when it was itself starting one.
        threading.Thread(target=self._leave_if_still_here, name="cuco-leave", daemon=True).start()

    def __call__(self, signum: int, frame: Any) -> None:
        self.count += 1
        if self.count > 1:
            self._second.set()
            raise KeyboardInterrupt
        self._stream.write("stopping: cancelling the search's Slurm jobs (Ctrl-C again to leave at once)\n"
                           if self._jobs else
                           "stopping after the evaluations in flight (Ctrl-C again to leave at once)\n")
        self._stream.flush()
        self._stop()

    def close(self) -> None:
        """The run returned by itself: the watchdog ends unused."""
        self._closed = True
        self._second.set()

    def leaving(self) -> str:
        """The line that says the search left (said once: by the normal way out or the watchdog)."""
        said, self._said = self._said, True
        return "" if said else self._leaving

    def _leave_if_still_here(self) -> None:
        from cuco_tui.toolchain.process import kill_child_groups

        self._second.wait()
        if self._closed:
            return
        time.sleep(LEAVE_S + LEAVE_MARGIN_S)
        kill_child_groups()
        try:
            if self._hold is not None:
                self._hold()
            self._stream.write(self.leaving())
            self._stream.flush()
        finally:
            os._exit(EXIT_INTERRUPTED)


# The flags of `cuco search` that set SearchConfig fields of the same name.
CONFIG_FLAGS = ("generations", "islands", "world", "seed", "lookahead", "keep_workers", "evaluations")


def cmd_search(args: argparse.Namespace) -> int:
    from cuco_tui.lineage import SessionError
    from cuco_tui.search.config import ConfigError, SearchConfig
    from cuco_tui.search.events import EventBus
    from cuco_tui.search.launch import agent_maker, new_target, start_engine
    from cuco_tui.executors import PlacementError
    from cuco_tui.executors.base import JobExecutor
    from cuco_tui.executors.slurm_types import SlurmError
    from cuco_tui.search.sessions import sessions_root
    from cuco_tui.core.workload import WorkloadError
    from cuco_tui.toolchain.process import kill_child_groups

    from cuco_tui.agents.factory import AgentUnavailable, default_agent_kind

    # Every flag is checked, and the executor and the agent made, before a session exists: a
    # refusal leaves nothing behind (no empty session for `cuco sessions` to list).
    agent_kind = args.agent or default_agent_kind()
    check_claude_options(args, agent_kind)
    if args.executor != "slurm":  # Slurm gives each job its GPUs (--gpus is refused there)
        gpu_list(args.gpus)  # a GPU named twice or not on this machine: refused before anything starts
    check_pacing_options(args)
    overrides = config_overrides(args, agent_kind, CONFIG_FLAGS)
    root = Path(args.root) if args.root else sessions_root()
    try:
        if args.resume:
            if args.session:
                raise UsageError("--session names the folder of a new session, and --resume continues an existing "
                                 "one: give one of them")
            target = open_resumed(args.resume, root, overrides, args.generations, args.workload)
        else:
            workload = workload_named(args.workload or DEFAULT_WORKLOAD)
            config = SearchConfig(workload=workload.name, **{"generations": DEFAULT_GENERATIONS, **overrides})
            target = new_target(workload, config, Path(args.session) if args.session else None, root)
    except (SessionError, ConfigError) as exc:
        raise UsageError(str(exc)) from exc
    workload, config = target.workload, target.config
    bus = EventBus()
    try:
        try:
            executor = make_executor(args, workload, config.world or min(workload.world_sizes))
        except BaseException:
            target.close()
            raise
        engine, repo = start_engine(target, agent_maker(agent_kind, args.model), executor, bus)
    except (PlacementError, WorkloadError) as exc:
        raise UsageError(placement_hint(str(exc), workload, config)) from exc
    except (AgentUnavailable, ConfigError, SessionError) as exc:
        raise UsageError(str(exc)) from exc

    err = sys.stderr
    bus.subscribe(ProgressPrinter(err))
    try:
        leaving = (f"cuco: interrupted: evaluations in flight were dropped, every committed candidate is kept; "
                   f"continue with `cuco search --resume {resume_name(repo.path, args)}`\n")
        interrupts = Interrupts(engine.stop, err, jobs=isinstance(executor, JobExecutor), leaving=leaving,
                                hold=lambda: repo.hold_for_exit(5.0))
        previous = signal.signal(signal.SIGINT, interrupts)
        try:
            summary = engine.run()
            interrupts.close()
        except (PlacementError, WorkloadError, SlurmError) as exc:
            raise UsageError(placement_hint(str(exc), workload, config)) from exc
        except KeyboardInterrupt:
            # The compiles and GPU runs in flight: leaving at once waits for none of them. Killed
            # again while the run's threads wind down, since a build taken up as the first kill
            # swept starts a compiler after it; the interpreter's exit would wait for that thread.
            kill_child_groups()
            ends = time.monotonic() + LEAVE_S
            while engine.working and time.monotonic() < ends:
                time.sleep(0.05)
                kill_child_groups()
            err.write(interrupts.leaving())
            raise
        finally:
            signal.signal(signal.SIGINT, previous)
    finally:
        repo.close()
    if args.json:
        print(json.dumps(summary.to_dict(), indent=1))
    else:
        print(summary.render())
        if end_state(summary.reason) == STOPPED:  # a resume goes on (core/ending.py)
            print(f"continue with `cuco search --resume {resume_name(repo.path, args)}`"
                  + (" and a higher --budget" if summary.reason == "budget" else ""))
        elif summary.reason == "evaluations":
            command, hint = f"cuco search --resume {resume_name(repo.path, args)} --evaluations N", \
                f"N above {config.evaluations}"
            if summary.generations >= config.generations:  # no generation left to evaluate in
                command, hint = command + " --generations M", hint + f", M above {summary.generations}"
            print(f"evaluate more with `{command}`, {hint}")
    return EXIT_INTERRUPTED if interrupts.count else EXIT_ENDED


def check_claude_options(args: argparse.Namespace, agent_kind: str) -> None:
    """--model and --budget, which only the Claude agent reads (the others call no model and
    spend no dollar, so a cap would never be reached), refused with another agent."""
    if agent_kind == "claude":
        return
    given = [flag for flag, value in (("--model", args.model), ("--budget", args.budget)) if value is not None]
    if given:
        chosen = "" if args.agent else " (the default without ANTHROPIC_API_KEY)"
        raise UsageError(f"{given[0]} is an option of --agent claude; the agent here is {agent_kind}{chosen}, "
                         f"which calls no model and spends no dollar: drop {given[0]}")


def open_resumed(name: str, root: Path | None, overrides: dict[str, Any], generations: int | None,
                 given_workload: str | None) -> Any:
    """The session `name` (a folder, or a name under `root`) to resume, reopened as a
    search/launch.py SessionTarget with the command line's changes, for `cuco search --resume` and
    `cuco-tui --resume` alike. Every refusal is a UsageError with the repository closed: no such
    session, one that cannot be resumed, --workload naming another workload, --generations not
    beyond those it ran (it is the session's total; generations up to the last committed one are
    not run again), no --generations when it ran every generation of its own total and left
    nothing for a resume to finish, an --evaluations total (given, or the session's own) it has
    reached already."""
    from cuco_tui.lineage import SessionError
    from cuco_tui.search.config import ConfigError
    from cuco_tui.search.launch import resumed_target
    from cuco_tui.search.sessions import resolve_session

    try:
        target = resumed_target(resolve_session(name, root), overrides)
    except (SessionError, ConfigError) as exc:
        raise UsageError(str(exc)) from exc
    try:
        session, workload = Path(target.repo.path).name, target.workload
        if given_workload and not names(given_workload, workload):
            raise UsageError(f"session {session} searches {workload.name}, not {given_workload}: "
                             f"drop --workload to resume it, or start a new search without --resume")
        from cuco_tui.search.outcomes import is_evaluation, left_for_a_resume

        records = target.repo.records()
        done = max((r.generation for r in records), default=0)
        if generations is not None and generations <= done:
            raise UsageError(f"session {session} has run its generations up to {done}, and --generations "
                             f"is the session's total: give more than {done} to search on")
        planned = target.config.generations
        if generations is None and records and done >= planned and not left_for_a_resume(records):
            # It would start, find no generation to run and end with nothing new. A search stopped
            # in its last generation (Ctrl-C, a stop, the budget) was told to resume: the engine
            # never runs a committed generation again, so that resume runs the next one.
            if end_state(target.repo.ended()) == STOPPED and "evaluations" not in overrides:
                target = replace(target, config=target.config.with_(generations=done + 1))
                print(f"session {session} stopped in its last generation ({done} of {planned}): this resume runs "
                      f"generation {done + 1} (--generations N for more)", file=sys.stderr)
            else:
                raise UsageError(f"session {session} ran its {planned} generation(s): pass --generations N "
                                 f"(N > {done}) to go on")
        limit = target.config.evaluations
        if limit is not None:
            evaluated = sum(is_evaluation(r) for r in records)
            if evaluated >= limit:
                given = "--evaluations is" if "evaluations" in overrides else f"it was given --evaluations {limit},"
                raise UsageError(f"session {session} has evaluated {evaluated} candidates, and {given} the session's "
                                 f"total: give a higher --evaluations to search on")
    except BaseException:
        target.close()
        raise
    return target


def names(given: str, workload: Any) -> bool:
    """Whether --workload `given` is `workload` (by name or by folder); no such workload is not it."""
    return workload_root(given) == workload.root.resolve()


def resume_name(session: Path, args: argparse.Namespace) -> str:
    """What to type after --resume: the session's name when it lives under the default root."""
    from cuco_tui.search.sessions import sessions_root

    root = Path(args.root) if args.root else sessions_root()
    return session.name if Path(session).parent.resolve() == root.resolve() and not args.root else str(session)


def placement_hint(message: str, workload, config) -> str:
    """A placement error, plus what a machine with too few GPUs can still do."""
    from cuco_tui.harness.gpus import inventory

    have = inventory().count
    world = config.world or min(workload.world_sizes)
    if 0 < have < world:
        message += (f"; this machine has {have} GPU{'s' if have > 1 else ''}: `cuco eval CANDIDATE --workload "
                    f"{workload.name} --share-gpu --world {world}` verifies a candidate with its ranks sharing one "
                    f"GPU (nothing timed), and `cuco search` on this machine compiles only with CUCO_NO_GPU=1")
    return message


# ---------------------------------------------------------------------------- wiring


def add_search_parser(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("search", help="evolve candidates with an agent, evaluating each and keeping the lineage")
    s.add_argument("--workload", "-w", help=WORKLOAD_HELP + "; with --resume, the session's own")
    s.add_argument("--generations", "-g", type=int,
                   help=f"the session's total number of generations after the seed's generation 0, 1 or more "
                        f"(default {DEFAULT_GENERATIONS}); with --resume, the search continues up to it")
    s.add_argument("--agent", choices=AGENT_KINDS,
                   help="who proposes: offline (templates steered by results), claude, or random (uniform random "
                   "sampling of the offline agent's space, a yardstick; default: claude when "
                   "ANTHROPIC_API_KEY is set, else offline)")
    s.add_argument("--model", help="the Claude model (with --agent claude)")
    s.add_argument("--gpus", help="GPU indices, e.g. 0,1 or 0-3 (default: every GPU); split into groups of --world")
    s.add_argument("--world", type=int, help="ranks per evaluation (default: the workload's smallest world size)")
    s.add_argument("--islands", type=int, help="number of islands (default 3)")
    s.add_argument("--budget", type=dollars, help=f"dollar cap for the agent, with --agent claude only "
                                                 f"(default ${DEFAULT_CLAUDE_BUDGET:.0f})")
    s.add_argument("--seed", type=int, help="random seed of the search")
    add_pacing_options(s)
    s.add_argument("--session", help="folder of the new session, new or empty (default: a new folder under --root)")
    s.add_argument("--resume", metavar="SESSION", help="continue a session (a folder, or a name under --root)")
    s.add_argument("--root", help="where sessions live (default: $CUCO_SESSIONS_DIR, else "
                                  "$XDG_DATA_HOME/cuco/sessions, else ~/.local/share/cuco/sessions)")
    s.add_argument("--json", action="store_true", help="print the summary as JSON")
    add_executor_options(s)
    s.set_defaults(fn=cmd_search)
