"""`cuco sessions` and `cuco show`: the sessions a search leaves behind, listed and read (a summary,
or one candidate's result, diagnostics and diff); `cuco export` (cli/export.py) opens them as here."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from dataclasses import replace
from pathlib import Path

from rich.table import Table
from rich.text import Text

from cuco_tui.cli.common import render_result, stdout_console
from cuco_tui.core.errors import UsageError
from cuco_tui.core.noise import record_speedup
from cuco_tui.core.records import candidate_id_of


# ---------------------------------------------------------------------------- cuco sessions


def _root(args: argparse.Namespace) -> Path:
    from cuco_tui.search.sessions import sessions_root

    return Path(args.root) if getattr(args, "root", None) else sessions_root()


def cmd_sessions(args: argparse.Namespace) -> int:
    from cuco_tui.lineage import list_sessions

    if args.root is not None and not Path(args.root).is_dir():  # the default folder is made by the first search
        what = "is a file" if Path(args.root).exists() else "does not exist"
        raise UsageError(f"--root {args.root} {what}: give the folder sessions live in (a search's --root)")
    sessions = list_sessions(_root(args))
    if args.json:
        print(json.dumps([{"name": s.name, "path": str(s.path), "workload": s.workload, "candidates": s.candidates,
                           "best_id": s.best_id, "best_speedup": s.best_speedup, "created": s.created,
                           "modified": s.modified, "state": s.state, "generations_done": s.generations_done,
                           "generations_planned": s.generations_planned} for s in sessions], indent=1))
        return 0
    if not sessions:
        print(f"no sessions under {_root(args)}; start one with `cuco search`")
        return 0
    rows = [("name", "workload", "state", "generations", "candidates", "best", "modified")]
    for s in sessions:
        best = f"{s.best_id} {s.best_speedup:.3f}x" if s.best_id and s.best_speedup else "-"
        planned = f"/{s.generations_planned}" if s.generations_planned else ""
        rows.append((s.name, Path(s.workload).name if "/" in s.workload else s.workload, s.state,
                     f"{s.generations_done}{planned}", str(s.candidates), best,
                     time.strftime("%Y-%m-%d %H:%M", time.localtime(s.modified))))
    print(f"sessions under {_root(args)}")
    print(plain_table(rows))
    stopped = [s for s in sessions if s.state == "stopped"]
    if stopped:
        again = shlex.join(["cuco", "search", "--resume", stopped[0].name]
                           + (["--root", args.root] if args.root is not None else []))
        print(f"\na stopped session continues with `{again}`" + (" (or another's name)" if len(stopped) > 1 else ""))
    return 0


def plain_table(rows: list[tuple[str, ...]]) -> str:
    """Aligned columns, nothing cut: it reads the same in a terminal, a pipe or a log."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows)


# ---------------------------------------------------------------------------- cuco show


def open_named(args: argparse.Namespace):
    """The session named or at the path, or a .bundle (imported into a temporary folder)."""
    from cuco_tui.lineage import SessionError, SessionRepo, open_session_or_bundle
    from cuco_tui.search.sessions import resolve_session

    try:
        if str(args.session).endswith(".bundle") and Path(args.session).is_file():
            return open_session_or_bundle(Path(args.session))
        return SessionRepo.open(resolve_session(args.session, _root(args)))
    except SessionError as exc:
        raise UsageError(str(exc)) from exc


def shown_as(args: argparse.Namespace, repo) -> str:
    """How a session is named to the reader: a bundle by its own path (not the temporary folder
    it is read from), a session by its folder."""
    given = Path(args.session)
    return str(given) if given.suffix == ".bundle" and given.is_file() else str(repo.path)


def candidate_named(repo, typed: str) -> str:
    """The id of the candidate `typed` names, read as the TUI reads it ("c0030", "c30", "0030" and
    "30" are all c0030); `typed` itself when the session has that id or it names none."""
    if typed in repo:
        return typed
    return candidate_id_of(typed) or typed


def record_of(repo, candidate: str, shown: str):
    """One candidate (any spelling of its id: candidate_named), whole; a candidate the session lacks
    is named with the session as the user gave it (`shown`: a bundle's own path, never the temporary
    folder it is read from)."""
    from cuco_tui.lineage import SessionError

    candidate = candidate_named(repo, candidate)
    if candidate not in repo:
        raise UsageError(f"no candidate {candidate!r} in session {shown}")
    try:
        return repo.record(candidate)
    except SessionError as exc:
        raise UsageError(str(exc)) from exc


def cmd_show(args: argparse.Namespace) -> int:
    from cuco_tui.search.summary import SearchSummary

    with open_named(args) as repo:
        if args.candidate:
            return _show_candidate(repo, args)
        records = repo.records()
        info = repo.session_info()
        summary = SearchSummary.of(records, session=shown_as(args, repo), workload=str(info.get("workload", "")))
        heads = repo.island_heads()
        if args.json:
            machine = repo.machine()
            print(json.dumps({**summary.to_dict(), "island_heads": heads, "best_tag": repo.best(),
                              "config": info.get("config", {}),
                              "machine": machine.to_dict() if machine else None}, indent=1))
            return 0
        print(summary.render())
        machine = repo.machine()
        if machine is None:
            print("machine   not recorded (a session from before sessions named their machine)")
        else:
            source = machine.extra.get("source")
            print(f"machine   {machine.describe()}" + (f" (added later, from {source})" if source else ""))
        if heads:
            print("islands   " + ", ".join(f"{i}: {cid}" for i, cid in sorted(heads.items())))
        print()
        print(candidate_table(records))
    return 0


def candidate_table(records) -> str:
    """Plain aligned text (it reads the same in a terminal, a pipe or a log). An older engine's
    placeholders for an exhausted agent are no candidates: one line under the table names them."""
    rows = [("id", "gen", "isl", "kind", "parents", "status", "speedup", "backend", "reason")]
    placeholders = [r.id for r in records if r.placeholder]
    for r in (r for r in records if not r.placeholder):
        reason = "" if r.status in ("measured", "no_gpu") else (r.result or {}).get("reason", "")
        speedup = record_speedup(r)
        rows.append((r.id, str(r.generation), str(r.island), r.kind, ",".join(r.parents) or "-", r.status,
                     speedup.label(".3f") if speedup is not None else "-", str((r.design or {}).get("backend", "-")),
                     reason[:80]))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    table = "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1] for row in rows)
    if placeholders:
        table += (f"\n\nagent exhausted: {', '.join(placeholders)} are placeholders an older cuco-tui committed when "
                  f"the agent had proposed every valid combination (no code, nothing evaluated)")
    return table


def _show_candidate(repo, args: argparse.Namespace) -> int:
    from cuco_tui.core.result import CascadeResult

    r = record_of(repo, args.candidate, shown_as(args, repo))
    diff = repo.diff(r.parents[0], r.id) if r.parents else ""
    if args.json:
        d = r.to_dict()
        d["diff_vs_parent"] = diff
        print(json.dumps(d, indent=1))
        return 0
    console = stdout_console()
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
    if r.placeholder:
        console.print(Text(f"not a candidate: {r.id} is a placeholder an older cuco-tui committed when the agent had "
                           f"proposed every valid combination (no code, nothing evaluated)", style="bold"))
        return 0
    if r.rationale.strip():
        console.print()
        console.print(Text("rationale", style="bold"))
        console.print(r.rationale.strip())
    console.print()
    if r.result:
        result = CascadeResult.from_dict(r.result)
        # the path it had on the machine that evaluated it means nothing here: its lineage name does
        console.print(render_result(replace(result, candidate=f"{r.id}.cu")))
    if r.parents:
        console.print()
        console.print(Text(f"diff against {r.parents[0]}", style="bold"))
        console.file.flush()
        # raw, never wrapped or styled: `cuco show S C > c.patch` is a patch `git apply` takes
        sys.stdout.write((diff or "(no change)\n") if diff.endswith("\n") or not diff else diff + "\n")
    return 0


# ---------------------------------------------------------------------------- wiring


def add_session_parsers(sub: argparse._SubParsersAction) -> None:
    """sessions and show (export is in cli/export.py)."""
    ls = sub.add_parser("sessions", help="list the search sessions")
    ls.add_argument("--root", metavar="DIR", help="where sessions live (default: $CUCO_SESSIONS_DIR, else "
                                                  "$XDG_DATA_HOME/cuco/sessions, else ~/.local/share/cuco/sessions)")
    ls.add_argument("--json", action="store_true", help="print the sessions as JSON")
    ls.set_defaults(fn=cmd_sessions)

    sh = sub.add_parser("show", help="a session's summary, or one candidate's result, diagnostics and diff")
    sh.add_argument("session", help="a session folder, or a name in the sessions folder (--root)")
    sh.add_argument("candidate", nargs="?", help="a candidate id, e.g. c0004 (or c4, 0004, 4)")
    sh.add_argument("--root", metavar="DIR", help="where sessions live, for a session given by name "
                                                  "(default: the sessions folder, as for `cuco sessions`)")
    sh.add_argument("--json", action="store_true", help="print the summary, or the candidate and its diff, as JSON")
    sh.set_defaults(fn=cmd_show)
