"""Starting a group of rank workers on a set of GPUs and making sure none outlives the run.

Each worker runs in its own session (process group), so killing it kills anything it
started. The launcher reads the workers' event files as they grow, and ends the group
when a rank fails (after a short grace, during which the others dump their wait traces),
when every rank is done, or when the whole run overruns its deadline. Afterwards it waits
until NVML shows none of the group's processes on the GPUs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from cuco_tui.harness.env import child_env
from cuco_tui.harness.gpus import compute_pids, is_shared
from cuco_tui.harness.plan import RunPlan
from cuco_tui.harness.rank_events import E, Joined, RankEvent, parse_line

ABORT_GRACE_S = 3.0
RELEASE_WAIT_S = 30.0


@dataclass
class RankOutcome:
    rank: int
    gpu: int
    pid: int
    exit_code: int | None  # None: it had to be killed
    events: list[RankEvent] = field(default_factory=list)
    stdout_tail: str = ""
    stderr_tail: str = ""
    killed: bool = False

    def last(self, kind: type[E]) -> E | None:
        """The last event of this type (a subclass counts) the rank reported."""
        for e in reversed(self.events):
            if isinstance(e, kind):
                return e
        return None

    def of(self, kind: type[E]) -> list[E]:
        return [e for e in self.events if isinstance(e, kind)]

    def describe_exit(self) -> str:
        if self.killed:
            return "killed by the launcher"
        if self.exit_code is None:
            return "still running"
        if self.exit_code < 0:
            try:
                return f"died of {signal.Signals(-self.exit_code).name}"
            except ValueError:
                return f"died of signal {-self.exit_code}"
        return f"exited with code {self.exit_code}"


@dataclass
class GroupRun:
    ranks: list[RankOutcome]
    seconds: float
    deadline_hit: bool
    aborted: bool  # the launcher ended the group early after a failure
    gpus_released: bool
    rundir: Path


class _Tail:
    """Reads the complete lines appended to a file since the last call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""

    def read(self) -> list[RankEvent]:
        if not self.path.exists():
            return []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        self.offset += len(data)
        data = self.partial + data
        lines = data.split(b"\n")
        self.partial = lines.pop()
        # A line that is not JSON comes back Garbled; the unfinished last line waits for its newline
        # (a rank killed while writing it never completes it, and it is dropped).
        return [parse_line(line) for line in lines if line.strip()]


def _tail_text(path: Path, limit: int = 4000) -> str:
    if not path.exists():
        return ""
    data = path.read_bytes()
    return data[-limit:].decode(errors="replace")


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_group(
    plan: RunPlan,
    gpus: list[int],
    rundir: Path,
    deadline_s: float,
    on_event: Callable[[RankEvent], None] | None = None,
    worker_argv: list[str] | None = None,
) -> GroupRun:
    """Run one worker per GPU of `gpus` over `plan`, and return what each rank reported.

    `worker_argv` replaces `python -m cuco_tui.harness.worker` (the tests use it to start
    programs that hang or crash on purpose)."""
    rundir.mkdir(parents=True, exist_ok=True)
    plan = plan.placed(gpus, str(rundir))
    plan_path = rundir / "plan.json"
    plan_path.write_text(json.dumps(plan.to_json(), indent=1))
    argv = worker_argv or [sys.executable, "-m", "cuco_tui.harness.worker"]
    procs: list[subprocess.Popen] = []
    outcomes: list[RankOutcome] = []
    tails = []
    start = time.monotonic()
    shared = is_shared(gpus)  # only with share_gpu: choose_gpus refuses repeats otherwise
    try:
        for rank, gpu in enumerate(gpus):
            # NCCL refuses two ranks on one GPU of one host; a host id of their own per rank makes
            # them separate hosts to it, joined through sockets (a correctness check, see --share-gpu).
            # Sockets by name: on a host with InfiniBand NCCL would otherwise pick that.
            extra = None
            if shared:
                extra = {"NCCL_HOSTID": f"cuco-{plan.nonce}-rank{rank}", "NCCL_NET": "Socket"}
            out = open(rundir / f"rank{rank}.stdout", "wb")
            err = open(rundir / f"rank{rank}.stderr", "wb")
            proc = subprocess.Popen(
                argv + ["--plan", str(plan_path), "--rank", str(rank)],
                stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                env=child_env(extra), start_new_session=True,
            )
            out.close()
            err.close()
            procs.append(proc)
            outcomes.append(RankOutcome(rank, gpu, proc.pid, None))
            tails.append(_Tail(rundir / f"rank{rank}.jsonl"))
        deadline_hit = aborted = False
        abort_at: float | None = None
        while True:
            for outcome, tail in zip(outcomes, tails):
                for event in tail.read():
                    outcome.events.append(event)
                    if on_event:
                        on_event(event)
            codes = [p.poll() for p in procs]
            if all(c is not None for c in codes):
                break
            now = time.monotonic()
            failed = any(c not in (None, 0) for c in codes)
            if abort_at is None and (failed or now - start > deadline_s):
                deadline_hit = not failed
                aborted = True
                (rundir / "abort").touch()  # the others dump their traces and exit
                abort_at = now
            if abort_at is not None and now - abort_at > ABORT_GRACE_S * plan.limits.time_scale:
                for outcome, proc in zip(outcomes, procs):
                    if proc.poll() is None:
                        _kill_group(proc)
                        outcome.killed = True
                for proc in procs:
                    proc.wait()
                break
            time.sleep(0.05)
    finally:
        for proc in procs:  # also on KeyboardInterrupt: no rank survives its launcher
            if proc.poll() is None:
                _kill_group(proc)
                proc.wait()
            else:
                _kill_group(proc)  # anything a finished rank left behind in its session
    for outcome, tail, proc in zip(outcomes, tails, procs):
        outcome.events.extend(tail.read())
        outcome.exit_code = None if outcome.killed else proc.returncode
        outcome.stdout_tail = _tail_text(rundir / f"rank{outcome.rank}.stdout")
        outcome.stderr_tail = _tail_text(rundir / f"rank{outcome.rank}.stderr")
    # A rank started under a tool (compute-sanitizer) holds its GPU from the worker, the tool's child.
    released = wait_released(gpus, {joined.pid if (joined := o.last(Joined)) else o.pid for o in outcomes})
    return GroupRun(outcomes, time.monotonic() - start, deadline_hit, aborted, released, rundir)


def wait_released(gpus: list[int], pids: set[int], limit_s: float = RELEASE_WAIT_S) -> bool:
    """Wait until none of `pids` holds a context on `gpus` (the driver tears a killed
    process's context down asynchronously). False if they are still there after `limit_s`."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if not (compute_pids(gpus) & pids):
            return True
        time.sleep(0.2)
    return not (compute_pids(gpus) & pids)
