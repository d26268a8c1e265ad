"""A search's sessions on disk: where they live (`sessions_root`), finding one by name or path,
checking where a new one would go, starting one, reopening one to resume it. A session is a
lineage repository (cuco_tui.lineage.SessionRepo) whose root commit records the workload, the
search config and the machine (GPUs, driver, CUDA, NCCL), so `--resume` needs nothing but the
folder. This is the one place to import them from; the lineage room lists sessions
(list_sessions) but cannot read a search config, which lives here.

Sessions are the user's own data, so they live in a folder of the user's, the same from any
working directory: $CUCO_SESSIONS_DIR, else $XDG_DATA_HOME/cuco/sessions, else
~/.local/share/cuco/sessions (never inside the installed package, which may be site-packages).
The example sessions recorded on GPUs (`EXAMPLES`, bundles) ship with a clone."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from cuco_tui.core.machine import MachineInfo
from cuco_tui.lineage import SessionError, SessionRepo, new_session_path
from cuco_tui.search.config import ConfigError, SearchConfig
from cuco_tui.core.workload import Workload, WorkloadError
from cuco_tui.workload.manifest import REPO_WORKLOADS, load_workload

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = REPO_ROOT / "sessions" / "examples"  # bundles of searches recorded on GPU hosts


def sessions_root(env: Mapping[str, str] | None = None) -> Path:
    """Where sessions live unless a command names another folder (--root)."""
    env = os.environ if env is None else env
    if env.get("CUCO_SESSIONS_DIR"):
        return Path(env["CUCO_SESSIONS_DIR"]).expanduser()
    data = Path(env["XDG_DATA_HOME"]).expanduser() if env.get("XDG_DATA_HOME") else Path.home() / ".local" / "share"
    return data / "cuco" / "sessions"


def example_bundles(root: Path | None = None) -> list[Path]:
    """The example bundles to browse: those under `root`/examples/, and with the default root
    (None) the ones a clone ships (EXAMPLES) too."""
    folders = [Path(root) / "examples"] if root is not None else [sessions_root() / "examples", EXAMPLES]
    found: dict[Path, Path] = {}
    for folder in folders:
        for bundle in sorted(folder.glob("*.bundle")):
            found.setdefault(bundle.resolve(), bundle)
    return list(found.values())


def resolve_session(name_or_path: str | Path, root: Path | None = None) -> Path:
    """A session folder given as a path, or as a name under `root` (default: sessions_root())."""
    root = sessions_root() if root is None else Path(root)
    path = Path(name_or_path)
    if (path / ".git").is_dir():
        return path
    under = root / str(name_or_path)
    if (under / ".git").is_dir():
        return under
    raise SessionError(f"no session {str(name_or_path)!r}: neither a folder holding one nor a session under {root}; "
                       f"`cuco sessions` lists them")


def new_session_folder(path: Path | None = None, root: Path | None = None, workload: str = "session") -> Path:
    """Where a new session of `workload` goes (`path`, else a fresh folder under `root`), checked
    before anything is made: SessionError says why it cannot go there (a file, a folder holding
    other things or a session already, a place that cannot be written)."""
    if path is None:
        root = sessions_root() if root is None else Path(root)
        if root.exists() and not root.is_dir():
            raise SessionError(f"the sessions folder {root} is a file, not a folder; name another with --root")
        _check_writable(root, "the sessions folder")
        return new_session_path(root, workload)
    path = Path(path)
    if path.exists() or path.is_symlink():
        if not path.is_dir():
            raise SessionError(f"{path} is a file, not a folder: a new session needs a new or empty folder")
        if (path / ".git").exists():
            try:
                SessionRepo.open(path).close()
            except SessionError:
                raise SessionError(f"{path} already holds a git repository that is not a cuco session; "
                                   f"choose another folder") from None
            raise SessionError(f"{path} already holds a session; continue it with --resume {path}, or choose a new "
                               f"folder")
        try:
            if any(path.iterdir()):
                raise SessionError(f"{path} is a folder that holds other files, not a session: a new session needs a "
                                   f"new or empty folder")
        except OSError as exc:
            raise SessionError(f"cannot use {path} for a session: {exc.strerror or exc}") from exc
    _check_writable(path, "a session")
    return path


def _check_writable(folder: Path, what: str) -> None:
    """The nearest folder of `folder` that exists (itself or an ancestor) must let us write."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise SessionError(f"cannot make {what} at {folder}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise SessionError(f"cannot make {what} at {folder}: {existing} is not writable")


def workload_ref(workload: Workload) -> str:
    """What a session records of its workload, found again from any folder: a shipped workload's
    name, any other workload's absolute folder."""
    shipped = REPO_WORKLOADS / workload.name
    try:
        if shipped.resolve() == workload.root.resolve() and (shipped / "manifest.toml").is_file():
            return workload.name
    except OSError:
        pass
    return str(workload.root.resolve())


def create_session(workload: Workload, config: SearchConfig, path: Path | None = None,
                   root: Path | None = None, machine: MachineInfo | None = None) -> SessionRepo:
    """A new session at `path` (default: a fresh folder under `root`, else sessions_root(), named
    after the workload), recording the machine it runs on (`machine`; default: this one, probed
    now) and its workload as workload_ref() gives it. SessionError when it cannot be made there;
    a failure halfway leaves nothing behind."""
    path = new_session_folder(path, root, workload.name)
    if machine is None:
        from cuco_tui.evaluate.machine import probe_machine

        machine = probe_machine()
    config = config.with_(workload=workload_ref(workload))
    existed = path.exists()
    try:
        return SessionRepo.create(path, config.workload, config.to_dict(), machine)
    except OSError as exc:
        if not existed:
            shutil.rmtree(path, ignore_errors=True)
        raise SessionError(f"cannot make a session at {path}: {exc.strerror or exc}") from exc


def find_workload(recorded: str, session: Path) -> Workload:
    """The workload a session recorded: a shipped workload's name, an absolute folder, or (sessions
    made before paths were recorded whole) a path relative to the folder the search ran in, looked
    for from here, beside the session's folder, and in the clone. WorkloadError names what was
    looked for."""
    path = Path(recorded)
    if not path.is_absolute() and len(path.parts) == 1 and (REPO_WORKLOADS / recorded / "manifest.toml").is_file():
        return load_workload(REPO_WORKLOADS / recorded)
    if path.is_absolute():
        if not (path / "manifest.toml").is_file():
            raise WorkloadError(f"its workload folder {path} holds no manifest.toml any more (moved or removed?)")
        return load_workload(path)
    places = list(dict.fromkeys(p.resolve() for p in (Path.cwd(), Path(session).resolve().parent.parent, REPO_ROOT)))
    for place in places:
        if (place / path / "manifest.toml").is_file():
            return load_workload(place / path)
    looked = ", ".join(str(p / path) for p in places)
    raise WorkloadError(f"it recorded its workload as the relative path {recorded!r}, and no workload folder is at "
                        f"{looked}; run the resume from the folder the search was started in")


def open_session(path: Path) -> tuple[SessionRepo, Workload, SearchConfig]:
    """The session at `path`, its workload and the config it was started with."""
    repo = SessionRepo.open(path)
    try:
        info = repo.session_info()
        config = SearchConfig.from_dict(dict(info.get("config") or {}, workload=info.get("workload", "")))
        workload = find_workload(config.workload, Path(path))
    except (WorkloadError, ConfigError, TypeError) as exc:
        repo.close()
        raise SessionError(f"session {path} cannot be resumed: {exc}") from exc
    except BaseException:
        repo.close()
        raise
    return repo, workload, config
