"""The sessions under a folder (normally the sessions folder, search/sessions.py sessions_root): listing them for `cuco sessions` and the
TUI's browser, naming a new one. Opening a session for a search (its workload and config) is
cuco_tui.search.sessions, which knows the search's config."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from cuco_tui.core.ending import FINISHED, STOPPED, end_state
from cuco_tui.core.ranking import best_measured
from cuco_tui.lineage.errors import SessionError
from cuco_tui.lineage.repo import SessionRepo


@dataclass(frozen=True)
class SessionSummary:
    name: str
    path: Path
    workload: str
    candidates: int  # an older engine's placeholders for an exhausted agent are not counted
    best_speedup: float | None  # the highest speedup among measured candidates
    best_id: str | None
    created: float  # unix time
    modified: float  # unix time of the newest commit
    generations_done: int = 0  # the last generation committed (0: the seed and the fast path)
    generations_planned: int = 0  # the session's config: generations 1..N follow generation 0
    ended: str = ""  # why its last search ended, as the engine recorded it ("" while one runs, or after a kill)

    @property
    def state(self) -> str:
        """"finished" (its search ran every generation asked for, or evaluated as many candidates
        as asked), "exhausted" (the agent had nothing new to propose), "stopped" (a search may
        continue it with --resume: stopped, killed, out of budget, a plateau, which a resume gives
        its patience again), or "empty";
        the engine's own word for how it ended (core/ending.py), which SearchFinished and the
        search's summary also give."""
        if not self.candidates:
            return "empty"
        if self.ended:
            return end_state(self.ended)
        if self.generations_planned and self.generations_done >= self.generations_planned:
            return FINISHED  # a session from before every end was recorded
        return STOPPED


def summarize(repo: SessionRepo) -> SessionSummary:
    info = repo.session_info()
    records = repo.records()  # read once: the count, the generations and the best all come from them
    best = best_measured(records)
    planned = (info.get("config") or {}).get("generations", 0)
    return SessionSummary(
        name=repo.path.name,
        path=repo.path,
        workload=str(info.get("workload", "")),
        candidates=sum(1 for r in records if not r.placeholder),  # placeholders are no candidates
        best_speedup=best.speedup if best else None,
        best_id=best.id if best else None,
        created=float(info.get("created", 0.0)),
        modified=repo.last_modified(),
        generations_done=max((r.generation for r in records), default=0),
        generations_planned=int(planned) if isinstance(planned, int) else 0,
        ended=repo.ended(),
    )


def list_sessions(root: Path) -> list[SessionSummary]:
    """Every session directly under `root`, most recently modified first. Folders that are not
    sessions (e.g. examples/ holding bundles) are skipped. Opening a session may rebuild its
    index, which is a cache."""
    root = Path(root)
    if not root.is_dir():
        return []
    out: list[SessionSummary] = []
    for child in sorted(root.iterdir()):
        if not (child / ".git").is_dir():
            continue
        try:
            with SessionRepo.open(child) as repo:
                out.append(summarize(repo))
        except SessionError:
            continue
    return sorted(out, key=lambda s: (s.modified, s.name), reverse=True)


def new_session_path(root: Path, workload: str, now: datetime | None = None) -> Path:
    """A folder name under `root` for a new session of `workload`, e.g.
    gemm_allgather-20261123-0427, unused so far (-2, -3, ... when taken)."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", workload).strip(".-") or "session"
    stamp = (now or datetime.now()).strftime("%Y%m%d-%H%M")
    path = Path(root) / f"{stem}-{stamp}"
    n = 2
    while path.exists():
        path = Path(root) / f"{stem}-{stamp}-{n}"
        n += 1
    return path
