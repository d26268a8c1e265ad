"""cp_attention's kernels on the CPU (workloads/cp_attention/emulator/cuda_cpu.h): the templates'
attention kernel in the orders the templates call it, and the reference's cuBLAS plan with its
softmax kernel (and the seed's), each against float64."""

import math
import subprocess

import numpy as np
import pytest

from cuco_tui.harness.bf16 import to_bf16_bits
from cp_common import REF, _check, _dims, _f64, _inputs
from emulator_helpers import needs_gxx
from cp_emulator import EMU, _attention_source, _softmax_sources


# ---------------------------------------------------------------------------- the kernels on the CPU
#
# No GPU here: workloads/cp_attention/emulator/cuda_cpu.h runs the workload's own CUDA kernels
# (the templates' blockwise attention kernel, the reference's and the seed's softmax kernels) on
# the CPU with g++, a thread per CUDA thread and the PTX ISA's fragment layouts for mma.sync and
# ldmatrix; the reference's cuBLAS calls (its plan) run through a NumPy model of
# cublasGemmStridedBatchedEx.


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
