"""A profile asked for from the TUI, run outside its process: what cannot be profiled (said in one
line before anything starts), the command that takes the profile (by default the CLI's own, `cuco
eval ID --session S --profile SHAPE`, which evaluates the candidate and keeps the profile with it:
cli/profile.py, lineage/profiles.py), and the one run at a time, with its one-line reason when it
fails. No Textual here: app/profiles.py asks, shows and waits on this from its workers.

A subprocess and not the cascade in a thread: the profile's evaluation compiles (a minute for a
fused CUTLASS candidate), starts a rank per GPU and records CUPTI activities, and the TUI must answer
keys meanwhile; a process of its own is also one the app can end whole when it quits."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from cuco_tui.core.records import RecordStatus
from cuco_tui.harness.env import child_env
from cuco_tui.harness.gpus import GpuInventory, inventory


@dataclass(frozen=True)
class ProfileRequest:
    """One candidate of a session, profiled at one of its workload's bench shapes."""

    session: Path  # the session folder (absolute)
    candidate_id: str
    shape: str

    def describe(self) -> str:
        return f"{self.candidate_id} at {self.shape}"


@dataclass(frozen=True)
class ProfileEnded:
    request: ProfileRequest
    returncode: int | None  # None: cancelled (the app quit)
    reason: str  # one line when it failed, "" when it ended well
    seconds: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0


# The command that profiles a request; it must keep the profile with the candidate
# (lineage/profiles.keep_profile) and exit 0, or exit non-zero saying why on stderr.
ProfileCommand = Callable[[ProfileRequest], list[str]]


def cuco_eval_command(request: ProfileRequest) -> list[str]:
    """`cuco eval ID --session S --profile SHAPE --json`: the result as JSON on stdout (a failed
    evaluation's status and reason are read from it), nothing but refusals and hints on stderr."""
    return [sys.executable, "-m", "cuco_tui.cli", "eval", request.candidate_id, "--session", str(request.session),
            "--profile", request.shape, "--json"]


# What a profile evaluates again: a candidate that compiled and, where it ran, verified. Any other
# status would fail the same way again (or was never evaluated), with no timeline to show.
PROFILABLE = (RecordStatus.MEASURED, RecordStatus.VERIFIED, RecordStatus.NO_GPU)


def status_refusal(candidate_id: str, status: str) -> str:
    """Why a candidate of this status is not profiled, in one line ("" when it can be)."""
    if status in PROFILABLE:
        return ""
    if status in (RecordStatus.PENDING, RecordStatus.UNREVIEWED, RecordStatus.EXHAUSTED):
        return f"{candidate_id} was never evaluated ({status}): only a candidate that compiled and verified is profiled"
    return (f"{candidate_id} failed its evaluation ({status}): a profile times a candidate that compiled and "
            "verified, so it would only fail again")


def temporary_refusal(candidate_id: str) -> str:
    return (f"{candidate_id} is read from a bundle imported into a temporary folder, deleted when it closes, so its "
            "profile would be lost: `git clone BUNDLE FOLDER` makes it a session of yours, then open that")


def failure_reason(returncode: int | None, stdout: str, stderr: str) -> str:
    """The one line that says why a profile's command failed: the CLI's refusal ("cuco: ..."), else
    the failed evaluation's status and reason (its --json result), else stderr's last line."""
    if returncode is None:
        return "cancelled: cuco-tui quit while it ran"
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    refusal = [line for line in lines if line.startswith("cuco: ")]
    if refusal:
        return refusal[-1].removeprefix("cuco: ")
    try:
        result = json.loads(stdout)
    except ValueError:
        result = None
    if isinstance(result, dict) and result.get("status"):
        reason = " ".join(str(result.get("reason", "")).split())
        return f"{result['status']}: {reason}" if reason else str(result["status"])
    if lines:
        return lines[-1]
    return f"it exited with status {returncode} and said nothing"


class ProfileBusy(RuntimeError):
    """A second profile asked for while one runs (one at a time: both would time on the GPUs)."""


class Profiler:
    """Runs the profiles the TUI asks for, one at a time, each as `command(request)` in a process
    session of its own. `gpus` tells what this machine has (harness/gpus.inventory, as the CLI's
    profile_shape asks). Tests hand in a command of their own and an inventory."""

    def __init__(self, command: ProfileCommand = cuco_eval_command,
                 gpus: Callable[[], GpuInventory] = inventory) -> None:
        self.command = command
        self._gpus = gpus
        self._lock = threading.Lock()  # guards the fields below: run() is on a worker, cancel() anywhere
        self._running: ProfileRequest | None = None
        self._started = 0.0
        self._proc: subprocess.Popen[bytes] | None = None
        self._cancelled = False

    def gpu_refusal(self) -> str:
        """One line when this machine has no GPU to profile on ("" when it has). Blocking (NVML):
        call from a thread."""
        inv = self._gpus()
        if inv.count:
            return ""
        return f"a profile records what the GPUs run, and this machine has none: {inv.problem or 'no GPU found'}"

    @property
    def running(self) -> ProfileRequest | None:
        return self._running

    def elapsed(self) -> float:
        """Seconds the running profile has taken so far (0 when none runs)."""
        return time.monotonic() - self._started if self._running is not None else 0.0

    def run(self, request: ProfileRequest, started: Callable[[], object] | None = None) -> ProfileEnded:
        """Run the profile to its end; blocking (minutes): call from a thread. ProfileBusy while
        another runs; `started` is called once this one is `running`."""
        with self._lock:
            if self._running is not None:
                raise ProfileBusy(f"a profile of {self._running.describe()} is running: one at a time")
            self._running, self._started, self._cancelled = request, time.monotonic(), False
        try:
            if started is not None:
                started()
            return self._run(request)
        finally:
            with self._lock:
                self._running, self._proc = None, None

    def _run(self, request: ProfileRequest) -> ProfileEnded:
        started = time.monotonic()
        try:
            # A session of its own: a Ctrl-C at the terminal is the TUI's, and cancel() ends it whole.
            proc = subprocess.Popen(self.command(request), env=child_env(), stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            return ProfileEnded(request, 127, f"the profile could not start: {exc}", time.monotonic() - started)
        with self._lock:
            self._proc = proc
            cancel = self._cancelled
        if cancel:
            self._end(proc)
        out, err = proc.communicate()
        seconds = time.monotonic() - started
        with self._lock:
            cancelled = self._cancelled
        code = None if cancelled else proc.returncode
        if code == 0:
            return ProfileEnded(request, 0, "", seconds)
        return ProfileEnded(request, code, failure_reason(code, out.decode(errors="replace"),
                                                          err.decode(errors="replace")), seconds)

    def cancel(self) -> None:
        """End the running profile and everything it started (its rank workers and compilers
        run in process sessions of their own); nothing of it is kept."""
        with self._lock:
            if self._running is None:
                return
            self._cancelled = True
            proc = self._proc
        if proc is not None:
            self._end(proc)

    @staticmethod
    def _end(proc: subprocess.Popen[bytes]) -> None:
        from cuco_tui.toolchain.process import kill_child_groups

        kill_child_groups(proc.pid)  # the groups its children lead: ranks, nvcc
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:  # it ended meanwhile
            pass
