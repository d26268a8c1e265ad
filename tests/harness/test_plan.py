"""The run plan (harness/plan.py): what the cascade builds is what every rank reads back from
plan.json, exactly; a plan.json of another version is refused in one sentence, by the rank worker
too; every check's inputs get a seed of their own."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from cuco_tui.evaluate.cascade import EvalOptions, make_plan
from cuco_tui.evaluate.sanitizer import plan_for
from cuco_tui.harness.plan import (BACK_TO_BACK_CHECK, PERTURBED_CHECK, PLAN_VERSION, PerturbPlan, PlanError,
                                   ProfilePlan, RunPlan)
from cuco_tui.workload.manifest import load_workload

W = load_workload("gemm_allgather")


def _full_plan() -> RunPlan:
    plan = make_plan(W, W.root / "c.so", EvalOptions(trace_ab=True, first_launch_timeout_s=12.5, align="host"),
                     "evaluate")
    plan = replace(plan, preload=("/lib/libcuco_attn.so",), notes=("no cuDNN",),
                   perturb=PerturbPlan("/lib/libcuco_perturb.so", seed=41, rounds=4, unit_us=2000),
                   profile=ProfilePlan("long-seq", launches=3))
    return plan_for(plan, "memcheck").placed([0, 1], "/runs/x")


def test_a_plan_reads_back_exactly_from_its_file():
    plan = _full_plan()
    text = json.dumps(plan.to_json(), indent=1)  # as the launcher writes plan.json
    back = RunPlan.from_json(json.loads(text))
    assert back == plan
    assert back.world == 2 and back.limits.first_launch_timeout_s == 12.5 and back.limits.time_scale == 20.0
    assert [s.name for s in back.shapes] == [s.name for s in W.verify_shapes + W.bench_shapes]
    baseline = make_plan(W, None, EvalOptions(), "baseline").placed([3], "/runs/y")
    assert RunPlan.from_json(json.loads(json.dumps(baseline.to_json()))) == baseline
    assert json.loads(text)["version"] == PLAN_VERSION
    assert back.align == "host" and baseline.align == "device"  # the ranks line up on the GPUs unless asked


def test_a_plan_of_another_version_is_refused_in_one_sentence(tmp_path):
    data = _full_plan().to_json() | {"version": PLAN_VERSION + 1}
    with pytest.raises(PlanError, match=f"a run plan of version {PLAN_VERSION + 1}; this harness reads version"):
        RunPlan.from_json(data)
    broken = _full_plan().to_json()
    del broken["shapes"]
    with pytest.raises(PlanError, match="cannot read"):
        RunPlan.from_json(broken)
    # The rank worker says so and exits (no GPU needed: the plan is read before CuPy is imported).
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(data))
    r = subprocess.run([sys.executable, "-m", "cuco_tui.harness.worker", "--plan", str(path), "--rank", "0"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [f"cannot read the run plan {path}: a run plan of version "
                                             f"{PLAN_VERSION + 1}; this harness reads version {PLAN_VERSION}"]


def test_every_check_of_a_run_gets_inputs_of_its_own():
    plan = _full_plan()
    seeds = []
    for shape in plan.shapes:
        seeds += [plan.seed(shape, c) for c in range(shape.checks)]
        if shape.level == "verify":
            seeds += [plan.seed(shape, BACK_TO_BACK_CHECK), plan.seed(shape, BACK_TO_BACK_CHECK) + 1]
            seeds += [plan.seed(shape, PERTURBED_CHECK + 2 * i) + k for i in range(plan.perturb.rounds) for k in (0, 1)]
    assert len(seeds) == len(set(seeds))
    first = plan.shapes[0]
    assert plan.seed(first, 1) == plan.nonce * 1000 + first.index * 10 + 1  # the formula recorded runs used


def test_an_alignment_the_harness_does_not_know_is_refused_on_the_command_line():
    r = subprocess.run([sys.executable, "-m", "cuco_tui.cli", "baseline", "--align", "sideways"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert "argument --align: invalid choice: 'sideways' (choose from 'device', 'host')" in r.stderr.splitlines()[-1]
