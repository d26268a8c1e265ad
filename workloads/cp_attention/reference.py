"""Reference for cp_attention: the strongest plain host-driven version. Two NCCL all-gathers
(cupy.cuda.nccl) bring every rank's K and V chunk into the whole sequence's K_all, V_all
[S, HKV, D]; then attention over the keys the rank's queries can see, computed by:

  cudnn   (the default where the harness loaded its attention library, cuco_attn.h) one call
          of cuDNN's fused SDPA over the keys the rank sees, grouped-query heads and, causal, a
          bottom-right aligned mask (the rank's queries are the last S/W of the (r+1)*S/W keys
          they see), on the harness's stream. What a careful engineer writes in C; 1.7-1.9x
          faster than sdpa on the slowest rank's work of every bench shape (H100,
          benchmarks/attention_lib.py), agreeing with it to 0.26 % (relative L2).
  sdpa    (the default without the library, with a warning) PyTorch's fused attention, one
          scaled_dot_product_attention call on the FlashAttention backend, same masks and heads,
          on the harness's stream through DLPack views; 4.9-6.9x faster than the three passes
          below (H100, benchmarks/cp_reference_modes.py), agreeing to 0.3 %.
  cupy    (CUCO_CP_REF_ATTENTION=cupy, or where torch is missing too) three passes, one block of
          query rows at a time (so the score matrix of the block fits, at most SCORE_BUDGET bytes
          of scores and probabilities); a weak baseline, kept to check the fused one and for
          machines without torch: speedups against it are not results.

  scores  per group-member j < H/HKV one cuBLAS strided-batched GEMM over the KV heads
          (bf16 in, fp32 out and accumulation, the 1/sqrt(D) scale as alpha):
          scores[h, i, key] = q[i, h, :] . K_all[key, h / G, :] / sqrt(D);
  softmax one fused kernel (a CuPy RawKernel, one CTA per row): the causal mask by GLOBAL
          position (query r*S/W + i sees keys 0 .. r*S/W + i), the row max and sum in one pass,
          the normalized probabilities written as bf16 in a second;
  PV      per j one strided-batched GEMM: o[i, h, :] = P[h, i, :] @ V_all[:, h / G, :]
          (bf16 in and out, fp32 accumulation).

Causal blocks multiply only the keys they can see (up to the block's last query).
`expected` is the float64 CPU answer the tests check it against; `blockwise` is the
candidates' algorithm (blocks of keys merged with online-softmax statistics) in NumPy.

Buffers per rank: inputs "q" [S/W, H, D], "k" [S/W, HKV, D], "v" [S/W, HKV, D] bf16; output
"o" [S/W, H, D] bf16. Dims: S (total), H, HKV, D, CAUSAL (0 or 1)."""

from __future__ import annotations

import math
import os
import warnings
from typing import Any, Callable, NamedTuple, Sequence

import numpy as np

from cuco_tui.harness.bf16 import from_bf16_bits, to_bf16_bits

CUDA_R_16BF = 14
CUDA_R_32F = 0
CUBLAS_COMPUTE_32F = 68
CUBLAS_GEMM_DEFAULT = -1
CUBLAS_OP_N = 0
CUBLAS_OP_T = 1
SCORE_BUDGET = 3 << 30  # bytes of fp32 scores + bf16 probabilities per query block
Q_SCALE = 2.0  # q ~ N(0, 2^2): scores of std 2, so rows are peaked enough to need the max
_SEED_MOD = 1 << 32


# ---------------------------------------------------------------------------- shapes


def check_dims(dims: dict[str, int], world: int) -> None:
    S, H, HKV, D = dims["S"], dims["H"], dims["HKV"], dims["D"]
    if S % world:
        raise ValueError(f"S={S} does not split evenly over {world} ranks")
    if HKV <= 0 or H % HKV:
        raise ValueError(f"H={H} query heads are not a multiple of HKV={HKV} KV heads")
    if D % 8:
        raise ValueError(f"D={D} must be a multiple of 8 (16-byte rows)")
    if dims["CAUSAL"] not in (0, 1):
        raise ValueError(f"CAUSAL is 0 or 1, not {dims['CAUSAL']}")


def visible_pairs(dims: dict[str, int], world: int, rank: int) -> int:
    """(query, key) pairs rank `rank`'s S/W queries attend to: all S keys, or, causal, the keys
    before its block and the lower triangle of its own."""
    sl = dims["S"] // world
    if not dims["CAUSAL"]:
        return sl * dims["S"]
    return sl * rank * sl + sl * (sl + 1) // 2


def flops(dims: dict[str, int], world: int) -> int:
    """Floating-point operations of the busiest rank (the last, when causal): QK^T and PV, 2 * 2 * D
    per (query, key) pair and query head."""
    return 4 * dims["H"] * dims["D"] * visible_pairs(dims, world, world - 1)


def comm_bytes(dims: dict[str, int], world: int) -> int:
    """Bytes each rank receives: every other rank's K and V chunk, [S/W, HKV, D] bf16 each."""
    return (world - 1) * (dims["S"] // world) * dims["HKV"] * dims["D"] * 2 * 2


def io_spec(dims: dict[str, int], world: int, rank: int = 0) -> dict[str, list[tuple[str, tuple[int, ...], str]]]:
    check_dims(dims, world)
    sl, H, HKV, D = dims["S"] // world, dims["H"], dims["HKV"], dims["D"]
    return {
        "inputs": [("q", (sl, H, D), "bf16"), ("k", (sl, HKV, D), "bf16"), ("v", (sl, HKV, D), "bf16")],
        "outputs": [("o", (sl, H, D), "bf16")],
    }


def fill_inputs(xp: Any, inputs: dict[str, Any], dims: dict[str, int], world: int, rank: int, seed: int) -> None:
    """Fresh values, different on every rank: q ~ N(0, Q_SCALE^2), k and v standard normal."""
    rs = xp.random.RandomState((seed * 7919 + 104729 * rank + 3) % _SEED_MOD)
    for name, scale in (("q", Q_SCALE), ("k", 1.0), ("v", 1.0)):
        buf = inputs[name]
        buf[...] = to_bf16_bits(xp, (rs.standard_normal(buf.shape) * scale).astype(xp.float32))


# ---------------------------------------------------------------------------- the exact answer


def _gathered(all_inputs: list[dict[str, np.ndarray]], name: str) -> np.ndarray:
    return np.concatenate([from_bf16_bits(np, inp[name]).astype(np.float64) for inp in all_inputs], axis=0)


def expected(all_inputs: list[dict[str, np.ndarray]], dims: dict[str, int], world: int) -> list[dict[str, np.ndarray]]:
    """float64 on the CPU: for every rank r, o_r = softmax(q_r K^T / sqrt(D) + mask) V over the
    whole sequence's K and V (the ranks' chunks in rank order); the causal mask hides key j from
    the query at global position r*S/W + i when j > r*S/W + i."""
    S, H, HKV, D = dims["S"], dims["H"], dims["HKV"], dims["D"]
    sl, group = S // world, H // HKV
    k = np.repeat(_gathered(all_inputs, "k"), group, axis=1)  # [S, H, D]: query head h reads KV head h // group
    v = np.repeat(_gathered(all_inputs, "v"), group, axis=1)
    keys = np.arange(S)
    outs = []
    for r, inp in enumerate(all_inputs):
        q = from_bf16_bits(np, inp["q"]).astype(np.float64)
        s = np.einsum("ihd,jhd->hij", q, k) / math.sqrt(D)
        if dims["CAUSAL"]:
            qpos = r * sl + np.arange(sl)
            s = np.where(keys[None, None, :] > qpos[None, :, None], -np.inf, s)
        s -= s.max(axis=-1, keepdims=True)
        p = np.exp(s)
        p /= p.sum(axis=-1, keepdims=True)
        outs.append({"o": np.einsum("hij,jhd->ihd", p, v)})
    return outs


# ---------------------------------------------------------------------------- the candidates' algorithm


def blockwise(q: np.ndarray, blocks: Sequence[tuple[int, np.ndarray, np.ndarray]], q_pos0: int, causal: bool,
              tile: int = 64) -> np.ndarray:
    """Attention of q [n, H, D] over key blocks (k_pos0, k [kn, HKV, D], v [kn, HKV, D]) taken in
    the given order, `tile` keys at a time, merged with online-softmax statistics: a running max
    m and sum l per (head, query row) and an unnormalized accumulator, rescaled by exp(m_old - m)
    whenever the max grows. A row that has seen only masked keys keeps m = -inf, l = 0, acc = 0;
    exponents are then taken against 0 instead of m, so no -inf - -inf (NaN) ever appears.
    The templates' kernels follow this, with the same guard. Returns o [n, H, D] (float64)."""
    n, H, D = q.shape
    qf = q.astype(np.float64)
    m = np.full((H, n), -np.inf)
    l = np.zeros((H, n))
    acc = np.zeros((H, n, D))
    qpos = q_pos0 + np.arange(n)
    scale = 1.0 / math.sqrt(D)
    for k_pos0, k, v in blocks:
        group = H // k.shape[1]
        kh = np.repeat(k.astype(np.float64), group, axis=1)
        vh = np.repeat(v.astype(np.float64), group, axis=1)
        for t0 in range(0, k.shape[0], tile):
            kt, vt = kh[t0:t0 + tile], vh[t0:t0 + tile]
            s = np.einsum("ihd,jhd->hij", qf, kt) * scale
            if causal:
                kpos = k_pos0 + t0 + np.arange(kt.shape[0])
                s = np.where(kpos[None, None, :] > qpos[None, :, None], -np.inf, s)
            m_new = np.maximum(m, s.max(axis=-1))
            m_use = np.where(m_new == -np.inf, 0.0, m_new)
            alpha = np.exp(m - m_use)
            p = np.exp(s - m_use[..., None])
            l = l * alpha + p.sum(axis=-1)
            acc = acc * alpha[..., None] + np.einsum("hij,jhd->hid", p, vt)
            m = m_new
    with np.errstate(divide="ignore", invalid="ignore"):
        return (acc / l[..., None]).transpose(1, 0, 2)


def ring_order(rank: int, world: int, causal: bool) -> list[int]:
    """The source ranks of the K/V blocks the templates attend to, in order: their own chunk
    (already here), then rank r-1's, r-2's, ... (a ring receives rank r-s's block at step s; the
    pull template fetches them in the same order, so at any moment each rank reads from a
    different peer), without the blocks a causal mask hides entirely (ranks after r)."""
    order = [(rank - s) % world for s in range(world)]
    return [p for p in order if not causal or p <= rank]


# ---------------------------------------------------------------------------- the GPU reference


_SOFTMAX_SRC = r"""
// NVRTC has no <math.h>: -inf from its bits.
#define NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ unsigned short f2bf(float f) {
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);                     // round to nearest even
  return (unsigned short)(u >> 16);
}

// (m, l) of two parts of a row: the max and the sum of exp(x - max).
__device__ __forceinline__ void merge(float& m, float& l, float m2, float l2) {
  const float mx = fmaxf(m, m2);
  if (mx == NEG_INF) return;  // both empty
  l = (m == NEG_INF ? 0.f : l * expf(m - mx)) + (m2 == NEG_INF ? 0.f : l2 * expf(m2 - mx));
  m = mx;
}

// One CTA per (row i of the block, head h): scores of that row at scores + (h * rows_alloc + i) * ld,
// kn of them. The query's global position is q_pos0 + i; keys are at global positions 0 .. kn-1.
extern "C" __global__ void softmax_rows(const float* scores, unsigned short* probs, long long ld, int rows_alloc,
                                        int kn, long long q_pos0, int causal) {
  const long long row = (long long)blockIdx.y * rows_alloc + blockIdx.x;
  const float* s = scores + row * ld;
  unsigned short* p = probs + row * ld;
  long long visible = causal ? q_pos0 + blockIdx.x + 1 : kn;
  const int n = (int)(visible < kn ? visible : kn);
  float m = NEG_INF, l = 0.f;
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    const float x = s[j];
    if (x > m) { l = l * expf(m - x) + 1.f; m = x; } else { l += expf(x - m); }
  }
  for (int off = 16; off > 0; off >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, off);
    const float l2 = __shfl_xor_sync(0xffffffffu, l, off);
    merge(m, l, m2, l2);
  }
  __shared__ float wm[32], wl[32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  if (lane == 0) { wm[warp] = m; wl[warp] = l; }
  __syncthreads();
  if (warp == 0) {
    m = lane < warps ? wm[lane] : NEG_INF;
    l = lane < warps ? wl[lane] : 0.f;
    for (int off = 16; off > 0; off >>= 1) {
      const float m2 = __shfl_xor_sync(0xffffffffu, m, off);
      const float l2 = __shfl_xor_sync(0xffffffffu, l, off);
      merge(m, l, m2, l2);
    }
    if (lane == 0) { wm[0] = m; wl[0] = l; }
  }
  __syncthreads();
  m = wm[0];
  const float inv = 1.f / wl[0];
  for (int j = threadIdx.x; j < kn; j += blockDim.x) p[j] = f2bf(j < n ? expf(s[j] - m) * inv : 0.f);
}
"""


def block_rows(sl: int, seq: int, heads: int, budget: int = SCORE_BUDGET) -> int:
    """Query rows per block: as many as keep heads x rows x S scores (fp32) and probabilities
    (bf16) within `budget`, a multiple of 16, at most the rank's S/W."""
    rows = budget // (heads * seq * 6)
    return max(16, min(sl, rows - rows % 16))


class Gemm(NamedTuple):
    """One cublasGemmStridedBatchedEx call (column-major, beta = 0): for i < batch,
    C_i = alpha op(A_i) op(B_i) with op(A_i) m x k, op(B_i) k x n, C_i m x n; each operand a buffer
    name and an element offset, its leading dimension and its batch stride (elements). alpha is
    1/sqrt(D) when `scaled`, else 1. Buffers: q, o (the harness's), k_all, v_all, probs (bf16),
    scores (fp32). (A NamedTuple: the harness loads this module without registering it, which
    dataclasses need.)"""

    transa: int
    transb: int
    m: int
    n: int
    k: int
    scaled: bool
    a: str
    a_off: int
    lda: int
    stride_a: int
    b: str
    b_off: int
    ldb: int
    stride_b: int
    c: str
    c_off: int
    ldc: int
    stride_c: int
    batch: int


def block_plan(dims: dict[str, int], world: int, rank: int, q0: int, rows: int,
               rows_alloc: int) -> tuple[list[Gemm], dict[str, int], list[Gemm]]:
    """The reference's (and the seed's) work for query rows [q0, q0 + rows) of `rank`: the score
    GEMMs, the softmax kernel's arguments, the P V GEMMs. Scores and probabilities of head h sit at
    h * rows_alloc * S (row i of it at + i * S); query head h = g * G + j reads KV head g, so for
    each j one call batches the heads g * G + j over g (A: K_g / V_g, stride D; B and C: stride G * D
    or G * rows_alloc * S)."""
    S, H, HKV, D = dims["S"], dims["H"], dims["HKV"], dims["D"]
    sl, G = S // world, H // HKV
    q_pos0 = rank * sl + q0
    kn = min(S, q_pos0 + rows) if dims["CAUSAL"] else S  # keys any row of the block can see
    head = rows_alloc * S
    # Row-major scores_h [rows, kn] = q_h K_g^T is column-major [kn, rows] = K_g q_h^T:
    # A = K_g stored as column-major [D, kn] (ld HKV*D), transposed; B = q_h^T [D, rows] (ld H*D).
    scores = [Gemm(CUBLAS_OP_T, CUBLAS_OP_N, kn, rows, D, True,
                   "k_all", 0, HKV * D, D,
                   "q", (q0 * H + j) * D, H * D, G * D,
                   "scores", j * head, S, G * head, HKV) for j in range(G)]
    softmax = {"rows": rows, "heads": H, "ld": S, "rows_alloc": rows_alloc, "kn": kn, "q_pos0": q_pos0,
               "causal": dims["CAUSAL"]}
    # Row-major o_h [rows, D] = P_h [rows, kn] @ V_g [kn, D] is column-major
    # o_h^T [D, rows] = V_g^T [D, kn] (ld HKV*D) @ P_h^T [kn, rows] (ld S).
    pv = [Gemm(CUBLAS_OP_N, CUBLAS_OP_N, D, rows, kn, False,
               "v_all", 0, HKV * D, D,
               "probs", j * head, S, G * head,
               "o", (q0 * H + j) * D, H * D, G * D, HKV) for j in range(G)]
    return scores, softmax, pv


MODES = ("auto", "cudnn", "sdpa", "cupy")


def attention_wanted() -> str:
    """CUCO_CP_REF_ATTENTION: auto (the default: cudnn where the harness loaded its attention
    library, else sdpa), cudnn, sdpa or cupy."""
    value = os.environ.get("CUCO_CP_REF_ATTENTION", "auto").strip().lower()
    if value not in MODES:
        raise ValueError(f"CUCO_CP_REF_ATTENTION={value!r}: use one of {', '.join(MODES)}")
    return value


class Reference:
    """All-gather K and V with NCCL, then attention: PyTorch's fused kernel (default), or query
    blocks of cuBLAS GEMMs around a fused softmax kernel; all on the harness's stream."""

    def __init__(self, env: Any, attention: str | None = None) -> None:
        import cupy
        from cupy.cuda import cublas

        self.env = env
        self.warnings: list[str] = []
        self.mode = requested = attention or attention_wanted()
        self.torch: Any = None
        self.plan: Any = None
        if self.mode in ("auto", "cudnn"):
            from cuco_tui.harness import attention as harness_attention

            self.attn = harness_attention.loaded()
            if self.attn is not None:
                self.mode = "cudnn"
            elif self.mode == "cudnn":
                raise RuntimeError("CUCO_CP_REF_ATTENTION=cudnn, but the harness attention library is not loaded")
            else:
                self.mode = "sdpa"
                self.warnings.append("the harness attention library (cuDNN) is not loaded: the reference's "
                                     "attention is PyTorch's FlashAttention, slower than cuDNN's on Hopper; "
                                     "speedups against it overstate (`cuco doctor` says why the library is missing)")
                warnings.warn(self.warnings[-1], RuntimeWarning, stacklevel=2)
        if self.mode == "sdpa":
            try:
                self._setup_sdpa(cupy)
            except ImportError as exc:
                # Without torch the weak baseline is all there is: say so where results are read.
                self.mode = "cupy"
                self.warnings.append(f"PyTorch is not importable ({exc}): the reference's attention is the "
                                     "three-pass CuPy one, 4.9-6.9x slower than a fused kernel on H100; "
                                     "speedups against it overstate")
                warnings.warn(self.warnings[-1], RuntimeWarning, stacklevel=2)
        self.cupy = cupy
        self.cublas = cublas
        d = env.dims
        check_dims(d, env.world)
        self.S, self.H, self.HKV, self.D, self.causal = d["S"], d["H"], d["HKV"], d["D"], d["CAUSAL"]
        self.sl = self.S // env.world
        self.group = self.H // self.HKV
        self.rows = block_rows(self.sl, self.S, self.H)
        with env.stream:
            self.k_all = cupy.empty((self.S, self.HKV, self.D), dtype=cupy.uint16)
            self.v_all = cupy.empty((self.S, self.HKV, self.D), dtype=cupy.uint16)
            if self.mode == "cupy":  # up to 2 x SCORE_BUDGET that the fused kernel does not need
                self.scores = cupy.empty(self.H * self.rows * self.S, dtype=cupy.float32)
                self.probs = cupy.empty(self.H * self.rows * self.S, dtype=cupy.uint16)
        if self.mode == "cudnn":
            from cuco_tui.harness.attention import AttentionError

            try:
                self._setup_cudnn()
            except AttentionError as exc:
                if requested != "auto":
                    raise
                # A library that loads but cannot plan (an old cuDNN, an unsupported GPU): fall back.
                self.mode = "sdpa"
                self._setup_sdpa(cupy)
                self.warnings.append(f"the harness attention library cannot plan this shape ({exc}): the "
                                     "reference's attention is PyTorch's FlashAttention, slower than cuDNN's on "
                                     "Hopper; speedups against it overstate")
                warnings.warn(self.warnings[-1], RuntimeWarning, stacklevel=2)
        self.softmax = cupy.RawKernel(_SOFTMAX_SRC, "softmax_rows")
        self.handle = cupy.cuda.device.get_cublas_handle()
        self.scale = np.full(1, 1.0 / math.sqrt(self.D), dtype=np.float32)
        self.one = np.ones(1, dtype=np.float32)
        self.zero = np.zeros(1, dtype=np.float32)

    def allgather(self, inputs: dict[str, Any]) -> None:
        from cupy.cuda import nccl

        count = self.sl * self.HKV * self.D
        for name, dst in (("k", self.k_all), ("v", self.v_all)):
            self.env.comm.allGather(inputs[name].data.ptr, dst.data.ptr, count, nccl.NCCL_BFLOAT16,
                                    self.env.stream.ptr)

    def _setup_cudnn(self) -> None:
        from cuco_tui.harness import attention as harness_attention

        rank = self.env.rank
        self.kv_len = (rank + 1) * self.sl if self.causal else self.S
        mask = harness_attention.CAUSAL_BOTTOM_RIGHT if self.causal else harness_attention.NO_MASK
        self.plan = harness_attention.Plan.create(self.attn, self.H, self.HKV, self.D, self.sl, self.kv_len, mask=mask)

    def _setup_sdpa(self, cupy: Any) -> None:
        import torch
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel
        from torch.nn.attention.bias import causal_lower_right

        torch.cuda.set_device(cupy.cuda.runtime.getDevice())
        self.torch, self.F = torch, F
        self.backends = lambda: sdpa_kernel([SDPBackend.FLASH_ATTENTION])
        self.tstream = torch.cuda.ExternalStream(self.env.stream.ptr)
        d = self.env.dims
        sl, rank = d["S"] // self.env.world, self.env.rank
        # The keys this rank's queries can see: all of them, or (causal) those up to its chunk's end.
        self.kv_len = (rank + 1) * sl if d["CAUSAL"] else d["S"]
        self.mask = causal_lower_right(sl, self.kv_len) if d["CAUSAL"] else None
        self.gqa = {"enable_gqa": True} if d["HKV"] != d["H"] else {}

    def _bf16(self, array: Any, shape: tuple[int, ...]) -> Any:
        """A torch bf16 view [1, heads, rows, D] of a CuPy buffer [rows, heads, D] of bf16 bits."""
        t = self.torch.from_dlpack(array).view(self.torch.bfloat16)
        return t.reshape(1, *shape).transpose(1, 2)

    def _attention_sdpa(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        torch = self.torch
        H, HKV, D = self.H, self.HKV, self.D
        with torch.cuda.stream(self.tstream), self.backends():
            q = self._bf16(inputs["q"], (self.sl, H, D))
            k = self._bf16(self.k_all[:self.kv_len], (self.kv_len, HKV, D))
            v = self._bf16(self.v_all[:self.kv_len], (self.kv_len, HKV, D))
            out = self.F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask, **self.gqa)
            self._bf16(outputs["o"], (self.sl, H, D)).copy_(out)

    def attention(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        if self.mode == "cudnn":
            self.plan.run(inputs["q"].data.ptr, self.k_all.data.ptr, self.v_all.data.ptr, outputs["o"].data.ptr,
                          self.env.stream.ptr)
            return
        if self.mode == "sdpa":
            self._attention_sdpa(inputs, outputs)
            return
        # CuPy binds its cuBLAS handle to the current stream on every call: keep the stream current.
        with self.env.stream:
            for q0 in range(0, self.sl, self.rows):
                self._block(inputs["q"].data.ptr, outputs["o"].data.ptr, q0, min(self.rows, self.sl - q0))

    def _block(self, q: int, o: int, q0: int, rows: int) -> None:
        scores, softmax, pv = block_plan(self.env.dims, self.env.world, self.env.rank, q0, rows, self.rows)
        for g in scores:
            self._gemm(g, q, o)
        self.softmax((rows, self.H), (256,), (self.scores, self.probs, np.int64(softmax["ld"]),
                                              np.int32(softmax["rows_alloc"]), np.int32(softmax["kn"]),
                                              np.int64(softmax["q_pos0"]), np.int32(softmax["causal"])))
        for g in pv:
            self._gemm(g, q, o)

    def _gemm(self, g: Gemm, q: int, o: int) -> None:
        buffers = {"q": (q, 2), "o": (o, 2), "k_all": (self.k_all.data.ptr, 2), "v_all": (self.v_all.data.ptr, 2),
                   "probs": (self.probs.data.ptr, 2), "scores": (self.scores.data.ptr, 4)}

        def operand(name: str, offset: int) -> tuple[int, int]:
            ptr, size = buffers[name]
            return ptr + offset * size, CUDA_R_32F if size == 4 else CUDA_R_16BF

        a, a_type = operand(g.a, g.a_off)
        b, b_type = operand(g.b, g.b_off)
        c, c_type = operand(g.c, g.c_off)
        alpha = self.scale if g.scaled else self.one
        self.cublas.gemmStridedBatchedEx(
            self.handle, g.transa, g.transb, g.m, g.n, g.k, alpha.ctypes.data,
            a, a_type, g.lda, g.stride_a, b, b_type, g.ldb, g.stride_b,
            self.zero.ctypes.data, c, c_type, g.ldc, g.stride_c, g.batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)

    def run(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        self.allgather(inputs)
        self.attention(inputs, outputs)

    def parts(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> dict[str, Callable[[], None]]:
        """Each half alone: max(allgather, attention) is what a perfect overlap would take."""
        return {
            "allgather": lambda: self.allgather(inputs),
            "attention": lambda: self.attention(inputs, outputs),
        }

    def comm_bytes(self) -> int:
        """Bytes each rank receives: every other rank's K and V chunk."""
        return comm_bytes(self.env.dims, self.env.world)
