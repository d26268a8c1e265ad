"""The rank watchdog (harness/watchdog.py) in a process of its own: it ends the process with the
documented exit code and event when an armed step overruns or the launcher asks, and only warns
while the group is closing. No GPU: these paths run before any health probe is enabled."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cuco_tui.harness.rank_events import Aborted, CloseWarning, RankEvent, TimedOut, read_events

SCRIPT = """
import sys, time
from pathlib import Path
from cuco_tui.harness.rank_events import EventLog
from cuco_tui.harness.watchdog import Watchdog
rundir, phase, arm = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])
log = EventLog(rundir / "rank0.jsonl", 0)
dog = Watchdog(log, rundir / "abort")
dog.phase = phase
dog.start()
if arm > 0:
    dog.arm(arm, "a step that never ends")
time.sleep(20)
sys.exit(3)
"""


def _run(tmp_path: Path, phase: str, arm: float) -> tuple[int, list[RankEvent]]:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path), phase, str(arm)], timeout=60)
    return proc.returncode, read_events(tmp_path / "rank0.jsonl")


def test_an_overrun_step_ends_the_rank_with_a_timeout_event(tmp_path):
    code, events = _run(tmp_path, "verify:small", 0.2)
    assert code == 124
    assert [type(e) for e in events] == [TimedOut]
    e = events[0]
    assert e.what == "a step that never ends" and e.phase == "verify:small" and e.limit_s == 0.2
    assert e.trace == () and "did not finish within 0.2 s" in e.message


def test_the_abort_file_ends_the_rank_with_an_aborted_event(tmp_path):
    (tmp_path / "abort").touch()
    code, events = _run(tmp_path, "bench:large", 0)
    assert code == 125
    assert [type(e) for e in events] == [Aborted]
    assert events[0].phase == "bench:large" and "another rank failed" in events[0].message


def test_while_closing_the_group_an_overrun_is_only_a_warning(tmp_path):
    code, events = _run(tmp_path, "close", 0.2)
    assert code == 0
    assert [type(e) for e in events] == [CloseWarning]
