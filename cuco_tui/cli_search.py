"""`cuco search`, `cuco sessions`, `cuco show` and `cuco export`: the search run headless, and
the sessions it leaves behind. Progress goes to stderr, one line per event that matters; the
summary (or JSON with --json) goes to stdout."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console
from rich.table import Table

from cuco_tui.cli import _gpus, _workload, render_result
from cuco_tui.core.errors import UsageError

DEFAULT_GENERATIONS = 10
DEFAULT_CLAUDE_BUDGET = 5.0


# ---------------------------------------------------------------------------- progress lines


class ProgressPrinter:
    """Turns engine events into short lines: `[  12.3s] committed c0004 no_gpu ...`."""

    def __init__(self, stream: TextIO, started: float | None = None) -> None:
        self.stream = stream
        self.started = started if started is not None else time.monotonic()

    def __call__(self, event: Any) -> None:
        line = self.line(event)
        if line:
            self.stream.write(f"[{time.monotonic() - self.started:7.1f}s] {line}\n")
            self.stream.flush()

    def line(self, e: Any) -> str:
        from cuco_tui.search import events as ev

        if isinstance(e, ev.SearchStarted):
            groups = " ".join(",".join(map(str, g)) or "cpu" for g in e.gpu_groups)
            how = f"resumed at generation {e.start_generation}" if e.resumed else "new"
            budget = f", budget ${e.budget_usd:.2f}" if e.budget_usd is not None else ""
            return (f"session {e.session} ({how}): {e.workload}, agent {e.agent}, {e.islands} islands, "
                    f"{e.generations} generations, GPU groups [{groups}], review {e.review_mode}{budget}")
        if isinstance(e, ev.GenerationStarted):
            return f"generation {e.generation} ({e.phase})"
        if isinstance(e, ev.ProposalReady):
            parents = ",".join(e.parents) or "-"
            first = (e.rationale.strip().splitlines() or [""])[0]
            return f"proposed {e.candidate} {e.kind} on island {e.island} from {parents}: {first[:100]}"
        if isinstance(e, ev.AwaitingReview):
            return f"review {e.candidate}: held ({e.why})"
        if isinstance(e, ev.ReviewDecided):
            return f"review {e.candidate}: {e.decision}" + (f" ({e.reason})" if e.reason else "")
        if isinstance(e, ev.StageStarted) and e.level >= 2:
            return f"{e.candidate} L{e.level}: {e.message}"
        if isinstance(e, ev.CandidateCommitted):
            r = e.record
            speed = f" {r.speedup:.3f}x" if r.speedup is not None else ""
            reason = (r.result or {}).get("reason", "")
            backend = r.design.get("backend", "?") if r.design else "?"
            return (f"committed {r.id} {r.status}{speed} (gen {r.generation}, island {r.island}, {r.kind}, "
                    f"{backend}, parents {','.join(r.parents) or '-'}): {reason[:120]}")
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
        if isinstance(e, ev.SearchFinished):
            return f"finished: {e.reason}"
        return ""


# ---------------------------------------------------------------------------- cuco search


def config_overrides(args: argparse.Namespace, agent_kind: str, keys: tuple[str, ...]) -> dict[str, Any]:
    """The SearchConfig fields the command line sets (`keys` given as flags, --gpus, --budget),
    shared by `cuco search` and `cuco-tui`; a new Claude session gets the default dollar cap."""
    overrides = {k: getattr(args, k) for k in keys if getattr(args, k) is not None}
    if args.gpus is not None:
        overrides["gpus"] = tuple(_gpus(args.gpus) or ())
    if args.budget is not None:
        overrides["budget_usd"] = args.budget
    elif agent_kind == "claude" and not args.resume:
        overrides["budget_usd"] = DEFAULT_CLAUDE_BUDGET
    return overrides


def cmd_search(args: argparse.Namespace) -> int:
    from cuco_tui.lineage import SessionError
    from cuco_tui.search.config import ConfigError, SearchConfig
    from cuco_tui.search.engine import SearchEngine
    from cuco_tui.search.events import EventBus
    from cuco_tui.executors import PlacementError
    from cuco_tui.search.sessions import SESSIONS, create_session, open_session, resolve_session
    from cuco_tui.core.workload import WorkloadError

    from cuco_tui.agents.factory import AgentUnavailable, default_agent_kind, make_agent

    agent_kind = args.agent or default_agent_kind()
    overrides = config_overrides(args, agent_kind, ("generations", "islands", "world", "seed"))

    try:
        if args.resume:
            repo, workload, config = open_session(resolve_session(args.resume, Path(args.root or SESSIONS)))
            config = config.with_(**overrides)
        else:
            workload = _workload(args.workload)
            config = SearchConfig(workload=args.workload, **{"generations": DEFAULT_GENERATIONS, **overrides})
            repo = create_session(workload, config, Path(args.session) if args.session else None,
                                  Path(args.root or SESSIONS))
    except (SessionError, ConfigError) as exc:
        raise UsageError(str(exc)) from exc

    bus = EventBus()
    err = sys.stderr
    bus.subscribe(ProgressPrinter(err))
    try:
        try:
            agent = make_agent(agent_kind, workload, world=config.world, gpus=tuple(config.gpus),
                               seed=config.seed, budget_usd=config.budget_usd, model=args.model)
        except AgentUnavailable as exc:
            raise UsageError(str(exc)) from exc
        engine = SearchEngine(workload, agent, repo, config, events=bus)
        previous = signal.getsignal(signal.SIGINT)

        def on_interrupt(signum, frame):  # first Ctrl-C: finish what runs; second: leave now
            err.write("stopping after the evaluations in flight (Ctrl-C again to leave at once)\n")
            err.flush()
            engine.stop()
            signal.signal(signal.SIGINT, previous)

        signal.signal(signal.SIGINT, on_interrupt)
        try:
            summary = engine.run()
        except (PlacementError, WorkloadError) as exc:
            raise UsageError(str(exc)) from exc
        finally:
            signal.signal(signal.SIGINT, previous)
    finally:
        repo.close()
    if args.json:
        print(json.dumps(summary.to_dict(), indent=1))
    else:
        print(summary.render())
    return 0


# ---------------------------------------------------------------------------- cuco sessions


def _root(args: argparse.Namespace) -> Path:
    from cuco_tui.search.sessions import SESSIONS

    return Path(args.root) if getattr(args, "root", None) else SESSIONS


def cmd_sessions(args: argparse.Namespace) -> int:
    from cuco_tui.lineage import list_sessions

    sessions = list_sessions(_root(args))
    if args.json:
        print(json.dumps([{"name": s.name, "path": str(s.path), "workload": s.workload, "candidates": s.candidates,
                           "best_id": s.best_id, "best_speedup": s.best_speedup, "created": s.created,
                           "modified": s.modified} for s in sessions], indent=1))
        return 0
    if not sessions:
        print(f"no sessions under {_root(args)}; start one with `cuco search`")
        return 0
    t = Table(title=f"sessions under {_root(args)}", title_justify="left")
    for col in ("name", "workload", "candidates", "best", "modified"):
        t.add_column(col, justify="right" if col == "candidates" else "left")
    for s in sessions:
        best = f"{s.best_id} {s.best_speedup:.3f}x" if s.best_id and s.best_speedup else "-"
        t.add_row(s.name, s.workload, str(s.candidates), best, time.strftime("%Y-%m-%d %H:%M", time.localtime(s.modified)))
    Console().print(t)
    return 0


# ---------------------------------------------------------------------------- cuco show


def _open(args: argparse.Namespace):
    """The session named or at the path, or a .bundle (imported into a temporary folder)."""
    from cuco_tui.lineage import SessionError, SessionRepo, open_session_or_bundle
    from cuco_tui.search.sessions import resolve_session

    try:
        if str(args.session).endswith(".bundle") and Path(args.session).is_file():
            return open_session_or_bundle(Path(args.session))
        return SessionRepo.open(resolve_session(args.session, _root(args)))
    except SessionError as exc:
        raise UsageError(str(exc)) from exc


def _record(repo, candidate: str):
    from cuco_tui.lineage import SessionError

    try:
        return repo.record(candidate)
    except SessionError as exc:
        raise UsageError(str(exc)) from exc


def cmd_show(args: argparse.Namespace) -> int:
    from cuco_tui.search.summary import SearchSummary

    with _open(args) as repo:
        if args.candidate:
            return _show_candidate(repo, args)
        records = repo.records()
        info = repo.session_info()
        summary = SearchSummary.of(records, session=str(repo.path), workload=str(info.get("workload", "")))
        heads = repo.island_heads()
        if args.json:
            print(json.dumps({**summary.to_dict(), "island_heads": heads, "best_tag": repo.best(),
                              "config": info.get("config", {})}, indent=1))
            return 0
        print(summary.render())
        if heads:
            print("islands   " + ", ".join(f"{i}: {cid}" for i, cid in sorted(heads.items())))
        print()
        print(candidate_table(records))
    return 0


def candidate_table(records) -> str:
    """Plain aligned text (it reads the same in a terminal, a pipe or a log)."""
    rows = [("id", "gen", "isl", "kind", "parents", "status", "speedup", "backend", "reason")]
    for r in records:
        reason = "" if r.status in ("measured", "no_gpu") else (r.result or {}).get("reason", "")
        rows.append((r.id, str(r.generation), str(r.island), r.kind, ",".join(r.parents) or "-", r.status,
                     f"{r.speedup:.3f}x" if r.speedup is not None else "-", str((r.design or {}).get("backend", "-")),
                     reason[:80]))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1] for row in rows)


def _show_candidate(repo, args: argparse.Namespace) -> int:
    from cuco_tui.core.result import CascadeResult

    r = _record(repo, args.candidate)
    diff = repo.diff(r.parents[0], r.id) if r.parents else ""
    if args.json:
        d = r.to_dict()
        d["diff_vs_parent"] = diff
        print(json.dumps(d, indent=1))
        return 0
    console = Console()
    head = Table.grid(padding=(0, 2))
    head.add_row("candidate", f"{r.id} ({r.kind}, generation {r.generation}, island {r.island})")
    head.add_row("parents", ", ".join(r.parents) or "-")
    head.add_row("agent", r.agent + (f", ${r.cost_usd:.4f}, {r.tokens_in}+{r.tokens_out} tokens" if r.cost_usd else ""))
    if r.review:
        head.add_row("review", r.review)
    design = " ".join(f"{k}={v}" for k, v in (r.design or {}).items() if k != "knobs")
    knobs = " ".join(f"{k}={v}" for k, v in ((r.design or {}).get("knobs") or {}).items())
    head.add_row("design", design or "-")
    if knobs:
        head.add_row("knobs", knobs)
    console.print(head)
    if r.rationale.strip():
        console.print("\n[bold]rationale[/bold]\n" + r.rationale.strip())
    console.print()
    if r.result:
        console.print(render_result(CascadeResult.from_dict(r.result)))
    if r.parents:
        console.print(f"\n[bold]diff against {r.parents[0]}[/bold]")
        console.print(diff or "(no change)", markup=False, highlight=False)
    return 0


# ---------------------------------------------------------------------------- cuco export


def cmd_export(args: argparse.Namespace) -> int:
    with _open(args) as repo:
        cid = args.candidate
        if cid is None:
            best = repo.best_measured()
            if best is None:
                raise UsageError(f"session {repo.path} has no measured candidate yet, so there is no best to export; "
                                 f"name one with --candidate ID")
            cid = best[0]
        r = _record(repo, cid)
        out = Path(args.best)
        out.mkdir(parents=True, exist_ok=True)
        kernel = out / f"{repo.path.name}-{r.id}.cu"
        kernel.write_text(r.source)
        (out / "result.json").write_text(json.dumps({"session": str(repo.path), "candidate": r.id,
                                                      "status": r.status, "speedup": r.speedup,
                                                      "design": r.design, "result": r.result}, indent=1) + "\n")
        print(f"wrote {kernel} and {out / 'result.json'} ({r.id}, {r.status}"
              + (f", {r.speedup:.3f}x" if r.speedup is not None else "") + ")")
    return 0


# ---------------------------------------------------------------------------- wiring


def add_parsers(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("search", help="evolve candidates with an agent, evaluating each and keeping the lineage")
    s.add_argument("--workload", "-w", default="gemm_allgather")
    s.add_argument("--generations", "-g", type=int,
                   help=f"the session's total number of generations (default {DEFAULT_GENERATIONS}); "
                        f"with --resume, the search continues up to it")
    s.add_argument("--agent", choices=("offline", "claude"),
                   help="who proposes (default: claude when ANTHROPIC_API_KEY is set, else offline)")
    s.add_argument("--model", help="the Claude model (with --agent claude)")
    s.add_argument("--gpus", help="GPU indices, e.g. 0,1 or 0-3 (default: every GPU); split into groups of --world")
    s.add_argument("--world", type=int, help="ranks per evaluation (default: the workload's smallest world size)")
    s.add_argument("--islands", type=int, help="number of islands (default 3)")
    s.add_argument("--budget", type=float, help=f"dollar cap for the agent (claude default ${DEFAULT_CLAUDE_BUDGET:.0f})")
    s.add_argument("--seed", type=int, help="random seed of the search")
    s.add_argument("--session", help="folder of the new session (default: a new folder under sessions/)")
    s.add_argument("--resume", metavar="SESSION", help="continue a session (a folder, or a name under sessions/)")
    s.add_argument("--root", help="where sessions live (default: sessions/ at the repository root)")
    s.add_argument("--json", action="store_true", help="print the summary as JSON")
    s.set_defaults(fn=cmd_search)

    ls = sub.add_parser("sessions", help="list the search sessions")
    ls.add_argument("--root", help="where sessions live (default: sessions/)")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(fn=cmd_sessions)

    sh = sub.add_parser("show", help="a session's summary, or one candidate's result, diagnostics and diff")
    sh.add_argument("session", help="a session folder, or a name under sessions/")
    sh.add_argument("candidate", nargs="?", help="a candidate id, e.g. c0004")
    sh.add_argument("--root")
    sh.add_argument("--json", action="store_true")
    sh.set_defaults(fn=cmd_show)

    ex = sub.add_parser("export", help="write a session's best kernel (.cu) and its result.json into a folder")
    ex.add_argument("session", help="a session folder, or a name under sessions/")
    ex.add_argument("--best", required=True, metavar="DIR", help="the folder to write into")
    ex.add_argument("--candidate", help="export this candidate instead of the best measured one")
    ex.add_argument("--root")
    ex.set_defaults(fn=cmd_export)
