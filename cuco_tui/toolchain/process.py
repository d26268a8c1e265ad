"""Running the compiler: every child process's environment, a lower CPU priority, a time limit
that kills the whole process group, and removing a temporary file whatever happened to it.
Shared by the candidate build (nvcc.py) and the libraries built once per machine (attention.py,
perturb.py, tile_gemm_lib.py).

And leaving at once: every long child cuco starts runs in a session of its own (nvcc with the
cicc, ptxas and gcc it starts; each evaluation's rank workers; compute-sanitizer), so a Ctrl-C at
the terminal does not reach it and a kill of its group takes all of it. A command that leaves at
once (a second Ctrl-C on `cuco search`) kills those groups (kill_child_groups) instead of waiting
for a compile or a GPU run to end by itself. Children that share our own group (git, short tool
calls) are not found. Linux only (/proc); elsewhere nothing is found."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

from cuco_tui.harness.env import child_env

def unlink_quietly(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


# Builds run at a lower CPU priority: several compile at once while the TUI must answer keys
# within 100 ms on the same cores (measured on 2 cores with 4 builds: the UI starved otherwise).
# `nice` and not preexec_fn, which is unsafe in a process with threads.
_NICE = ["nice", "-n", "10"] if shutil.which("nice") else []


def run_tool(command: list[str], cwd: Path, timeout: float) -> tuple[int | None, str]:
    """(exit status or None on timeout, combined output). On a timeout the whole process group
    (nvcc and the cicc/ptxas/gcc it started) is killed."""
    proc = subprocess.Popen(_NICE + command, cwd=cwd, env=child_env(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out.decode("utf-8", errors="replace")
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            out, _ = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            out = b""
        return None, (out or b"").decode("utf-8", errors="replace")
    except BaseException:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()
        raise


def killed(rc: int | None, log: str) -> bool:
    """The compiler was killed from outside (a search left at once, the OOM killer), itself or a
    cicc/ptxas it started (nvcc then exits 255 saying which "died due to signal"): no verdict on
    the source, which may well compile next time."""
    return rc is not None and (rc < 0 or "died due to signal" in log)


def definite_failure(rc: int | None, log: str) -> bool:
    """The compiler ran to its end and refused: the only failure a build cache keeps. A timeout
    (rc None) may pass on a less busy machine, a kill says nothing of the source."""
    return rc is not None and rc > 0 and not killed(rc, log)


def install_library(tmp: Path, path: Path, record: Path, facts: dict) -> None:
    """Move a freshly built library into place (atomically: a concurrent reader sees the old state
    or the new, never half a file) and write what is known of its build beside it."""
    os.chmod(tmp, 0o755)
    os.replace(tmp, path)
    record.write_text(json.dumps(facts, indent=1))


def record_failure(record: Path, rc: int | None, log: str, facts: dict) -> None:
    """Keep a failed build's record when, and only when, the failure is definite."""
    if definite_failure(rc, log):
        record.write_text(json.dumps(facts, indent=1))


def child_groups(parent: int | None = None, proc: Path = Path("/proc")) -> list[int]:
    """The process groups led by a child of `parent` (default: this process)."""
    parent = os.getpid() if parent is None else parent
    found: list[int] = []
    try:
        entries = list(proc.iterdir())
    except OSError:
        return found
    for entry in entries:
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) < 3:
            continue
        pid, ppid, pgrp = int(entry.name), int(fields[1]), int(fields[2])
        if ppid == parent and pgrp == pid:
            found.append(pid)
    return sorted(found)


def kill_child_groups(parent: int | None = None) -> list[int]:
    """SIGKILL every process group child_groups() finds; the groups killed."""
    killed = []
    for group in child_groups(parent):
        try:
            os.killpg(group, signal.SIGKILL)
        except OSError:  # it ended meanwhile
            continue
        killed.append(group)
    return killed
