"""Long compiles in the headless search's progress: a fused CUTLASS candidate compiles for a
minute or more, between its "proposed" and "committed" lines. BuildWatch follows the compiles
the engine reports (BuildStarted, then the candidate's end of L1) and, from a timer thread,
says every `every` seconds which one is still compiling and for how long:
`still compiling c0004 (45 s; 2 queued)`. Times are the events' wall-clock `at` against
`clock` (a test gives its own clock and calls `due` itself, or waits on the line written)."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

EVERY_S = 15.0  # a build quiet for this long gets a line, and again each time as long again
POLL_S = 1.0  # how often the timer thread looks


class BuildWatch:
    def __init__(self, say: Callable[[str], None], *, every: float = EVERY_S, poll: float = POLL_S,
                 clock: Callable[[], float] = time.time) -> None:
        self._say = say
        self.every = every
        self._poll = poll
        self._clock = clock
        self._lock = threading.Lock()
        self._building: dict[str, tuple[float, float]] = {}  # candidate -> (began, next line due)
        self._queued = 0  # builds waiting for a builder, as last reported
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def observe(self, e: Any) -> None:
        """Take in an engine event (cuco_tui.search.events)."""
        from cuco_tui.search import events as ev

        ended = ""
        with self._lock:
            if isinstance(e, (ev.BuildQueued, ev.BuildStarted)):
                self._queued = e.queued
            if isinstance(e, ev.BuildStarted):
                self._building[e.candidate] = (e.at, e.at + self.every)
            elif isinstance(e, ev.StageFinished) and e.level == 1 and e.candidate in self._building:
                began, next_due = self._building.pop(e.candidate)
                if next_due > began + self.every:  # it was said to be compiling still: say it ended
                    ended = (f"{'compile failed' if e.status else 'compiled'} {e.candidate} "
                             f"in {e.at - began:.0f} s")
            elif isinstance(e, ev.StageStarted) and e.level != 1:
                self._building.pop(e.candidate, None)
            elif isinstance(e, ev.CandidateCommitted):
                self._building.pop(e.record.id, None)
            elif isinstance(e, ev.JobChanged) and e.state == "cancelled":
                self._building.pop(e.candidate, None)
        if ended:
            self._say(ended)
        if isinstance(e, ev.BuildStarted):
            self.start()
        elif isinstance(e, ev.SearchFinished):
            self.stop()

    def due(self, now: float) -> list[str]:
        """The lines owed at `now`: each build compiling past its next multiple of `every`."""
        lines = []
        with self._lock:
            for cid, (began, next_due) in list(self._building.items()):
                if now < next_due:
                    continue
                queued = f"; {self._queued} queued" if self._queued else ""
                lines.append(f"still compiling {cid} ({now - began:.0f} s{queued})")
                while next_due <= now:
                    next_due += self.every
                self._building[cid] = (began, next_due)
        return lines

    def start(self) -> None:
        """The timer thread, once (a daemon: an interrupted search does not wait for it)."""
        with self._lock:
            if self._thread is not None or self._stop.is_set():
                return
            self._thread = threading.Thread(target=self._run, name="cuco-build-watch", daemon=True)
        self._thread.start()

    def stop(self, wait_s: float = 0.0) -> None:
        """No more lines from the timer; `wait_s`: wait that long for its thread to end."""
        self._stop.set()
        thread = self._thread
        if wait_s and thread is not None:
            thread.join(wait_s)

    @property
    def ticking(self) -> bool:
        """The timer thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.wait(self._poll):
            for line in self.due(self._clock()):
                self._say(line)
