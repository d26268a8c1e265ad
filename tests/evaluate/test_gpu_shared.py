"""GPU tests that need one GPU only: every rank of a group on the same GPU (`--share-gpu`).

What they check is the product's single-GPU path: each workload's seed verifies against its
reference with two and four ranks sharing the GPU, the back-to-back launches included, and
the result says that nothing was timed and why a device-initiated candidate cannot pass there."""

import pytest

from cuco_tui.evaluate.cascade import EvalOptions, evaluate
from cuco_tui.core.result import Level, Status
from cuco_tui.workload.manifest import list_workloads, load_workload

pytestmark = pytest.mark.gpu


def _explain(r) -> str:
    return "\n".join([r.reason, r.deadlock_report] + [d.render() for d in r.diagnostics])


def _shared(world: int) -> EvalOptions:
    return EvalOptions(gpus=[0], world=world, share_gpu=True)


@pytest.mark.parametrize("name", list_workloads())
def test_the_seed_verifies_with_two_ranks_on_one_gpu(name):
    w = load_workload(name)
    r = evaluate(w.seed, w, _shared(2))
    assert r.status == Status.VERIFIED and r.level == Level.VERIFY, _explain(r)
    assert "nothing timed" in r.reason and not r.timings
    assert r.gpus == [0, 0]
    labels = [v.shape for v in r.verifications]
    assert all(v.ok for v in r.verifications)
    assert sum("back to back" in s for s in labels) >= 2 * len(w.verify_shapes), labels
    assert any(d.code == "shared_gpu" for d in r.diagnostics)
    # L2's perturbed schedules ran, reached the candidate's calls, and it survived them.
    assert sum("perturbed, seed" in s for s in labels) >= 2 * 4 * len(w.verify_shapes), labels
    note = next(d for d in r.diagnostics if d.code == "perturb" and d.severity == "note")
    assert note.message.startswith("verified under 4 perturbed schedule(s)"), _explain(r)
    # Every seed is host-driven NCCL: the rounds stood in front of its NCCL calls (CuPy's NCCL loaded
    # before the perturber once took them all, and the rounds of cp_attention's seed held nothing).
    assert "nccl" in note.message.partition("calls seen:")[2], _explain(r)
    assert not any(d.code == "perturb" and d.severity == "warning" for d in r.diagnostics), _explain(r)


@pytest.mark.parametrize("name", [n for n in list_workloads() if 4 in load_workload(n).world_sizes])
def test_the_seed_verifies_with_four_ranks_on_one_gpu(name):
    w = load_workload(name)
    r = evaluate(w.seed, w, _shared(4))
    assert r.status == Status.VERIFIED and r.level == Level.VERIFY, _explain(r)
    assert r.world == 4 and all(v.ok for v in r.verifications)


def test_a_device_initiated_candidate_fails_there_with_the_reason():
    w = load_workload("gemm_allgather")
    r = evaluate(w.root / "candidates" / "lsa_allgather.cu", w,
                 EvalOptions(gpus=[0], world=2, share_gpu=True, first_launch_timeout_s=10.0))
    assert not r.status.ok
    # The failure itself (NCCL refuses the device communicator across "hosts"), then why.
    assert "ncclDevCommCreate" in r.reason or "ncclCommWindowRegister" in r.reason, _explain(r)
    assert "communicates from the device" in r.reason and "one GPU per rank" in r.reason


@pytest.mark.parametrize("fault", ["early_arrival", "reuse_before_read", "stale_pull"])
def test_a_race_fails_under_a_perturbed_schedule_and_its_seed_replays_it(fault):
    """The race faults pass the ordinary checks by luck on one GPU; a perturbed round fails them,
    the reason names the seed, and that seed alone fails them again."""
    import re
    from dataclasses import replace

    w = load_workload("gemm_allgather")
    path = w.root / "faults" / f"{fault}.cu"
    options = EvalOptions(gpus=[0], world=2, share_gpu=True, bench=False)
    r = evaluate(path, w, options)
    assert r.status == Status.INCORRECT and r.reason.startswith("race: wrong output under a perturbed schedule"), \
        _explain(r)
    assert any(d.code == "race" for d in r.diagnostics) and "worst: rank" in r.reason
    seed = int(re.search(r"\(seed (\d+), ", r.reason).group(1))
    again = evaluate(path, w, replace(options, perturb_seed=seed, perturb_rounds=1))
    assert again.status == Status.INCORRECT and f"(seed {seed}, " in again.reason, _explain(again)


OVERRUN_KERNEL = """
// One element past the end of "y": the output still verifies, compute-sanitizer must not.
__global__ void overrun_y(unsigned short* y, size_t elements) { y[elements] = y[0]; }
"""
OVERRUN_CALL = """
  overrun_y<<<1, 1, 0, stream>>>((unsigned short*)cuco::output(ctx, "y")->ptr, (size_t)c->M * n_local);
  CUCO_TRY_CUDA(ctx, cudaGetLastError());
  return 0;
}

static int candidate_teardown("""


def test_memcheck_passes_the_seed_and_names_the_line_of_an_overrun(tmp_path):
    """`cuco eval --sanitize memcheck`: the seed (NCCL, cuBLAS, CuPy's buffers unpooled) has no
    finding; a copy of it whose extra kernel writes one element past "y" verifies as before and is
    made incorrect by the finding, which names the kernel, the source line and the thread."""
    w = load_workload("gemm_allgather")
    options = EvalOptions(gpus=[0], world=2, share_gpu=True, sanitize="memcheck")
    r = evaluate(w.seed, w, options)
    assert r.status == Status.VERIFIED and "compute-sanitizer memcheck: no errors" in r.reason, _explain(r)
    source = w.seed.read_text()
    source = source.replace("struct Candidate {", OVERRUN_KERNEL + "\nstruct Candidate {", 1)
    source = source.replace("  return 0;\n}\n\nstatic int candidate_teardown(", OVERRUN_CALL, 1)
    assert "overrun_y<<<" in source
    path = tmp_path / "overrun.cu"
    path.write_text(source)
    r = evaluate(path, w, options)
    assert r.status == Status.INCORRECT and r.reason.startswith("compute-sanitizer memcheck:"), _explain(r)
    assert "(the output itself verified)" in r.reason
    found = [d for d in r.diagnostics if d.code == "sanitizer-memcheck" and d.severity == "error"]
    line = next(i for i, text in enumerate(source.splitlines(), 1) if "y[elements] = y[0]" in text)
    assert found and found[0].file == "overrun.cu" and found[0].line == line, _explain(r)
    assert "Invalid __global__ write" in found[0].message and "overrun_y" in found[0].message


@pytest.mark.parametrize("name", list_workloads())
def test_each_reference_on_the_gpu_matches_its_float64_answer(name, tmp_path):
    """`cuco workload check --gpu`: what every candidate is verified against is itself right."""
    from cuco_tui.evaluate.reference_check import check_reference

    w = load_workload(name)
    r = check_reference(w, EvalOptions(gpus=[0], world=2, share_gpu=True, bench=False), run_root=tmp_path)
    assert r.ok, r.summary()
    assert {row.shape for row in r.rows} == {s.name for s in w.verify_shapes}
    # every output of every rank that has one (kv_transfer's sender, rank 0, has none)
    from cuco_tui.core.reference import load_reference

    ref, dims = load_reference(w.reference), dict(w.verify_shapes[0].dims)
    assert {row.rank for row in r.rows} == {k for k in (0, 1) if ref.io_spec(dims, 2, k).outputs}
    assert r.summary().startswith("matches expected() in float64")


def test_a_reference_answer_spoiled_on_the_gpu_is_named_by_rank_and_place(tmp_path):
    """The comparison with float64 can fail: the saved output of one rank is spoiled before it."""
    import numpy as np

    from cuco_tui.evaluate.reference_check import check_reference, compare_saved

    w = load_workload("gemm_allgather")
    r = check_reference(w, EvalOptions(gpus=[0], world=2, share_gpu=True, bench=False), run_root=tmp_path)
    assert r.ok, r.summary()
    (rundir,) = [p for p in tmp_path.iterdir() if p.is_dir() and "-reference-" in p.name]
    path = rundir / f"reference-{w.verify_shapes[0].name}-rank1.npz"
    saved = dict(np.load(path))
    saved["out.y"] = saved["out.y"].copy()
    saved["out.y"][2, 3] ^= 0x4000  # the exponent's top bit: a far-off value
    np.savez(path, **saved)
    rows, problem = compare_saved(w, rundir, 2)
    assert problem == "" and [(x.rank, x.worst_index) for x in rows if not x.passed] == [(1, (2, 3))]
