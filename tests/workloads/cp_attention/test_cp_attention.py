"""cp_attention: the manifest (and its CAUSAL flag dim), the float64 answer against an independent
naive computation (causal masks by global position), the candidates' blockwise online-softmax
algorithm in NumPy; the workload's CUDA code on the CPU (workloads/cp_attention/emulator/: the
templates' attention kernel and both softmax kernels, the reference's cuBLAS plan, and the seed and
the templates whole, every rank at once, over a model of the CUDA runtime, NCCL and cuBLAS); the
seed and the strategy templates through L0 and L1; and, on GPUs (marker `gpu`), the reference
against float64 and the seed and the templates through verification."""

import importlib.util
import itertools
import math
import subprocess

import numpy as np
import pytest

from cuco_tui.toolchain import BuildCache
from cuco_tui.toolchain.toolchain import discover
from cuco_tui.evaluate.cascade import EvalOptions, evaluate
from cuco_tui.core.result import Status
from cuco_tui.harness.bf16 import from_bf16_bits, to_bf16_bits
from cuco_tui.core.workload import WorkloadError
from cuco_tui.workload.manifest import load_workload
from emulator_helpers import compile_emulated, needs_gxx, with_driver
from static_helpers import assert_static_ok

W = load_workload("cp_attention")
SEED = W.seed.read_text()
can_compile = pytest.mark.skipif(not discover().can_compile, reason="needs nvcc, NCCL and cuBLAS headers")


def _ref():
    spec = importlib.util.spec_from_file_location("cp_attention_ref", W.reference)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


REF = _ref()


def _dims(S, H, HKV, D, causal):
    return {"S": S, "H": H, "HKV": HKV, "D": D, "CAUSAL": causal}


def _inputs(dims, world, seed=3):
    out = []
    for rank in range(world):
        spec = REF.io_spec(dims, world, rank)
        bufs = {n: np.empty(s, dtype=np.uint16) for n, s, _ in spec["inputs"]}
        REF.fill_inputs(np, bufs, dims, world, rank, seed)
        out.append(bufs)
    return out


def _f64(bits):
    return from_bf16_bits(np, bits).astype(np.float64)


def _passes(got, want, rtol, floor=0.0):
    """The harness's criterion: |y - ref| <= rtol * (|ref| + rms(ref)), every element; with a
    floor (harness.verify.compare), rms is at least floor * max|ref| and the relative L2 error
    must be within rtol too."""
    rms = np.sqrt(np.mean(want ** 2))
    if floor:
        rms = max(rms, floor * np.abs(want).max())
        if np.linalg.norm(got - want) > rtol * np.linalg.norm(want):
            return False
    return bool((np.abs(got - want) <= rtol * (np.abs(want) + rms)).all())


def _book():
    from cuco_tui.agents.offline import StrategyBook

    return StrategyBook.load(W.root, W.seed)


def _sequential():
    """The three-pass host attention (cuBLAS GEMMs around a softmax kernel): the seed before the
    harness attention library, now the host_sequential template."""
    book = _book()
    return book.render(book.get("host_sequential"), {})


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


# ---------------------------------------------------------------------------- the kernels on the CPU
#
# No GPU here: workloads/cp_attention/emulator/cuda_cpu.h runs the workload's own CUDA kernels
# (the templates' blockwise attention kernel, the reference's and the seed's softmax kernels) on
# the CPU with g++, a thread per CUDA thread and the PTX ISA's fragment layouts for mma.sync and
# ldmatrix; the reference's cuBLAS calls (its plan) run through a NumPy model of
# cublasGemmStridedBatchedEx.

EMU = W.root / "emulator"

_SHIMS = """
inline void cp_async16(void* smem, const void* gmem) { emu_cp_async16(smem, gmem); }
inline void cp_async_commit() {}
template <int N> inline void cp_async_wait() {}
inline void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) { emu_mma_16816(c, a, b0, b1); }
inline void ldmatrix_x4_trans(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3, const void* row) {
  emu_ldmatrix_x4_trans(r0, r1, r2, r3, row);
}
"""


def _emulated_ptx(text):
    """The kernel file's PTX wrappers swapped for the emulator's, its dynamic shared memory static."""
    start = text.index("__device__ __forceinline__ void cp_async16(")
    end = text.index("__device__ __forceinline__ uint32_t pack_bf16(")
    text = text[:start] + _SHIMS + text[end:]
    smem = "extern __shared__ __align__(16) unsigned char attn_smem[];"
    assert smem in text
    return text.replace(smem, "alignas(16) static thread_local unsigned char attn_smem[4 * kBK * (128 + 8) * 2];")


def _attention_source():
    """The templates' kernel file alone, with the emulator's PTX wrappers."""
    text = (W.root / "templates" / "flash_attention.cuh.j2").read_text()
    text = text.replace("{% raw %}", "").replace("{% endraw %}", "").replace("#include <cuda_bf16.h>\n", "")
    text = _emulated_ptx(text)
    text = text[:text.index("constexpr size_t attn_smem_bytes")]
    return '#include "cuda_cpu.h"\n' + text + '#include "attention_main.inc"\n'


def _candidate_source(src, score_budget=None):
    """A rendered candidate for the emulator: PTX wrappers swapped, launches rewritten, and the driver."""
    if "cp_async16(" in src:
        src = _emulated_ptx(src)
    if score_budget is not None:
        old = "constexpr size_t kScoreBudget = 3ull << 30;"
        assert old in src
        src = src.replace(old, f"constexpr size_t kScoreBudget = {score_budget};")
    return with_driver(src, "candidate_main.inc")


def _softmax_sources():
    """The reference's softmax kernel (a CuPy RawKernel) and the seed's."""
    ref = REF._SOFTMAX_SRC.replace('extern "C" ', "")
    sequential = _sequential()
    seed = sequential[sequential.index("constexpr size_t kScoreBudget"):sequential.index("struct Candidate {")]
    head = '#include "cuda_cpu.h"\n'
    return {"ref": head + ref + "#define PROBS_T unsigned short\n" + '#include "softmax_main.inc"\n',
            "seed": head + seed + "#define PROBS_T __nv_bfloat16\n" + '#include "softmax_main.inc"\n'}


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    """Binaries of the kernels on the CPU: {"attention": path, "softmax-ref": path, "softmax-seed": path}."""
    root = tmp_path_factory.mktemp("cp_emulator")
    sources = {"attention": _attention_source(), **{f"softmax-{k}": v for k, v in _softmax_sources().items()}}
    bins = {}
    for name, text in sources.items():
        src = root / f"{name}.cpp"
        src.write_text(text)
        out = root / name
        r = subprocess.run(["g++", "-std=c++20", "-O2", "-pthread", "-fno-strict-aliasing", f"-I{EMU}", str(src),
                            "-o", str(out)], capture_output=True, text=True)
        assert r.returncode == 0, f"{name}:\n{r.stderr[-4000:]}"
        bins[name] = out
    return bins


def _run(binary, folder):
    r = subprocess.run([str(binary), str(folder)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr


def _attend(emulator, tmp_path, inputs, dims, world, rank, calls):
    """Run the kernel calls (key_row0, kn, k_pos0, first, last) of one rank on the CPU; keys and
    values are the whole sequence's (every rank's chunk in order). Returns o as float64."""
    S, H, HKV, D = dims["S"], dims["H"], dims["HKV"], dims["D"]
    sl = S // world
    folder = tmp_path / f"r{rank}-{len(list(tmp_path.iterdir()))}"
    folder.mkdir()
    inputs[rank]["q"].astype(np.uint16).tofile(folder / "q.bin")
    np.concatenate([inp["k"] for inp in inputs]).astype(np.uint16).tofile(folder / "k.bin")
    np.concatenate([inp["v"] for inp in inputs]).astype(np.uint16).tofile(folder / "v.bin")
    lines = [f"{sl} {H} {HKV} {D} {dims['CAUSAL']} {rank * sl} {S} {len(calls)}"]
    lines += [" ".join(str(int(v)) for v in call) for call in calls]
    (folder / "meta.txt").write_text("\n".join(lines) + "\n")
    _run(emulator["attention"], folder)
    o = np.fromfile(folder / "o.bin", dtype=np.uint16).reshape(sl, H, D)
    return _f64(o)


def _ring_calls(rank, world, sl, causal):
    """What the ring template launches on one rank: a block per step, own first."""
    order = REF.ring_order(rank, world, bool(causal))
    return [(p * sl, sl, p * sl, i == 0, i == len(order) - 1) for i, p in enumerate(order)]


def _pull_calls(rank, world, sl, causal, chunks):
    """What ipc_pull launches: the own block whole, then each needed peer's block in chunks of
    whole 64-key tiles (chunks with no tile skipped), the last chunk of the last peer writing o."""
    peers = REF.ring_order(rank, world, bool(causal))[1:]
    calls = [(rank * sl, sl, rank * sl, True, not peers)]
    tiles = sl // 64
    for p in peers:
        for ch in range(chunks):
            t0, t1 = tiles * ch // chunks, tiles * (ch + 1) // chunks
            if t1 > t0:
                calls.append((p * sl + t0 * 64, (t1 - t0) * 64, p * sl + t0 * 64, False,
                              p == peers[-1] and ch == chunks - 1))
    return calls


def _check(got, want, what):
    assert np.isfinite(got).all(), f"{what}: {np.count_nonzero(~np.isfinite(got))} non-finite elements"
    assert _passes(got, want, W.rtol), f"{what}: max rel {np.max(np.abs(got - want) / (np.abs(want) + 1e-3)):.3g}"
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-2, what


@needs_gxx
@pytest.mark.parametrize("world,dims", [
    (2, _dims(256, 4, 2, 64, 1)),
    (2, _dims(384, 2, 2, 128, 0)),   # 192 rows a rank: three query tiles
    (4, _dims(512, 2, 1, 64, 1)),
    (4, _dims(256, 4, 4, 128, 1)),
    (8, _dims(512, 2, 2, 128, 1)),   # 64 rows a rank: one tile, chunks beyond the tiles are skipped
    (8, _dims(512, 4, 1, 64, 0)),
])
def test_attention_kernel_on_the_cpu_in_the_templates_orders(emulator, tmp_path, world, dims):
    """The templates' kernel, called as host_flash (one call over every visible key), ring (a block
    per step) and ipc_pull (own block, then peers in 1 or 4 chunks) call it, against float64."""
    sl = dims["S"] // world
    inputs = _inputs(dims, world, seed=17)
    want = REF.expected(inputs, dims, world)
    causal = dims["CAUSAL"]
    for rank in range(world):
        flash = [(0, (rank + 1) * sl if causal else dims["S"], 0, True, True)]
        plans = {"host_flash": flash, "ring": _ring_calls(rank, world, sl, causal)}
        for chunks in (1, 2, 4):
            plans[f"pull-{chunks}"] = _pull_calls(rank, world, sl, causal, chunks)
        for name, calls in plans.items():
            got = _attend(emulator, tmp_path, inputs, dims, world, rank, calls)
            _check(got, want[rank]["o"], f"{name} rank {rank}")


@needs_gxx
def test_attention_kernel_on_the_cpu_with_masked_blocks_first(emulator, tmp_path):
    """Causal, blocks after the rank taken first: the kernel skips every tile of them, stores
    m = -inf, l = 0 and reloads them, and the answer is unchanged (no NaN from -inf - -inf)."""
    world, dims = 4, _dims(256, 2, 2, 64, 1)
    sl = 64
    inputs = _inputs(dims, world, seed=23)
    want = REF.expected(inputs, dims, world)
    for rank in (0, 2):
        order = list(range(world - 1, -1, -1))
        calls = [(p * sl, sl, p * sl, i == 0, i == world - 1) for i, p in enumerate(order)]
        _check(_attend(emulator, tmp_path, inputs, dims, world, rank, calls), want[rank]["o"], f"rank {rank}")


def _column_major(flat, off, ld, stride, rows, cols, batch):
    """Indices of `batch` column-major rows x cols matrices: (b, i, j) at off + b*stride + i + j*ld."""
    return (off + np.arange(batch)[:, None, None] * stride + np.arange(rows)[None, :, None]
            + np.arange(cols)[None, None, :] * ld)


def _gemm_model(g, buffers, scale):
    """cublasGemmStridedBatchedEx (beta 0) on NumPy buffers: reads and writes checked in bounds,
    and no element written twice."""
    a_shape = (g.m, g.k) if g.transa == REF.CUBLAS_OP_N else (g.k, g.m)
    b_shape = (g.k, g.n) if g.transb == REF.CUBLAS_OP_N else (g.n, g.k)
    ia = _column_major(None, g.a_off, g.lda, g.stride_a, *a_shape, g.batch)
    ib = _column_major(None, g.b_off, g.ldb, g.stride_b, *b_shape, g.batch)
    ic = _column_major(None, g.c_off, g.ldc, g.stride_c, g.m, g.n, g.batch)
    assert g.lda >= a_shape[0] and g.ldb >= b_shape[0] and g.ldc >= g.m
    for name, idx in ((g.a, ia), (g.b, ib), (g.c, ic)):
        assert idx.min() >= 0 and idx.max() < buffers[name].size, f"{name} out of bounds"
    assert np.unique(ic).size == ic.size, "a GEMM writes an element twice"
    a = buffers[g.a][ia]
    b = buffers[g.b][ib]
    if g.transa != REF.CUBLAS_OP_N:
        a = a.transpose(0, 2, 1)
    if g.transb != REF.CUBLAS_OP_N:
        b = b.transpose(0, 2, 1)
    c = (scale if g.scaled else 1.0) * (a @ b)
    if g.c == "scores":
        buffers["scores"][ic] = c.astype(np.float32)
    else:  # bf16 output: kept as the values its bits hold
        buffers[g.c][ic] = _f64(to_bf16_bits(np, c.astype(np.float32)))
    return ic


def _simulate_reference(emulator, tmp_path, inputs, dims, world, rank, rows_alloc, softmax="softmax-ref"):
    """The reference's query-block loop on one rank: its GEMM plan through the NumPy cuBLAS model,
    its softmax kernel on the CPU. Returns o (float64), checking every element of o is written."""
    S, H, HKV, D = dims["S"], dims["H"], dims["HKV"], dims["D"]
    sl = S // world
    buffers = {
        "q": _f64(inputs[rank]["q"]).ravel(),
        "k_all": np.concatenate([_f64(inp["k"]) for inp in inputs]).ravel(),
        "v_all": np.concatenate([_f64(inp["v"]) for inp in inputs]).ravel(),
        "scores": np.full(H * rows_alloc * S, np.nan, dtype=np.float32),
        "probs": np.full(H * rows_alloc * S, np.nan),
        "o": np.full(sl * H * D, np.nan),
    }
    for q0 in range(0, sl, rows_alloc):
        rows = min(rows_alloc, sl - q0)
        scores, sm, pv = REF.block_plan(dims, world, rank, q0, rows, rows_alloc)
        assert len(scores) == len(pv) == H // HKV
        for g in scores:
            _gemm_model(g, buffers, 1 / math.sqrt(D))
        folder = tmp_path / f"sm-{len(list(tmp_path.iterdir()))}"
        folder.mkdir()
        buffers["scores"].tofile(folder / "scores.bin")
        (folder / "meta.txt").write_text(" ".join(str(sm[k]) for k in ("rows", "heads", "ld", "rows_alloc", "kn",
                                                                      "q_pos0", "causal")) + "\n")
        assert sm["heads"] == H
        _run(emulator[softmax], folder)
        probs = np.fromfile(folder / "probs.bin", dtype=np.uint16).reshape(H, rows_alloc, S)
        written = probs[:, :rows, :sm["kn"]]
        assert not (written == 0x7fc1).any(), "the softmax left probabilities unwritten"
        buffers["probs"] = np.full(H * rows_alloc * S, np.nan)
        buffers["probs"].reshape(H, rows_alloc, S)[:, :rows, :sm["kn"]] = _f64(written)
        for g in pv:
            _gemm_model(g, buffers, 1.0)
    o = buffers["o"].reshape(sl, H, D)
    assert np.isfinite(o).all(), "the reference leaves part of o unwritten"
    return o


@needs_gxx
@pytest.mark.parametrize("world,dims,rows_alloc", [
    (2, _dims(128, 4, 2, 16, 1), 16),   # blocks of 16 of 64 rows, GQA
    (2, _dims(128, 2, 2, 8, 0), 48),    # a short last block (64 = 48 + 16)
    (4, _dims(256, 2, 1, 8, 1), 64),    # one block a rank, MQA
])
def test_reference_plan_on_the_cpu_matches_float64(emulator, tmp_path, world, dims, rows_alloc):
    """The reference's cuBLAS calls (as the seed makes them) and its softmax kernel, run on the CPU:
    the rank's o matches float64; the seed's softmax kernel gives the same probabilities bit for bit."""
    inputs = _inputs(dims, world, seed=29)
    want = REF.expected(inputs, dims, world)
    for rank in range(world):
        got = _simulate_reference(emulator, tmp_path, inputs, dims, world, rank, rows_alloc)
        _check(got, want[rank]["o"], f"rank {rank}")
    rank = world - 1
    seed_o = _simulate_reference(emulator, tmp_path, inputs, dims, world, rank, rows_alloc, "softmax-seed")
    ref_o = _simulate_reference(emulator, tmp_path, inputs, dims, world, rank, rows_alloc, "softmax-ref")
    assert np.array_equal(seed_o, ref_o)


# Whole candidates on the CPU: emu_runtime.h models the CUDA runtime (streams as threads with
# random delays, events, IPC), NCCL (send/recv matching, all-gather) and cuBLAS; every rank is a
# thread. A launch on one input set, then the other input set and a poisoned output in stream order
# and a second launch with no host wait between them (as the harness's back-to-back check), then
# the first set again after a host wait: races (within a launch and between launches), missing
# joins, stale state and unwritten elements show up as wrong answers, hangs as the watchdog's
# report, overruns and use after free as crashes.

E2E = [  # (name, strategy, knobs)
    ("seed", None, None),
    ("sequential", "host_sequential", {}),
    ("overlap", "attn_overlap", {"comm_priority": "high"}),
    ("balance-remote", "attn_balance", {"first": "remote", "comm_priority": "high"}),
    ("balance-local", "attn_balance", {"first": "local", "comm_priority": "same"}),
    ("host_flash", "host_flash", {}),
    ("ring", "ring", {"comm_priority": "high"}),  # stream priorities mean nothing to the emulator
    ("pull-ipc-1", "ipc_pull", {"mover": "ipc", "chunks": 1, "mover_blocks": 16, "comm_priority": "high"}),
    ("pull-ipc-4", "ipc_pull", {"mover": "ipc", "chunks": 4, "mover_blocks": 32, "comm_priority": "same"}),
    ("pull-ce-2", "ipc_pull", {"mover": "copy_engine", "chunks": 2, "mover_blocks": 16, "comm_priority": "high"}),
    ("pull-ce-1", "ipc_pull", {"mover": "copy_engine", "chunks": 1, "mover_blocks": 16, "comm_priority": "same"}),
]


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    """The E2E candidates built for the CPU: {name: binary}. The seed's score budget is cut so that
    its query-block loop takes several blocks, the last one short."""
    root = tmp_path_factory.mktemp("cp_e2e")
    book = _book()
    sources = {}
    for name, strategy, knobs in E2E:
        if strategy is None:
            sources[name] = _candidate_source(SEED)
        elif strategy == "host_sequential":
            sources[name] = _candidate_source(_sequential(), score_budget=48 * 4 * 512 * 6)  # 48 rows at H=4, 96 at H=2
        else:
            s = book.get(strategy)
            sources[name] = _candidate_source(book.render(s, s.normalized(knobs)))
    return compile_emulated(sources, root)


def _run_candidate(binary, folder, dims, world, seed, launches=2):
    """Both input sets through the emulated candidate; returns [(o_A, o_B, o_A1) per rank] as float64
    (o_A1: the first set's output of the launch before the back-to-back one, copied in stream order)."""
    sl, H, D = dims["S"] // world, dims["H"], dims["D"]
    folder.mkdir()
    sets = {"A": _inputs(dims, world, seed=seed), "B": _inputs(dims, world, seed=seed + 1)}
    for tag, inputs in sets.items():
        for r, inp in enumerate(inputs):
            for name in ("q", "k", "v"):
                inp[name].astype(np.uint16).tofile(folder / f"r{r}-{name}{tag}.bin")
    (folder / "meta.txt").write_text(f"{world} {dims['S']} {H} {dims['HKV']} {D} {dims['CAUSAL']} {launches} "
                                     f"{seed} 120\n")
    r = subprocess.run([str(binary), str(folder)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"exit {r.returncode}:\n{r.stderr[-4000:]}"
    outs = []
    for rank in range(world):
        outs.append(tuple(_f64(np.fromfile(folder / f"r{rank}-o{tag}.bin", dtype=np.uint16).reshape(sl, H, D))
                          for tag in ("A", "B", "A1")))
    return outs, {tag: REF.expected(inputs, dims, world) for tag, inputs in sets.items()}


E2E_SHAPES = [  # (world, dims, schedule seeds)
    (2, _dims(512, 4, 2, 64, 1), (31, 47)),  # GQA, causal; the seed's blocks: 48 rows, the last of 256 short
    (2, _dims(256, 2, 1, 64, 0), (59, 61)),   # MQA, not causal
    (4, _dims(512, 2, 2, 128, 0), (37,)),     # the seed: blocks of 96 rows, the last of 128 short
    (4, _dims(512, 4, 1, 64, 1), (41, 53)),   # MQA, causal
    (8, _dims(512, 2, 2, 64, 1), (43,)),      # 64 rows a rank; ipc_pull's 4 chunks of one tile
    (8, _dims(512, 2, 1, 64, 0), (67,)),      # not causal at W=8
]


def _shape_id(v):
    if isinstance(v, dict):
        return "-".join(f"{k}{x}" for k, x in v.items())
    return f"W{v}" if isinstance(v, int) else "seeds" + "-".join(map(str, v))


@needs_gxx
@pytest.mark.parametrize("world,dims,seeds", E2E_SHAPES, ids=_shape_id)
@pytest.mark.parametrize("name", [e[0] for e in E2E])
def test_candidate_runs_end_to_end_on_the_cpu(emulated, tmp_path, name, world, dims, seeds):
    for seed in seeds:  # schedules of the random delays
        outs, want = _run_candidate(emulated[name], tmp_path / f"s{seed}", dims, world, seed)
        for rank, (got_a, got_b, got_a1) in enumerate(outs):
            _check(got_a1, want["A"][rank]["o"], f"{name} rank {rank}, the launch before the back-to-back one")
            _check(got_b, want["B"][rank]["o"], f"{name} rank {rank}, inputs replaced between launches back to back")
            _check(got_a, want["A"][rank]["o"], f"{name} rank {rank}, fresh inputs, poisoned output")


# ---------------------------------------------------------------------------- seed and templates (L0, L1)


def _static_ok(src):
    assert_static_ok(src, SEED)


def test_seed_passes_the_static_checks_and_declares_what_it_does():
    from cuco_tui.design.classify import classify

    _static_ok(SEED)
    assert classify(SEED).inferred() == {"backend": "nccl_host", "placement": "before", "sync": "global",
                                         "issuer": "host", "chunk": "full", "streams": "1", "comm_sms": "0"}


@can_compile
def test_seed_compiles_and_stops_with_no_gpu(monkeypatch):
    monkeypatch.setenv("CUCO_NO_GPU", "1")
    r = evaluate(W.seed, W)
    assert r.status == Status.NO_GPU, r.reason


def test_every_strategy_renders_every_knob_setting_through_l0():
    from cuco_tui.design.classify import classify

    book = _book()
    assert {s.name for s in book.strategies} == {"host_sequential", "host_attn", "host_flash", "ring", "attn_overlap",
                                                 "attn_balance", "ipc_pull"}
    assert book.render(book.get("host_attn"), {}) == SEED
    rendered = set()
    for s in book.strategies:
        for values in itertools.product(*s.knobs.values()):
            knobs = s.normalized(dict(zip(s.knobs, values)))
            src = book.render(s, knobs)
            if src in rendered:
                continue
            _static_ok(src)
            inferred = classify(src).inferred()
            assert inferred == s.point(knobs).coords(), (s.name, knobs)
            rendered.add(src)
    assert len(rendered) > 20


def test_fast_path_is_the_ipc_pull():
    from cuco_tui.agents.base import ProposalRequest
    from cuco_tui.agents.offline import OfflineAgent
    from cuco_tui.core.records import CandidateRecord

    seed = CandidateRecord(id="c0000", generation=0, island=0, kind="seed", parents=(), source=SEED, design={},
                           rationale="seed", agent="workload", status="measured", speedup=1.0)
    p = OfflineAgent(W).propose(ProposalRequest(kind="fast_path", workload=W, parents=(seed,)))
    assert p.error == "" and p.design["backend"] == "cuda_ipc" and p.design["knobs"]["strategy"] == "ipc_pull"


VARIANTS = [
    ("attn_overlap", {"comm_priority": "high"}),
    ("attn_balance", {"first": "remote", "comm_priority": "high"}),
    ("attn_balance", {"first": "local", "comm_priority": "same"}),
    ("host_flash", {}),
    ("ring", {"comm_priority": "high"}),
    ("ring", {"comm_priority": "same"}),
    ("ipc_pull", {"mover": "ipc", "chunks": 1, "mover_blocks": 16, "comm_priority": "high"}),
    ("ipc_pull", {"mover": "ipc", "chunks": 4, "mover_blocks": 32, "comm_priority": "same"}),
    ("ipc_pull", {"mover": "copy_engine", "chunks": 2, "mover_blocks": 16, "comm_priority": "high"}),
    ("ipc_pull", {"mover": "copy_engine", "chunks": 1, "mover_blocks": 16, "comm_priority": "same"}),
]


@can_compile
def test_strategy_templates_compile(tmp_path):
    from cuco_tui.toolchain import BuildCache, compile_candidate

    book = _book()
    variants = [(s.name, s.default_knobs()) for s in book.strategies if s.name != "host_sequential"]  # = the seed
    cache = BuildCache(tmp_path / "cache")
    sources = {}
    for name, knobs in variants + VARIANTS:
        s = book.get(name)
        sources.setdefault(book.render(s, s.normalized(knobs)), name + "".join(f"-{v}" for v in knobs.values()))
    for src, label in sources.items():
        path = tmp_path / f"{label}.cu"
        path.write_text(src)
        r = compile_candidate(path, discover(), cache)
        assert r.ok, f"{path.name}:\n" + "\n".join(d.render() for d in r.diagnostics)


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
    assert r.status == Status.MEASURED, _explain(r)
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
    assert r.status == Status.MEASURED, _explain(r)
    assert all(v.ok for v in r.verifications)
