"""Rank workers kept between the evaluations of one GPU group.

Starting a group of rank workers costs seconds before the first check (on 2 x H100: 2.5 s of an
8.5 s evaluation: Python and CuPy, the CUDA context, the harness's NCCL group) and its end about
another second. A search evaluates candidate after candidate on the same GPUs, so the launcher
(harness/launcher.py) can keep the group: workers started with `--serve` finish a plan with
`Idle` instead of exiting and take the path of the next plan on their stdin. A plan goes to kept
workers only when it needs nothing they cannot give (`keep_key`: the same GPUs, perturber and
tracing, no compute-sanitizer, no profile, no ranks sharing a GPU); a run that fails anywhere, or
a rank that finds what the candidate left behind (harness/leftovers.py), ends the group as before,
and the next plan starts fresh workers."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from cuco_tui.harness.plan import RunPlan

CLOSE_WAIT_S = 10.0  # for kept workers to close their NCCL group and exit once their stdin ends


@dataclass(frozen=True)
class KeepKey:
    """What the workers of a group fix when they start, so that only a plan that agrees on all of
    it may run in them."""

    gpus: tuple[int, ...]
    perturber: str | None  # the interposer's library, loaded before CuPy
    trace_slots: int
    time_scale: float


def keep_key(plan: RunPlan) -> KeepKey | None:
    """The key of a placed plan, or None when it must run in fresh workers: a baseline run, a run
    under compute-sanitizer (the tool wraps the process) or with a profile (CUPTI), ranks sharing
    a GPU (each rank's environment names the run)."""
    if plan.mode != "evaluate" or plan.sanitize or plan.profile is not None or plan.shared_gpu or not plan.gpus:
        return None
    return KeepKey(gpus=plan.gpus, perturber=plan.perturb.library if plan.perturb else None,
                   trace_slots=plan.trace_slots, time_scale=plan.limits.time_scale)


@dataclass
class KeptWorker:
    """One rank's kept process, with where its output goes (the first run folder of the group)."""

    proc: subprocess.Popen
    stdin: IO[bytes] | None  # None: a worker that reads no more plans
    stdout: Path
    stderr: Path


class KeptWorkers:
    """The kept workers of one GPU group: at most one set, of one key, lent to one run at a time
    (the GPU group's lease makes sure of it; the lock keeps the bookkeeping whole all the same).
    Once closed, it keeps nothing: workers given back after `close` are ended."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: KeepKey | None = None
        self._workers: list[KeptWorker] = []
        self._closed = False

    def take(self, key: KeepKey) -> tuple[list[KeptWorker], list[int]]:
        """The live workers of `key`, now the caller's (give them back with `keep`), and the pids
        of the workers it ended instead (of another key, or a set with a rank gone): the caller
        waits for their GPUs to be released before it starts fresh ones."""
        with self._lock:
            workers, self._workers = self._workers, []
            same = self._key == key
            self._key = None
        if same and workers and all(w.proc.poll() is None for w in workers):
            return workers, []
        return [], end(workers)

    def keep(self, key: KeepKey, workers: list[KeptWorker]) -> None:
        """Workers that finished a plan of `key` idle, for the next one."""
        with self._lock:
            if self._closed:
                stale = workers
            else:
                stale, self._workers, self._key = self._workers, workers, key
        end(stale)

    def close(self, wait: bool = True) -> list[int]:
        """End the kept workers and keep none from now on; the pids that were running. `wait`: let
        each close its NCCL group and exit (CLOSE_WAIT_S at most); else kill them at once."""
        with self._lock:
            workers, self._workers, self._key = self._workers, [], None
            self._closed = True
        return end(workers, CLOSE_WAIT_S if wait else 0.0)

    def end_kept(self) -> list[int]:
        """End the kept workers now (a run that needs fresh ones), and go on keeping later ones."""
        with self._lock:
            workers, self._workers, self._key = self._workers, [], None
        return end(workers)


def end(workers: list[KeptWorker], wait_s: float = CLOSE_WAIT_S) -> list[int]:
    """Close the workers' stdin (a kept worker then closes its group and exits), wait up to
    `wait_s`, then kill what is left, each worker's whole process group; their pids."""
    for w in workers:
        try:
            if w.stdin is not None:
                w.stdin.close()
        except OSError:
            pass
    deadline = time.monotonic() + wait_s
    for w in workers:
        try:
            w.proc.wait(max(deadline - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(w.proc.pid, signal.SIGKILL)  # the worker, or what it left in its session
        except (ProcessLookupError, PermissionError):
            pass
        w.proc.wait()
    return [w.proc.pid for w in workers]
