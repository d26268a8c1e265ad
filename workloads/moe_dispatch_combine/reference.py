"""Reference for moe_dispatch_combine: the strongest plain host-driven version, in the style of
Megatron-LM's all-to-all token dispatcher, written as a careful engineer would write it in C
(the seed is that) but driven from Python: nothing is allocated, no host sync but the one the
counts need, and no Python loop of launches on the timed path. On each rank:

  dispatch  a stable counting sort of the T*8 (token, expert) pairs by expert (three small
            kernels: counts per block, one scan, slots handed out in pair order) and one row copy
            into the send buffer, whose segment p holds the rows for rank p's experts, by expert;
            the per-expert counts exchanged (NCCL send/recv of E/W int32 to every rank, one
            group), copied into pinned host memory and read there (the one host sync: NCCL and
            cuBLAS need sizes on the host; the plan built from them is cached by their bytes);
            the rows moved (NCCL send/recv to every rank, one group) and regrouped by local expert
            (one kernel for the segment starts, one row copy);
  experts   per local expert two cuBLAS GEMMs ([n, H] @ [H, 2I], gate and up together, then
            [n, I] @ [I, H]; bf16 in and out, fp32 accumulation) around one silu(gate) * up
            kernel over all rows; launched as one CUDA graph, captured the second time a routing
            is seen and replayed after (eager when capture fails, with a warning);
  combine   the results put back in arrival order (one row copy), sent back (one group), and
            each token's 8 results summed with its router weights (one kernel).

Per iteration: 8 kernel launches, 3 NCCL groups, 1 device-to-host copy, 1 host sync, and the
expert GEMMs (one graph launch, or 2 * (experts with rows) + 1 launches when eager).

`expected` is the float64 CPU answer the tests check everything against; `simulate` is this same
pipeline (the same index plans, the same bf16 roundings) in NumPy with the all-to-alls done
in memory, so the CPU tests check the reference's index arithmetic without a GPU (and the
kernels themselves, on a small CPU emulation of CUDA, in the tests).

Buffers per rank: inputs "x" [T, H] bf16, "topk_idx" [T, 8] int32, "topk_w" [T, 8] float32,
"w13" [E/W, H, 2I] bf16 (gate | up), "w2" [E/W, I, H] bf16; output "out" [T, H] bf16."""

from __future__ import annotations

import ctypes
import math
import os
import warnings
from collections import OrderedDict
from typing import Any, Callable

import numpy as np

from cuco_tui.harness.bf16 import from_bf16_bits, to_bf16_bits

TOPK = 8
MAX_EXPERTS = 1024  # the route kernels keep one counter per expert in shared memory
CUDA_R_16BF = 14
CUBLAS_COMPUTE_32F = 68
CUBLAS_GEMM_DEFAULT = -1
CUBLAS_OP_N = 0
_SEED_MOD = 1 << 32


# ---------------------------------------------------------------------------- shapes


def check_dims(dims: dict[str, int], world: int) -> None:
    E = dims["E"]
    if E % world:
        raise ValueError(f"E={E} experts do not split evenly over {world} ranks")
    if E < TOPK:
        raise ValueError(f"top-{TOPK} routing needs at least {TOPK} experts, not E={E}")
    if E > MAX_EXPERTS:
        raise ValueError(f"at most {MAX_EXPERTS} experts (the route kernels count them in shared memory), not E={E}")
    if not 0 < dims["HOT"] < 100:
        raise ValueError(f"HOT is a percentage below 100, not {dims['HOT']}")
    if dims["H"] % 8 or dims["I"] % 2:
        raise ValueError("H must be a multiple of 8 and I even")


def local_experts(dims: dict[str, int], world: int) -> int:
    return dims["E"] // world


def capacity(dims: dict[str, int], world: int) -> int:
    """The most rows one rank can receive from one source: a token's 8 experts are distinct,
    so it sends at most min(8, E/W) rows to any one rank."""
    return dims["T"] * min(TOPK, local_experts(dims, world))


def flops(dims: dict[str, int], world: int) -> int:
    """Floating-point operations of an average rank: T * 8 routed rows, each through [H, 2I] and
    [I, H] (the routing decides each rank's real share; the hot experts' ranks do more)."""
    return TOPK * dims["T"] * (2 * dims["H"] * 2 * dims["I"] + 2 * dims["I"] * dims["H"])


def comm_bytes(dims: dict[str, int], world: int) -> int:
    """Bytes an average rank receives: the (W-1)/W of its T * 8 routed rows that other ranks
    dispatch to it, and as many results coming back in the combine, [H] bf16 each."""
    return 2 * TOPK * dims["T"] * (world - 1) // world * dims["H"] * 2


def io_spec(dims: dict[str, int], world: int, rank: int = 0) -> dict[str, list[tuple[str, tuple[int, ...], str]]]:
    check_dims(dims, world)
    T, H, I = dims["T"], dims["H"], dims["I"]
    el = local_experts(dims, world)
    return {
        "inputs": [
            ("x", (T, H), "bf16"),
            ("topk_idx", (T, TOPK), "i32"),
            ("topk_w", (T, TOPK), "f32"),
            ("w13", (el, H, 2 * I), "bf16"),
            ("w2", (el, I, H), "bf16"),
        ],
        "outputs": [("out", (T, H), "bf16")],
    }


# ---------------------------------------------------------------------------- routing


def zipf_exponent(experts: int, hot: float) -> float:
    """The exponent s of popularity weights (rank + 1)^-s under which the hottest quarter of
    `experts` holds `hot` percent of the weight (0 when `hot` is at or below uniform)."""
    q = max(1, experts // 4)
    target = hot / 100.0
    if target <= q / experts:
        return 0.0
    if target >= 1.0:
        raise ValueError(f"HOT must be below 100, not {hot}")
    ranks = np.arange(1, experts + 1, dtype=np.float64)

    def share(s: float) -> float:
        w = ranks ** -s
        return float(w[:q].sum() / w.sum())

    lo, hi = 0.0, 1.0
    while share(hi) < target and hi < 256:
        hi *= 2
    for _ in range(80):
        mid = (lo + hi) / 2
        if share(mid) < target:
            lo = mid
        else:
            hi = mid
    return hi


def popularity(experts: int) -> np.ndarray:
    """Each expert's place in the popularity order (0 = hottest). Fixed per E (not per run or
    rank), so every rank sees the same hot experts and bench runs see the same load."""
    return np.random.RandomState(0xE0E0 + experts).permutation(experts)


def routing(xp: Any, rs: Any, tokens: int, experts: int, hot: float) -> tuple[Any, Any]:
    """Top-8 distinct experts per token, drawn without replacement in proportion to the
    popularity weights (Gumbel top-k), and router weights: positive, summing to 1 per token."""
    s = zipf_exponent(experts, hot)
    logp = -s * np.log(popularity(experts).astype(np.float64) + 1.0)
    u = xp.clip(rs.random_sample((tokens, experts)), 1e-12, 1.0 - 1e-12)
    keys = xp.asarray(logp)[None, :] - xp.log(-xp.log(u))
    idx = xp.argsort(-keys, axis=1)[:, :TOPK].astype(xp.int32)
    scores = rs.uniform(0.05, 1.0, (tokens, TOPK))
    weights = (scores / scores.sum(axis=1, keepdims=True)).astype(xp.float32)
    return idx, weights


def fill_inputs(xp: Any, inputs: dict[str, Any], dims: dict[str, int], world: int, rank: int, seed: int) -> None:
    """Fresh inputs: x standard normal; routing from the skewed generator; expert weights scaled
    by 1/sqrt(fan-in) so every intermediate is O(1). Generated expert by expert to bound the
    temporary memory (the weights of one rank reach 11 GB at the largest shape)."""
    T, H, E, I = dims["T"], dims["H"], dims["E"], dims["I"]
    rs = xp.random.RandomState((seed * 7919 + 1009 * rank + 1) % _SEED_MOD)
    inputs["x"][...] = to_bf16_bits(xp, rs.standard_normal((T, H)).astype(xp.float32))
    idx, weights = routing(xp, rs, T, E, dims["HOT"])
    inputs["topk_idx"][...] = idx
    inputs["topk_w"][...] = weights
    for e in range(local_experts(dims, world)):
        inputs["w13"][e] = to_bf16_bits(xp, (rs.standard_normal((H, 2 * I)) / math.sqrt(H)).astype(xp.float32))
        inputs["w2"][e] = to_bf16_bits(xp, (rs.standard_normal((I, H)) / math.sqrt(I)).astype(xp.float32))


# ---------------------------------------------------------------------------- the exact answer


def _silu(v: Any) -> Any:
    return v / (1.0 + np.exp(-v))


def expected(all_inputs: list[dict[str, np.ndarray]], dims: dict[str, int], world: int) -> list[dict[str, np.ndarray]]:
    """float64 on the CPU, no rounding of intermediates: for every rank's token t,
    out[t] = sum_k w[t,k] * ((silu(x_t W1_e) * (x_t W3_e)) W2_e) with e = topk_idx[t,k]."""
    I = dims["I"]
    el = local_experts(dims, world)
    w13 = [from_bf16_bits(np, all_inputs[e // el]["w13"][e % el]).astype(np.float64) for e in range(dims["E"])]
    w2 = [from_bf16_bits(np, all_inputs[e // el]["w2"][e % el]).astype(np.float64) for e in range(dims["E"])]
    outs = []
    for inp in all_inputs:
        x = from_bf16_bits(np, inp["x"]).astype(np.float64)
        idx = np.asarray(inp["topk_idx"])
        wts = np.asarray(inp["topk_w"]).astype(np.float64)
        out = np.zeros_like(x)
        for e in np.unique(idx):
            t, k = np.nonzero(idx == e)
            a = x[t] @ w13[e]
            y = (_silu(a[:, :I]) * a[:, I:]) @ w2[e]
            np.add.at(out, t, wts[t, k][:, None] * y)
        outs.append({"out": out})
    return outs


# ---------------------------------------------------------------------------- index plans (NumPy or CuPy)


def dispatch_order(xp: Any, topk_idx: Any, experts: int) -> tuple[Any, Any, Any]:
    """Sort the (token, choice) pairs by expert, stably (pair index breaks ties).
    Returns order (the pair at each send slot), pos (the send slot of each pair, int32) and the
    pairs per expert (int32 [E]). Send slots of rank p's experts form one segment, by expert."""
    flat = topk_idx.reshape(-1).astype(xp.int64)
    n = flat.size
    order = xp.argsort(flat * n + xp.arange(n, dtype=xp.int64))
    pos = xp.empty(n, dtype=xp.int32)
    pos[order] = xp.arange(n, dtype=xp.int32)
    counts = xp.bincount(flat, minlength=experts).astype(xp.int32)
    return order, pos, counts


def _exclusive(v: np.ndarray) -> np.ndarray:
    out = np.zeros(len(v) + 1, dtype=np.int64)
    np.cumsum(v, out=out[1:])
    return out


class Layout:
    """Host-side sizes of one iteration on one rank, from the pairs it sends per expert
    (`counts` [E]) and the rows it receives per (source rank, local expert) (`recv_counts` [W, E/W]).

    Send layout (rows sorted by global expert): segment p = rows for rank p, at send_off[p].
    Arrival layout (rows as received): segment p = rows from rank p (by local expert), at recv_off[p].
    Expert layout (rows the GEMMs read): segment e = rows of local expert e (by source), at expert_off[e]."""

    def __init__(self, counts: np.ndarray, recv_counts: np.ndarray) -> None:
        world, el = recv_counts.shape
        self.world, self.local = world, el
        self.counts = np.asarray(counts, dtype=np.int64)
        self.recv_counts = np.asarray(recv_counts, dtype=np.int64)
        self.send_n = self.counts.reshape(world, el).sum(axis=1)
        self.send_off = _exclusive(self.send_n)
        self.recv_n = self.recv_counts.sum(axis=1)
        self.recv_off = _exclusive(self.recv_n)
        self.expert_n = self.recv_counts.sum(axis=0)
        self.expert_off = _exclusive(self.expert_n)
        self.rows = int(self.recv_off[-1])

    def expert_to_arrival(self) -> np.ndarray:
        """For each row of the expert layout, its row in the arrival layout (int64 [rows])."""
        rc = self.recv_counts
        starts = (self.recv_off[:-1, None] + np.cumsum(rc, axis=1) - rc)  # [W, El]: arrival start of (p, e)
        lens = rc.T.reshape(-1)  # expert-major: (e, p)
        seg_starts = starts.T.reshape(-1)
        first = _exclusive(lens)[:-1]
        return np.repeat(seg_starts - first, lens) + np.arange(int(lens.sum()), dtype=np.int64)

    def received_bytes(self, rank: int, hidden: int) -> int:
        """Bytes that cross the links into this rank: dispatched rows plus returned results."""
        others = [p for p in range(self.world) if p != rank]
        rows = int(self.recv_n[others].sum() + self.send_n[others].sum())
        return rows * hidden * 2


# ---------------------------------------------------------------------------- the pipeline in NumPy


def _round_bf16(v: np.ndarray) -> np.ndarray:
    return from_bf16_bits(np, to_bf16_bits(np, v.astype(np.float32)))


def simulate(all_inputs: list[dict[str, np.ndarray]], dims: dict[str, int], world: int) -> list[dict[str, np.ndarray]]:
    """The reference's pipeline on the CPU: the same plans (`dispatch_order`, `Layout`), the
    all-to-alls as copies between the ranks' arrays, bf16 rounding wherever the GPU stores bf16
    (GEMM results, silu * up, expert outputs, the output). float32 elsewhere."""
    E, I = dims["E"], dims["I"]
    el = local_experts(dims, world)
    plans = [dispatch_order(np, np.asarray(inp["topk_idx"]), E) for inp in all_inputs]
    sends = [np.asarray(inp["x"])[order // TOPK] for inp, (order, _, _) in zip(all_inputs, plans)]
    layouts = [Layout(plans[r][2], np.stack([plans[p][2][r * el:(r + 1) * el] for p in range(world)]))
               for r in range(world)]
    results = []  # per rank: its results in arrival layout, bf16 bits
    for r in range(world):
        lay = layouts[r]
        arrival = np.concatenate([sends[p][layouts[p].send_off[r]:layouts[p].send_off[r + 1]] for p in range(world)])
        e2a = lay.expert_to_arrival()
        xe = from_bf16_bits(np, arrival[e2a])
        y = np.empty((lay.rows, dims["H"]), dtype=np.float32)
        for e in range(el):
            lo, hi = lay.expert_off[e], lay.expert_off[e + 1]
            if hi == lo:
                continue
            w13 = from_bf16_bits(np, all_inputs[r]["w13"][e])
            w2 = from_bf16_bits(np, all_inputs[r]["w2"][e])
            a = _round_bf16(xe[lo:hi] @ w13)
            h = _round_bf16(_silu(a[:, :I]) * a[:, I:])
            y[lo:hi] = _round_bf16(h @ w2)
        back = np.empty_like(y)
        back[e2a] = y
        results.append(back)
    outs = []
    for r in range(world):
        order, pos, _ = plans[r]
        comb = np.concatenate([results[p][layouts[p].recv_off[r]:layouts[p].recv_off[r + 1]] for p in range(world)])
        wts = np.asarray(all_inputs[r]["topk_w"], dtype=np.float32)
        rows = comb[pos].reshape(-1, TOPK, dims["H"])
        acc = np.zeros(rows.shape[::2], dtype=np.float32)
        for k in range(TOPK):  # the GPU kernel's order: choice 0 first, fp32
            acc += wts[:, k:k + 1] * rows[:, k]
        outs.append({"out": _round_bf16(acc).astype(np.float64)})
    return outs


# ---------------------------------------------------------------------------- the GPU reference: kernels

ROUTE_PAIRS = 256  # (token, choice) pairs per block of route_count and route_place, at least
ROUTE_MAX_BLOCKS = 256  # route_scan scans experts x blocks counters in one block
ROUTE_THREADS = 256  # route_count
SCAN_THREADS = 1024  # route_scan: its block-wide scan assumes exactly 32 warps
PLACE_THREADS = 128  # route_place
COPY_THREADS = 128  # row copies (16 bytes a thread and load) and weighted_combine

_KERNELS = r"""
__device__ __forceinline__ float lo_bf(unsigned int v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float hi_bf(unsigned int v) { return __uint_as_float(v & 0xffff0000u); }
__device__ __forceinline__ unsigned int f2bf(float f) {   // round to nearest even, NaN kept
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;
  u += 0x7fffu + ((u >> 16) & 1u);
  return u >> 16;
}
__device__ __forceinline__ unsigned int pack(float lo, float hi) { return f2bf(lo) | (f2bf(hi) << 16); }
__device__ __forceinline__ float silu(float v) { return v / (1.0f + expf(-v)); }

// ---- Routing: a stable counting sort of the (token, choice) pairs by expert, the plan of
// dispatch_order() without its sort. Block b of route_count and route_place owns the pairs
// [b * chunk, (b + 1) * chunk); hist is [experts, blocks], expert-major.

// hist[e, b] = the pairs of block b that go to expert e.
extern "C" __global__ void route_count(const int* idx, int pairs, int chunk, int experts, int* hist) {
  __shared__ int count[1024];
  for (int e = threadIdx.x; e < experts; e += blockDim.x) count[e] = 0;
  __syncthreads();
  const int end = min(pairs, (int)(blockIdx.x + 1) * chunk);
  for (int i = (int)blockIdx.x * chunk + (int)threadIdx.x; i < end; i += blockDim.x) atomicAdd(&count[idx[i]], 1);
  __syncthreads();
  for (int e = threadIdx.x; e < experts; e += blockDim.x) hist[e * gridDim.x + blockIdx.x] = count[e];
}

// One block of 1024 threads. counts[e] = the pairs for expert e; then hist becomes its exclusive
// scan in (expert, block) order, which is block b's first send slot for expert e: slots are
// sorted by expert, and within an expert by block, so by pair.
extern "C" __global__ void __launch_bounds__(1024) route_scan(int* hist, int blocks, int experts, int* counts) {
  __shared__ int warp_total[32];
  for (int e = threadIdx.x; e < experts; e += blockDim.x) {
    int sum = 0;
    for (int b = 0; b < blocks; ++b) sum += hist[e * blocks + b];
    counts[e] = sum;
  }
  __syncthreads();  // every count is read before the scan overwrites hist
  const int n = experts * blocks, per = (n + (int)blockDim.x - 1) / (int)blockDim.x;
  const int lo = min(n, (int)threadIdx.x * per), hi = min(n, lo + per);
  int mine = 0;
  for (int i = lo; i < hi; ++i) mine += hist[i];
  // Exclusive scan of `mine` over the block: inclusive within each warp, then over the warps' totals.
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int incl = mine;
  for (int d = 1; d < 32; d <<= 1) {
    const int up = __shfl_up_sync(0xffffffffu, incl, d);
    if (lane >= d) incl += up;
  }
  if (lane == 31) warp_total[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    int total = warp_total[lane];
    for (int d = 1; d < 32; d <<= 1) {
      const int up = __shfl_up_sync(0xffffffffu, total, d);
      if (lane >= d) total += up;
    }
    warp_total[lane] = total;
  }
  __syncthreads();
  int run = incl - mine + (warp > 0 ? warp_total[warp - 1] : 0);
  for (int i = lo; i < hi; ++i) {
    const int v = hist[i];
    hist[i] = run;
    run += v;
  }
}

// Block b hands out the send slots of its pairs in pair order, from its first slot per expert
// (hist after route_scan): pos[i] is pair i's place in the stable sort by expert. One thread walks
// the block's pairs (256 at the bench shapes: microseconds); the others only load the cursors.
extern "C" __global__ void route_place(const int* __restrict__ idx, int pairs, int chunk, int experts,
                                       const int* __restrict__ first, int* __restrict__ pos) {
  __shared__ int cursor[1024];
  for (int e = threadIdx.x; e < experts; e += blockDim.x) cursor[e] = first[e * gridDim.x + blockIdx.x];
  __syncthreads();
  if (threadIdx.x != 0) return;
  const int end = min(pairs, (int)(blockIdx.x + 1) * chunk);
  for (int i = (int)blockIdx.x * chunk; i < end; ++i) pos[i] = cursor[idx[i]]++;
}

// ---- Row copies: one block per row, 16 bytes a thread and load.

// send[pos[i]] = x[i / 8]: the rows in the send layout.
extern "C" __global__ void permute_rows(const uint4* x, const int* pos, uint4* send, int vecs) {
  const uint4* src = x + (long long)(blockIdx.x / 8) * vecs;
  uint4* dst = send + (long long)pos[blockIdx.x] * vecs;
  for (int v = threadIdx.x; v < vecs; v += blockDim.x) dst[v] = src[v];
}

// The (source p, local expert e) segments, s = p * local + e: where each starts in the arrival
// layout (by source, then expert; arrival[segments] = all rows) and in the expert layout (by
// expert, then source). recv_counts[s]: rows from rank p for local expert e. One thread.
extern "C" __global__ void segment_offsets(const int* recv_counts, int world, int local, long long* arrival,
                                           long long* expert) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  long long run = 0;
  for (int e = 0; e < local; ++e)
    for (int p = 0; p < world; ++p) {
      expert[p * local + e] = run;
      run += recv_counts[p * local + e];
    }
  run = 0;
  for (int s = 0; s < world * local; ++s) {
    arrival[s] = run;
    run += recv_counts[s];
  }
  arrival[world * local] = run;
}

// Block r handles arrival row r: its segment is the last one starting at or before r (an empty
// segment shares its start with the next), its expert row the segment's expert start plus the
// offset inside. to_expert: dst[expert row] = src[r] (dispatch), else dst[r] = src[expert row].
extern "C" __global__ void regroup_rows(uint4* dst, const uint4* src, const long long* arrival,
                                        const long long* expert, int segments, int vecs, int to_expert) {
  const long long row = blockIdx.x;
  int lo = 0, hi = segments - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (arrival[mid] <= row) lo = mid;
    else hi = mid - 1;
  }
  const long long other = expert[lo] + (row - arrival[lo]);
  const uint4* s = src + (to_expert ? row : other) * vecs;
  uint4* d = dst + (to_expert ? other : row) * vecs;
  for (int v = threadIdx.x; v < vecs; v += blockDim.x) d[v] = s[v];
}

// ---- Math.

// h[r, i] = silu(gate[r, i]) * up[r, i]; h13 rows are [gate (I) | up (I)]. Two bf16 per thread.
extern "C" __global__ void silu_mul(const unsigned int* h13, unsigned int* h, long long rows, int half) {
  const long long n = rows * half;
  for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += (long long)gridDim.x * blockDim.x) {
    const long long r = j / half, i = j % half;
    const unsigned int g = h13[r * 2 * half + i], u = h13[r * 2 * half + half + i];
    h[j] = pack(silu(lo_bf(g)) * lo_bf(u), silu(hi_bf(g)) * hi_bf(u));
  }
}

// out[t, :] = sum_k w[t, k] * comb[pos[t*8 + k], :], fp32, choice 0 first. One block per token,
// eight bf16 (16 bytes) per thread and load.
extern "C" __global__ void weighted_combine(const uint4* comb, const int* pos, const float* w, uint4* out, int vecs) {
  const int t = blockIdx.x;
  for (int c = threadIdx.x; c < vecs; c += blockDim.x) {
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    for (int k = 0; k < 8; ++k) {
      const float wk = w[t * 8 + k];
      const uint4 q = comb[(long long)pos[t * 8 + k] * vecs + c];
      const unsigned int v[4] = {q.x, q.y, q.z, q.w};
      for (int j = 0; j < 4; ++j) {
        acc[2 * j] += wk * lo_bf(v[j]);
        acc[2 * j + 1] += wk * hi_bf(v[j]);
      }
    }
    out[(long long)t * vecs + c] = make_uint4(pack(acc[0], acc[1]), pack(acc[2], acc[3]), pack(acc[4], acc[5]),
                                              pack(acc[6], acc[7]));
  }
}
"""


def route_grid(pairs: int) -> tuple[int, int]:
    """Blocks and pairs per block (chunk) of route_count and route_place: the pairs split evenly
    over blocks of at most ROUTE_PAIRS, but no more than ROUTE_MAX_BLOCKS blocks (route_scan's one
    block scans experts x blocks counters); blocks * chunk covers every pair, no block is empty."""
    blocks = max(1, min(ROUTE_MAX_BLOCKS, -(-pairs // ROUTE_PAIRS)))
    return blocks, max(1, -(-pairs // blocks))


# ---------------------------------------------------------------------------- the GPU reference: host plans


class LRU:
    """A dict of at most `capacity` entries that drops the least recently used one."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.items: OrderedDict[Any, Any] = OrderedDict()

    def get(self, key: Any, make: Callable[[], Any]) -> Any:
        item = self.items.get(key)
        if item is None:
            item = self.items[key] = make()
            while len(self.items) > self.capacity:
                self.items.popitem(last=False)
        else:
            self.items.move_to_end(key)
        return item


class Plan:
    """What the host needs of one iteration once it holds the counts: the layout, and the NCCL
    and GEMM arguments as plain ints. Cached by the counts' bytes (`key`): the routing is an
    input, so a benchmark repeats one routing and only its first repetition builds a plan."""

    def __init__(self, key: bytes, layout: Layout) -> None:
        self.key = key
        self.layout = layout
        self.rows = layout.rows
        # (offset, rows) per rank, in rows: the send layout's segments and the arrival layout's.
        self.send_parts = [(int(o), int(n)) for o, n in zip(layout.send_off[:-1], layout.send_n)]
        self.recv_parts = [(int(o), int(n)) for o, n in zip(layout.recv_off[:-1], layout.recv_n)]
        # (local expert, first row, rows) of the experts that received rows: one GEMM pair each.
        self.experts = [(e, int(o), int(n)) for e, (o, n) in enumerate(zip(layout.expert_off[:-1], layout.expert_n))
                        if n]


def plan_from_counts(host_counts: np.ndarray, world: int) -> Plan:
    """host_counts: int32 [2E], the rows this rank sends per global expert, then the rows it
    receives per (source rank, local expert), as the counts exchange leaves them."""
    experts = len(host_counts) // 2
    counts = np.array(host_counts[:experts])
    recv_counts = np.array(host_counts[experts:]).reshape(world, experts // world)
    return Plan(np.ascontiguousarray(host_counts).tobytes(), Layout(counts, recv_counts))


# ---------------------------------------------------------------------------- the GPU reference: CUDA graphs


def launch_mode(enabled: bool, earlier_runs: int, captured: bool) -> str:
    """How to launch a rank-local sequence for one key: 'eager' the first time (it also warms
    cuBLAS's heuristics and workspace outside a capture, and a routing seen once, as in
    verification, never pays for a capture), 'capture' the second time, 'replay' after."""
    if not enabled:
        return "eager"
    if captured:
        return "replay"
    return "capture" if earlier_runs >= 1 else "eager"


class GraphSlot:
    def __init__(self) -> None:
        self.runs = 0
        self.graph: Any = None


class GraphCache:
    """CUDA graphs of a launch sequence, one per key, the most recent `capacity` of them.
    `capture(launches)` records `launches` into a graph without running them (and raises if it
    cannot); `replay(graph)` launches one. A failed capture turns graphs off for good: the
    sequence then runs eagerly, and `warnings` says why."""

    def __init__(self, capture: Callable[[Callable[[], None]], Any], replay: Callable[[Any], None], enabled: bool,
                 capacity: int = 4) -> None:
        self.capture = capture
        self.replay = replay
        self.enabled = enabled
        self.slots = LRU(capacity)
        self.warnings: list[str] = []

    def run(self, key: Any, launches: Callable[[], None], what: str) -> str:
        """Runs `launches` once, one way or the other; returns the way ('eager', 'capture', 'replay')."""
        slot = self.slots.get(key, GraphSlot)
        mode = launch_mode(self.enabled, slot.runs, slot.graph is not None)
        slot.runs += 1
        if mode == "capture":
            try:
                slot.graph = self.capture(launches)
            except Exception as exc:  # any failure: run eagerly from now on, never crash the run
                self.disable(f"CUDA graph capture of {what} failed ({type(exc).__name__}: {exc}); "
                             f"running {what} eagerly from now on")
                mode = "eager"
        if mode == "eager":
            launches()
        else:
            self.replay(slot.graph)
        return mode

    def disable(self, why: str) -> None:
        self.enabled = False
        self.slots = LRU(self.slots.capacity)
        self.warnings.append(why)
        warnings.warn(why, RuntimeWarning, stacklevel=3)


def graphs_wanted() -> bool:
    """CUDA graphs for the expert GEMMs unless CUCO_MOE_REF_GRAPHS=0 (to time the eager path)."""
    return os.environ.get("CUCO_MOE_REF_GRAPHS", "1") != "0"


# ---------------------------------------------------------------------------- the GPU reference


def raw_cublas() -> ctypes.CDLL:
    """The process's libcublas through ctypes. CuPy's cuBLAS bindings refuse to run while a stream
    captures (NotImplementedError) though cuBLAS itself supports graph capture, so the expert
    GEMMs call cublasGemmEx directly. The library CuPy loaded is found by its soname, or else by
    its path in /proc/self/maps."""
    try:
        lib = ctypes.CDLL("libcublas.so.13")
    except OSError:
        with open("/proc/self/maps") as maps:
            paths = [line.split()[-1] for line in maps if "libcublas.so" in line and "libcublasLt" not in line]
        if not paths:
            raise
        lib = ctypes.CDLL(paths[0])
    vp, i32 = ctypes.c_void_p, ctypes.c_int
    lib.cublasGemmEx.argtypes = [vp, i32, i32, i32, i32, i32, vp, vp, i32, i32, vp, i32, i32, vp, vp, i32, i32,
                                 i32, i32]
    lib.cublasGemmEx.restype = i32
    lib.cublasSetStream_v2.argtypes = [vp, vp]
    lib.cublasSetStream_v2.restype = i32
    return lib


def _check_cublas(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"{what} returned cuBLAS status {status}")


class Reference:
    """Host-driven dispatch, expert GEMMs and combine on the harness's NCCL communicator and
    CuPy's cuBLAS handle, all on env.stream, with one host sync (for the counts) an iteration.
    Every buffer is allocated here, once per shape; an iteration allocates nothing."""

    def __init__(self, env: Any, graphs: bool | None = None, cublas: Any = None) -> None:
        import cupy
        import cupyx

        self.env = env
        self.cupy = cupy
        d = env.dims
        check_dims(d, env.world)
        self.T, self.H, self.E, self.I = d["T"], d["H"], d["E"], d["I"]
        self.el = local_experts(d, env.world)
        self.pairs = self.T * TOPK
        self.route_blocks, self.route_chunk = route_grid(self.pairs)
        rows = env.world * capacity(d, env.world)  # the most rows this rank can receive
        u16 = cupy.uint16
        with env.stream:
            self.send = cupy.empty((self.pairs, self.H), dtype=u16)  # send layout
            self.comb = cupy.empty((self.pairs, self.H), dtype=u16)  # results, in send layout
            self.recv = cupy.empty((rows, self.H), dtype=u16)  # arrival layout (rows, then results)
            self.xe = cupy.empty((rows, self.H), dtype=u16)  # expert layout
            self.h13 = cupy.empty((rows, 2 * self.I), dtype=u16)
            self.h = cupy.empty((rows, self.I), dtype=u16)
            self.y = cupy.empty((rows, self.H), dtype=u16)
            self.pos = cupy.empty(self.pairs, dtype=cupy.int32)  # send slot of each (token, choice)
            self.hist = cupy.empty(self.E * self.route_blocks, dtype=cupy.int32)
            # [0, E): rows this rank sends per global expert; [E, 2E): rows it receives per
            # (source rank, local expert). Side by side: one copy to the host.
            self.counts = cupy.empty(2 * self.E, dtype=cupy.int32)
            self.segments = cupy.empty(2 * self.E + 1, dtype=cupy.int64)
        # Views made once (a view costs host time too): the received counts, and the segments'
        # starts in the arrival layout [E + 1] and in the expert layout [E].
        self.recv_counts = self.counts[self.E:]
        self.arrival_starts, self.expert_starts = self.segments[:self.E + 1], self.segments[self.E + 1:]
        self.host_counts = cupyx.empty_pinned(2 * self.E, dtype=np.int32)  # pinned: an async copy
        module = cupy.RawModule(code=_KERNELS)
        for name in ("route_count", "route_scan", "route_place", "permute_rows", "segment_offsets", "regroup_rows",
                     "silu_mul", "weighted_combine"):
            setattr(self, name, module.get_function(name))
        self.handle = cupy.cuda.device.get_cublas_handle()
        self.lib = cublas if cublas is not None else raw_cublas()  # tests pass a fake
        self.alpha = np.ones(1, dtype=np.float32)
        self.beta = np.zeros(1, dtype=np.float32)
        self.alpha_ptr, self.beta_ptr = self.alpha.ctypes.data, self.beta.ctypes.data
        self.i32 = {k: np.int32(v) for k, v in (("pairs", self.pairs), ("chunk", self.route_chunk), ("E", self.E),
                                                  ("blocks", self.route_blocks), ("vecs", self.H // 8),
                                                  ("world", env.world), ("local", self.el), ("half", self.I // 2))}
        self.plans = LRU(16)
        self.graphs = GraphCache(self._capture, lambda g: g.launch(stream=env.stream),
                                 graphs_wanted() if graphs is None else graphs)
        self.plan: Plan | None = None

    @property
    def layout(self) -> Layout | None:
        return self.plan.layout if self.plan else None

    @property
    def warnings(self) -> list[str]:
        """Why this reference runs slower than it could (a failed graph capture), for the log."""
        return self.graphs.warnings

    # -- the three parts

    def dispatch(self, inputs: dict[str, Any]) -> None:
        env = self.env
        self._route(inputs)
        self._exchange_counts()
        key = self.host_counts.tobytes()
        plan = self.plan = self.plans.get(key, lambda: plan_from_counts(self.host_counts, env.world))
        self._all_to_all(self.send, plan.send_parts, self.recv, plan.recv_parts)
        if plan.rows:
            a = self.i32
            with env.stream:
                self.segment_offsets((1,), (32,), (self.recv_counts, a["world"], a["local"], self.arrival_starts,
                                                   self.expert_starts))
                self._regroup(plan, self.xe, self.recv, to_expert=True)

    def experts(self, inputs: dict[str, Any]) -> None:
        if self.plan is None:
            self.dispatch(inputs)
        plan = self.plan
        if not plan.rows:
            return
        w13, w2 = inputs["w13"].data.ptr, inputs["w2"].data.ptr
        # Outside any capture: the GEMMs then launch on (and are captured from) env.stream.
        _check_cublas(self.lib.cublasSetStream_v2(self.handle, self.env.stream.ptr), "cublasSetStream")
        # One graph launch instead of 2 * E/W + 1 from Python: the shapes depend on the counts only.
        self.graphs.run((plan.key, w13, w2), lambda: self._expert_launches(plan, w13, w2), "the expert GEMMs")

    def combine(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        if self.plan is None:
            self.experts(inputs)
        env, plan = self.env, self.plan
        if plan.rows:
            with env.stream:
                self._regroup(plan, self.recv, self.y, to_expert=False)
        self._all_to_all(self.recv, plan.recv_parts, self.comb, plan.send_parts)
        with env.stream:
            self.weighted_combine((self.T,), (COPY_THREADS,), (self.comb, self.pos, inputs["topk_w"], outputs["out"],
                                                               self.i32["vecs"]))

    # -- the steps

    def _route(self, inputs: dict[str, Any]) -> None:
        """Counts per expert and send slots (the stable counting sort), then the rows into the
        send layout: four launches, no host work."""
        a, B = self.i32, self.route_blocks
        idx = inputs["topk_idx"]
        with self.env.stream:
            self.route_count((B,), (ROUTE_THREADS,), (idx, a["pairs"], a["chunk"], a["E"], self.hist))
            self.route_scan((1,), (SCAN_THREADS,), (self.hist, a["blocks"], a["E"], self.counts))
            self.route_place((B,), (PLACE_THREADS,), (idx, a["pairs"], a["chunk"], a["E"], self.hist, self.pos))
            self.permute_rows((self.pairs,), (COPY_THREADS,), (inputs["x"], self.pos, self.send, a["vecs"]))

    def _exchange_counts(self) -> None:
        """Every rank learns the rows it receives per (source, local expert), and the host reads
        both count vectors: NCCL and cuBLAS take sizes from the host. The iteration's one sync."""
        from cupy.cuda import nccl

        env, el, cp = self.env, self.el, self.cupy
        base, sp = self.counts.data.ptr, env.stream.ptr
        nccl.groupStart()
        for p in range(env.world):
            env.comm.send(base + p * el * 4, el, nccl.NCCL_INT32, p, sp)
            env.comm.recv(base + (self.E + p * el) * 4, el, nccl.NCCL_INT32, p, sp)
        nccl.groupEnd()
        cp.cuda.runtime.memcpyAsync(self.host_counts.ctypes.data, base, self.host_counts.nbytes,
                                    cp.cuda.runtime.memcpyDeviceToHost, sp)
        env.stream.synchronize()

    def _all_to_all(self, src: Any, src_parts: list[tuple[int, int]], dst: Any,
                    dst_parts: list[tuple[int, int]]) -> None:
        """One NCCL group: part p of src (offset, rows) to rank p, part p of dst from rank p. Empty
        parts are skipped (the peer skips the matching call: it knows the same counts)."""
        from cupy.cuda import nccl

        env, H, row = self.env, self.H, self.H * 2
        s, d, sp = src.data.ptr, dst.data.ptr, env.stream.ptr
        nccl.groupStart()
        for p in range(env.world):
            off, n = src_parts[p]
            if n:
                env.comm.send(s + off * row, n * H, nccl.NCCL_BFLOAT16, p, sp)
            off, n = dst_parts[p]
            if n:
                env.comm.recv(d + off * row, n * H, nccl.NCCL_BFLOAT16, p, sp)
        nccl.groupEnd()

    def _regroup(self, plan: Plan, dst: Any, src: Any, to_expert: bool) -> None:
        """Rows between the arrival layout and the expert layout (the caller holds env.stream)."""
        self.regroup_rows((plan.rows,), (COPY_THREADS,), (dst, src, self.arrival_starts, self.expert_starts,
                                                          self.i32["E"], self.i32["vecs"], np.int32(to_expert)))

    def _expert_launches(self, plan: Plan, w13: int, w2: int) -> None:
        """Per local expert with rows, [n, H] @ [H, 2I] (gate and up in one GEMM); silu * up over
        all rows in one kernel; per expert [n, I] @ [I, H]. 2 * (experts with rows) + 1 launches."""
        H, I = self.H, self.I
        xe, h13, h, y = self.xe.data.ptr, self.h13.data.ptr, self.h.data.ptr, self.y.data.ptr
        with self.env.stream:
            for e, r0, n in plan.experts:
                # Row-major C[n, 2I] = X[n, H] @ W13_e[H, 2I] is column-major C^T = W13_e^T X^T.
                self._gemm(2 * I, n, H, w13 + e * H * 2 * I * 2, xe + r0 * H * 2, h13 + r0 * 2 * I * 2)
            blocks = min(4096, (plan.rows * I // 2 + 255) // 256)
            self.silu_mul((blocks,), (256,), (self.h13, self.h, np.int64(plan.rows), self.i32["half"]))
            for e, r0, n in plan.experts:
                self._gemm(H, n, I, w2 + e * I * H * 2, h + r0 * I * 2, y + r0 * H * 2)

    def _gemm(self, m: int, n: int, k: int, a: int, b: int, c: int) -> None:
        """Column-major C[m, n] = A[m, k] B[k, n] on device pointers (bf16, fp32 accumulation), on
        the stream `experts` bound the handle to."""
        _check_cublas(self.lib.cublasGemmEx(
            self.handle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k,
            self.alpha_ptr, a, CUDA_R_16BF, m, b, CUDA_R_16BF, k, self.beta_ptr, c, CUDA_R_16BF, m,
            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT,
        ), "cublasGemmEx")

    def _capture(self, launches: Callable[[], None]) -> Any:
        """`launches` recorded into a CUDA graph on env.stream (nothing runs). Only rank-local work
        is captured: NCCL calls stay eager, so a capture that fails on one rank cannot leave the
        ranks' communicator out of step. The stream leaves capture mode whatever happens."""
        stream = self.env.stream
        try:
            with stream:
                stream.begin_capture()
                try:
                    launches()
                finally:
                    graph = stream.end_capture()
            return graph
        except Exception:
            try:
                if stream.is_capturing():
                    stream.end_capture()
            except Exception:
                pass
            raise

    # -- the harness's interface

    def run(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        self.dispatch(inputs)
        self.experts(inputs)
        self.combine(inputs, outputs)

    def parts(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> dict[str, Callable[[], None]]:
        """Each stage alone (experts and combine reuse the last dispatch's plan): their times are
        the ceilings, max(experts, dispatch + combine) being what perfect overlap would take."""
        return {
            "dispatch": lambda: self.dispatch(inputs),
            "experts": lambda: self.experts(inputs),
            "combine": lambda: self.combine(inputs, outputs),
        }

    def comm_bytes(self) -> int:
        """Bytes this rank receives from other ranks in one iteration (dispatch + combine)."""
        if self.plan is None:
            return 0
        return self.plan.layout.received_bytes(self.env.rank, self.H)
