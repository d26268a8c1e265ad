"""`cuco workload check --gpu`: the reference's outputs saved by a GPU run, compared with the
workload's float64 expected() on the same inputs. The ranks' part needs a GPU
(tests/evaluate/test_gpu_shared.py); here the saved files are made on the CPU as a rank writes them,
from the reference's own fill_inputs and expected(), and the comparison must pass what is right and
name what is wrong."""

from __future__ import annotations

import numpy as np
import pytest

from cuco_tui.core.reference import load_reference
from cuco_tui.evaluate.cascade import EvalOptions
from cuco_tui.evaluate.reference_check import ReferenceCheck, check_reference, compare_saved
from cuco_tui.harness.bf16 import from_bf16_bits, to_bf16_bits
from cuco_tui.harness.verify import POISON_BF16
from cuco_tui.workload.manifest import load_workload
from cuco_tui.workload.saved_check import saved_file

W = load_workload("gemm_allgather")
WORLD = 2


def _save_ranks(rundir, spoil=None):
    """What the ranks of a `reference` plan write: each rank's inputs and its output in bf16;
    `spoil(rank, outputs)` changes them first."""
    ref = load_reference(W.reference)
    for shape in W.verify_shapes:
        dims = dict(shape.dims)
        inputs = []
        for rank in range(WORLD):
            spec = ref.io_spec(dims, WORLD, rank)
            ins = {b.name: np.zeros(b.shape, dtype=np.uint16) for b in spec.inputs}
            ref.fill_inputs(np, ins, dims, WORLD, rank, 7)
            inputs.append(ins)
        want = ref.expected(inputs, dims, WORLD)
        for rank in range(WORLD):
            outs = {k: to_bf16_bits(np, np.asarray(v, dtype=np.float32)) for k, v in want[rank].items()}
            if spoil:
                spoil(rank, outs)
            arrays = {f"in.{k}": v for k, v in inputs[rank].items()} | {f"out.{k}": v for k, v in outs.items()}
            np.savez(saved_file(rundir, shape.name, rank), **arrays)


def test_a_reference_that_matches_float64_passes_every_output_of_every_rank(tmp_path):
    _save_ranks(tmp_path)
    rows, problem = compare_saved(W, tmp_path, WORLD)
    assert problem == ""
    assert len(rows) == WORLD * len(W.verify_shapes)
    assert all(r.passed for r in rows)
    check = ReferenceCheck(W.name, (0, 0), W.rtol, rows)
    assert check.ok
    assert check.summary().startswith("matches expected() in float64 at verify (W=2 on GPU 0,0)")


def test_a_wrong_element_is_named_with_its_rank_output_and_place(tmp_path):
    def spoil(rank, outs):
        if rank == 1:
            y = from_bf16_bits(np, outs["y"]).astype(np.float32)
            y[3, 5] += 10 * float(np.abs(y).max())
            outs["y"] = to_bf16_bits(np, y)

    _save_ranks(tmp_path, spoil)
    rows, _ = compare_saved(W, tmp_path, WORLD)
    bad = [r for r in rows if not r.passed]
    assert [(r.rank, r.output, r.worst_index) for r in bad] == [(1, "y", (3, 5))]
    summary = ReferenceCheck(W.name, (0, 1), W.rtol, rows).summary()
    assert summary.startswith("differs from expected() in float64 (W=2 on GPUs 0,1, rtol")
    assert "rank 1 'y' at verify: max relative error" in summary and "at [3, 5]" in summary


def test_an_output_the_reference_left_unwritten_is_said_so(tmp_path):
    def spoil(rank, outs):
        if rank == 0:
            outs["y"][:2] = POISON_BF16

    _save_ranks(tmp_path, spoil)
    rows, _ = compare_saved(W, tmp_path, WORLD)
    check = ReferenceCheck(W.name, (0, 0), W.rtol, rows)
    assert not check.ok
    assert "rank 0 left" in check.summary() and "elements of 'y' at verify unwritten" in check.summary()


def test_a_rank_that_saved_nothing_is_a_problem_not_a_pass(tmp_path):
    _save_ranks(tmp_path)
    saved_file(tmp_path, W.verify_shapes[0].name, 1).unlink()
    rows, problem = compare_saved(W, tmp_path, WORLD)
    assert rows == () and problem == "verify: no saved buffers of rank(s) 1"
    assert not ReferenceCheck(W.name, (0, 0), W.rtol, rows, problem=problem).ok


def test_without_a_gpu_the_check_says_why_in_one_line():
    from cuco_tui.harness.gpus import inventory

    if inventory().count:
        pytest.skip("this machine has a GPU")
    check = check_reference(W, EvalOptions(world=2, bench=False))
    assert not check.ok
    assert check.summary().startswith("not verified: ") and "\n" not in check.summary()


@pytest.mark.parametrize("flags, message", [
    (["--world", "2"], "--world names the GPU group of --gpu (the reference on GPUs): add --gpu"),
    (["--share-gpu"], "--share-gpu names the GPU group of --gpu (the reference on GPUs): add --gpu"),
    (["--gpu", "--world", "3"], "--world 3: gemm_allgather runs on 2, 4, 8 GPUs, not 3"),
    (["--gpu", "--share-gpu", "--gpus", "0,1"], "--share-gpu puts every rank on one GPU: name one with --gpus"),
])
def test_group_flags_without_gpu_or_out_of_the_workload_are_refused_in_one_line(flags, message, capsys):
    from cuco_tui.cli import cuco

    rc = cuco.main(["workload", "check", str(W.root), "--no-compile", *flags])
    err = capsys.readouterr().err
    assert rc == 2
    assert message in err and len(err.strip().splitlines()) == 1


def test_with_gpu_a_broken_manifest_is_a_finding_not_a_crash(tmp_path, capsys):
    from cuco_tui.cli import cuco

    (tmp_path / "manifest.toml").write_text("name = [broken\n")
    rc = cuco.main(["workload", "check", str(tmp_path), "--gpu", "--world", "2", "--json"])
    out = capsys.readouterr().out
    assert rc == 1
    assert '"item": "manifest"' in out and '"level": "error"' in out and "reference on GPU" not in out
