"""The levels' steps in a rank worker (harness/rank_steps.py): which the plan turns on, and an
interposer that cannot be loaded leaves the candidate verified without perturbed rounds, saying so
in the rank's events. (The interposer loaded before CuPy by the worker itself: test_perturb.py.)"""

from __future__ import annotations

from dataclasses import replace

from cuco_tui.harness.plan import PerturbPlan, ProfilePlan, RunPlan
from cuco_tui.harness.rank_events import EventLog, PerturbWarning, read_events
from cuco_tui.core.profile import KERNEL, MEMCPY, Activity
from cuco_tui.harness.rank_steps import ProfiledLaunches, UnderSanitizer, candidates_own, rank_steps

PLAN = RunPlan(mode="evaluate", workload="w", reference="reference.py", library="candidate.so", shapes=(), rtol=0.02,
               floor=0.0, warmup=1, repetitions=1, nonce=1)


def test_the_plan_turns_the_steps_on(tmp_path):
    log = EventLog(tmp_path / "rank0.jsonl", 0)
    assert rank_steps(PLAN, log) == []
    assert [type(s) for s in rank_steps(replace(PLAN, sanitize="memcheck"), log)] == [UnderSanitizer]
    assert [type(s) for s in rank_steps(replace(PLAN, profile=ProfilePlan("long-seq")), log)] == [ProfiledLaunches]
    baseline = replace(PLAN, mode="baseline", library=None, perturb=PerturbPlan("/nowhere.so", 1, 4, 2000),
                       profile=ProfilePlan("long-seq"))
    assert rank_steps(baseline, log) == []  # no candidate, no rounds: nothing loaded, nothing said
    assert read_events(tmp_path / "rank0.jsonl") == []


def test_an_interposer_that_cannot_be_loaded_is_a_warning_and_no_rounds(tmp_path):
    log = EventLog(tmp_path / "rank1.jsonl", 1)
    plan = replace(PLAN, perturb=PerturbPlan(str(tmp_path / "libcuco_perturb.so"), 7, 4, 2000))
    assert rank_steps(plan, log) == []
    (warning,) = read_events(tmp_path / "rank1.jsonl")
    assert isinstance(warning, PerturbWarning) and warning.rank == 1
    assert "cannot load the schedule perturber" in warning.message
    assert warning.message.endswith("; verified without schedule perturbation")


def test_a_profile_keeps_the_launches_and_leaves_out_the_harness_alignment_before_them():
    barrier = Activity(KERNEL, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 90, 120, 0, 7)
    pause = Activity(KERNEL, "cuco_settle", 130, 430, 0, 7)
    align = Activity(KERNEL, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 432, 450, 0, 7)
    gemm = Activity(KERNEL, "fused_gemm_kernel", 455, 900, 0, 7)
    copy = Activity(MEMCPY, "memcpy ptop 1->0", 460, 640, 1, 9, copy_kind="ptop", bytes=1 << 26)
    own_reduce = Activity(KERNEL, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 910, 990, 0, 7)  # the candidate's
    assert candidates_own([barrier, pause, align, gemm, copy, own_reduce], since=125) == [gemm, copy, own_reduce]
    assert candidates_own([barrier, gemm, copy], since=125) == [gemm, copy]  # aligned by the host alone
    # One rank: NCCL's in-place all-reduce launches no kernel, so an all-reduce after the pause is the candidate's
    assert candidates_own([barrier, pause, gemm, own_reduce], since=125, world=1) == [gemm, own_reduce]
    assert candidates_own([barrier, pause, gemm, own_reduce], since=125) == [gemm, own_reduce]  # not first: kept


def test_a_profile_shows_what_the_candidate_started_on_its_own_stream_during_the_pause():
    """Work a candidate began on a side stream not ordered after the harness's stream runs during
    the pause, before the timed start: the timeline keeps it instead of cutting it with the
    harness's own kernels."""
    pause = Activity(KERNEL, "cuco_settle", 130, 430, 0, 7)
    align = Activity(KERNEL, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 432, 450, 0, 7)
    early = Activity(MEMCPY, "memcpy ptop 0->1", 200, 380, 0, 9, copy_kind="ptop", bytes=1 << 26)
    gemm = Activity(KERNEL, "fused_gemm_kernel", 455, 900, 0, 7)
    assert candidates_own([pause, align, early, gemm], since=125) == [early, gemm]
