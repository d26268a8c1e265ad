"""A rank's watchdog thread, and the wait trace it dumps.

The watchdog enforces each step's time limit: on expiry, or when the launcher asks by creating
the `abort` file, it writes this rank's wait trace (the pinned slots `cuco::wait_geq` and
`cuco::lsa_barrier_sync` fill, readable while a kernel hangs) into the event file and ends the
process at once."""

from __future__ import annotations

import ctypes
import os
import threading
import time
from pathlib import Path
from typing import Any

from cuco_tui.harness import abi
from cuco_tui.harness.rank_events import (EXIT_ABORTED, EXIT_FAILED, EXIT_OK, EXIT_TIMEOUT, Aborted, CloseWarning,
                                          EventLog, Failed, Stopped, TimedOut)


class TraceMemory:
    """Pinned, mapped host memory for the candidate's wait slots: the device writes it, and
    this process reads it even while a kernel hangs."""

    def __init__(self, cupy: Any, slots: int) -> None:
        self.slots = slots
        self.bytes = slots * ctypes.sizeof(abi.CWaitSlot)
        self.host_ptr = 0
        if slots > 0:  # 0 slots: tracing off (to measure what it costs); the helpers then skip it
            self.host_ptr = cupy.cuda.runtime.hostAlloc(self.bytes, cupy.cuda.runtime.hostAllocMapped)
            ctypes.memset(self.host_ptr, 0, self.bytes)
        # Unified addressing: memory from cudaHostAlloc(mapped) has the same address on the device.
        self.device_ptr = self.host_ptr

    def records(self) -> list[dict[str, Any]]:
        if not self.host_ptr:
            return []
        return [r.__dict__ for r in abi.decode_slots(ctypes.string_at(self.host_ptr, self.bytes))]


class Watchdog(threading.Thread):
    """Ends the process when the armed step overruns, or when the launcher asks."""

    def __init__(self, log: EventLog, abort_file: Path, scale: float = 1.0) -> None:
        """`scale` widens every step's limit (a rank running under compute-sanitizer)."""
        super().__init__(daemon=True)
        self.log = log
        self.abort_file = abort_file
        self.scale = scale
        self.deadline: float | None = None
        self.what = ""
        self.limit = 0.0
        self.trace: TraceMemory | None = None
        self.phase = ""
        self.device: int | None = None  # set once the rank has joined: enables the health probe
        self.cupy: Any = None

    def follow(self, log: EventLog, abort_file: Path) -> None:
        """A kept worker's next plan: its event file, and the abort file of its run folder."""
        self.log, self.abort_file = log, abort_file
        self.phase, self.what = "", ""
        self.disarm()

    def arm(self, seconds: float, what: str) -> None:
        self.what, self.limit = what, seconds * self.scale
        self.deadline = time.monotonic() + self.limit

    def disarm(self) -> None:
        self.deadline = None

    def run(self) -> None:
        ticks = 0
        while True:
            time.sleep(0.02)
            ticks += 1
            if self.abort_file.exists():
                if self.phase == "close":
                    self.log.emit(CloseWarning(message="the launcher stopped the group while this rank closed it"))
                    os._exit(EXIT_OK)
                self._die(Aborted, EXIT_ABORTED, "the launcher stopped the group after another rank failed")
            deadline = self.deadline
            if deadline is not None and time.monotonic() > deadline:
                if self.phase == "close":  # every result is in: say so and leave
                    self.log.emit(CloseWarning(message=f"{self.what} did not finish within {self.limit:.1f} s"))
                    os._exit(EXIT_OK)
                self._die(TimedOut, EXIT_TIMEOUT, f"{self.what} did not finish within {self.limit:.1f} s")
            device = self.device  # read once: a kept worker turns the probe off from another thread
            if ticks % 10 == 0 and device is not None:
                self._probe_health(device)

    def _probe_health(self, device: int) -> None:
        """A kernel fault (illegal address, ...) poisons the context at once, but event and
        stream queries can go on answering 'not ready' for as long as the faulted kernel's
        stream looks busy (seen on H200 VMs: never, within 45 s). cudaMemGetInfo reports
        the sticky error at once, so the watchdog asks it five times a second."""
        try:
            with self.cupy.cuda.Device(device):
                self.cupy.cuda.runtime.memGetInfo()
        except self.cupy.cuda.runtime.CUDARuntimeError as exc:
            self.log.emit(Failed(kind="cuda", phase=self.phase, message=f"{exc} (during {self.what or self.phase})",
                                 trace=tuple(self.trace.records()) if self.trace else ()))
            os._exit(EXIT_FAILED)

    def _die(self, event: type[Stopped], code: int, message: str) -> None:
        trace = tuple(self.trace.records()) if self.trace else ()
        self.log.emit(event(phase=self.phase, what=self.what, limit_s=self.limit, message=message, trace=trace))
        os._exit(code)
