"""Export of one candidate from the TUI (`w` on the lineage and candidate screens): exactly what
`cuco export SESSION --candidate ID --out FOLDER` writes, a folder that builds on its own (the .cu,
the runtime headers it includes, result.json, a README with the nvcc line), by default
./export/<session>-<id>/.

The CLI owns what an export holds (cli/export.py), and app/ stands below cli/ (docs/architecture.md),
so the command runs in a process of its own, as a profile does (app/profile_run.py): one owner,
no second copy of the export here. Blocking: the screens call it from a thread worker."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from cuco_tui.harness.env import child_env

DEFAULT_ROOT = Path("export")
TIMEOUT_S = 120.0  # reading the record and finding the toolchain for the README's nvcc line: seconds


class ExportFailed(Exception):
    """Why the export did not happen, in one line (the CLI's refusal when it gave one)."""


@dataclass(frozen=True)
class Exported:
    folder: Path  # absolute
    said: str  # the command's own line: the files it wrote and where


def default_folder(session: str, candidate_id: str, root: Path = DEFAULT_ROOT) -> Path:
    return Path(root) / f"{session}-{candidate_id}"


def cuco_export_command(session: Path, candidate_id: str, folder: Path) -> list[str]:
    return [sys.executable, "-m", "cuco_tui.cli", "export", str(session), "--candidate", candidate_id,
            "--out", str(folder)]


def export_candidate(session: Path, candidate_id: str, folder: Path) -> Exported:
    """Run `cuco export` for the candidate of the session folder into `folder` (relative: to this
    process's working folder, not the child's). ExportFailed with a sentence when it refuses or
    cannot run."""
    folder = Path(folder).absolute()
    try:
        done = subprocess.run(cuco_export_command(Path(session).absolute(), candidate_id, folder), env=child_env(),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace",
                              timeout=TIMEOUT_S)
    except OSError as exc:
        raise ExportFailed(f"`cuco export` could not start: {exc}") from exc
    except subprocess.TimeoutExpired:
        raise ExportFailed(f"`cuco export` did not end within {TIMEOUT_S:.0f} s") from None
    if done.returncode != 0:
        raise ExportFailed(failure_line(done.returncode, done.stderr))
    said = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    return Exported(folder, said[-1] if said else f"wrote the export into {folder}")


def failure_line(returncode: int, stderr: str) -> str:
    """The CLI's refusal ("cuco: ..." on stderr), else stderr's last line, else the exit status."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    refusal = [line for line in lines if line.startswith("cuco: ")]
    if refusal:
        return refusal[-1].removeprefix("cuco: ")
    return lines[-1] if lines else f"`cuco export` exited with status {returncode} and said nothing"
