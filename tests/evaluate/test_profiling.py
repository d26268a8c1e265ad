"""A profile on request, from the cascade's side (evaluate/profiling.py): the level puts its shape
into the run plan or refuses in one sentence, and the ranks' profile files are read back into the
result's profile (a summary per rank, the trace and summary written into the run folder); a rank
that could not record, or a run that ended before the shape, gives a profile that says why. The
capture itself needs a GPU (tests/evaluate/test_gpu_profile.py); on a host without one, recording
cannot start and says why in one line."""

from __future__ import annotations

import json

import pytest

from cuco_tui.core.profile import KERNEL, MEMCPY, Activity, Profile
from cuco_tui.core.result import CascadeResult, Level, Status
from cuco_tui.evaluate.cascade import EvalOptions, levels_for, make_plan
from cuco_tui.evaluate.levels import LevelUnavailable, Setup, prepare_all
from cuco_tui.evaluate.profiling import SUMMARY_FILE, TRACE_FILE, Profiling, read_profile
from cuco_tui.harness.gpus import inventory
from cuco_tui.harness.launcher import GroupRun, RankOutcome
from cuco_tui.harness.plan import ProfilePlan
from cuco_tui.harness.profile_capture import ActivityRecorder, CaptureUnavailable
from cuco_tui.harness.rank_events import Done, ProfileCaptured
from cuco_tui.harness.rank_steps import ProfiledLaunches, rank_steps
from cuco_tui.toolchain import BuildCache
from cuco_tui.toolchain.toolchain import discover
from cuco_tui.workload.manifest import load_workload

W = load_workload("gemm_allgather")
SPEC = ProfilePlan("long-seq", 5)


def _setup(options: EvalOptions, tmp_path, gpus=(0, 1)) -> Setup:
    return Setup(options, gpus, discover(), BuildCache(tmp_path / "cache"), lambda level, message: None)


def test_asked_for_the_profile_level_puts_its_shape_and_launches_into_the_plan(tmp_path):
    options = EvalOptions(profile="long-seq", profile_launches=3)
    levels = levels_for(options)
    assert isinstance(levels[-1], Profiling)
    plan = make_plan(W, tmp_path / "c.so", options, "evaluate")
    prepared = prepare_all(levels[-1:], plan, _setup(options, tmp_path))
    assert prepared.plan.profile == ProfilePlan("long-seq", 3)
    assert not any(isinstance(level, Profiling) for level in levels_for(EvalOptions()))
    # In the ranks the plan's entry turns the step on (a baseline run, with no candidate, has none).
    placed = prepared.plan.placed([0, 1], str(tmp_path))
    assert [type(s) for s in rank_steps(placed, None)] == [ProfiledLaunches]


def test_a_shape_the_run_does_not_time_or_ranks_sharing_a_gpu_are_refused_in_one_sentence(tmp_path):
    options = EvalOptions(profile="long-seq", shapes=("square-8k",))
    plan = make_plan(W, tmp_path / "c.so", options, "evaluate")
    with pytest.raises(LevelUnavailable, match="^cannot profile at long-seq: this run times only square-8k$"):
        Profiling("long-seq").prepare(plan, _setup(options, tmp_path))
    plan = make_plan(W, tmp_path / "c.so", EvalOptions(profile="long-seq"), "evaluate")
    with pytest.raises(LevelUnavailable, match="every rank on one GPU"):
        Profiling("long-seq").prepare(plan, _setup(options, tmp_path, gpus=(0, 0)))


def _kernel(start, end, name="gemm", stream=7):
    return Activity(KERNEL, name, start, end, device=0, stream=stream)


def _copy(start, end, stream=9):
    return Activity(MEMCPY, "memcpy dtod", start, end, device=0, stream=stream, copy_kind="dtod", bytes=4096)


def _rank(rundir, rank, activities=None, problem="", dropped=0):
    events = [ProfileCaptured(rank=rank, shape=SPEC.shape, launches=SPEC.launches, problem=problem,
                              file=f"profile-rank{rank}.json" if activities is not None else "",
                              activities=len(activities or ()), dropped=dropped), Done(rank=rank)]
    if activities is not None:
        (rundir / f"profile-rank{rank}.json").write_text(json.dumps(
            {"shape": SPEC.shape, "launches": SPEC.launches, "activities": [a.to_dict() for a in activities]}))
    return RankOutcome(rank, 2 + rank, 100 + rank, 0, events)


def test_the_ranks_files_become_a_summary_per_rank_with_the_trace_and_summary_in_the_run_folder(tmp_path):
    ranks = [_rank(tmp_path, 0, [_kernel(0, 100), _copy(50, 150)]),
             _rank(tmp_path, 1, [_kernel(0, 100), _copy(100, 130), _kernel(130, 140, "ncclDevKernel_SendRecv")],
                   dropped=4)]
    profile = read_profile(ranks, tmp_path, SPEC, {0: 2, 1: 3})
    assert profile.ok
    assert [(r.rank, r.span_ns, r.compute_ns, r.communication_ns, r.exposed_ns) for r in profile.ranks] == [
        (0, 150, 100, 100, 50), (1, 140, 100, 40, 40)]
    assert profile.trace == str(tmp_path / TRACE_FILE)
    trace = json.loads((tmp_path / TRACE_FILE).read_text())
    assert {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"} == {"rank 0 (GPU 2)",
                                                                                                "rank 1 (GPU 3)"}
    assert Profile.from_dict(json.loads((tmp_path / SUMMARY_FILE).read_text())) == profile
    assert profile.notes == ("rank 1 recorded 4 activities more than it kept; its summary leaves them out",)


def test_a_rank_that_could_not_record_makes_a_profile_that_says_why_in_one_line(tmp_path):
    why = "CUPTI's Python package is not installed on this host (pip install 'cuco-tui[profile]'): ModuleNotFoundError"
    ranks = [_rank(tmp_path, 0, problem="another rank could not record activities (its own profile event says why)"),
             _rank(tmp_path, 1, problem=why)]
    profile = read_profile(ranks, tmp_path, SPEC)
    assert not profile.ok and profile.ranks == ()
    assert profile.problem == "rank 0: another rank could not record activities (its own profile event says why)"
    ranks = [_rank(tmp_path, 0, problem=why), _rank(tmp_path, 1, problem=why)]
    assert read_profile(ranks, tmp_path, SPEC).problem == f"rank 0: {why}"
    assert not (tmp_path / TRACE_FILE).exists()


def test_a_run_that_ended_before_the_shape_has_a_profile_that_says_so_and_the_result_keeps_its_status(tmp_path):
    ranks = [RankOutcome(r, r, 100 + r, 2, [Done(rank=r)]) for r in (0, 1)]
    run = GroupRun(ranks, 1.0, deadline_hit=False, aborted=False, gpus_released=True, rundir=tmp_path)
    failed = CascadeResult("c.cu", "gemm_allgather", Status.INCORRECT, Level.VERIFY, "wrong output at verify")
    result = Profiling("long-seq").finish(failed, run)
    assert result.status == Status.INCORRECT and result.reason == failed.reason
    assert result.profile.problem == "the run ended before long-seq was profiled (see the result's reason)"
    again = CascadeResult.from_dict(json.loads(json.dumps(result.to_dict())))
    assert again.profile == result.profile
    assert "profile" not in failed.to_dict()  # a result without one reads as before


def test_on_a_host_without_a_gpu_recording_cannot_start_and_says_why_in_one_line():
    if inventory().count:
        pytest.skip("a GPU is here: recording can start (tests/evaluate/test_gpu_profile.py)")
    with pytest.raises(CaptureUnavailable) as caught:
        ActivityRecorder.load().start()  # without cupti-python, the load; with it, the start (no driver)
    message = str(caught.value)
    assert "\n" not in message and "Traceback" not in message
    assert message.startswith(("CUPTI's Python package is not installed", "CUPTI could not record",
                               "CUPTI's Python package could not be loaded"))


def test_cuptis_own_records_become_activities_and_those_past_the_cap_are_counted():
    """Needs cupti-python (the `profile` extra), not a GPU: the record classes of cupti.pyi, filled
    by hand as CUPTI fills them, read through the recorder's buffer callback."""
    cupti = pytest.importorskip("cupti.cupti")
    kernel = cupti.ActivityKernel13()
    kernel.kind, kernel.start, kernel.end, kernel.device_id, kernel.stream_id = (
        cupti.ActivityKind.CONCURRENT_KERNEL, 100, 180, 1, 7)
    local = cupti.ActivityMemcpy7()
    local.kind, local.copy_kind, local.bytes, local.start, local.end, local.stream_id = (
        cupti.ActivityKind.MEMCPY, cupti.ActivityMemcpyKind.DTOD, 4096, 120, 150, 9)
    peer = cupti.ActivityMemcpyPtoP4()
    peer.kind, peer.src_device_id, peer.dst_device_id, peer.bytes, peer.start, peer.end = (
        cupti.ActivityKind.MEMCPY2, 1, 2, 8192, 150, 200)
    memset = cupti.ActivityMemset5()
    memset.kind, memset.bytes, memset.start, memset.end = cupti.ActivityKind.MEMSET, 64, 90, 95
    recorder = ActivityRecorder(cupti, limit=3)
    recorder._buffer_completed([kernel, local, peer, memset])
    assert recorder.records == [
        Activity(KERNEL, "", 100, 180, 1, 7),
        Activity(MEMCPY, "memcpy dtod", 120, 150, 0, 9, copy_kind="dtod", bytes=4096),
        Activity(MEMCPY, "memcpy ptop 1->2", 150, 200, 0, 0, copy_kind="ptop", bytes=8192)]
    assert recorder.dropped == 1 and recorder.unreadable == 0
