"""cp_attention on GPUs (marker `gpu`): the reference against float64 on one GPU (each attention
mode), and the seed and the template variants through verification on two."""

import numpy as np
import pytest

from cuco_tui.toolchain import BuildCache
from cuco_tui.toolchain.toolchain import discover
from cuco_tui.evaluate.cascade import EvalOptions, evaluate
from cuco_tui.core.result import Status
from cuco_tui.harness.bf16 import from_bf16_bits
from cp_common import REF, VARIANTS, W, _book, _dims, _passes


# ---------------------------------------------------------------------------- on GPUs


def _gpus():
    from cuco_tui.harness.gpus import inventory

    return inventory().count


def _load_attention_library():
    from cuco_tui.toolchain.attention import ensure_library
    from cuco_tui.harness import attention as harness_attention

    library = ensure_library(discover(), BuildCache())
    if not library.ok:
        pytest.skip(f"no attention library: {library.problem}")
    assert harness_attention.loaded(library.preload()) is not None


@pytest.mark.gpu
@pytest.mark.parametrize("attention", ["cudnn", "sdpa", "cupy"])
def test_reference_matches_float64_on_one_gpu(attention):
    """The reference (NCCL on a one-rank communicator; PyTorch's fused attention, or cuBLAS and
    the softmax kernel) against float64 at each verify shape; and, as rank 1 of 2 with K_all and
    V_all filled by hand, with the causal mask offset by the rank's global position (and, for
    the CuPy passes, blocks of a few rows)."""
    if attention == "sdpa":
        pytest.importorskip("torch", reason="the fused reference needs PyTorch")
    if attention == "cudnn":
        _load_attention_library()
    import cupy
    from cupy.cuda import nccl

    class Env:
        pass

    def buffers(dims, world, rank, seed):
        io = REF.io_spec(dims, world, rank)
        host = {n: np.empty(s, dtype=np.uint16) for n, s, _ in io["inputs"]}
        REF.fill_inputs(np, host, dims, world, rank, seed)
        return host, {n: cupy.asarray(v) for n, v in host.items()}, cupy.empty(io["outputs"][0][1], dtype=cupy.uint16)

    for shape in W.verify_shapes:
        dims = shape.dims
        env = Env()
        env.comm = nccl.NcclCommunicator(1, nccl.get_unique_id(), 0)
        env.stream = cupy.cuda.Stream(non_blocking=True)
        env.world, env.rank, env.dims = 1, 0, dims
        host, dev, out = buffers(dims, 1, 0, 11)
        ref = REF.Reference(env, attention)
        assert ref.mode == attention and ref.warnings == []
        ref.run(dev, {"o": out})
        ref.run(dev, {"o": out})  # twice: nothing left over from the first run may matter
        env.stream.synchronize()
        want = REF.expected([host], dims, 1)[0]["o"]
        got = from_bf16_bits(np, cupy.asnumpy(out)).astype(np.float64)
        assert _passes(got, want, W.rtol, W.floor), shape.name
        assert ref.comm_bytes() == 0
        env.comm.destroy()

    dims = _dims(1024, 4, 2, 128, 1)
    both = [buffers(dims, 2, r, 5) for r in range(2)]
    env = Env()
    env.comm, env.stream, env.world, env.rank, env.dims = None, cupy.cuda.Stream(non_blocking=True), 2, 1, dims
    ref = REF.Reference(env, attention)
    ref.rows = 48  # CuPy passes: several blocks, the last one short (512 = 10 x 48 + 32)
    with env.stream:
        ref.k_all[...] = cupy.concatenate([both[0][1]["k"], both[1][1]["k"]])
        ref.v_all[...] = cupy.concatenate([both[0][1]["v"], both[1][1]["v"]])
    ref.attention(both[1][1], {"o": both[1][2]})
    env.stream.synchronize()
    want = REF.expected([both[0][0], both[1][0]], dims, 2)[1]["o"]
    got = from_bf16_bits(np, cupy.asnumpy(both[1][2])).astype(np.float64)
    assert _passes(got, want, W.rtol, W.floor)


VERIFY_ONLY = EvalOptions(world=2, bench=False)


def _explain(r):
    bad = [f"{v.shape}: max rel {v.max_rel_error:.3g}, fro {v.rel_fro_error:.3g}, unwritten {v.unwritten}, "
           f"nonfinite {v.nonfinite}, {v.worst}" for v in r.verifications if not v.ok]
    return "\n".join([r.reason, r.deadlock_report or "", *bad, *(d.render() for d in r.diagnostics)])


@pytest.mark.gpu
def test_seed_is_verified_on_two_gpus():
    if _gpus() < 2:
        pytest.skip("needs 2 GPUs")
    r = evaluate(W.seed, W, VERIFY_ONLY)
    assert r.status == Status.VERIFIED, _explain(r)
    assert len(r.verifications) >= 2 * len(W.verify_shapes) and all(v.ok for v in r.verifications)


@pytest.mark.gpu
@pytest.mark.parametrize("name,knobs", VARIANTS, ids=lambda v: v if isinstance(v, str) else "-".join(map(str, v.values())))
def test_template_is_verified_on_two_gpus(tmp_path, name, knobs):
    if _gpus() < 2:
        pytest.skip("needs 2 GPUs")
    book = _book()
    s = book.get(name)
    path = tmp_path / f"{name}.cu"
    path.write_text(book.render(s, s.normalized(knobs)))
    r = evaluate(path, W, VERIFY_ONLY)
    assert r.status == Status.VERIFIED, _explain(r)
    assert all(v.ok for v in r.verifications)


BALANCE_OVERLAP = [knobs for name, knobs in VARIANTS if name == "balance_overlap"]


@pytest.mark.gpu
@pytest.mark.parametrize("knobs", BALANCE_OVERLAP, ids=lambda v: "-".join(map(str, v.values())))
def test_balance_overlap_is_verified_at_four_ranks(tmp_path, knobs):
    """At W=4 the mirror pairs are (0, 3) and (1, 2), rank 0's mirror half sees every chunk and
    the K/V exchange skips the chunks no reader needs; with fewer than 4 GPUs the ranks share one
    (verified, not timed)."""
    gpus = _gpus()
    if gpus < 1:
        pytest.skip("needs a GPU")
    book = _book()
    s = book.get("balance_overlap")
    path = tmp_path / "balance_overlap.cu"
    path.write_text(book.render(s, s.normalized(knobs)))
    r = evaluate(path, W, EvalOptions(world=4, bench=False, share_gpu=gpus < 4))
    assert r.status == Status.VERIFIED, _explain(r)
    assert len(r.verifications) >= 2 * len(W.verify_shapes) and all(v.ok for v in r.verifications)
