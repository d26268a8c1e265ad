"""gemm_reducescatter on GPUs (marker `gpu`): the seed and every template at its defaults through L2
(verification, back to back, perturbed schedules) with the ranks sharing one GPU at W=2 and W=4,
and on one GPU per rank at W=2 and W=4 where the host has them; ce_fold's single-knob changes too;
the reference against the seed in one timed run (the seed is the reference in C: it must not be
much faster)."""

import pytest

from cuco_tui.core.result import Level, Status
from cuco_tui.evaluate.cascade import EvalOptions, evaluate
from rs_common import BOOK, W

pytestmark = pytest.mark.gpu

TEMPLATES = ["host_chunked", "ce_push", "ce_fold"]


def _gpus():
    from cuco_tui.harness.gpus import inventory

    return inventory().count


def _explain(r):
    bad = [f"{v.shape}: max rel {v.max_rel_error:.3g}, unwritten {v.unwritten}, nonfinite {v.nonfinite}, {v.worst}"
           for v in r.verifications if not v.ok]
    return "\n".join([r.reason, r.deadlock_report or "", *bad, *(d.render() for d in r.diagnostics)])


def _candidate(tmp_path, name):
    if name == "seed":
        return W.seed
    s = BOOK.get(name)
    path = tmp_path / f"{name}.cu"
    path.write_text(BOOK.render(s, s.default_knobs()))
    return path


def _verified(r, world):
    # Nothing timed (ranks sharing a GPU, or bench=False): a verified result, not a measured one.
    assert r.status == Status.VERIFIED, _explain(r)
    assert r.world == world and all(v.ok for v in r.verifications), _explain(r)
    labels = [v.shape for v in r.verifications]
    assert sum("back to back" in s for s in labels) >= len(W.verify_shapes), labels
    # L2's perturbed schedules ran and the candidate survived them.
    assert any(d.code == "perturb" and d.severity == "note" for d in r.diagnostics), _explain(r)


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("name", ["seed"] + TEMPLATES)
def test_verified_with_the_ranks_sharing_one_gpu(tmp_path, name, world):
    r = evaluate(_candidate(tmp_path, name), W, EvalOptions(gpus=[0], world=world, share_gpu=True))
    _verified(r, world)
    assert r.level == Level.VERIFY and "nothing timed" in r.reason and not r.timings


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("name", ["seed"] + TEMPLATES)
def test_verified_on_a_gpu_per_rank(tmp_path, name, world):
    if _gpus() < world:
        pytest.skip(f"needs {world} GPUs")
    r = evaluate(_candidate(tmp_path, name), W, EvalOptions(world=world, bench=False))
    _verified(r, world)
    assert r.gpus == list(range(world))


@pytest.mark.parametrize("world", [2, 4])
def test_each_single_knob_change_of_ce_fold_verifies(tmp_path, world):
    """ce_fold's other knob points (2 and 8 chunks, a mover per peer) through L2 with their
    perturbed rounds, on a GPU per rank where the host has them, else sharing one: the cuBLASLt
    fold, its alignments at the odd shape (chunks that start off 256 bytes) and, at W=4, the
    in-place sum of the received slots."""
    s = BOOK.get("ce_fold")
    for knobs in s.one_knob_changes()[1:]:
        path = tmp_path / ("ce_fold" + "".join(f"-{v}" for v in knobs.values()) + ".cu")
        path.write_text(BOOK.render(s, knobs))
        own = _gpus() >= world
        options = EvalOptions(world=world, bench=False) if own else EvalOptions(gpus=[0], world=world, share_gpu=True)
        _verified(evaluate(path, W, options), world)


def test_the_reference_is_not_slower_than_the_seed():
    """The seed is the reference in C (one cuBLAS GEMM, one NCCL reduce-scatter): a reference
    slower than it would inflate every speedup the search reports."""
    if _gpus() < 2:
        pytest.skip("needs 2 GPUs")
    shapes = ("mlp-down-8b", "long-seq")
    r = evaluate(W.seed, W, EvalOptions(world=2, shapes=shapes))
    assert r.status == Status.MEASURED, _explain(r)
    assert sorted(t.shape for t in r.timings) == sorted(shapes)
    for t in r.timings:
        assert t.candidate.n >= 20 and len(t.per_rank) == 2
        assert 0.8 < t.speedup <= 1.05, t
