"""`cuco sessions`, `cuco show` and `cuco export`: the sessions a search leaves behind, listed,
read (a summary, or one candidate's result, diagnostics and diff) and their best kernel written out."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from cuco_tui.cli.common import render_result
from cuco_tui.core.errors import UsageError


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


def add_session_parsers(sub: argparse._SubParsersAction) -> None:
    """sessions, show and export."""
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
