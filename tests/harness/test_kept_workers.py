"""A search's GPU group keeps its rank workers between evaluations (harness/kept.py): the next
plan runs in the same processes when the last ended idle on every rank, and in fresh ones after a
failure, a rank that leaves, or a plan the kept workers cannot run."""

import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from cuco_tui.harness.kept import KeptWorkers, keep_key
from cuco_tui.harness.launcher import run_group
from cuco_tui.harness.plan import PerturbPlan, RunPlan
from cuco_tui.harness.rank_events import Done, Idle, Joined, Leaving
from repo_paths import TESTS

ARGV = [sys.executable, str(TESTS / "fake_serving_rank.py")]


def plan(*behaviours: str) -> RunPlan:
    return RunPlan(mode="evaluate", workload=",".join(behaviours), reference="", library="c.so", shapes=(),
                   rtol=0.02, floor=0.0, warmup=1, repetitions=1, nonce=7)


def run(kept, tmp_path: Path, name: str, *behaviours: str, **changes):
    return run_group(replace(plan(*behaviours), **changes), [0, 1], tmp_path / name, deadline_s=60,
                     worker_argv=ARGV, kept=kept)


def pids(group) -> list[int]:
    return [r.last(Joined).pid for r in group.ranks]


def gone(pid: int, settle_s: float = 5.0) -> bool:
    end = time.monotonic() + settle_s
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
            if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
                return True
        except (ProcessLookupError, OSError):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def kept():
    workers = KeptWorkers()
    yield workers
    workers.close()


def test_the_next_plan_runs_in_the_same_processes_and_close_ends_them(kept, tmp_path):
    first = run(kept, tmp_path, "a", "ok", "ok")
    second = run(kept, tmp_path, "b", "ok", "ok")
    for group in (first, second):
        assert [r.exit_code for r in group.ranks] == [0, 0] and not group.aborted
        assert all(r.last(Done) and r.last(Idle) for r in group.ranks)
    assert pids(second) == pids(first)
    assert [r.last(Joined).plans for r in second.ranks] == [1, 1]
    assert "ran plan 2" in second.ranks[0].stdout_tail and "ran plan 1" not in second.ranks[0].stdout_tail
    assert kept.close() == pids(first)
    assert all(gone(pid) for pid in pids(first))


def test_a_failed_plan_ends_the_group_and_the_next_starts_fresh(kept, tmp_path):
    first = run(kept, tmp_path, "a", "ok", "ok")
    failed = run(kept, tmp_path, "b", "hang", "error")
    assert failed.aborted and failed.ranks[1].exit_code == 2
    assert all(gone(pid) for pid in pids(first))
    third = run(kept, tmp_path, "c", "ok", "ok")
    assert not set(pids(third)) & set(pids(first)) and [r.last(Joined).plans for r in third.ranks] == [0, 0]


def test_a_rank_that_leaves_ends_the_group_after_its_results(kept, tmp_path):
    first = run(kept, tmp_path, "a", "leave", "leave")
    assert [r.exit_code for r in first.ranks] == [0, 0] and all(r.last(Done) for r in first.ranks)
    assert first.ranks[0].last(Leaving).reason.startswith("1000 MiB")
    second = run(kept, tmp_path, "b", "ok", "ok")
    assert not set(pids(second)) & set(pids(first))


def test_a_plan_the_kept_workers_cannot_run_gets_fresh_ones_and_ends_them(kept, tmp_path):
    first = run(kept, tmp_path, "a", "ok", "ok")
    sanitized = run(kept, tmp_path, "b", "ok", "ok", sanitize="memcheck")
    assert not set(pids(sanitized)) & set(pids(first)) and not any(r.last(Idle) for r in sanitized.ranks)
    assert all(gone(pid) for pid in pids(first) + pids(sanitized))


def test_only_plans_that_agree_on_what_workers_fix_share_them():
    placed = plan("ok").placed([0, 1], "/r")
    assert keep_key(placed) == keep_key(placed.placed([0, 1], "/other"))
    perturbed = replace(placed, perturb=PerturbPlan(library="/p.so", seed=1, rounds=2, unit_us=2000))
    assert keep_key(perturbed) != keep_key(placed)
    assert keep_key(placed.placed([2, 3], "/r")) != keep_key(placed)
    for unkept in (replace(placed, mode="baseline"), replace(placed, shared_gpu=True), plan("ok")):
        assert keep_key(unkept) is None


def test_workers_given_back_after_close_are_ended(tmp_path):
    """An evaluation still running when the search leaves at once gives its workers back to a
    closed set: they are ended, not kept idle on the GPUs."""
    import subprocess

    from cuco_tui.harness.kept import KeepKey, KeptWorker

    workers = KeptWorkers()
    workers.close(wait=False)
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE,
                            start_new_session=True)
    workers.keep(KeepKey((0, 1), None, 0, 1.0), [KeptWorker(proc, proc.stdin, tmp_path / "o", tmp_path / "e")])
    assert proc.poll() is not None and gone(proc.pid)
    assert workers.take(KeepKey((0, 1), None, 0, 1.0)) == ([], [])
