"""`cuco search`'s progress lines for long compiles (issue 36, item 20): a line when a build
starts, then, from a timer thread, "still compiling" every 15 s of a build, with how many
builds wait. The clock is the test's: nothing here waits on the wall clock."""

from __future__ import annotations

import threading

from cuco_tui.cli.build_watch import BuildWatch
from cuco_tui.cli.search import ProgressPrinter
from cuco_tui.search import events as ev
from cuco_tui.search.summary import SearchSummary


class Lines:
    """A stream that keeps its lines and tells a waiting test each time one is written."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.written = threading.Condition()

    def write(self, text: str) -> None:
        with self.written:
            self.lines.append(text)
            self.written.notify_all()

    def flush(self) -> None:
        pass

    def wait_for(self, words: str, timeout: float = 30.0) -> bool:
        with self.written:
            return self.written.wait_for(lambda: any(words in line for line in self.lines), timeout)


def test_a_build_start_is_one_line_with_the_queue_behind_it():
    line = ProgressPrinter(None).line
    assert line(ev.BuildStarted(candidate="c0004", queued=2)) == "c0004 L1: compiling (2 more queued)"
    assert line(ev.BuildStarted(candidate="c0004", queued=0)) == "c0004 L1: compiling"
    assert line(ev.BuildQueued(candidate="c0005", queued=1)) == ""  # its start says it


def test_a_long_build_is_said_every_15_seconds_and_its_end_once():
    said: list[str] = []
    watch = BuildWatch(said.append, every=15.0, clock=lambda: 0.0)
    watch.observe(ev.BuildQueued(candidate="c0004", queued=1, at=990.0))
    watch.observe(ev.BuildStarted(candidate="c0004", queued=0, at=1000.0))
    watch.observe(ev.BuildQueued(candidate="c0005", queued=1, at=1001.0))
    watch.observe(ev.BuildQueued(candidate="c0006", queued=2, at=1002.0))
    watch.stop()  # no thread: the test calls due() itself
    assert watch.due(1010.0) == []
    assert watch.due(1015.0) == ["still compiling c0004 (15 s; 2 queued)"]
    assert watch.due(1020.0) == []
    assert watch.due(1046.0) == ["still compiling c0004 (46 s; 2 queued)"]  # one line, however late the look
    assert watch.due(1059.0) == []
    watch.observe(ev.StageFinished(candidate="c0004", level=1, seconds=52.0, at=1052.0))
    assert said == ["compiled c0004 in 52 s"] and watch.due(1100.0) == []
    watch.observe(ev.BuildStarted(candidate="c0005", queued=1, at=1052.0))
    watch.observe(ev.StageFinished(candidate="c0005", level=1, seconds=3.0, at=1055.0))
    assert said == ["compiled c0004 in 52 s"]  # a short build: its start was enough


def test_the_printer_says_a_build_is_still_compiling_from_its_own_thread():
    out = Lines()
    clock = [1000.0]
    printer = ProgressPrinter(out, watch=lambda say: BuildWatch(say, poll=0.01, clock=lambda: clock[0]))
    printer(ev.BuildStarted(candidate="c0004", queued=1, at=1000.0))
    assert out.wait_for("c0004 L1: compiling (1 more queued)")
    clock[0] = 1045.0
    assert out.wait_for("still compiling c0004 (45 s; 1 queued)")
    printer(ev.StageFinished(candidate="c0004", level=1, status="compile_error", seconds=50.0, at=1050.0))
    assert out.wait_for("compile failed c0004 in 50 s")
    assert printer.watch.ticking
    printer(ev.SearchFinished(summary=SearchSummary.of([]), reason="done"))
    printer.watch.stop(wait_s=30)
    assert not printer.watch.ticking
