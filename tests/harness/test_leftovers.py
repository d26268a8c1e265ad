"""A kept worker takes another plan only when the candidate left nothing behind."""

from cuco_tui.harness.leftovers import MEMORY_SLACK_BYTES, ProcessState, left_behind, thread_count

MiB = 1 << 20


def test_nothing_left_behind_within_the_drivers_own_slack():
    before = ProcessState(free_bytes=70_000 * MiB, threads=9)
    assert left_behind(before, ProcessState(free_bytes=70_000 * MiB - MEMORY_SLACK_BYTES, threads=9)) == ""
    assert left_behind(before, ProcessState(free_bytes=70_100 * MiB, threads=8)) == ""


def test_a_leaked_buffer_and_a_running_thread_are_named():
    before = ProcessState(free_bytes=70_000 * MiB, threads=9)
    found = left_behind(before, ProcessState(free_bytes=69_000 * MiB, threads=11))
    assert "2 more thread(s)" in found and "1000 MiB of GPU memory" in found


def test_a_device_limit_a_candidate_changed_is_named():
    before = ProcessState(free_bytes=70_000 * MiB, threads=9, limits=(1024, 1 << 20, 8 << 20, 64, 0))
    after = ProcessState(free_bytes=70_000 * MiB, threads=9, limits=(1024, 1 << 20, 8 << 20, 64, 30 << 20))
    assert "device limit changed" in left_behind(before, after)


def test_this_process_has_threads_to_count():
    assert thread_count() >= 1
