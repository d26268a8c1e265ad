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
from cuco_tui.harness.kept import KeptWorker, KeptWorkers, end, keep_key
from cuco_tui.harness.rank_events import EXIT_OK, E, Idle, Joined, RankEvent, parse_line

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


def _tail_text(path: Path, limit: int = 4000, since: int = 0) -> str:
    """The last `limit` bytes of what `path` holds past offset `since` (a kept worker's output
    of earlier plans comes before it)."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(since, size - limit))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


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
    kept: KeptWorkers | None = None,
) -> GroupRun:
    """Run one worker per GPU of `gpus` over `plan`, and return what each rank reported.

    `worker_argv` replaces `python -m cuco_tui.harness.worker` (the tests use it to start
    programs that hang or crash on purpose; compute-sanitizer wraps the worker with it). With
    `kept`, a plan that fresh workers would not need (harness/kept.py keep_key) runs in the
    group's kept workers when they are there, and the workers are kept for the next plan when
    every rank ends it idle."""
    rundir.mkdir(parents=True, exist_ok=True)
    plan = plan.placed(gpus, str(rundir))
    plan_path = rundir / "plan.json"
    plan_path.write_text(json.dumps(plan.to_json(), indent=1))
    argv = worker_argv or [sys.executable, "-m", "cuco_tui.harness.worker"]
    key = keep_key(plan) if kept is not None else None
    start = time.monotonic()
    workers: list[KeptWorker] = []
    ended: list[int] = []
    if kept is not None and key is not None:
        workers, ended = kept.take(key)
    elif kept is not None:  # a plan they cannot run ends them: they would hold the GPUs' memory idle
        ended = kept.end_kept()
    # What a kept worker wrote before this plan is not this plan's output: its files are read from here.
    offsets = [(_size(w.stdout), _size(w.stderr)) for w in workers]
    sent = _sent(workers, plan_path)
    if workers and not sent:  # one could not take it: none of what any of them began counts
        ended += [w.proc.pid for w in workers]
        for rank in range(len(gpus)):
            (rundir / f"rank{rank}.jsonl").unlink(missing_ok=True)
    workers = sent
    if not workers:
        if ended:  # a killed context is torn down asynchronously: fresh workers start on free GPUs
            wait_released(gpus, set(ended))
        workers = _started(plan, gpus, rundir, plan_path, argv, serve=key is not None)
        offsets = [(0, 0)] * len(workers)
    procs = [w.proc for w in workers]
    outcomes = [RankOutcome(rank, gpu, w.proc.pid, None) for rank, (gpu, w) in enumerate(zip(gpus, workers))]
    tails = [_Tail(rundir / f"rank{rank}.jsonl") for rank in range(len(workers))]
    idle = [False] * len(workers)
    keep = False
    try:
        deadline_hit = aborted = False
        abort_at: float | None = None
        while True:
            for i, (outcome, tail) in enumerate(zip(outcomes, tails)):
                for event in tail.read():
                    outcome.events.append(event)
                    idle[i] = idle[i] or isinstance(event, Idle)
                    if on_event:
                        on_event(event)
            codes = [p.poll() for p in procs]
            if all(c is not None or i for c, i in zip(codes, idle)):
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
        keep = key is not None and not aborted and all(idle) and all(p.poll() is None for p in procs)
    finally:
        if keep:
            assert kept is not None and key is not None
            kept.keep(key, workers)
        else:
            for w in workers:  # also on KeyboardInterrupt: no rank survives its launcher
                if w.proc.poll() is None:
                    _kill_group(w.proc)
                    w.proc.wait()
                else:
                    _kill_group(w.proc)  # anything a finished rank left behind in its session
                if w.stdin is not None:
                    w.stdin.close()
    for outcome, tail, proc, w, (out_at, err_at) in zip(outcomes, tails, procs, workers, offsets):
        outcome.events.extend(tail.read())
        outcome.exit_code = EXIT_OK if keep else (None if outcome.killed else proc.returncode)
        outcome.stdout_tail = _tail_text(w.stdout, since=out_at)
        outcome.stderr_tail = _tail_text(w.stderr, since=err_at)
    if keep:  # the workers hold their GPUs for the next plan, as they should
        return GroupRun(outcomes, time.monotonic() - start, False, False, True, rundir)
    # A rank started under a tool (compute-sanitizer) holds its GPU from the worker, the tool's child.
    released = wait_released(gpus, {joined.pid if (joined := o.last(Joined)) else o.pid for o in outcomes})
    return GroupRun(outcomes, time.monotonic() - start, deadline_hit, aborted, released, rundir)


def _started(plan: RunPlan, gpus: list[int], rundir: Path, plan_path: Path, argv: list[str],
             serve: bool) -> list[KeptWorker]:
    """A fresh worker per GPU (`serve`: one that can be kept, reading more plans from its stdin)."""
    workers: list[KeptWorker] = []
    shared = is_shared(gpus)  # only with share_gpu: choose_gpus refuses repeats otherwise
    try:
        for rank, gpu in enumerate(gpus):
            # NCCL refuses two ranks on one GPU of one host; a host id of their own per rank makes
            # them separate hosts to it, joined through sockets (a correctness check, see --share-gpu).
            # Sockets by name: on a host with InfiniBand NCCL would otherwise pick that.
            extra = None
            if shared:
                extra = {"NCCL_HOSTID": f"cuco-{plan.nonce}-rank{rank}", "NCCL_NET": "Socket"}
            stdout, stderr = rundir / f"rank{rank}.stdout", rundir / f"rank{rank}.stderr"
            out, err = open(stdout, "wb"), open(stderr, "wb")
            proc = subprocess.Popen(
                argv + ["--plan", str(plan_path), "--rank", str(rank)] + (["--serve"] if serve else []),
                stdout=out, stderr=err, stdin=subprocess.PIPE if serve else subprocess.DEVNULL,
                env=child_env(extra), start_new_session=True,
            )
            out.close()
            err.close()
            workers.append(KeptWorker(proc, proc.stdin, stdout, stderr))
    except BaseException:
        for w in workers:
            _kill_group(w.proc)
            w.proc.wait()
        raise
    return workers


def _sent(workers: list[KeptWorker], plan_path: Path) -> list[KeptWorker]:
    """Kept workers given the next plan's path; [] (and the workers ended) when one cannot take it."""
    try:
        for w in workers:
            assert w.stdin is not None  # kept workers were started with --serve
            w.stdin.write(f"{plan_path}\n".encode())
            w.stdin.flush()
    except OSError:  # a worker gone since it said it was idle: the others may have begun, kill them
        end(workers, 0.0)
        return []
    return workers


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def wait_released(gpus: list[int], pids: set[int], limit_s: float = RELEASE_WAIT_S) -> bool:
    """Wait until none of `pids` holds a context on `gpus` (the driver tears a killed
    process's context down asynchronously). False if they are still there after `limit_s`."""
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if not (compute_pids(gpus) & pids):
            return True
        time.sleep(0.2)
    return not (compute_pids(gpus) & pids)
