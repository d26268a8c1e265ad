"""Compiling ahead: candidates built on CPU threads while the GPUs are busy, into the same
content-keyed cache the evaluator reads, so the cascade's own compile step finds the library
ready. A fused CUTLASS candidate takes a minute to build, so the pool tells its caller when a
build is queued and when a builder takes it, with how many wait (the search's build progress)."""

from __future__ import annotations

import threading
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from pathlib import Path
from typing import Callable

from cuco_tui.toolchain.nvcc import BuildCache, BuildResult, compile_candidate
from cuco_tui.toolchain.toolchain import Toolchain

QueueFn = Callable[[int], None]  # told how many builds wait for a builder


class BuildPool:
    """Compiles candidates on CPU threads, into the same content-keyed cache the evaluator
    reads, so its own compile step finds the library ready."""

    def __init__(self, workers: int, toolchain: Toolchain | None = None, cache: BuildCache | None = None) -> None:
        self._executor = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="cuco-build")
        self._toolchain = toolchain
        self._cache = cache
        self._lock = threading.Lock()
        # Held while the count of waiting builds changes and while the caller is told of it, so
        # what it hears comes in the order it happened: a build queued before it started, and
        # each count the one of that moment. Reentrant: a watcher told may submit a build itself.
        self._queue = threading.RLock()
        self._waiting = 0
        self._running = 0
        self._closed = False  # shut down without waiting: a build taken up after it starts no compiler

    def _tools(self) -> Toolchain:
        with self._lock:
            if self._toolchain is None:
                from cuco_tui.toolchain.toolchain import discover

                self._toolchain = discover()
            return self._toolchain

    @property
    def running(self) -> int:
        """Builds a builder has taken and not finished (their compiler may be running)."""
        with self._queue:
            return self._running

    @property
    def waiting(self) -> int:
        """Builds submitted that no builder has taken yet."""
        with self._queue:
            return self._waiting

    def submit(self, source: Path, queued: QueueFn | None = None, started: QueueFn | None = None) -> Future[BuildResult]:
        """Build `source` on a builder thread. `queued(n)` is called at once (n: the builds now
        waiting, this one included), `started(n)` on the builder as it begins (n: those still
        waiting). Both are called one at a time, in the order the counts changed."""

        def build() -> BuildResult:
            with self._queue:
                self._waiting -= 1
                if self._closed:  # counted as running or refused under one lock: a caller that kills
                    raise CancelledError()  # the compilers after shutdown misses none
                if started is not None:
                    started(self._waiting)
                self._running += 1
            try:
                return compile_candidate(source, self._tools(), self._cache or BuildCache())
            finally:
                with self._queue:
                    self._running -= 1

        with self._queue:
            self._waiting += 1
            if queued is not None:
                queued(self._waiting)
            return self._executor.submit(build)

    def shutdown(self, wait: bool = True) -> None:
        if not wait:
            with self._queue:
                self._closed = True
        self._executor.shutdown(wait=wait, cancel_futures=not wait)
