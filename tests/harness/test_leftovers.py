"""A kept worker takes another plan only when the candidate left nothing behind that would change
the next plan: GPU memory, a thread still running, a device limit."""

import threading

from cuco_tui.harness.leftovers import (IDLE_THREADS, MEMORY_SLACK_BYTES, ProcessState, busy_threads, left_behind,
                                        thread_ids)

MiB = 1 << 20
BEFORE = ProcessState(free_bytes=70_000 * MiB, threads=(1, 2, 3), limits=(1024, 1 << 20, 8 << 20, 64, 0))


def test_nothing_left_behind_within_the_drivers_own_slack_and_idle_threads():
    after = ProcessState(free_bytes=70_000 * MiB - MEMORY_SLACK_BYTES, threads=(1, 2, 3, 40, 41),
                         busy={1: "python3"}, limits=BEFORE.limits)
    assert left_behind(BEFORE, after) == ""


def test_a_leaked_buffer_a_running_thread_and_a_changed_limit_are_named():
    after = ProcessState(free_bytes=69_000 * MiB, threads=(1, 2, 3, 40), busy={40: "spinner"},
                         limits=(1024, 1 << 20, 8 << 20, 64, 30 << 20))
    found = left_behind(BEFORE, after)
    assert "1 thread(s) started since the group's first candidate still running (spinner)" in found
    assert "1000 MiB of GPU memory" in found
    assert "a device limit changed (persisting-L2 size 0 -> 31457280)" in found


def test_a_stack_the_runtime_grew_for_a_kernel_is_no_leftover_and_a_smaller_one_is():
    grown = ProcessState(free_bytes=BEFORE.free_bytes, threads=BEFORE.threads, limits=(4096,) + BEFORE.limits[1:])
    assert left_behind(BEFORE, grown) == ""
    shrunk = ProcessState(free_bytes=BEFORE.free_bytes, threads=BEFORE.threads, limits=(512,) + BEFORE.limits[1:])
    assert left_behind(BEFORE, shrunk) == "a device limit changed (stack size 1024 -> 512)"


def test_too_many_idle_threads_are_named():
    after = ProcessState(free_bytes=BEFORE.free_bytes, threads=tuple(range(1, 5 + IDLE_THREADS)), limits=BEFORE.limits)
    assert "more threads than before" in left_behind(BEFORE, after)


def test_a_spinning_thread_of_this_process_is_seen_and_a_sleeping_one_is_not():
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            pass

    spinner = threading.Thread(target=spin, name="spinner", daemon=True)
    sleeper = threading.Thread(target=stop.wait, name="sleeper", daemon=True)
    spinner.start()
    sleeper.start()
    try:
        assert spinner.native_id in thread_ids() and sleeper.native_id in thread_ids()
        busy = busy_threads({threading.get_native_id()}, sample_s=0.5)
    finally:
        stop.set()
    assert spinner.native_id in busy and sleeper.native_id not in busy
