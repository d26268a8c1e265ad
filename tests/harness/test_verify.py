import importlib.util

import numpy as np
import pytest

from cuco_tui.harness.bf16 import from_bf16_bits, to_bf16_bits
from cuco_tui.harness.verify import POISON_BF16, compare, poison
from cuco_tui.workload.manifest import load_workload


def test_bf16_round_trip_and_rounding():
    x = np.array([1.0, -2.5, 3.140625, 1e-3, 65504.0, np.inf, -np.inf], dtype=np.float32)
    back = from_bf16_bits(np, to_bf16_bits(np, x))
    assert np.allclose(back, x, rtol=2 ** -8)
    assert back[0] == 1.0 and back[1] == -2.5
    assert np.isnan(from_bf16_bits(np, to_bf16_bits(np, np.array([np.nan], dtype=np.float32))))[0]
    # 1 + 2^-8 lies exactly between two bf16 values: ties go to even (1.0).
    assert from_bf16_bits(np, to_bf16_bits(np, np.array([1 + 2 ** -8], dtype=np.float32)))[0] == 1.0


def _bf16(a):
    return to_bf16_bits(np, np.asarray(a, dtype=np.float32))


def test_identical_outputs_pass():
    rng = np.random.default_rng(0)
    want = _bf16(rng.standard_normal((64, 32)))
    c = compare(np, want.copy(), want, "bf16")
    assert c.passed(0.02) and c.max_rel_error == 0 and c.unwritten == 0


def test_rounding_noise_passes_but_a_wrong_element_fails():
    rng = np.random.default_rng(1)
    ref = rng.standard_normal((128, 64)).astype(np.float32)
    want = _bf16(ref)
    noisy = _bf16(ref * (1 + 4e-3 * rng.standard_normal(ref.shape)))
    assert compare(np, noisy, want, "bf16").passed(0.02)
    bad = noisy.copy()
    bad[77, 5] = _bf16([float(from_bf16_bits(np, want[77, 5])) + 1.0])[0]
    c = compare(np, bad, want, "bf16")
    assert not c.passed(0.02)
    assert c.worst_index == (77, 5)


def test_unwritten_elements_are_counted_apart_from_computed_nans():
    want = _bf16(np.ones((8, 8)))
    got = want.copy()
    poison(np, got[:2], "bf16")
    got[5, 5] = 0x7FC0  # a NaN the candidate computed
    c = compare(np, got, want, "bf16")
    assert c.unwritten == 16
    assert c.nonfinite == 17
    assert not c.passed(0.02)
    assert (got[:2] == POISON_BF16).all()


def test_reference_formula_matches_float64_matmul():
    w = load_workload("gemm_allgather")
    spec = importlib.util.spec_from_file_location("ref", w.reference)
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    dims = {"M": 8, "K": 16, "N": 4}
    world = 2
    inputs = []
    for rank in range(world):
        io = ref.io_spec(dims, world)
        bufs = {n: np.empty(s, dtype=np.uint16) for n, s, _ in io["inputs"]}
        ref.fill_inputs(np, bufs, dims, world, rank, seed=3)
        inputs.append(bufs)
    out = ref.expected(inputs, dims, world)
    full = np.concatenate([from_bf16_bits(np, i["x"]).astype(np.float64) for i in inputs])
    for rank in range(world):
        b = from_bf16_bits(np, inputs[rank]["b"]).astype(np.float64)
        manual = np.array([[sum(full[i, k] * b[k, j] for k in range(16)) for j in range(2)] for i in range(8)])
        assert out[rank]["y"].shape == (8, 2)
        assert np.allclose(out[rank]["y"], manual)
    # fresh inputs per seed, different per rank
    assert not np.array_equal(inputs[0]["x"], inputs[1]["x"])


def _causal_attention(q, k, v, round_p, shift=0, drop_every=0):
    """Causal attention in float64 with the probabilities rounded as a bf16 kernel would:
    `round_p` "normalized" (softmax, then bf16, then P V) or "unnormalized" (exp, then bf16,
    P V, then / the fp32 row sum), or None (exact). `shift` lets row i see keys up to i + shift
    (an off-by-one mask); `drop_every` drops every n-th key (a missed chunk)."""
    n, d = q.shape
    s = q @ k.T / np.sqrt(d)
    rows, cols = np.indices(s.shape)
    mask = cols > rows + shift
    if drop_every:
        mask |= (cols % drop_every == 1) & (cols != rows)
    s = np.where(mask, -np.inf, s)
    e = np.exp(s - s.max(axis=1, keepdims=True))
    l = e.sum(axis=1, keepdims=True)
    bf = lambda a: from_bf16_bits(np, to_bf16_bits(np, a.astype(np.float32))).astype(np.float64)
    if round_p == "normalized":
        return bf(e / l) @ v
    if round_p == "unnormalized":
        return (bf(e) @ v) / l
    return (e / l) @ v


def test_the_floor_accepts_two_legit_bf16_attention_kernels_and_still_catches_mask_bugs():
    """Long causal attention: most rows average thousands of values, so the output's rms is
    tiny, while the first rows average a few values that can cancel. Two correct kernels that
    round their probabilities to bf16 at different points then differ by a few percent of
    |want| + rms there (what the GPU showed at 128k tokens: 4-7 %); a floor of a fraction of max|want|
    in the denominator (cp_attention's manifest), with the relative L2 error as a second test,
    passes them and fails an off-by-one causal mask and a dropped key chunk."""
    floor = load_workload("cp_attention").floor
    assert floor > 0
    rng = np.random.default_rng(5)
    n, d = 4096, 16
    q, k, v = (rng.standard_normal((n, d)) for _ in range(3))
    want = _bf16(_causal_attention(q, k, v, "normalized"))
    other = _bf16(_causal_attention(q, k, v, "unnormalized"))
    assert not compare(np, other, want, "bf16").passed(0.02)  # no floor: a false alarm
    assert compare(np, other, want, "bf16", floor=floor).passed(0.02)
    for bug in (dict(shift=1), dict(drop_every=512)):
        got = _bf16(_causal_attention(q, k, v, "normalized", **bug))
        c = compare(np, got, want, "bf16", floor=floor)
        assert not c.passed(0.02), (bug, c.max_rel_error, c.l2_rel_error)


def test_without_a_floor_the_l2_error_is_not_required():
    rng = np.random.default_rng(2)
    ref = rng.standard_normal((64, 64)).astype(np.float32)
    c = compare(np, _bf16(ref * 1.015), _bf16(ref), "bf16")
    assert c.passed(0.02) and c.floor == 0.0


@pytest.mark.parametrize("dtype, kind", [("i64", np.int64), ("i32", np.int32), ("u8", np.uint8), ("f16", np.uint16)])
def test_outputs_of_every_manifest_dtype_are_poisoned_and_compared(dtype, kind):
    """An imported program may return counts or indices (PKB's 79 returns int64): its outputs are
    poisoned, an element left so is unwritten, and a wrong count is named like a wrong value."""
    want = np.arange(1, 65, dtype=np.float64).reshape(8, 8) % 50 + 1
    got = (want.astype(np.float16).view(np.uint16) if dtype == "f16" else want.astype(kind)).copy()
    assert compare(np, got, want, dtype).passed(0.02)
    poison(np, got[0], dtype)
    c = compare(np, got, want, dtype)
    assert c.unwritten == 8 and not c.passed(0.02)
    fresh = (want.astype(np.float16).view(np.uint16) if dtype == "f16" else want.astype(kind)).copy()
    fresh[3, 4] = fresh[3, 4] + (0x1000 if dtype == "f16" else 7)
    bad = compare(np, fresh, want, dtype)
    assert bad.unwritten == 0 and bad.worst_index == (3, 4) and not bad.passed(0.02)


def test_integer_outputs_must_be_exact_and_their_poison_value_may_be_an_answer():
    idx = np.arange(1000, 1064, dtype=np.int64)
    got = idx.copy()
    got[7] += 3  # an index off by 3 is small against 1000s, and wrong
    c = compare(np, got, idx.astype(np.float64), "i64")
    assert not c.passed(0.02) and c.worst_index == (7,) and (c.worst_got, c.worst_want) == (1010.0, 1007.0)
    big = np.full(8, 10**9, dtype=np.int64)
    assert not compare(np, big + 100000, big.astype(np.float64), "i64").passed(0.02)
    codes = np.arange(256, dtype=np.uint8)  # holds 165, the u8 poison, as an answer
    ok = compare(np, codes.copy(), codes.astype(np.float64), "u8")
    assert ok.unwritten == 0 and ok.passed(0.02)
    left = codes.copy()
    poison(np, left[:4], "u8")
    assert compare(np, left, codes.astype(np.float64), "u8").unwritten == 4
