"""A search's sessions on disk: where they live (SESSIONS), finding one by name or path,
starting one, reopening one to resume it. A session is a lineage repository
(cuco_tui.lineage.SessionRepo) whose root commit records the workload, the search config and
the machine (GPUs, driver, CUDA, NCCL), so `--resume` needs nothing but the folder. This is the one place to import them from; the
lineage room lists sessions (list_sessions) but cannot read a search config, which lives here."""

from __future__ import annotations

from pathlib import Path

from cuco_tui.core.machine import MachineInfo
from cuco_tui.lineage import SessionError, SessionRepo, new_session_path
from cuco_tui.search.config import ConfigError, SearchConfig
from cuco_tui.core.workload import Workload, WorkloadError
from cuco_tui.workload.manifest import load_workload

REPO_ROOT = Path(__file__).resolve().parents[2]
SESSIONS = REPO_ROOT / "sessions"


def resolve_session(name_or_path: str | Path, root: Path = SESSIONS) -> Path:
    """A session folder given as a path, or as a name under `root`."""
    path = Path(name_or_path)
    if (path / ".git").is_dir():
        return path
    under = Path(root) / str(name_or_path)
    if (under / ".git").is_dir():
        return under
    raise SessionError(f"no session {str(name_or_path)!r}: neither a folder holding one nor a session under {root}; "
                       f"`cuco sessions` lists them")


def create_session(workload: Workload, config: SearchConfig, path: Path | None = None,
                   root: Path = SESSIONS, machine: MachineInfo | None = None) -> SessionRepo:
    """A new session at `path` (default: a fresh folder under `root` named after the workload),
    recording the machine it runs on (`machine`; default: this one, probed now)."""
    path = Path(path) if path is not None else new_session_path(root, workload.name)
    if machine is None:
        from cuco_tui.evaluate.machine import probe_machine

        machine = probe_machine()
    return SessionRepo.create(path, config.workload, config.to_dict(), machine)


def open_session(path: Path) -> tuple[SessionRepo, Workload, SearchConfig]:
    """The session at `path`, its workload and the config it was started with."""
    repo = SessionRepo.open(path)
    try:
        info = repo.session_info()
        config = SearchConfig.from_dict(dict(info.get("config") or {}, workload=info.get("workload", "")))
        workload = load_workload(config.workload)
    except (WorkloadError, ConfigError, TypeError) as exc:
        repo.close()
        raise SessionError(f"session {path} cannot be resumed: {exc}") from exc
    except BaseException:
        repo.close()
        raise
    return repo, workload, config
