"""Compiling ahead: candidates built on CPU threads while the GPUs are busy, into the same
content-keyed cache the evaluator reads, so the cascade's own compile step finds the library
ready."""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from cuco_tui.toolchain.nvcc import BuildCache, BuildResult, compile_candidate
from cuco_tui.toolchain.toolchain import Toolchain


class BuildPool:
    """Compiles candidates on CPU threads, into the same content-keyed cache the evaluator
    reads, so its own compile step finds the library ready."""

    def __init__(self, workers: int, toolchain: Toolchain | None = None, cache: BuildCache | None = None) -> None:
        self._executor = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="cuco-build")
        self._toolchain = toolchain
        self._cache = cache
        self._lock = threading.Lock()

    def _tools(self) -> Toolchain:
        with self._lock:
            if self._toolchain is None:
                from cuco_tui.toolchain.toolchain import discover

                self._toolchain = discover()
            return self._toolchain

    def submit(self, source: Path) -> Future[BuildResult]:
        return self._executor.submit(lambda: compile_candidate(source, self._tools(), self._cache or BuildCache()))

    def shutdown(self, wait: bool = True) -> None:
        self._executor.shutdown(wait=wait, cancel_futures=not wait)
