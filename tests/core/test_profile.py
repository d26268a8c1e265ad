"""A profile's summary (core/profile.py) on hand-made intervals: what counts as communication, the
busy time of each (overlapping, nested and disjoint activities on several streams), the exposed
communication and the overlap, the longest activities, and the JSON round-trip; and the Chrome
trace (core/profile_trace.py) an engineer opens in ui.perfetto.dev, kept under its size."""

from __future__ import annotations

import json

from cuco_tui.core.profile import (KERNEL, MEMCPY, MEMSET, Activity, Profile, ProfileSummary, is_communication,
                                   subtract, summarize, union)
from cuco_tui.core.profile_trace import chrome_trace


def kernel(start, end, name="gemm_kernel", stream=7):
    return Activity(KERNEL, name, start, end, device=0, stream=stream)


def copy(start, end, kind="dtod", stream=9, nbytes=1 << 20):
    return Activity(MEMCPY, f"memcpy {kind}", start, end, device=0, stream=stream, copy_kind=kind, bytes=nbytes)


def test_copies_between_gpus_and_nccl_kernels_are_communication_and_the_rest_compute():
    assert is_communication(copy(0, 1, "dtod"))
    assert is_communication(copy(0, 1, "ptop"))
    assert not is_communication(copy(0, 1, "htod"))
    assert not is_communication(copy(0, 1, "dtoh"))
    assert is_communication(kernel(0, 1, "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"))
    assert not is_communication(kernel(0, 1, "_Z16fused_gemm_storeILi128EEvP6__half"))
    assert not is_communication(Activity(MEMSET, "memset", 0, 1, 0, 7, bytes=64))


def test_union_merges_overlapping_nested_and_touching_intervals_and_keeps_disjoint_ones():
    assert union([(5, 9), (0, 3), (1, 2), (3, 4), (8, 12), (20, 21), (7, 7)]) == [(0, 4), (5, 12), (20, 21)]


def test_subtract_leaves_what_the_other_intervals_do_not_cover():
    compute = [(0, 10), (20, 30)]
    assert subtract([(5, 25)], compute) == [(10, 20)]
    assert subtract([(0, 40)], compute) == [(10, 20), (30, 40)]
    assert subtract([(12, 18)], compute) == [(12, 18)]
    assert subtract([(2, 8), (22, 28)], compute) == []
    assert subtract([(0, 5)], []) == [(0, 5)]


def test_a_copy_hidden_under_compute_on_another_stream_is_not_exposed():
    s = summarize([kernel(0, 100), copy(10, 90)])
    assert (s.span_ns, s.compute_ns, s.communication_ns, s.exposed_ns) == (100, 100, 80, 0)
    assert s.overlap == 1.0
    assert s.exposed_pct == 0.0


def test_communication_after_the_compute_is_exposed_and_counted_once_across_streams():
    acts = [kernel(0, 100, stream=7), kernel(50, 120, stream=8),  # two compute streams, overlapping
            copy(100, 200, stream=9), copy(150, 250, stream=10),  # two copy streams, overlapping
            kernel(300, 310, "ncclDevKernel_AllReduce", stream=11)]  # disjoint, alone
    s = summarize(acts, rank=1)
    assert s.rank == 1
    assert s.span_ns == 310
    assert s.compute_ns == 120
    assert s.communication_ns == 150 + 10
    assert s.exposed_ns == (250 - 120) + 10
    assert abs(s.overlap - 20 / 160) < 1e-12
    assert abs(s.exposed_pct - 100 * 140 / 310) < 1e-9
    assert s.exposed_ns <= s.communication_ns


def test_the_longest_five_activities_are_named_longest_first():
    acts = [kernel(i * 100, i * 100 + d, name=f"k{d}") for i, d in enumerate([5, 50, 20, 70, 10, 60, 1])]
    s = summarize(acts)
    assert [x.name for x in s.longest] == ["k70", "k60", "k50", "k20", "k10"]
    assert [x.duration_ns for x in s.longest] == [70, 60, 50, 20, 10]


def test_no_communication_means_no_overlap_figure_and_no_activities_an_empty_summary():
    s = summarize([kernel(0, 10)])
    assert s.communication_ns == 0 and s.exposed_ns == 0 and s.overlap is None
    empty = summarize([])
    assert empty.span_ns == 0 and empty.activities == 0 and empty.exposed_pct == 0.0


def test_a_profile_round_trips_through_json():
    summary = summarize([kernel(0, 100), copy(90, 150), kernel(200, 210, "ncclKernel_SendRecv")], rank=1)
    profile = Profile("long-seq", 5, (summarize([kernel(0, 10)], rank=0), summary), trace="profile.trace.json",
                      notes=("the trace keeps the first 10 of 20 activities",))
    again = Profile.from_dict(json.loads(json.dumps(profile.to_dict())))
    assert again == profile
    assert ProfileSummary.from_dict(json.loads(json.dumps(summary.to_dict()))) == summary
    a = copy(1, 2, "ptop")
    assert Activity.from_dict(json.loads(json.dumps(a.to_dict()))) == a


def test_a_profile_reads_as_one_line_per_rank_or_says_why_there_is_none():
    profile = Profile("long-seq", 5, (summarize([kernel(0, 1_000_000), copy(1_000_000, 1_500_000)], rank=0),))
    text = "\n".join(profile.lines())
    assert "rank 0: exposed communication 0.500 ms (33.3% of 1.500 ms)" in text
    assert "0% of it overlapped" in text
    missing = Profile("long-seq", 5, problem="CUPTI is not installed on this host (pip install cuco-tui[profile])")
    assert missing.lines() == ["profile of 5 launches at long-seq: none taken: CUPTI is not installed on this host "
                               "(pip install cuco-tui[profile])"]


def test_the_trace_has_a_process_per_rank_a_thread_per_stream_and_the_two_categories():
    per_rank = {0: [kernel(1000, 5000, stream=7), copy(2000, 3000, stream=9)],
                1: [kernel(1500, 4000, "ncclDevKernel_AllGather", stream=13)]}
    trace = chrome_trace(per_rank, gpus={0: 2, 1: 3})
    data = json.loads(trace.text)
    events = data["traceEvents"]
    names = {(e["pid"], e["args"]["name"]) for e in events if e["name"] == "process_name"}
    assert names == {(0, "rank 0 (GPU 2)"), (1, "rank 1 (GPU 3)")}
    threads = {(e["pid"], e["tid"]) for e in events if e["name"] == "thread_name"}
    assert threads == {(0, 7), (0, 9), (1, 13)}
    spans = [e for e in events if e["ph"] == "X"]
    assert {(e["pid"], e["tid"], e["cat"]) for e in spans} == {(0, 7, "compute"), (0, 9, "communication"),
                                                               (1, 13, "communication")}
    first = min(spans, key=lambda e: e["ts"])
    assert first["ts"] == 0.0 and first["dur"] == 4.0  # microseconds from the earliest activity
    assert trace.kept == trace.total == 3 and trace.note == ""


def test_a_trace_too_large_keeps_each_ranks_earliest_activities_under_the_limit_and_says_so():
    long_name = "_ZN7cutlass4gemm6kernel" + "x" * 3000
    per_rank = {r: [kernel(i * 10, i * 10 + 5, long_name, stream=7 + i % 3) for i in range(4000)] for r in (0, 1)}
    trace = chrome_trace(per_rank, max_bytes=300_000)
    assert len(trace.text.encode()) <= 300_000
    assert 0 < trace.kept < trace.total == 8000
    assert f"keeps the first {trace.kept} of 8000" in trace.note
    spans = [e for e in json.loads(trace.text)["traceEvents"] if e["ph"] == "X"]
    for rank in (0, 1):
        times = sorted(e["ts"] for e in spans if e["pid"] == rank)
        assert times[0] == 0.0 and len(times) == trace.kept // 2  # the earliest, evenly between ranks
    assert all(len(e["name"]) <= 240 for e in spans)


def test_a_mostly_overlapped_profile_says_that_a_kernels_waits_count_as_compute():
    """On 4 x H100 a fused AG+GEMM showed 1.5% exposed communication while 36% slower than its bound:
    its kernel waits for rows inside itself, and a timeline sees a busy kernel. The summary says so
    where most communication overlaps a kernel; a sequential profile does not."""
    hidden = Profile("long-seq", 5, (summarize([kernel(0, 1_000_000), copy(100_000, 900_000)], rank=0),))
    text = "\n".join(hidden.lines())
    assert "note:" in text and "waits" in text and "counts as compute" in text
    sequential = Profile("long-seq", 5, (summarize([kernel(0, 1_000_000), copy(1_000_000, 1_500_000)], rank=0),))
    assert "counts as compute" not in "\n".join(sequential.lines())
