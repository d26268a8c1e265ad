"""The cascade's control flow on this machine, and the interpretation of what ranks report,
from event files recorded on the 2 x H200 host (tests/data/runs/*, 2026-11-23)."""

import json
import re
import time
from dataclasses import replace
from pathlib import Path

import pytest

from cuco_tui.toolchain.toolchain import discover
from cuco_tui.evaluate import races
from cuco_tui.evaluate.cascade import EvalOptions, evaluate, interpret
from cuco_tui.core.result import CascadeResult, Level, Status
from cuco_tui.harness.launcher import GroupRun, RankOutcome
from cuco_tui.harness.rank_events import (CloseWarning, Done, Failed, PerturbEnded, PerturbStarted, ReferenceWarning,
                                          ShapeStarted, Timed, TimedOut, Verified, read_events)
from cuco_tui.workload.manifest import load_workload
import repo_paths

W = load_workload("gemm_allgather")
DATA = repo_paths.DATA / "runs"
needs_nvcc = pytest.mark.skipif(not discover().can_compile, reason="needs nvcc, NCCL and cuBLAS headers")


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setenv("CUCO_NO_GPU", "1")


def _edit(tmp_path: Path, old: str, new: str, name: str = "cand.cu") -> Path:
    text = W.seed.read_text()
    assert old in text
    path = tmp_path / name
    path.write_text(text.replace(old, new))
    return path


def test_frozen_edit_is_rejected_before_anything_is_compiled(tmp_path, no_gpu, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("CUCO_CACHE_DIR", str(cache))
    cand = _edit(tmp_path, "return candidate_launch(static_cast<Candidate*>(state), stream);",
                 "return 0;")
    r = evaluate(cand, W)
    assert r.status == Status.REJECTED and r.level == Level.STATIC
    assert "frozen region changed" in r.reason
    assert any(d.code == "frozen-region" and d.line for d in r.diagnostics)
    assert not cache.exists() or not any(cache.iterdir())


def test_forbidden_call_is_rejected_with_its_line(tmp_path, no_gpu):
    cand = _edit(tmp_path, "  c->ctx = ctx;\n", "  c->ctx = ctx;\n  system(\"nvidia-smi\");\n")
    r = evaluate(cand, W)
    assert r.status == Status.REJECTED
    d = next(d for d in r.diagnostics if d.code == "forbidden-call")
    assert "system" in d.source_line and d.line > 0


def test_unreadable_candidate(tmp_path, no_gpu):
    r = evaluate(tmp_path / "missing.cu", W)
    assert r.status == Status.REJECTED and "cannot read" in r.reason


@needs_nvcc
def test_compile_error_stops_at_l1_with_the_line(tmp_path, no_gpu):
    cand = _edit(tmp_path, "  const int W = ctx->world;\n  const size_t shard",
                 "  const int W = ctx->world;\n  undefined_thing = 3;\n  const size_t shard")
    r = evaluate(cand, W)
    assert r.status == Status.COMPILE_ERROR and r.level == Level.COMPILE
    err = next(d for d in r.diagnostics if d.severity == "error")
    assert "undefined_thing" in err.source_line
    assert err.line == cand.read_text().splitlines().index("  undefined_thing = 3;") + 1
    assert r.verifications == [] and r.timings == []


@needs_nvcc
def test_the_seed_compiles_and_stops_with_no_gpu(no_gpu):
    r = evaluate(W.seed, W)
    assert r.status == Status.NO_GPU and r.level == Level.COMPILE
    assert "no_gpu" in r.reason and "CUCO_NO_GPU" in r.reason
    assert r.status.ok


def _recorded(name: str, exit_codes: list[int | None]) -> GroupRun:
    d = DATA / name
    ranks = []
    for rank, code in enumerate(exit_codes):
        ranks.append(RankOutcome(rank, rank, 1000 + rank, code, read_events(d / f"rank{rank}.jsonl")))
    return GroupRun(ranks, 10.0, deadline_hit=False, aborted=False, gpus_released=True, rundir=d)


BASE = {"candidate": "c.cu", "workload": "gemm_allgather", "world": 2, "gpus": [0, 1]}


def test_recorded_measured_run():
    r = interpret(_recorded("measured", [0, 0]), W, dict(BASE))
    assert r.status == Status.MEASURED and r.level == Level.BENCHMARK
    assert [t.shape for t in r.timings] == [s.name for s in W.bench_shapes]
    for t in r.timings:
        assert t.candidate.n == 30 and len(t.per_rank) == 2
        # the slowest rank per repetition: never faster than either rank's median
        assert t.candidate.median >= min(p.median for p in t.per_rank)
        assert 0.8 < t.speedup < 1.25
    assert all(v.ok for v in r.verifications) and len(r.verifications) == 2 + len(W.bench_shapes)
    assert r.speedup is not None
    # the speedup with its spread (core/noise.py): "... 4 shapes: 0.99x ±3% the reference ..."
    assert re.search(r"shapes: \d\.\d\dx ±\d+(\.\d)?% the reference \(geometric mean\)", r.reason), r.reason


def test_each_timing_records_how_the_plan_aligned_its_ranks():
    # This run was recorded under a host barrier alone (2026-11-23); the plan's word is recorded, and
    # a result read back keeps it: a compare of two candidates then knows whether their times compare.
    for align in ("host", "device"):
        r = interpret(_recorded("measured", [0, 0]), W, dict(BASE), align=align)
        assert [t.align for t in r.timings] == [align] * len(W.bench_shapes)
        again = CascadeResult.from_dict(json.loads(json.dumps(r.to_dict())))
        assert [t.align for t in again.timings] == [align] * len(W.bench_shapes)
    assert {t.align for t in interpret(_recorded("measured", [0, 0]), W, dict(BASE)).timings} == {"device"}


def test_recorded_wrong_values():
    r = interpret(_recorded("wrong_values", [0, 0]), W, dict(BASE))
    assert r.status == Status.INCORRECT and r.level == Level.VERIFY
    assert "max relative error" in r.reason and "rank" in r.reason
    assert r.verifications[0].unwritten == 0 and r.verifications[0].max_rel_error > 0.5


def test_recorded_unwritten_output():
    r = interpret(_recorded("unwritten", [0, 0]), W, dict(BASE))
    assert r.status == Status.INCORRECT
    v = r.verifications[0]
    assert v.unwritten == v.elements // 2  # the last of 2 shards of rows, on both ranks
    assert "never written" in r.reason


def test_recorded_hang_is_a_deadlock_with_the_wait_site():
    r = interpret(_recorded("hang", [124, 124]), W, dict(BASE))
    assert r.status == Status.DEADLOCK
    assert "did not finish within 20.0 s" in r.reason
    assert "cycle" in r.deadlock_report
    assert "rank 0 waits on rank 1 (line 13, flag 7: wants 1, saw 0)" in r.deadlock_report
    assert "rank 1 waits on rank 0 (line 13, flag 7: wants 1, saw 0)" in r.deadlock_report


def test_recorded_hang_with_its_candidate_names_the_launch_of_the_kernel_that_hangs():
    """Issue 32: the wait has no CUCO_WAIT_SITE, its dump no function's name; the candidate the run
    evaluated (kept beside the run) says the wait at line 13 is wait_for_neighbour's, launched at 46."""
    source = (DATA / "hang" / "hang.cu").read_text()
    r = interpret(_recorded("hang", [124, 124]), W, dict(BASE, candidate="/scratch/hang.cu"), source=source)
    assert r.status == Status.DEADLOCK
    assert "rank 0 waits on rank 1 (hang.cu:46 (in wait_for_neighbour at line 13), flag 7: wants 1, saw 0)" \
        in r.deadlock_report
    assert "hang.cu:46: wait_for_neighbour<<<1, 32, 0, stream>>>(c->flag" in r.deadlock_report


def test_a_rank_that_dies_silently_is_a_runtime_error():
    run = _recorded("measured", [0, 0])
    run.ranks[1].events = run.ranks[1].events[:3]
    run.ranks[1].exit_code = -11
    run.ranks[1].stderr_tail = "Segmentation fault"
    r = interpret(run, W, dict(BASE))
    assert r.status == Status.RUNTIME_ERROR
    assert "rank 1 died of SIGSEGV" in r.reason


def test_an_error_event_wins_over_the_others_timeouts():
    run = _recorded("hang", [124, 2])
    run.ranks[1].events.append(Failed(rank=1, kind="cuda",
                                      message="cudaErrorIllegalAddress: an illegal memory access was encountered"))
    r = interpret(run, W, dict(BASE))
    assert r.status == Status.RUNTIME_ERROR and "illegal memory access" in r.reason


def test_result_round_trips_through_json():
    r = interpret(_recorded("measured", [0, 0]), W, dict(BASE))
    back = CascadeResult.from_dict(json.loads(json.dumps(r.to_dict())))
    assert back == r


def test_a_reference_warning_travels_into_the_result_once():
    """A reference that runs below its strength (a failed graph capture, a slower attention
    fallback) says so; the result carries it as one warning, however many ranks reported it."""
    run = _recorded("measured", [0, 0])
    for o in run.ranks:
        o.events.insert(1, ReferenceWarning(rank=o.rank, message="graphs off"))
    r = interpret(run, W, dict(BASE))
    assert r.status == Status.MEASURED
    warned = [d for d in r.diagnostics if d.code == "reference"]
    assert len(warned) == 1 and warned[0].severity == "warning" and "graphs off" in warned[0].message


def test_the_worker_reports_each_reference_warning_once():
    from cuco_tui.core.reference import ModuleRankReference
    from cuco_tui.harness.worker import Rank

    class Log:
        def __init__(self):
            self.events = []

        def emit(self, event):
            self.events.append(event)

    class Ref:
        warnings = ["torch missing"]

    rank = Rank.__new__(Rank)  # only the reporting state: no GPU, no group
    rank.log, rank.reference_notes = Log(), set()
    rank.report_reference(ModuleRankReference(Ref()))
    rank.report_reference(ModuleRankReference(Ref()))
    rank.report_reference(ModuleRankReference(object()))  # a reference without warnings
    assert rank.log.events == [ReferenceWarning(message="torch missing")]


def test_a_failure_of_the_back_to_back_launches_is_named_so():
    """The workers' last verification at each verify shape runs two launches with the inputs
    replaced between them in stream order; its failure must say that, not look like check #3."""
    run = _recorded("wrong_values", [0, 0])
    for o in run.ranks:
        o.events = [replace(e, label="back to back, 2nd") if isinstance(e, Verified) else e for e in o.events]
    r = interpret(run, W, dict(BASE))
    assert r.status == Status.INCORRECT
    assert r.verifications[0].shape.endswith(" back to back, 2nd")
    assert "back to back" in r.reason


def _one_gpu(monkeypatch):
    from cuco_tui.evaluate import cascade
    from cuco_tui.harness.gpus import GpuInfo, GpuInventory

    monkeypatch.setattr(cascade, "inventory", lambda: GpuInventory((GpuInfo(0, "NVIDIA H100", 81559, 132),)))


def test_a_one_gpu_machine_cannot_run_two_ranks_unless_asked_to_share(monkeypatch):
    from cuco_tui.evaluate.cascade import choose_gpus

    _one_gpu(monkeypatch)
    gpus, why = choose_gpus(W, EvalOptions(world=2))
    assert gpus == [] and "needs 2 GPUs" in why
    assert choose_gpus(W, EvalOptions(share_gpu=True)) == ([0, 0], "")  # the workload's smallest world
    assert choose_gpus(W, EvalOptions(world=4, share_gpu=True)) == ([0, 0, 0, 0], "")
    gpus, why = choose_gpus(W, EvalOptions(gpus=[3], world=2, share_gpu=True))
    assert gpus == [] and "GPU 3 does not exist" in why


def test_a_shared_group_takes_only_world_sizes_the_workload_allows(monkeypatch):
    from cuco_tui.evaluate.cascade import choose_gpus

    _one_gpu(monkeypatch)
    assert choose_gpus(W, EvalOptions(world=3, share_gpu=True)) == ([], "gemm_allgather runs with 2, 4, 8 ranks, not 3")
    assert choose_gpus(W, EvalOptions(world=0, share_gpu=True))[0] == []
    gpus, why = choose_gpus(W, EvalOptions(world=-1))
    assert gpus == [] and "at least one rank" in why


def test_a_gpu_named_twice_shares_it_only_when_asked(monkeypatch):
    from cuco_tui.evaluate.cascade import choose_gpus

    _one_gpu(monkeypatch)
    gpus, why = choose_gpus(W, EvalOptions(gpus=[0, 0]))
    assert gpus == [] and "name one GPU twice" in why


def test_the_cli_hints_at_share_gpu_where_gpus_are_too_few(monkeypatch, tmp_path, capsys):
    from cuco_tui import cli
    from cuco_tui.evaluate import cascade
    from cuco_tui.harness import gpus as gpus_module
    from cuco_tui.harness.gpus import GpuInfo, GpuInventory

    one = GpuInventory((GpuInfo(0, "NVIDIA H100", 81559, 132),))
    monkeypatch.setattr(gpus_module, "inventory", lambda: one)
    monkeypatch.setattr(cascade, "inventory", lambda: one)
    seen = []

    def evaluate(path, workload, options, progress=None, kept=None):  # the cascade's answer on this machine
        seen.append(options)
        gpus, why = cascade.choose_gpus(workload, options)
        return CascadeResult(candidate=str(path), workload=workload.name, status=Status.RUNTIME_ERROR,
                             level=Level.COMPILE, reason=why)

    monkeypatch.setattr(cascade, "evaluate", evaluate)
    assert cli.main(["eval", str(W.seed)]) == 1
    captured = capsys.readouterr()
    assert "needs 2 GPUs at least; this machine has 1" in captured.out
    assert "hint: with fewer GPUs, --share-gpu checks correctness" in captured.err
    assert cli.main(["eval", str(W.seed), "--share-gpu", "--world", "4", "--no-bench"]) == 1
    assert seen[-1].share_gpu and seen[-1].world == 4 and not seen[-1].bench
    assert "hint:" not in capsys.readouterr().err


def test_a_shared_gpu_run_verifies_and_never_times():
    from cuco_tui.evaluate.cascade import make_plan

    own = make_plan(W, None, EvalOptions(world=2), "evaluate")
    shared = make_plan(W, None, EvalOptions(world=2, share_gpu=True), "evaluate")
    assert any(s.level == "bench" for s in own.shapes)
    assert shared.shapes and all(s.level == "verify" for s in shared.shapes)
    assert shared.shared_gpu and not own.shared_gpu


def test_a_shared_gpu_result_is_verified_not_measured_and_reads_back_so():
    run = _recorded("measured", [0, 0])
    for o in run.ranks:  # the verification part of a real run, without its timings
        o.events = [e for e in o.events if not isinstance(e, Timed)
                    and not (isinstance(e, (ShapeStarted, Verified)) and e.level == "bench")]
    r = interpret(run, W, dict(BASE, gpus=[0, 0]))
    assert r.status == Status.VERIFIED and r.level == Level.VERIFY and r.status.ok
    assert "every rank on one GPU: nothing timed" in r.reason and r.speedup is None
    again = CascadeResult.from_dict(json.loads(json.dumps(r.to_dict())))
    assert again.status == Status.VERIFIED and again.to_dict() == r.to_dict()
    # recorded before "verified" existed: "measured" with nothing timed reads as verified; timed stays measured
    assert CascadeResult.from_dict({**r.to_dict(), "status": "measured"}).status == Status.VERIFIED
    timed = interpret(_recorded("measured", [0, 0]), W, dict(BASE))
    assert CascadeResult.from_dict(json.loads(json.dumps(timed.to_dict()))).status == Status.MEASURED


def test_share_gpu_takes_one_gpu_and_no_shapes(capsys):
    from cuco_tui.cli import main

    assert main(["eval", str(W.seed), "--share-gpu", "--gpus", "0,1"]) != 0
    assert "one GPU" in capsys.readouterr().err
    assert main(["eval", str(W.seed), "--share-gpu", "--shapes", "short-seq"]) != 0
    assert "times nothing" in capsys.readouterr().err


def test_two_runs_of_one_source_started_in_the_same_second_get_their_own_folders(tmp_path):
    from cuco_tui.evaluate.cascade import new_rundir

    # The same candidate at two world sizes at once once shared a folder: one group read the
    # other's half-written plan and joined its NCCL group.
    day = time.strftime("%Y%m%d-")
    a, b = new_rundir(tmp_path, "seed-0123abcd"), new_rundir(tmp_path, "seed-0123abcd")
    assert a != b and a.is_dir() and b.is_dir() and a.parent == b.parent == tmp_path
    assert a.name[:9] in (day, time.strftime("%Y%m%d-")) and "-seed-0123abcd-" in a.name


def test_trouble_closing_the_harness_group_after_the_results_is_a_warning():
    run = _recorded("measured", [0, 0])
    run.ranks[1].events.append(CloseWarning(rank=1,
                                            message="closing the harness's NCCL group did not finish within 30.0 s"))
    run.ranks[0].exit_code = -11  # died after "done", while closing
    r = interpret(run, W, dict(BASE))
    assert r.status == Status.MEASURED and r.level == Level.BENCHMARK and len(r.timings) == len(W.bench_shapes)
    warned = [d.message for d in r.diagnostics if d.code == "harness" and d.severity == "warning"]
    assert any("rank 1: closing the harness's NCCL group did not finish" in m for m in warned)
    assert any("rank 0 died of SIGSEGV after its results" in m for m in warned)


def test_a_rank_that_dies_before_done_is_still_the_candidates_failure():
    run = _recorded("measured", [0, 0])
    run.ranks[0].events = [e for e in run.ranks[0].events if not isinstance(e, Done)]
    run.ranks[0].exit_code = -11
    assert interpret(run, W, dict(BASE)).status == Status.RUNTIME_ERROR


# L2's perturbed schedules, as the ranks report them (rank_checks.RankChecks.perturbed): a `perturb`
# event when a round starts, `verify` events labelled with its seed, `perturb_stats` when it ends.
# The verify events are the recorded ones of tests/data/runs/measured and wrong_values, relabelled.

def _verify_event(name: str, rank: int, **fields) -> Verified:
    e = next(e for e in read_events(DATA / name / f"rank{rank}.jsonl") if isinstance(e, Verified))
    return replace(e, **fields)


def _perturbed_run(failing_seed: int | None, seeds=(40, 41, 42, 43), calls: int = 12,
                   shapes=("verify",)) -> GroupRun:
    ranks = []
    for rank in range(2):
        events = []
        for shape in shapes:
            events += _perturbed_shape(shape, rank, failing_seed, seeds, calls)
        events.append(Done(rank=rank))
        ranks.append(RankOutcome(rank, 0, 1000 + rank, 0, events))
    return GroupRun(ranks, 10.0, deadline_hit=False, aborted=False, gpus_released=True, rundir=DATA)


def _perturbed_shape(shape: str, rank: int, failing_seed: int | None, seeds, calls: int) -> list:
    """One verify shape's checks as a rank reports them: the ordinary ones, then the perturbed rounds,
    whose seeds are the same at every shape."""
    events = [ShapeStarted(rank=rank, shape=shape, level="verify", dims={})]
    events += [_verify_event("measured", rank, check=c, shape=shape) for c in range(2)]
    for i, seed in enumerate(seeds):
        events.append(PerturbStarted(rank=rank, shape=shape, round=i, seed=seed,
                                     kind=("copies_late", "rank_late", "compute_late", "scatter")[seed % 4],
                                     target=0, description=f"what seed {seed} does", unit_us=2000, start_delay_us=0))
        fails = seed == failing_seed and rank == 1
        for nth, check in (("2nd", 4 + 2 * i), ("1st", 5 + 2 * i)):
            src = "wrong_values" if fails and nth == "1st" else "measured"
            events.append(_verify_event(src, rank, check=check, label=f"perturbed, seed {seed}, {nth}",
                                        perturb_seed=seed, shape=shape))
        events.append(PerturbEnded(rank=rank, shape=shape, round=i, seed=seed, ok=seed != failing_seed, seconds=0.05,
                                   calls=calls, delayed=3, delayed_us=6000, skipped=0, errors=0,
                                   per_class={"copy": 0, "event": 0, "kernel": calls // 2, "nccl": calls // 2,
                                              "gemm": 0}))
        if seed == failing_seed:
            break
    return events


def test_a_wrong_answer_under_a_perturbed_schedule_is_a_race_that_names_its_seed():
    r = interpret(_perturbed_run(failing_seed=41), W, dict(BASE, gpus=[0, 0]))
    assert r.status == Status.INCORRECT and r.level == Level.VERIFY
    assert r.reason.startswith("race: wrong output under a perturbed schedule (seed 41, rank_late: what seed 41 does)")
    assert "at verify perturbed, seed 41, 1st: max relative error" in r.reason and "worst: rank 1, y[" in r.reason
    assert ("Replay: cuco eval c.cu --workload gemm_allgather --share-gpu --world 2 --no-bench --perturb-seed 41 "
            "--perturb-rounds 1") in r.reason
    race = [d for d in r.diagnostics if d.code == "race"]
    assert len(race) == 1 and "under perturbation seed 41" in race[0].message
    assert not [d for d in r.diagnostics if d.code == "perturb"]  # no "verified under ..." beside it
    assert [v.shape for v in r.verifications if not v.ok] == ["verify perturbed, seed 41, 1st"]


def test_a_candidate_that_survives_the_perturbed_schedules_says_so():
    r = interpret(_perturbed_run(failing_seed=None), W, dict(BASE))
    assert r.status == Status.VERIFIED and "race" not in r.reason
    note = next(d for d in r.diagnostics if d.code == "perturb")
    assert note.severity == "note"
    assert note.message.startswith("verified under 4 perturbed schedule(s) (seeds 40-43: copies_late, rank_late, "
                                   "compute_late, scatter) in 0.20 s; 24 ordering points held back, 48 ms in all; "
                                   "calls seen: kernel 48, nccl 48")
    assert len(r.verifications) == 2 + 8 and all(v.ok for v in r.verifications)


def test_the_same_seeds_at_every_verify_shape_are_one_set_of_schedules_run_at_each():
    """The ranks run the same seeds at each verify shape (moe_dispatch_combine, cp_attention and
    tp_attn_out have two): each shape's rounds are their own, and the note says the schedules ran
    at every shape."""
    r = interpret(_perturbed_run(failing_seed=None, shapes=("verify", "verify-hot")), W, dict(BASE))
    assert r.status == Status.VERIFIED and "race" not in r.reason
    note = next(d for d in r.diagnostics if d.code == "perturb")
    assert note.severity == "note", note.message
    assert note.message.startswith("verified under 4 perturbed schedule(s) (seeds 40-43: copies_late, rank_late, "
                                   "compute_late, scatter) at each of 2 verify shapes in 0.40 s; 48 ordering points "
                                   "held back, 96 ms in all"), note.message
    rounds = races.rounds(_perturbed_run(failing_seed=None, shapes=("verify", "verify-hot")).ranks)
    assert [(x.shape, x.seed, x.ok) for x in rounds] == [(s, seed, True) for s in ("verify", "verify-hot")
                                                         for seed in (40, 41, 42, 43)]


def test_a_round_left_unfinished_at_the_second_shape_is_named_with_its_shape():
    run = _perturbed_run(failing_seed=None, shapes=("verify", "verify-hot"))
    for o in run.ranks:  # rank 1 never ends the second shape's first round
        cut = next(i for i, e in enumerate(o.events) if isinstance(e, PerturbEnded) and e.shape == "verify-hot")
        if o.rank == 1:
            o.events = o.events[:cut]
    rounds = races.rounds(run.ranks)
    assert [(x.shape, x.seed) for x in rounds if x.ok is None] == [("verify-hot", s) for s in (40, 41, 42, 43)]
    assert all(x.ok for x in rounds if x.shape == "verify")
    # whatever ended the run, it was not verified under the schedules: no note says so
    assert not [d for d in races.notes(run.ranks) if d.severity == "note"]


def test_perturbed_rounds_that_reached_no_call_of_the_candidate_are_a_warning():
    r = interpret(_perturbed_run(failing_seed=None, calls=0), W, dict(BASE))
    assert r.status == Status.VERIFIED
    assert any(d.code == "perturb" and d.severity == "warning" and "reached none" in d.message for d in r.diagnostics)


def test_a_hang_in_a_perturbed_round_names_the_round():
    run = _perturbed_run(failing_seed=None, seeds=(42,))
    for o in run.ranks:
        o.events = [e for e in o.events if not isinstance(e, (PerturbEnded, Done))
                    and not (isinstance(e, Verified) and e.perturb_seed)]
        o.events.append(TimedOut(rank=o.rank, phase="verify:verify", limit_s=10.0,
                                 what="two candidate launches back to back (perturbed, seed 42)",
                                 message="two candidate launches back to back (perturbed, seed 42) did not finish "
                                         "within 10.0 s", trace=({"slot": 0, "state": "waiting", "site": 97,
                                                                  "kind": "flag", "peer": 1 - o.rank, "id": 1,
                                                                  "expected": 3, "observed": 2, "completed": 5,
                                                                  "label": "arrived"},)))
        o.exit_code = 124
    r = interpret(run, W, dict(BASE), source="\n" * 96 + "    wait_flag<<<1, 1, 0, stream>>>(f, CUCO_WAIT_SITE(\"arrived\"));\n")
    assert r.status == Status.DEADLOCK
    assert "(during the perturbed round of seed 42 at verify: what seed 42 does)" in r.reason
    assert "rank 0 waits on rank 1 (c.cu:97, 'arrived' (flag 1): wants 3, saw 2)" in r.deadlock_report
    assert 'c.cu:97: wait_flag<<<1, 1, 0, stream>>>(f, CUCO_WAIT_SITE("arrived"));' in r.deadlock_report


@pytest.mark.parametrize("argv,says", [
    (["--perturb-rounds", "0"], "--perturb-rounds must be 1 or more, not 0"),
    (["--perturb-seed", "-4"], "--perturb-seed must be 0 or more, not -4"),
    (["--no-perturb", "--perturb-seed", "3"], "--no-perturb turns the perturbed schedules off"),
])
def test_bad_perturbation_options_are_refused_in_one_sentence(capsys, argv, says):
    from cuco_tui.cli.cuco import main

    assert main(["eval", str(W.seed), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cuco: ") and says in err and err.count("\n") == 1


def test_perturbation_options_reach_the_evaluation(monkeypatch, capsys):
    from cuco_tui.cli.cuco import main
    from cuco_tui.evaluate import cascade

    seen = []

    def fake_evaluate(path, workload, options, progress=None, kept=None):
        seen.append(options)
        return CascadeResult(str(path), workload.name, Status.NO_GPU, Level.COMPILE, "no_gpu: none; compiled only")

    monkeypatch.setattr(cascade, "evaluate", fake_evaluate)
    assert main(["eval", str(W.seed), "--perturb-seed", "17", "--perturb-rounds", "1", "--json"]) == 0
    assert main(["eval", str(W.seed), "--no-perturb", "--json"]) == 0
    assert main(["eval", str(W.seed), "--json"]) == 0
    assert [(o.perturb, o.perturb_seed, o.perturb_rounds) for o in seen] == [
        (True, 17, 1), (False, None, cascade.EvalOptions().perturb_rounds), (True, None, 4)]


def test_a_candidate_past_the_size_limit_is_rejected_before_it_is_read(tmp_path, no_gpu, monkeypatch):
    from cuco_tui.evaluate.static_checks import MAX_SOURCE_BYTES

    monkeypatch.setenv("CUCO_CACHE_DIR", str(tmp_path / "cache"))
    marker = "// cuco-design:"
    text = W.seed.read_text()
    at = text.index("\n", text.index(marker)) + 1  # a comment inside the EVOLVE block: L0 would pass it
    pad = MAX_SOURCE_BYTES + 1 - len(text.encode()) - 3
    just_over = tmp_path / "big.cu"
    just_over.write_text(text[:at] + "//" + "x" * pad + "\n" + text[at:])
    assert just_over.stat().st_size == MAX_SOURCE_BYTES + 1
    result = evaluate(just_over, W)
    assert (result.status, result.level) == (Status.REJECTED, Level.STATIC), result.reason
    assert [d.code for d in result.diagnostics] == ["size"] and "at most 1 MiB" in result.reason
    huge = tmp_path / "huge.cu"  # sparse: 8 GiB that take no disk, and would take the memory if read
    with huge.open("wb") as f:
        f.truncate(8 << 30)
    result = evaluate(huge, W)
    assert result.status == Status.REJECTED and "huge.cu is 8192.0 MiB" in result.reason
    assert not (tmp_path / "cache").exists()  # nothing compiled
