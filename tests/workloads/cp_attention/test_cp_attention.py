"""cp_attention: the manifest (and its CAUSAL flag dim), the float64 answer against an independent
naive computation (causal masks by global position), the candidates' blockwise online-softmax
algorithm in NumPy, and the reference's softmax compiled with NVRTC. The workload's CUDA code on
the CPU (workloads/cp_attention/emulator/) is in test_cp_kernels_on_cpu.py (the templates'
attention kernel and both softmax kernels, the reference's cuBLAS plan) and
test_cp_attention_emulated.py (the seed and the templates whole, every rank at once, over a
model of the CUDA runtime, NCCL and cuBLAS); the seed and the strategy templates through L0 and
L1 in test_cp_templates.py; on GPUs (marker `gpu`), the reference against float64 and the seed
and the templates through verification, in test_cp_gpu.py."""

import math

import numpy as np
import pytest

from cuco_tui.harness.bf16 import to_bf16_bits
from cuco_tui.core.workload import WorkloadError
from cuco_tui.workload.manifest import load_workload
from cp_common import REF, W, _dims, _f64, _inputs


# ---------------------------------------------------------------------------- manifest and buffers


def test_manifest_loads_and_fits_every_world_size():
    assert W.world_sizes == (2, 4, 8)
    assert W.dim_names == ("S", "H", "HKV", "D", "CAUSAL")
    assert W.split_dims == ("S",)
    for world in W.world_sizes:
        W.check_world(world)
    with pytest.raises(WorkloadError):
        W.check_world(3)
    shapes = W.verify_shapes + W.bench_shapes
    assert {s.dims["CAUSAL"] for s in W.verify_shapes} == {0, 1}
    assert {s.dims["CAUSAL"] for s in W.bench_shapes} == {0, 1}
    assert {s.dims["D"] for s in shapes} == {64, 128}
    assert any(s.dims["HKV"] < s.dims["H"] for s in W.verify_shapes)  # grouped-query heads are verified
    assert min(s.dims["S"] for s in W.bench_shapes) == 16384 and max(s.dims["S"] for s in W.bench_shapes) == 131072
    assert {s.dims["H"] for s in W.bench_shapes} >= {8, 16, 32}
    for s in shapes:
        assert s.dims["H"] % s.dims["HKV"] == 0
        for world in W.world_sizes:
            assert (s.dims["S"] // world) % 64 == 0  # whole 64-row tiles on every rank
    assert all(s.dims["S"] <= 2048 for s in W.verify_shapes)


def test_flag_dims_may_be_zero_and_nothing_else(tmp_path):
    """manifest.py's `flag_dims`: a dim listed there takes 0 or 1; every other dim stays positive."""
    root = tmp_path / "wl"
    root.mkdir()
    for f, text in (("seed.cu", "// seed\n"), ("reference.py", ""), ("task.md", "task\n")):
        (root / f).write_text(text)

    def manifest(flag_value, other=1, flags='["F"]'):
        (root / "manifest.toml").write_text(
            f'name = "wl"\nworld_sizes = [2]\ndims = ["N", "F"]\nflag_dims = {flags}\nseed = "seed.cu"\n'
            f'reference = "reference.py"\n[[verify]]\nN = {other}\nF = {flag_value}\n[[bench]]\nN = 2\nF = 1\n')
        return load_workload(root)

    assert manifest(0).verify_shapes[0].dims == {"N": 1, "F": 0}
    assert manifest(1).verify_shapes[0].dims["F"] == 1
    with pytest.raises(WorkloadError, match="F is a flag dim and must be 0 or 1, not 2"):
        manifest(2)
    with pytest.raises(WorkloadError, match="must be 0 or 1"):
        manifest("true")
    with pytest.raises(WorkloadError, match="N must be a positive integer, not 0"):
        manifest(0, other=0)
    with pytest.raises(WorkloadError, match="F must be a positive integer, not 0"):
        manifest(0, flags="[]")  # without flag_dims, 0 is refused as before
    with pytest.raises(WorkloadError, match="flag_dims names X, which is not in dims"):
        manifest(0, flags='["X"]')


def test_buffers():
    dims = _dims(2048, 8, 2, 128, 1)
    spec = REF.io_spec(dims, 4, 1)
    assert spec == REF.io_spec(dims, 4, 3)
    shapes = {n: (s, d) for n, s, d in spec["inputs"] + spec["outputs"]}
    assert shapes == {"q": ((512, 8, 128), "bf16"), "k": ((512, 2, 128), "bf16"), "v": ((512, 2, 128), "bf16"),
                      "o": ((512, 8, 128), "bf16")}


def test_dims_the_reference_refuses():
    with pytest.raises(ValueError, match="multiple of HKV"):
        REF.io_spec(_dims(1024, 6, 4, 64, 0), 2)
    with pytest.raises(ValueError, match="split evenly"):
        REF.io_spec(_dims(1000, 4, 4, 64, 0), 3)
    with pytest.raises(ValueError, match="CAUSAL"):
        REF.io_spec(_dims(1024, 4, 4, 64, 2), 2)


def test_inputs_are_deterministic_and_differ_by_rank():
    dims = _dims(64, 2, 1, 8, 1)
    a, b = _inputs(dims, 2, seed=5), _inputs(dims, 2, seed=5)
    for ra, rb in zip(a, b):
        for name in ra:
            assert np.array_equal(ra[name], rb[name])
    assert not np.array_equal(a[0]["k"], a[1]["k"])
    assert not np.array_equal(a[0]["q"], _inputs(dims, 2, seed=6)[0]["q"])
    q = _f64(a[0]["q"])
    assert 1.5 < q.std() < 2.5  # peaked rows: the max matters


def _bytes_per_rank(dims, world):
    """What one rank holds at once in an evaluation: the harness's buffers (the output twice: the
    candidate's and the reference's), the reference's gathered K/V and its score block, and the
    hungriest template's (the seed: the same as the reference; a flash template: gathered K/V and
    fp32 running state)."""
    S, H, HKV, D = dims["S"], dims["H"], dims["HKV"], dims["D"]
    sl = S // world
    harness = sl * (3 * H + 2 * HKV) * D * 2
    gathered = 2 * S * HKV * D * 2
    rows = REF.block_rows(sl, S, H)
    block = H * rows * S * 6
    flash = gathered + sl * H * (D + 2) * 4
    return harness + gathered + block + max(gathered + block, flash)


@pytest.mark.parametrize("world", [2, 4, 8])
def test_every_shape_stays_under_20_gb_a_rank(world):
    for s in W.bench_shapes + W.verify_shapes:
        gb = _bytes_per_rank(s.dims, world) / 1e9
        assert gb < 20, f"{s.name} at W={world}: {gb:.1f} GB a rank"


def test_block_rows():
    assert REF.block_rows(768, 1536, 8) == 768  # small: one block of every row
    rows = REF.block_rows(65536, 131072, 16)
    assert rows % 16 == 0 and 16 * rows * 131072 * 6 <= REF.SCORE_BUDGET and rows >= 128
    assert REF.block_rows(1 << 20, 1 << 24, 64) == 16  # never fewer than 16 rows


# ---------------------------------------------------------------------------- the answer on the CPU


def _naive(all_inputs, dims, world):
    """Attention row by row with Python floats: for rank r, query i, head h, the keys it can see
    are the global positions 0 .. S-1 (non-causal) or 0 .. r*S/W + i (causal), taken from the
    rank that holds each; KV head h // (H / HKV)."""
    S, H, HKV, D = dims["S"], dims["H"], dims["HKV"], dims["D"]
    sl, group = S // world, H // HKV
    ks = [_f64(inp["k"]) for inp in all_inputs]
    vs = [_f64(inp["v"]) for inp in all_inputs]
    outs = []
    for r, inp in enumerate(all_inputs):
        q = _f64(inp["q"])
        o = np.zeros((sl, H, D))
        for i in range(sl):
            last = r * sl + i if dims["CAUSAL"] else S - 1
            for h in range(H):
                g = h // group
                scores = []
                for pos in range(last + 1):
                    key = ks[pos // sl][pos % sl, g]
                    scores.append(sum(q[i, h, d] * key[d] for d in range(D)) / math.sqrt(D))
                top = max(scores)
                weights = [math.exp(s - top) for s in scores]
                total = sum(weights)
                for pos, w in enumerate(weights):
                    o[i, h] += (w / total) * vs[pos // sl][pos % sl, g]
        outs.append(o)
    return outs


@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("causal", [0, 1])
@pytest.mark.parametrize("heads", [(4, 4), (4, 2)])
def test_expected_matches_a_naive_float64_computation(world, causal, heads):
    dims = _dims(16, heads[0], heads[1], 8, causal)
    inputs = _inputs(dims, world)
    got = REF.expected(inputs, dims, world)
    for want, g in zip(_naive(inputs, dims, world), got):
        assert g["o"].shape == want.shape
        assert np.allclose(g["o"], want, rtol=1e-12, atol=1e-12)


def test_causal_mask_is_by_global_position():
    """Rank r's queries see every key of the ranks before it, their own chunk up to the query, and
    nothing of the ranks after: changing a key or value a query may not see changes nothing."""
    world, dims = 4, _dims(32, 2, 1, 8, 1)
    sl = 8
    base = _inputs(dims, world)
    want = REF.expected(base, dims, world)
    # rank 0's first query sees exactly key 0: its output is v[0]
    assert np.allclose(want[0]["o"][0], _f64(base[0]["v"])[0])

    def changed(rank, pos):
        """Outputs after rank `rank`'s key and value at local row `pos` are replaced."""
        inputs = [{k: v.copy() for k, v in inp.items()} for inp in base]
        rng = np.random.RandomState(rank * 100 + pos)
        for name in ("k", "v"):
            inputs[rank][name][pos] = to_bf16_bits(np, rng.standard_normal(inputs[rank][name][pos].shape) * 3)
        return REF.expected(inputs, dims, world)

    # a key of rank 1 at local row 5 (global 13): rank 1's rows >= 5 and all of ranks 2, 3 see it
    after = changed(1, 5)
    assert np.array_equal(after[0]["o"], want[0]["o"])
    assert np.array_equal(after[1]["o"][:5], want[1]["o"][:5])
    assert not np.allclose(after[1]["o"][5:], want[1]["o"][5:])
    for r in (2, 3):
        assert (np.abs(after[r]["o"] - want[r]["o"]).max(axis=(1, 2)) > 0).all()
    # the last key of the sequence: only the very last query of the last rank sees it
    after = changed(3, sl - 1)
    for r in range(3):
        assert np.array_equal(after[r]["o"], want[r]["o"])
    assert np.array_equal(after[3]["o"][:-1], want[3]["o"][:-1]) and not np.allclose(after[3]["o"][-1], want[3]["o"][-1])
    # without the mask every query sees every key
    nc = _dims(32, 2, 1, 8, 0)
    full = REF.expected(base, nc, world)
    inputs = [{k: v.copy() for k, v in inp.items()} for inp in base]
    inputs[3]["v"][sl - 1] = to_bf16_bits(np, np.full((1, 8), 5.0, dtype=np.float32))
    moved = REF.expected(inputs, nc, world)
    for r in range(world):
        assert (np.abs(moved[r]["o"] - full[r]["o"]).max(axis=(1, 2)) > 0).all()


def test_ring_order():
    assert REF.ring_order(2, 4, False) == [2, 1, 0, 3]
    assert REF.ring_order(2, 4, True) == [2, 1, 0]
    assert REF.ring_order(0, 8, True) == [0]
    assert REF.ring_order(7, 8, True) == [7, 6, 5, 4, 3, 2, 1, 0]
    for world in (2, 4, 8):
        for r in range(world):
            assert sorted(REF.ring_order(r, world, False)) == list(range(world))


def _blocks(inputs, order, sl, chunks=1):
    blocks = []
    for p in order:
        k, v = _f64(inputs[p]["k"]), _f64(inputs[p]["v"])
        step = sl // chunks
        for c in range(chunks):
            blocks.append((p * sl + c * step, k[c * step:(c + 1) * step], v[c * step:(c + 1) * step]))
    return blocks


@pytest.mark.parametrize("world,causal,chunks,tile", [
    (2, 0, 1, 64), (2, 1, 1, 64), (4, 1, 2, 16), (4, 0, 4, 8), (8, 1, 1, 8), (8, 0, 2, 4),
])
def test_blockwise_online_softmax_matches_float64(world, causal, chunks, tile):
    """The templates' algorithm: blocks of keys in the ring (and pull) order, tiles within a
    block, merged with a running max and sum; causal diagonal tiles leave rows fully masked."""
    dims = _dims(world * 32, 4, 2, 16, causal)
    sl = 32
    inputs = _inputs(dims, world)
    want = REF.expected(inputs, dims, world)
    for r in range(world):
        blocks = _blocks(inputs, REF.ring_order(r, world, bool(causal)), sl, chunks)
        got = REF.blockwise(_f64(inputs[r]["q"]), blocks, r * sl, bool(causal), tile)
        assert np.allclose(got, want[r]["o"], rtol=1e-10, atol=1e-12)


def test_blockwise_survives_fully_masked_blocks_first():
    """Blocks a causal mask hides entirely (ranks after r), taken first and tile by tile, leave
    the state at m = -inf, l = 0 without a NaN; the answer is unchanged."""
    world, sl = 4, 16
    dims = _dims(world * sl, 2, 2, 8, 1)
    inputs = _inputs(dims, world)
    want = REF.expected(inputs, dims, world)
    for r in range(world):
        order = list(range(world - 1, -1, -1))  # future blocks first
        with np.errstate(all="raise"):
            got = REF.blockwise(_f64(inputs[r]["q"]), _blocks(inputs, order, sl), r * sl, True, 4)
        assert np.isfinite(got).all()
        assert np.allclose(got, want[r]["o"], rtol=1e-10, atol=1e-12)


def _nvrtc():
    import glob

    try:
        import nvidia
    except ImportError:
        return None
    found = sorted(p for d in nvidia.__path__ for p in glob.glob(f"{d}/*/lib/libnvrtc.so*"))
    return found[0] if found else None


@pytest.mark.skipif(_nvrtc() is None, reason="needs NVRTC (the nvidia-cuda-nvrtc wheel)")
def test_reference_softmax_compiles_with_nvrtc():
    """CuPy compiles the reference's RawKernel with NVRTC, which has no <math.h> (no INFINITY):
    compile it the same way here, no GPU needed."""
    import ctypes

    lib = ctypes.CDLL(_nvrtc())
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), REF._SOFTMAX_SRC.encode(), b"softmax.cu", 0, None, None) == 0
    opts = (ctypes.c_char_p * 1)(b"--gpu-architecture=compute_90")
    rc = lib.nvrtcCompileProgram(prog, 1, opts)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    assert rc == 0, log.value.decode()
