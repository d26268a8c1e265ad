"""Sessions as single files: `git bundle` of every ref, so a session can be shipped, kept as an
example (sessions/examples/*.bundle) and opened again with its history whole."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import git

from cuco_tui.lineage.errors import SessionError
from cuco_tui.lineage.repo import SessionRepo


def export_bundle(repo: SessionRepo, path: Path) -> Path:
    """Write every ref of the session (main, islands, tags) and their history to `path`."""
    path = Path(path).resolve()  # git runs inside the repository; a relative path would land there
    path.parent.mkdir(parents=True, exist_ok=True)
    repo.git_repo.git.bundle("create", str(path), "--all")
    return path


def import_bundle(bundle_path: Path, dest: Path) -> SessionRepo:
    """Make a session at `dest` from a bundle written by export_bundle, and open it.

    Not `git clone`: a clone renames branches to origin/*, and a session's refs (main,
    island-<n>, best, root) must come back under their own names. So: a fresh bare repository,
    then a fetch of refs/* onto refs/*."""
    given = Path(bundle_path)  # errors name the bundle as the user gave it
    bundle_path = given.resolve()
    dest = Path(dest)
    if not bundle_path.is_file():
        raise SessionError(f"no bundle at {given}")
    if dest.exists() and any(dest.iterdir()):
        raise SessionError(f"{dest} is not empty; import the bundle into a new folder")
    made = not dest.exists()
    try:
        dest.mkdir(parents=True, exist_ok=True)
        repo = git.Repo.init(dest / ".git", bare=True, initial_branch="main")
        try:
            repo.git.bundle("verify", str(bundle_path))
            # --update-head-ok: HEAD already names main (unborn); fetching into it is the point.
            repo.git.fetch(str(bundle_path), "+refs/*:refs/*", "--update-head-ok", "--no-tags")
        except git.GitCommandError as e:
            raise SessionError(f"{given} is not a readable git bundle: {_one_line(e.stderr)}") from e
        finally:
            repo.close()
        try:
            return SessionRepo.open(dest)
        except SessionError as e:  # said of the folder it was imported into, which the user never named
            raise SessionError(str(e).replace(str(dest), f"the bundle {given}")
                               .replace("choose another folder", "choose another bundle")) from e
    except BaseException:
        # Leave nothing half-made behind; remove only what this call created.
        if made:
            shutil.rmtree(dest, ignore_errors=True)
        else:
            for child in dest.iterdir():
                shutil.rmtree(child) if child.is_dir() else child.unlink()
        raise


def _one_line(stderr: str) -> str:
    """git's stderr as GitPython gives it (`  stderr: '...'`, several lines) on one line."""
    text = stderr.strip().removeprefix("stderr:").strip().strip("'")
    return "; ".join(line.strip() for line in text.splitlines() if line.strip())


def open_session_or_bundle(path: Path) -> SessionRepo:
    """A session folder, opened; a .bundle, imported into a new temporary folder and opened."""
    path = Path(path)
    if path.is_file() and path.suffix == ".bundle":
        scratch = Path(tempfile.mkdtemp(prefix="cuco-lineage-"))
        try:
            repo = import_bundle(path, scratch / path.stem)
        except BaseException:
            shutil.rmtree(scratch, ignore_errors=True)
            raise
        repo.remove_on_close(scratch, imported_from=path)
        return repo
    if not path.exists():
        raise SessionError(f"no session or bundle at {path}")
    return SessionRepo.open(path)
