"""moe_dispatch_combine: the manifest, the routing generator, the reference's math and index plans
on the CPU (against an independent float64 computation), the seed and the strategy templates
through L0 and L1; and, on GPUs (marker `gpu`), the reference against float64 and the seed and
three templates through verification."""

import importlib.util
import itertools
import sys

import numpy as np
import pytest

from cuco_tui.toolchain.toolchain import discover
from cuco_tui.evaluate.cascade import EvalOptions, evaluate
from cuco_tui.core.result import Status
from cuco_tui.harness.bf16 import from_bf16_bits
from cuco_tui.core.workload import WorkloadError
from cuco_tui.workload.manifest import load_workload
from static_helpers import assert_static_ok

W = load_workload("moe_dispatch_combine")
SEED = W.seed.read_text()
can_compile = pytest.mark.skipif(not discover().can_compile, reason="needs nvcc, NCCL and cuBLAS headers")
KINDS = {"bf16": np.uint16, "i32": np.int32, "f32": np.float32}


def _ref():
    spec = importlib.util.spec_from_file_location("moe_ref", W.reference)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


REF = _ref()


def _inputs(dims, world, seed=3):
    out = []
    for rank in range(world):
        spec = REF.io_spec(dims, world, rank)
        bufs = {n: np.empty(s, dtype=KINDS[d]) for n, s, d in spec["inputs"]}
        REF.fill_inputs(np, bufs, dims, world, rank, seed)
        out.append(bufs)
    return out


def _rel(got, want):
    return np.linalg.norm(got - want) / np.linalg.norm(want)


# ---------------------------------------------------------------------------- manifest and buffers


def test_manifest_loads_and_fits_every_world_size():
    assert W.world_sizes == (2, 4, 8)
    assert W.dim_names == ("T", "H", "E", "I", "HOT")
    assert W.split_dims == ("E",)
    for world in W.world_sizes:
        W.check_world(world)
    with pytest.raises(WorkloadError):
        W.check_world(3)  # E=16 does not split over 3 ranks
    bench = W.bench_shapes
    assert len(bench) >= 4 and all(s.dims["H"] == 7168 and s.dims["I"] == 2048 for s in bench)
    assert {s.dims["HOT"] for s in bench} >= {25, 60}  # uniform and skewed routing
    assert {s.dims["E"] for s in bench} >= {64, 256}
    assert any(s.dims["T"] == 4096 for s in bench) and any(s.dims["T"] == 1024 for s in bench)
    assert all(s.dims["T"] <= 128 for s in W.verify_shapes)


def test_buffers_are_the_same_on_every_rank():
    dims = W.verify_shapes[0].dims
    spec = REF.io_spec(dims, 4, 0)
    assert spec == REF.io_spec(dims, 4, 3)
    shapes = {n: (s, d) for n, s, d in spec["inputs"] + spec["outputs"]}
    T, H, E, I = dims["T"], dims["H"], dims["E"], dims["I"]
    assert shapes == {
        "x": ((T, H), "bf16"), "topk_idx": ((T, 8), "i32"), "topk_w": ((T, 8), "f32"),
        "w13": ((E // 4, H, 2 * I), "bf16"), "w2": ((E // 4, I, H), "bf16"), "out": ((T, H), "bf16"),
    }
    assert all(len(n) < 16 for n in shapes)  # the C ABI's name field


def _bytes_per_rank(dims, world):
    """What one rank holds at once in an evaluation: the harness's buffers (outputs twice: the
    candidate's and the reference's), the reference's, the hungriest template's (ipc_dispatch:
    four buffers of W slots; expert_pipeline: the same, and the intermediates of all W slots' rows),
    and fill_inputs' largest temporary."""
    T, H, E, I = dims["T"], dims["H"], dims["E"], dims["I"]
    el = E // world
    cap = T * min(8, el)
    rows = world * cap
    harness = T * H * 2 * 3 + T * 8 * 8 + el * 3 * H * I * 2 + 4 * 60 * 2**20
    reference = 2 * T * 8 * H * 2 + 3 * rows * H * 2 + rows * 3 * I * 2 + T * 8 * 32
    seed = 2 * T * 8 * H * 2 + 3 * rows * H * 2 + rows * 3 * I * 2
    ipc = 4 * rows * H * 2 + cap * 3 * I * 2
    pipeline = 4 * rows * H * 2 + rows * 3 * I * 2
    fill = H * 2 * I * (8 + 4 + 4)
    return harness + reference + max(seed, ipc, pipeline) + fill


@pytest.mark.parametrize("world", [2, 4, 8])
def test_every_bench_shape_fits_on_an_h200(world):
    for s in W.bench_shapes:
        gib = _bytes_per_rank(s.dims, world) / 2**30
        assert gib < 100, f"{s.name} at W={world}: {gib:.1f} GiB a rank"
    big = next(s for s in W.bench_shapes if s.dims["E"] == 256 and s.dims["T"] == 4096)
    assert _bytes_per_rank(big.dims, 2) > 11 * 2**30  # the weights alone: 128 experts x 88 MB


def test_dims_the_reference_refuses():
    dims = dict(W.verify_shapes[0].dims)
    with pytest.raises(ValueError):
        REF.io_spec({**dims, "E": 4}, 2)  # fewer experts than top-8
    with pytest.raises(ValueError):
        REF.io_spec({**dims, "E": 18}, 4)
    with pytest.raises(ValueError):
        REF.io_spec({**dims, "HOT": 100}, 2)


# ---------------------------------------------------------------------------- routing


def test_zipf_exponent_hits_the_hot_share():
    assert REF.zipf_exponent(64, 25) == 0.0 and REF.zipf_exponent(64, 10) == 0.0
    last = 0.0
    for hot in (30, 40, 60, 80, 95):
        s = REF.zipf_exponent(64, hot)
        w = np.arange(1, 65, dtype=np.float64) ** -s
        assert abs(w[:16].sum() / w.sum() - hot / 100) < 1e-6
        assert s > last
        last = s


@pytest.mark.parametrize("experts,hot", [(8, 25), (16, 90), (64, 25), (64, 60), (256, 60)])
def test_routing_is_top8_distinct_experts_with_normalized_weights(experts, hot):
    idx, w = REF.routing(np, np.random.RandomState(1), 500, experts, hot)
    assert idx.shape == (500, 8) and idx.dtype == np.int32 and w.dtype == np.float32
    assert idx.min() >= 0 and idx.max() < experts
    assert all(len(set(row)) == 8 for row in idx.tolist())
    assert (w > 0).all() and np.allclose(w.sum(axis=1), 1.0, atol=1e-6)


def test_routing_skew_grows_with_hot():
    experts, tokens = 64, 4000
    hottest = np.argsort(REF.popularity(experts))[:experts // 4]
    shares, peaks = [], []
    for hot in (25, 40, 60, 80, 95):
        idx, _ = REF.routing(np, np.random.RandomState(7), tokens, experts, hot)
        load = np.bincount(idx.ravel(), minlength=experts)
        shares.append(load[hottest].sum() / load.sum())
        peaks.append(load.max() / load.mean())
    assert abs(shares[0] - 0.25) < 0.02 and peaks[0] < 1.25  # uniform
    assert all(a < b for a, b in zip(shares, shares[1:])), shares
    assert all(a < b for a, b in zip(peaks, peaks[1:])), peaks
    assert shares[-1] > 0.6  # top-8 without replacement caps it below the sampling weight's 95%


def test_inputs_are_deterministic_and_the_hot_experts_are_the_same_on_every_rank():
    dims = dict(T=200, H=16, E=32, I=8, HOT=80)
    a, b = _inputs(dims, 2, seed=5), _inputs(dims, 2, seed=5)
    for ra, rb in zip(a, b):
        for name in ra:
            assert np.array_equal(ra[name], rb[name])
    assert not np.array_equal(a[0]["topk_idx"], a[1]["topk_idx"])  # each rank its own tokens
    assert not np.array_equal(a[0]["topk_idx"], _inputs(dims, 2, seed=6)[0]["topk_idx"])
    hottest = set(np.argsort(REF.popularity(32))[:8].tolist())
    for rank in a:
        load = np.bincount(rank["topk_idx"].ravel(), minlength=32)
        assert set(np.argsort(-load)[:4].tolist()) <= hottest


# ---------------------------------------------------------------------------- the math on the CPU


def _silu(v):
    return v / (1.0 + np.exp(-v))


def _by_hand(all_inputs, dims, world):
    """out[t] for every rank by explicit loops over tokens and choices, float64."""
    el = dims["E"] // world
    I = dims["I"]
    outs = []
    for inp in all_inputs:
        x = from_bf16_bits(np, inp["x"]).astype(np.float64)
        out = np.zeros_like(x)
        for t in range(dims["T"]):
            for k in range(8):
                e = int(inp["topk_idx"][t, k])
                owner = all_inputs[e // el]
                w13 = from_bf16_bits(np, owner["w13"][e % el]).astype(np.float64)
                w2 = from_bf16_bits(np, owner["w2"][e % el]).astype(np.float64)
                gate, up = x[t] @ w13[:, :I], x[t] @ w13[:, I:]
                out[t] += float(inp["topk_w"][t, k]) * ((_silu(gate) * up) @ w2)
        outs.append(out)
    return outs


@pytest.mark.parametrize("world,hot", [(2, 25), (2, 90), (4, 60)])
def test_expected_matches_float64_by_hand(world, hot):
    dims = dict(T=5, H=16, E=16, I=8, HOT=hot)
    inputs = _inputs(dims, world)
    got = REF.expected(inputs, dims, world)
    for want, g in zip(_by_hand(inputs, dims, world), got):
        assert np.allclose(g["out"], want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("world,dims", [
    (2, dict(T=24, H=64, E=16, I=32, HOT=25)),
    (2, dict(T=17, H=64, E=32, I=32, HOT=90)),
    (4, dict(T=9, H=64, E=16, I=32, HOT=60)),
    (8, dict(T=3, H=64, E=64, I=32, HOT=50)),   # at W=8 some ranks get nothing from some peers
    (8, dict(T=6, H=64, E=16, I=32, HOT=25)),   # 2 experts a rank: fewer than a token's 8 choices
])
def test_the_reference_pipeline_on_the_cpu_matches_float64(world, dims):
    """`simulate` runs the GPU reference's plans (sort, counts, layouts, regrouping, combine
    slots) with NumPy and bf16 roundings: it must land on the exact answer within bf16 noise."""
    inputs = _inputs(dims, world)
    want = REF.expected(inputs, dims, world)
    got = REF.simulate(inputs, dims, world)
    for w_, g in zip(want, got):
        assert _rel(g["out"], w_["out"]) < 1e-2


def _routed(rows):
    return np.array(rows, dtype=np.int32)


def test_a_rank_that_receives_nothing_from_a_peer():
    """World 2, E=16: rank 1 routes every token to its own 8 experts, so rank 0 receives nothing
    from rank 1 (and rank 1 everything rank 0 sends it); the plans and the answer still hold."""
    dims = dict(T=6, H=32, E=16, I=16, HOT=25)
    inputs = _inputs(dims, 2)
    rng = np.random.RandomState(0)
    inputs[1]["topk_idx"][...] = _routed([rng.permutation(np.arange(8, 16)) for _ in range(6)])
    _, _, counts1 = REF.dispatch_order(np, inputs[1]["topk_idx"], 16)
    _, _, counts0 = REF.dispatch_order(np, inputs[0]["topk_idx"], 16)
    lay0 = REF.Layout(counts0, np.stack([counts0[:8], counts1[:8]]))
    assert lay0.recv_n[1] == 0 and lay0.send_n[1] == counts0[8:].sum()
    for want, got in zip(REF.expected(inputs, dims, 2), REF.simulate(inputs, dims, 2)):
        assert _rel(got["out"], want["out"]) < 1e-2
    for want, got in zip(_by_hand(inputs, dims, 2), REF.expected(inputs, dims, 2)):
        assert np.allclose(got["out"], want)


def test_ranks_that_receive_nothing_at_all():
    """World 4, E=16: every token picks exactly the 8 experts of ranks 0 and 1; ranks 2 and 3
    compute nothing and still get their outputs back."""
    dims = dict(T=4, H=32, E=16, I=16, HOT=25)
    inputs = _inputs(dims, 4)
    rng = np.random.RandomState(1)
    for inp in inputs:
        inp["topk_idx"][...] = _routed([rng.permutation(8) for _ in range(4)])
    for want, got in zip(REF.expected(inputs, dims, 4), REF.simulate(inputs, dims, 4)):
        assert _rel(got["out"], want["out"]) < 1e-2


def test_layout_by_hand():
    """Two sources, three local experts: arrival order (source, expert), expert order (expert, source)."""
    recv_counts = np.array([[2, 0, 1], [1, 3, 0]])
    lay = REF.Layout(np.array([1, 1, 1, 0, 2, 0]), recv_counts)
    assert lay.send_n.tolist() == [3, 2] and lay.send_off.tolist() == [0, 3, 5]
    assert lay.recv_n.tolist() == [3, 4] and lay.recv_off.tolist() == [0, 3, 7]
    assert lay.expert_n.tolist() == [3, 3, 1] and lay.expert_off.tolist() == [0, 3, 6, 7]
    # arrival rows: src0 e0 -> 0,1; src0 e2 -> 2; src1 e0 -> 3; src1 e1 -> 4,5,6
    assert lay.expert_to_arrival().tolist() == [0, 1, 3, 4, 5, 6, 2]
    assert lay.received_bytes(0, 8) == (4 + 2) * 16


def test_dispatch_order_is_stable_and_sorted_by_expert():
    idx = _routed([[3, 1, 0, 2, 4, 5, 6, 7], [1, 3, 2, 0, 7, 6, 5, 4]])
    order, pos, counts = REF.dispatch_order(np, idx, 8)
    flat = idx.ravel()
    assert (np.diff(flat[order]) >= 0).all()
    assert order.tolist()[:2] == [2, 11]  # expert 0: token 0's choice 2, then token 1's choice 3
    assert (order[pos] == np.arange(16)).all() and counts.tolist() == [2] * 8


# ---------------------------------------------------------------------------- the GPU reference's host logic


def test_route_grid_covers_every_pair_with_no_empty_block():
    for pairs in [8, 24, 255, 256, 257, 560, 8192, 32768, 65280, 65288, 10**6]:
        blocks, chunk = REF.route_grid(pairs)
        assert 1 <= blocks <= REF.ROUTE_MAX_BLOCKS
        assert blocks * chunk >= pairs > (blocks - 1) * chunk, (pairs, blocks, chunk)
        assert chunk <= REF.ROUTE_PAIRS or blocks == REF.ROUTE_MAX_BLOCKS  # the pairs split evenly
    assert REF.route_grid(4096 * 8) == (128, 256)  # prefill-4k: 256 pairs a block


def test_plan_from_counts_is_the_layout_in_plain_ints():
    """Two ranks, three local experts, seen from rank 0: what it sends per global expert, then
    what it receives per (source, local expert), as the counts exchange leaves them."""
    host = np.array([1, 1, 1, 0, 2, 0] + [2, 0, 1, 1, 3, 0], dtype=np.int32)
    plan = REF.plan_from_counts(host, 2)
    lay = REF.Layout(host[:6], host[6:].reshape(2, 3))
    assert plan.key == host.tobytes()
    assert plan.rows == lay.rows == 7
    assert plan.send_parts == [(0, 3), (3, 2)] and plan.recv_parts == [(0, 3), (3, 4)]
    assert plan.experts == [(0, 0, 3), (1, 3, 3), (2, 6, 1)]
    assert all(type(v) is int for part in plan.send_parts + plan.recv_parts + plan.experts for v in part)
    host[:] = 0  # the pinned buffer is reused next iteration: the plan keeps copies
    assert plan.layout.counts.tolist() == [1, 1, 1, 0, 2, 0] and plan.rows == 7


def test_a_plan_skips_experts_without_rows():
    host = np.array([4, 0, 0, 0] + [0, 3, 0, 0], dtype=np.int32)  # one rank, experts 0 and 2 get nothing
    plan = REF.plan_from_counts(np.array([0, 3, 0, 0] * 2, dtype=np.int32), 1)
    assert plan.experts == [(1, 0, 3)] and plan.rows == 3
    assert REF.plan_from_counts(host, 2).rows == 3


def test_auto_runs_per_expert_gemms_from_128_rows_an_expert_on_average():
    """auto's rule (H100, cuBLAS 13.1: per-expert GEMMs 2x faster at 226+ rows an expert, the
    grouped call 5 % faster at 65 on average): the mean over the experts that have rows."""
    assert REF.PER_EXPERT_MIN_ROWS == 128
    assert REF.auto_gemm([128, 128, 128]) == REF.auto_gemm([127, 129]) == REF.auto_gemm([1, 500]) == "per_expert"
    assert REF.auto_gemm([127]) == REF.auto_gemm([127, 128]) == REF.auto_gemm([17, 200, 20]) == "grouped"
    assert REF.auto_gemm([]) == "grouped"
    # A plan's choice ignores experts without rows, and is the same for both projections.
    one_rank = [0, 0, 0, 0] + [300, 0, 0, 0]
    assert REF.plan_from_counts(np.array(one_rank, dtype=np.int32), 1).auto == ("per_expert", "per_expert")
    few = [0, 0, 0, 0] + [100, 0, 100, 100]
    assert REF.plan_from_counts(np.array(few, dtype=np.int32), 1).auto == ("grouped", "grouped")


def test_lru_keeps_the_most_recently_used():
    made = []
    lru = REF.LRU(2)
    get = lambda k: lru.get(k, lambda: made.append(k) or k.upper())  # noqa: E731
    assert [get("a"), get("b"), get("a"), get("c")] == ["A", "B", "A", "C"]  # c evicts b, not a
    assert list(lru.items) == ["a", "c"]
    get("b")
    assert made == ["a", "b", "c", "b"] and list(lru.items) == ["c", "b"]


def test_launch_mode_eager_then_capture_then_replay():
    assert REF.launch_mode(True, 0, False) == "eager"  # first sight: warms cuBLAS outside a capture
    assert REF.launch_mode(True, 1, False) == "capture"
    assert REF.launch_mode(True, 7, True) == "replay"
    assert REF.launch_mode(True, 7, False) == "capture"  # evicted and seen again
    assert {REF.launch_mode(False, n, c) for n in (0, 1, 5) for c in (False, True)} == {"eager"}


class _FakeGraphs:
    """What GraphCache's callables see: launches run or recorded, graphs replayed."""

    def __init__(self, fail_at=None):
        self.log, self.captures, self.fail_at = [], 0, fail_at

    def capture(self, launches):
        self.captures += 1
        if self.captures == self.fail_at:
            raise RuntimeError("cudaErrorStreamCaptureUnsupported")
        return ("graph", self.captures)

    def replay(self, graph):
        self.log.append(("replay", graph))

    def launches(self, key):
        return lambda: self.log.append(("eager", key))


def test_graph_cache_runs_each_routing_eagerly_once_then_from_its_graph():
    fake = _FakeGraphs()
    cache = REF.GraphCache(fake.capture, fake.replay, enabled=True, capacity=2)
    modes = [cache.run(k, fake.launches(k), "x") for k in ["a", "a", "a", "b", "a"]]
    assert modes == ["eager", "capture", "replay", "eager", "replay"]
    # Captured work does not run: the capture is replayed at once, so every call ran its launches once.
    assert fake.log == [("eager", "a"), ("replay", ("graph", 1)), ("replay", ("graph", 1)), ("eager", "b"),
                        ("replay", ("graph", 1))]
    cache.run("c", fake.launches("c"), "x")
    cache.run("d", fake.launches("d"), "x")  # capacity 2: a is gone with its graph
    assert cache.run("a", fake.launches("a"), "x") == "eager" and cache.warnings == []


def test_graph_cache_falls_back_to_eager_for_good_when_a_capture_fails():
    fake = _FakeGraphs(fail_at=1)
    cache = REF.GraphCache(fake.capture, fake.replay, enabled=True)
    with pytest.warns(RuntimeWarning, match="capture of the expert GEMMs failed"):
        modes = [cache.run("a", fake.launches("a"), "the expert GEMMs") for _ in range(4)]
    assert modes == ["eager"] * 4 and fake.log == [("eager", "a")] * 4  # the failed one ran eagerly too
    assert fake.captures == 1 and not cache.enabled  # never tried again
    assert len(cache.warnings) == 1 and "cudaErrorStreamCaptureUnsupported" in cache.warnings[0]


def test_graphs_can_be_turned_off_from_the_environment(monkeypatch):
    monkeypatch.delenv("CUCO_MOE_REF_GRAPHS", raising=False)
    assert REF.graphs_wanted()
    monkeypatch.setenv("CUCO_MOE_REF_GRAPHS", "0")
    assert not REF.graphs_wanted()


# ---------------------------------------------------------------------------- the reference's kernels on the CPU

# Just enough CUDA to run the reference's kernels (REF._KERNELS, unchanged) as C++ on a CPU: a
# block's threads are OS threads and blocks run one after another, __syncthreads is a barrier of
# the block, __shfl_up_sync an exchange between two barriers of the warp, and __shared__
# variables are static (one block at a time owns them). Kernels that never synchronize run their
# threads one after another.
_EMU_PRELUDE = r"""
#include <barrier>
#include <cstring>
#include <math.h>
#include <memory>
#include <thread>
#include <vector>

struct dim3 { unsigned x = 1, y = 1, z = 1; };
struct uint4 { unsigned x, y, z, w; };
static uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
static thread_local dim3 threadIdx, blockIdx;
static dim3 blockDim, gridDim;
static std::barrier<>* emu_block;
static std::vector<std::unique_ptr<std::barrier<>>> emu_warps;
static int emu_lanes[32][32];

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __syncthreads() emu_block->arrive_and_wait()

static int min(int a, int b) { return a < b ? a : b; }
static int atomicAdd(int* p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
static unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static int __shfl_up_sync(unsigned, int v, int d) {  // every lane of the warp takes part
  const unsigned w = threadIdx.x / 32, lane = threadIdx.x % 32;
  emu_lanes[w][lane] = v;
  emu_warps[w]->arrive_and_wait();
  const int got = (int)lane >= d ? emu_lanes[w][lane - d] : v;
  emu_warps[w]->arrive_and_wait();
  return got;
}

template <class F>
static void emu_launch(unsigned grid, unsigned block, bool threaded, F body) {
  gridDim.x = grid;
  blockDim.x = block;
  for (unsigned b = 0; b < grid; ++b) {
    if (!threaded) {
      for (unsigned t = 0; t < block; ++t) {
        blockIdx.x = b;
        threadIdx.x = t;
        body();
      }
      continue;
    }
    std::barrier<> whole(block);
    emu_block = &whole;
    emu_warps.clear();
    for (unsigned w = 0; w < (block + 31) / 32; ++w) emu_warps.emplace_back(new std::barrier<>(32));
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < block; ++t)
      threads.emplace_back([=] { blockIdx.x = b; threadIdx.x = t; body(); });
    for (auto& th : threads) th.join();
  }
}
"""

# One entry point per kernel: emu_NAME(grid, block, the kernel's arguments).
_EMU_EXPORTS = r"""
#define EMU_EXPORT(name, threaded, params, args) \
  extern "C" void emu_##name(unsigned grid, unsigned block, EMU_UNPAREN params) { \
    emu_launch(grid, block, threaded, [=] { name args; }); \
  }
#define EMU_UNPAREN(...) __VA_ARGS__
EMU_EXPORT(route_count, true, (const int* idx, int pairs, int chunk, int experts, int* hist),
           (idx, pairs, chunk, experts, hist))
EMU_EXPORT(route_scan, true, (int* hist, int blocks, int experts, int* counts), (hist, blocks, experts, counts))
EMU_EXPORT(route_place, true, (const int* idx, int pairs, int chunk, int experts, const int* first, int* pos),
           (idx, pairs, chunk, experts, first, pos))
EMU_EXPORT(permute_rows, false, (const uint4* x, const int* pos, uint4* send, int vecs), (x, pos, send, vecs))
EMU_EXPORT(segment_offsets, false, (const int* rc, int world, int local, long long* arrival, long long* expert),
           (rc, world, local, arrival, expert))
EMU_EXPORT(regroup_rows, false, (uint4* dst, const uint4* src, const long long* arrival, const long long* expert,
                                 int segments, int vecs, int to_expert),
           (dst, src, arrival, expert, segments, vecs, to_expert))
EMU_EXPORT(silu_mul, false, (const unsigned* h13, unsigned* h, long long rows, int half), (h13, h, rows, half))
EMU_EXPORT(weighted_combine, false, (const uint4* comb, const int* pos, const float* w, uint4* out, int vecs),
           (comb, pos, w, out, vecs))
EMU_EXPORT(grouped_pointers, true, (const int* rc, int world, int local, long long w13, long long w2, long long xe,
                                    long long h13, long long h, long long y, long long H, long long I,
                                    long long* ptrs),
           (rc, world, local, w13, w2, xe, h13, h, y, H, I, ptrs))
"""


@pytest.fixture(scope="module")
def emu(tmp_path_factory):
    """REF._KERNELS built for the CPU (g++, C++20), loaded with ctypes."""
    import ctypes
    import shutil
    import subprocess

    if shutil.which("g++") is None:
        pytest.skip("needs g++")
    d = tmp_path_factory.mktemp("moe_emu")
    (d / "kernels.cpp").write_text(_EMU_PRELUDE + REF._KERNELS + _EMU_EXPORTS)
    r = subprocess.run(["g++", "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-o", str(d / "kernels.so"),
                        str(d / "kernels.cpp")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    lib = ctypes.CDLL(str(d / "kernels.so"))
    for f in ("emu_route_count", "emu_route_scan", "emu_route_place", "emu_permute_rows", "emu_segment_offsets",
              "emu_regroup_rows", "emu_silu_mul", "emu_weighted_combine", "emu_grouped_pointers"):
        getattr(lib, f).restype = None
    return lib


def _p(a):
    import ctypes

    assert a.flags.c_contiguous
    return ctypes.c_void_p(a.ctypes.data)


def _emu_route(emu, idx, experts):
    """The reference's _route on the emulator: pos, counts and the send rows."""
    import ctypes

    idx = np.ascontiguousarray(idx, dtype=np.int32).reshape(-1)
    pairs = idx.size
    blocks, chunk = REF.route_grid(pairs)
    hist = np.full(experts * blocks, -7, dtype=np.int32)
    counts = np.full(experts, -7, dtype=np.int32)
    pos = np.full(pairs, -7, dtype=np.int32)
    i32 = ctypes.c_int
    emu.emu_route_count(blocks, REF.ROUTE_THREADS, _p(idx), i32(pairs), i32(chunk), i32(experts), _p(hist))
    emu.emu_route_scan(1, REF.SCAN_THREADS, _p(hist), i32(blocks), i32(experts), _p(counts))
    emu.emu_route_place(blocks, REF.PLACE_THREADS, _p(idx), i32(pairs), i32(chunk), i32(experts), _p(hist), _p(pos))
    return pos, counts


@pytest.mark.parametrize("tokens,experts,hot", [
    (5, 16, 25),     # one block, fewer counters than scan threads
    (70, 64, 60),    # three blocks, the last one short
    (400, 256, 90),  # thirteen blocks, several counters per scan thread, skewed
])
def test_route_kernels_give_dispatch_orders_stable_sort(emu, tokens, experts, hot):
    idx, _ = REF.routing(np, np.random.RandomState(tokens), tokens, experts, hot)
    pos, counts = _emu_route(emu, idx, experts)
    order, want_pos, want_counts = REF.dispatch_order(np, idx, experts)
    assert np.array_equal(counts, want_counts)
    assert np.array_equal(pos, want_pos)


def test_permute_rows_fills_the_send_layout(emu):
    import ctypes

    tokens, experts, hidden = 9, 16, 64
    idx, _ = REF.routing(np, np.random.RandomState(2), tokens, experts, 60)
    x = np.random.RandomState(3).randint(0, 1 << 16, size=(tokens, hidden)).astype(np.uint16)
    pos, _ = _emu_route(emu, idx, experts)
    send = np.zeros((tokens * 8, hidden), dtype=np.uint16)
    emu.emu_permute_rows(tokens * 8, REF.COPY_THREADS, _p(x), _p(pos), _p(send), ctypes.c_int(hidden // 8))
    order, _, _ = REF.dispatch_order(np, idx, experts)
    assert np.array_equal(send, x[order // 8])


@pytest.mark.parametrize("recv_counts", [
    [[2, 0, 1], [1, 3, 0]],                 # test_layout_by_hand's
    [[0, 0], [0, 5], [3, 0], [0, 0]],       # four sources, whole sources empty
    [[0, 0, 0, 4]],                         # one source, leading empty experts
])
def test_regroup_kernels_follow_the_layout(emu, recv_counts):
    import ctypes

    rc = np.array(recv_counts, dtype=np.int32)
    world, local = rc.shape
    lay = REF.Layout(np.zeros(world * local, dtype=np.int32), rc)
    segments = world * local
    arrival = np.full(segments + 1, -1, dtype=np.int64)
    expert = np.full(segments, -1, dtype=np.int64)
    emu.emu_segment_offsets(1, 32, _p(rc), ctypes.c_int(world), ctypes.c_int(local), _p(arrival), _p(expert))
    hidden = 16
    recv = np.arange(lay.rows * hidden, dtype=np.uint16).reshape(lay.rows, hidden)
    xe = np.zeros_like(recv)
    args = (_p(arrival), _p(expert), ctypes.c_int(segments), ctypes.c_int(hidden // 8))
    emu.emu_regroup_rows(lay.rows, REF.COPY_THREADS, _p(xe), _p(recv), *args, ctypes.c_int(1))
    e2a = lay.expert_to_arrival()
    assert np.array_equal(xe, recv[e2a])
    back = np.zeros_like(recv)
    emu.emu_regroup_rows(lay.rows, REF.COPY_THREADS, _p(back), _p(xe), *args, ctypes.c_int(0))
    assert np.array_equal(back, recv)


@pytest.mark.parametrize("recv_counts", [
    [[2, 0, 1], [1, 3, 0]],                 # test_layout_by_hand's: every expert has rows
    [[0, 0], [0, 5], [3, 0], [0, 0]],       # four sources
    [[0, 0, 0, 4]],                         # leading empty experts
    [[0, 2] * 300, [1, 0] * 300],           # 600 experts (more than a warp's scan), every other one empty
])
def test_grouped_pointers_list_the_plans_experts_in_order(emu, recv_counts):
    """The grouped GEMMs' device pointer arrays: problem j is Plan.experts[j] (the experts with
    rows, in order), at its weights and at its first row of xe, h13, h and y; the rest untouched."""
    import ctypes

    rc = np.array(recv_counts, dtype=np.int32)
    world, local = rc.shape
    counts = np.zeros(world * local, dtype=np.int32)
    plan = REF.plan_from_counts(np.concatenate([counts, rc.reshape(-1)]), world)
    H, I = 64, 128
    bases = {"w13": 1 << 40, "w2": 2 << 40, "xe": 3 << 40, "h13": 4 << 40, "h": 5 << 40, "y": 6 << 40}
    ptrs = np.full((6, local), -1, dtype=np.int64)
    ll = ctypes.c_longlong
    emu.emu_grouped_pointers(1, 1024, _p(rc), ctypes.c_int(world), ctypes.c_int(local),
                             *(ll(bases[k]) for k in ("w13", "w2", "xe", "h13", "h", "y")), ll(H), ll(I), _p(ptrs))
    g = len(plan.experts)
    assert g == int((rc.sum(axis=0) > 0).sum())
    for j, (e, first, _) in enumerate(plan.experts):
        assert ptrs[:, j].tolist() == [bases["w13"] + e * H * 2 * I * 2, bases["xe"] + first * H * 2,
                                       bases["h13"] + first * 2 * I * 2, bases["w2"] + e * I * H * 2,
                                       bases["h"] + first * I * 2, bases["y"] + first * H * 2], j
    assert (ptrs[:, g:] == -1).all()


def _bf16_close(got_bits, want_bits):
    """Equal, or one bf16 step apart (exp and FMA contraction differ between CPU, GPU and NumPy)."""
    got, want = from_bf16_bits(np, got_bits).astype(np.float64), from_bf16_bits(np, want_bits).astype(np.float64)
    return np.all(np.abs(got - want) <= np.abs(want) * 2.0 ** -7 + 1e-30)


def test_silu_mul_and_weighted_combine_round_like_simulate(emu):
    import ctypes

    from cuco_tui.harness.bf16 import to_bf16_bits

    rs = np.random.RandomState(4)
    rows, inter, tokens, hidden = 37, 64, 6, 64
    h13 = to_bf16_bits(np, rs.standard_normal((rows, 2 * inter)).astype(np.float32) * 3)
    h = np.zeros((rows, inter), dtype=np.uint16)
    emu.emu_silu_mul(3, 256, _p(h13), _p(h), ctypes.c_longlong(rows), ctypes.c_int(inter // 2))
    a = from_bf16_bits(np, h13)
    want = to_bf16_bits(np, (REF._silu(a[:, :inter]) * a[:, inter:]).astype(np.float32))
    assert _bf16_close(h, want)

    comb = to_bf16_bits(np, rs.standard_normal((tokens * 8, hidden)).astype(np.float32))
    pos = rs.permutation(tokens * 8).astype(np.int32)
    w = rs.uniform(0.05, 1.0, (tokens, 8)).astype(np.float32)
    out = np.zeros((tokens, hidden), dtype=np.uint16)
    emu.emu_weighted_combine(tokens, REF.COPY_THREADS, _p(comb), _p(pos), _p(w), _p(out), ctypes.c_int(hidden // 8))
    rows3 = from_bf16_bits(np, comb)[pos].reshape(tokens, 8, hidden)
    acc = np.zeros((tokens, hidden), dtype=np.float32)
    for k in range(8):  # simulate's order
        acc += w[:, k:k + 1] * rows3[:, k]
    assert _bf16_close(out, to_bf16_bits(np, acc))


def test_the_kernels_compile_with_nvrtc():
    """What CuPy's RawModule does on the GPU host, here for sm_90 without a GPU."""
    nvrtc = pytest.importorskip("cupy_backends.cuda.libs.nvrtc")
    try:
        prog = nvrtc.createProgram(REF._KERNELS, "moe_reference.cu", (), ())
    except Exception as exc:  # no NVRTC library on this machine
        pytest.skip(f"NVRTC unavailable: {exc}")
    try:
        nvrtc.compileProgram(prog, ("--gpu-architecture=compute_90",))
    except Exception as exc:
        pytest.fail(f"{exc}\n{nvrtc.getProgramLog(prog)}")
    ptx = nvrtc.getPTX(prog)
    ptx = ptx.decode() if isinstance(ptx, bytes) else ptx
    for name in ("route_count", "route_scan", "route_place", "permute_rows", "segment_offsets", "regroup_rows",
                 "silu_mul", "weighted_combine", "grouped_pointers"):
        assert f".entry {name}(" in ptx, name


# ---------------------------------------------------------------------------- the Reference class on the CPU

# Reference itself, run on W threads against fakes of CuPy (arrays are NumPy arrays, kernels run
# on the emulator above, graphs record launches and replay them), cuBLAS (GEMMs in NumPy, float32
# accumulation, bf16 results) and NCCL (grouped send/recv matched between the rank threads): its
# buffers, offsets, kernel arguments and graph handling, checked against `simulate`, and what it
# does per iteration counted.


class _FakeArray(np.ndarray):
    """A NumPy array with CuPy's `.data.ptr`."""

    @property
    def data(self):
        from types import SimpleNamespace

        return SimpleNamespace(ptr=self.ctypes.data)


class _FakeGPU:
    """The fake CuPy/cuBLAS/NCCL world of W rank threads, with per-rank event counts."""

    BF16, INT32 = 9, 2
    SIZES = {BF16: 2, INT32: 4}

    def __init__(self, emu, world):
        import threading
        from types import ModuleType, SimpleNamespace

        self.emu, self.world = emu, world
        self.tls = threading.local()
        self.emu_lock = threading.Lock()  # the emulator runs one launch at a time
        self.barrier = threading.Barrier(world, timeout=60)
        self.box = {}  # (source, destination) -> bytes of one grouped send
        gpu = self

        class Stream:
            def __init__(self):
                self.recording = None
                self.ptr = id(self)

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

            def synchronize(self):
                gpu.count("sync")

            def begin_capture(self):
                assert self.recording is None
                self.recording = []

            def end_capture(self):
                work, self.recording = self.recording, None
                return Graph(work)

            def is_capturing(self):
                return self.recording is not None

        class Graph:
            def __init__(self, work):
                self.work = work

            def launch(self, stream=None):
                gpu.count("graph_launch")
                for fn in self.work:
                    fn()

        class RawModule:
            def __init__(self, code):
                assert code == REF._KERNELS

            def get_function(self, name):
                return gpu.kernel(name)

        def empty(shape, dtype):
            gpu.count("alloc")
            return np.empty(shape, dtype=dtype).view(_FakeArray)

        def memcpy_async(dst, src, size, kind, stream):
            assert kind == 2  # device to host
            gpu.count("memcpy")
            gpu.enqueue(lambda: ctypes.memmove(dst, src, size))

        import ctypes

        cupy = ModuleType("cupy")
        cupy.uint16, cupy.int32, cupy.int64 = np.uint16, np.int32, np.int64
        cupy.empty, cupy.RawModule = empty, RawModule
        cupy.cuda = ModuleType("cupy.cuda")
        cupy.cuda.Stream = Stream
        cupy.cuda.device = SimpleNamespace(get_cublas_handle=lambda: 0)
        cupy.cuda.runtime = SimpleNamespace(memcpyAsync=memcpy_async, memcpyDeviceToHost=2)
        # The Reference calls libcublas itself (CuPy's bindings refuse stream capture).
        self.cublas = SimpleNamespace(cublasGemmEx=self.gemm_ex, cublasSetStream_v2=self.set_stream,
                                      cublasGemmGroupedBatchedEx=self.gemm_grouped)
        cupy.cuda.nccl = ModuleType("cupy.cuda.nccl")
        cupy.cuda.nccl.NCCL_BFLOAT16, cupy.cuda.nccl.NCCL_INT32 = self.BF16, self.INT32
        cupy.cuda.nccl.groupStart, cupy.cuda.nccl.groupEnd = self.group_start, self.group_end
        cupyx = ModuleType("cupyx")
        cupyx.empty_pinned = lambda shape, dtype: np.empty(shape, dtype=dtype)
        self.modules = {"cupy": cupy, "cupy.cuda": cupy.cuda, "cupy.cuda.nccl": cupy.cuda.nccl, "cupyx": cupyx}
        self.Stream = Stream
        self.counts = [dict() for _ in range(world)]

    # -- per rank thread

    def count(self, what, n=1):
        c = self.counts[self.tls.rank]
        c[what] = c.get(what, 0) + n

    def enqueue(self, fn):
        """Run now, or record when the rank's stream is capturing."""
        stream = self.tls.stream
        if stream.recording is not None:
            stream.recording.append(fn)
        else:
            fn()

    def kernel(self, name):
        import ctypes

        fn = getattr(self.emu, "emu_" + name)

        def arg(a):
            if isinstance(a, _FakeArray):
                return ctypes.c_void_p(a.ctypes.data)
            if isinstance(a, np.int32):
                return ctypes.c_int(int(a))
            if isinstance(a, np.int64):
                return ctypes.c_longlong(int(a))
            raise TypeError(f"{name}: a kernel argument CuPy would not pass as its C type: {a!r}")

        def launch(grid, block, args, shared_mem=0):
            (g,), (b,) = grid, block
            cargs = [arg(a) for a in args]
            self.count("kernel")

            def run():
                with self.emu_lock:
                    fn(g, b, *cargs)
            self.enqueue(run)
        return launch

    def set_stream(self, handle, stream_ptr):
        assert self.tls.stream.recording is None, "cublasSetStream inside a capture"
        self.tls.blas_stream = stream_ptr
        return 0

    def gemm_ex(self, handle, ta, tb, m, n, k, alpha, a, at, lda, b, bt, ldb, beta, c, ct, ldc, compute, algo):
        import ctypes


        # cuBLAS launches on the stream its handle was bound to, not on CuPy's current stream.
        assert getattr(self.tls, "blas_stream", None) == self.tls.stream.ptr, "GEMM on an unbound stream"
        assert (ta, tb, at, bt, ct, lda, ldb, ldc) == (0, 0, 14, 14, 14, m, k, m)
        assert ctypes.c_float.from_address(alpha).value == 1.0 and ctypes.c_float.from_address(beta).value == 0.0
        self.count("gemm")
        self.enqueue(lambda: self.gemm_now(m, n, k, a, b, c))
        return 0  # CUBLAS_STATUS_SUCCESS

    @staticmethod
    def gemm_now(m, n, k, a, b, c):
        """Column-major C[m, n] = A[m, k] B[k, n] in bf16, float32 accumulation, now."""
        import ctypes

        from cuco_tui.harness.bf16 import to_bf16_bits

        def view(ptr, rows, cols):  # column-major [cols, rows] is row-major [rows, cols]
            return np.ctypeslib.as_array((ctypes.c_uint16 * (rows * cols)).from_address(ptr)).reshape(rows, cols)

        # row-major C[n, m] = B[n, k] @ A[k, m]
        prod = from_bf16_bits(np, view(b, n, k)) @ from_bf16_bits(np, view(a, k, m))
        view(c, n, m)[...] = to_bf16_bits(np, prod.astype(np.float32))

    def gemm_grouped(self, handle, ta, tb, m, n, k, alpha, a, at, lda, b, bt, ldb, beta, c, ct, ldc, count, sizes,
                     compute):
        """cuBLAS's grouped GEMM: the size arrays are read on the host at the call, the pointer
        arrays on the device when the stream runs it (so they must be written before, in stream order)."""
        import ctypes

        def host(ptr, ctype=ctypes.c_int32):
            return np.ctypeslib.as_array((ctype * count).from_address(ptr)).copy()

        assert getattr(self.tls, "blas_stream", None) == self.tls.stream.ptr, "GEMM on an unbound stream"
        ta, tb, m, n, k, lda, ldb, ldc, sizes = (host(v) for v in (ta, tb, m, n, k, lda, ldb, ldc, sizes))
        alpha, beta = host(alpha, ctypes.c_float), host(beta, ctypes.c_float)
        assert count > 0 and (at, bt, ct, compute) == (14, 14, 14, 68)
        assert (ta == 0).all() and (tb == 0).all() and (sizes == 1).all() and (n > 0).all()
        assert (lda == m).all() and (ldb == k).all() and (ldc == m).all()
        assert (alpha == 1.0).all() and (beta == 0.0).all()
        self.count("gemm")

        def run():
            pa, pb, pc = (host(v, ctypes.c_int64) for v in (a, b, c))
            for j in range(count):
                self.gemm_now(int(m[j]), int(n[j]), int(k[j]), int(pa[j]), int(pb[j]), int(pc[j]))
        self.enqueue(run)
        return 0

    def group_start(self):
        assert self.tls.group is None
        self.tls.group = []

    def group_end(self):
        import ctypes

        assert self.tls.stream.recording is None, "NCCL stays out of the graphs"
        group, self.tls.group = self.tls.group, None
        me = self.tls.rank
        self.count("nccl_group")
        for kind, ptr, nbytes, peer in group:
            if kind == "send":
                assert (me, peer) not in self.box
                self.box[(me, peer)] = ctypes.string_at(ptr, nbytes)
        self.barrier.wait()
        for kind, ptr, nbytes, peer in group:
            if kind == "recv":
                data = self.box.pop((peer, me))
                assert len(data) == nbytes, (peer, me, len(data), nbytes)
                ctypes.memmove(ptr, data, nbytes)
        self.barrier.wait()
        assert not self.box, f"sends nobody received: {list(self.box)}"
        self.barrier.wait()

    def comm(self, rank):
        gpu = self

        class Comm:
            def send(self, ptr, count, dtype, peer, stream):
                gpu.tls.group.append(("send", ptr, count * gpu.SIZES[dtype], peer))

            def recv(self, ptr, count, dtype, peer, stream):
                gpu.tls.group.append(("recv", ptr, count * gpu.SIZES[dtype], peer))
        return Comm()

    def run_ranks(self, fn):
        """fn(rank) on W threads at once; the first exception is re-raised."""
        import threading

        errors = []

        def main(rank):
            self.tls.rank, self.tls.group, self.tls.stream = rank, None, self.Stream()
            try:
                fn(rank)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
                self.barrier.abort()

        threads = [threading.Thread(target=main, args=(r,)) for r in range(self.world)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]


def _fake_run(emu, monkeypatch, dims, world, runs, inputs=None, graphs=True, gemm="grouped", cublas=None):
    """Each rank builds a Reference on the fakes and calls runs(rank, ref, inputs, outputs, gpu).
    cublas(fake cuBLAS) -> the cuBLAS the Reference gets (default: the fake itself)."""
    from types import SimpleNamespace

    gpu = _FakeGPU(emu, world)
    for name, module in gpu.modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    all_inputs = inputs or _inputs(dims, world)
    outs = [None] * world

    def rank_main(rank):
        env = SimpleNamespace(comm=gpu.comm(rank), stream=gpu.tls.stream, world=world, rank=rank, dims=dims)
        ins = {k: np.ascontiguousarray(v).view(_FakeArray) for k, v in all_inputs[rank].items()}
        out = {"out": np.full((dims["T"], dims["H"]), 0x7FC1, dtype=np.uint16).view(_FakeArray)}
        ref = REF.Reference(env, graphs=graphs, cublas=cublas(gpu.cublas) if cublas else gpu.cublas, gemm=gemm)
        runs(rank, ref, ins, out, gpu)
        outs[rank] = np.asarray(out["out"]).copy()

    gpu.run_ranks(rank_main)
    return all_inputs, outs, gpu


@pytest.mark.parametrize("gemm", REF.GEMM_MODES)
@pytest.mark.parametrize("world,dims", [
    (1, dict(T=10, H=64, E=16, I=64, HOT=60)),
    (2, dict(T=24, H=64, E=16, I=64, HOT=25)),
    (4, dict(T=9, H=64, E=16, I=64, HOT=60)),
    (8, dict(T=3, H=64, E=64, I=64, HOT=50)),   # ranks that receive nothing from some peers
])
def test_the_reference_class_on_fake_gpus_matches_simulate(emu, monkeypatch, world, dims, gemm):
    """Three iterations on one routing (experts eager, captured, replayed), each must land on
    `simulate`'s answer: buffers, offsets, kernel arguments, NCCL parts and graphs all in use,
    with the expert phase's grouped GEMMs and with two GEMMs per expert."""
    results = {}

    def runs(rank, ref, ins, out, gpu):
        modes = []
        for _ in range(3):
            out["out"][...] = 0x7FC1
            ref.run(ins, out)
            modes.append(np.asarray(out["out"]).copy())
        results[rank] = modes

    inputs, _, gpu = _fake_run(emu, monkeypatch, dims, world, runs, gemm=gemm)
    want = REF.simulate(inputs, dims, world)
    exact = REF.expected(inputs, dims, world)
    for rank in range(world):
        for i, got_bits in enumerate(results[rank]):
            got = from_bf16_bits(np, got_bits).astype(np.float64)
            assert np.isfinite(got).all(), (rank, i)
            # expf and the order of float32 sums differ a little between this CPU and NumPy
            assert _rel(got, want[rank]["out"]) < 2e-3, (rank, i)
            assert _rel(got, exact[rank]["out"]) < 1e-2, (rank, i)
        assert np.array_equal(results[rank][1], results[rank][2])
    assert all(c.get("graph_launch", 0) == 2 for c in gpu.counts if c.get("gemm"))  # capture + replay


@pytest.mark.parametrize("gemm", REF.GEMM_MODES)
def test_the_reference_class_does_one_sync_and_no_allocation_an_iteration(emu, monkeypatch, gemm):
    """What one iteration costs the host once its routing is known: 8 kernels, 1 copy of the
    counts, 1 sync, 3 NCCL groups, 1 graph launch; nothing allocated. Eager, the expert phase is
    the pointer kernel, 2 grouped GEMMs and silu * up (grouped, and auto with a few rows an
    expert), or 2 GEMMs per expert with rows and silu * up (per_expert)."""
    dims, world = dict(T=16, H=64, E=16, I=64, HOT=25), 2
    seen = {}

    def runs(rank, ref, ins, out, gpu):
        before = dict(gpu.counts[rank])
        for i in range(4):
            ref.run(ins, out)
            after = dict(gpu.counts[rank])
            seen[(rank, i)] = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
            before = after
        seen[(rank, "experts")] = len(ref.plan.experts)
        assert max(n for _, _, n in ref.plan.experts) < REF.PER_EXPERT_MIN_ROWS
        assert ref.ways(ref.plan) == ("per_expert",) * 2 if gemm == "per_expert" else ("grouped",) * 2

    _fake_run(emu, monkeypatch, dims, world, runs, gemm=gemm)
    for rank in range(world):
        experts = seen[(rank, "experts")]
        eager, capture, replay = seen[(rank, 0)], seen[(rank, 1)], seen[(rank, 3)]
        common = {"sync": 1, "memcpy": 1, "nccl_group": 3}
        expert_phase = {"kernel": 8 + 2, "gemm": 2} if gemm != "per_expert" else {"kernel": 8 + 1, "gemm": 2 * experts}
        assert experts > 2
        assert eager == {**common, **expert_phase}, eager
        assert capture == {**common, **expert_phase, "graph_launch": 1}, capture
        assert replay == {**common, "kernel": 8, "graph_launch": 1}, replay
        assert "alloc" not in replay


def _every_token_to(inputs, experts):
    """The inputs with every token routed to the same 8 `experts` (their weights kept)."""
    idx = np.tile(np.array(experts, dtype=np.int32), (inputs[0]["topk_idx"].shape[0], 1))
    return [{**inp, "topk_idx": idx.copy()} for inp in inputs]


def test_auto_picks_the_gemms_per_routing_and_replays_each_routings_graph(emu, monkeypatch):
    """One Reference in auto mode, two routings in turn: the generator's (64 rows an expert on
    average: one grouped GEMM per projection) and every token to experts 0-3 and 8-11 (128 rows
    each for the 4 experts of each rank: one GEMM per expert). Each routing runs eagerly, then is
    captured, then replayed, with its own launches, and lands on `simulate`'s answer."""
    dims, world = dict(T=64, H=64, E=16, I=64, HOT=25), 2
    few = _inputs(dims, world)
    many = _every_token_to(few, [0, 1, 2, 3, 8, 9, 10, 11])
    order = ["few", "few", "many", "many", "few", "many"]
    seen, outs = {}, {}

    def runs(rank, ref, ins, out, gpu):
        routed = {"few": ins, "many": {**ins, "topk_idx": np.ascontiguousarray(many[rank]["topk_idx"]).view(
            _FakeArray)}}
        for i, which in enumerate(order):
            before = dict(gpu.counts[rank])
            out["out"][...] = 0x7FC1
            ref.run(routed[which], out)
            seen[(rank, i)] = {k: v - before.get(k, 0) for k, v in gpu.counts[rank].items() if v != before.get(k, 0)}
            seen[(rank, i, "ways")] = ref.ways(ref.plan)
            seen[(rank, i, "experts")] = len(ref.plan.experts)
            outs[(rank, i)] = np.asarray(out["out"]).copy()
        assert ref.gemm == "auto" and ref.warnings == []

    _fake_run(emu, monkeypatch, dims, world, runs, inputs=few, gemm="auto")
    want = {"few": REF.simulate(few, dims, world), "many": REF.simulate(many, dims, world)}
    common = {"sync": 1, "memcpy": 1, "nccl_group": 3}
    for rank in range(world):
        for i, which in enumerate(order):
            got = from_bf16_bits(np, outs[(rank, i)]).astype(np.float64)
            assert _rel(got, want[which][rank]["out"]) < 2e-3, (rank, i, which)
            experts = seen[(rank, i, "experts")]
            if which == "few":
                assert seen[(rank, i, "ways")] == ("grouped", "grouped")
                expert_phase = {"kernel": 8 + 2, "gemm": 2}
            else:
                assert seen[(rank, i, "ways")] == ("per_expert", "per_expert") and experts == 4
                expert_phase = {"kernel": 8 + 1, "gemm": 2 * experts}
            if i < 4:  # eager, then captured: the launches run (a capture records them), once
                assert seen[(rank, i)] == {**common, **expert_phase, **({"graph_launch": 1} if i % 2 else {})}, i
            else:  # replayed from the routing's own graph
                assert seen[(rank, i)] == {**common, "kernel": 8, "graph_launch": 1}, i
        assert np.array_equal(outs[(rank, 4)], outs[(rank, 1)]) and np.array_equal(outs[(rank, 5)], outs[(rank, 3)])


def test_the_reference_class_parts_reuse_the_last_plan(emu, monkeypatch):
    """The harness times dispatch, experts and combine alone, over and over: each part redoes
    only its own work, and dispatch, experts, combine in turn give run's answer."""
    dims, world = dict(T=12, H=64, E=16, I=64, HOT=60), 2
    outs = {}

    def runs(rank, ref, ins, out, gpu):
        parts = ref.parts(ins, out)
        ref.run(ins, out)
        outs[(rank, "run")] = np.asarray(out["out"]).copy()
        out["out"][...] = 0x7FC1
        for name in ("dispatch", "dispatch", "experts", "experts", "experts", "combine", "combine"):
            before = dict(gpu.counts[rank])
            parts[name]()
            done = {k: v - before.get(k, 0) for k, v in gpu.counts[rank].items() if v != before.get(k, 0)}
            assert done.get("sync", 0) == (name == "dispatch"), (name, done)
            assert done.get("gemm", 0) == 0 or name == "experts", (name, done)
        outs[(rank, "parts")] = np.asarray(out["out"]).copy()
        assert ref.comm_bytes() == ref.plan.layout.received_bytes(rank, dims["H"]) > 0

    _fake_run(emu, monkeypatch, dims, world, runs)
    for rank in range(world):
        assert np.array_equal(outs[(rank, "parts")], outs[(rank, "run")])


def test_the_reference_class_runs_eagerly_when_capture_fails(emu, monkeypatch):
    dims, world = dict(T=8, H=64, E=16, I=64, HOT=25), 1
    outs = []

    def runs(rank, ref, ins, out, gpu):
        def broken(self):
            raise RuntimeError("cudaErrorStreamCaptureUnsupported: operation not permitted when stream is capturing")
        monkeypatch.setattr(gpu.Stream, "begin_capture", broken)
        with pytest.warns(RuntimeWarning, match="expert GEMMs"):
            for _ in range(3):
                out["out"][...] = 0x7FC1
                ref.run(ins, out)
                outs.append(np.asarray(out["out"]).copy())
        assert len(ref.warnings) == 1 and "StreamCaptureUnsupported" in ref.warnings[0]
        assert gpu.counts[rank].get("graph_launch", 0) == 0

    inputs, _, _ = _fake_run(emu, monkeypatch, dims, world, runs)
    want = REF.simulate(inputs, dims, world)[0]["out"]
    for got in outs:
        assert _rel(from_bf16_bits(np, got).astype(np.float64), want) < 2e-3


def _refusing(cublas):
    """The fake cuBLAS whose grouped GEMM always answers CUBLAS_STATUS_NOT_SUPPORTED."""
    from types import SimpleNamespace

    return SimpleNamespace(**{**vars(cublas), "cublasGemmGroupedBatchedEx": lambda *args: 15})


def _without_grouped(cublas):
    """The fake cuBLAS of a library older than 12.5: no grouped GEMM at all."""
    from types import SimpleNamespace

    return SimpleNamespace(**{k: v for k, v in vars(cublas).items() if k != "cublasGemmGroupedBatchedEx"})


@pytest.mark.parametrize("gemm", ["grouped", "auto"])
@pytest.mark.parametrize("cublas,why", [(_refusing, "status 15"), (_without_grouped, "no cublasGemmGroupedBatchedEx")])
def test_the_reference_falls_back_to_per_expert_gemms_without_a_grouped_gemm(emu, monkeypatch, cublas, why, gemm):
    """A libcublas that refuses the grouped GEMM, or has none: the expert phase runs two GEMMs
    per expert from then on, with one warning saying why, and the answer stays right (auto too:
    its choice at this shape, a few rows an expert, is the grouped GEMM)."""
    dims, world = dict(T=8, H=64, E=16, I=64, HOT=25), 1
    outs = []

    def runs(rank, ref, ins, out, gpu):
        for _ in range(3):
            out["out"][...] = 0x7FC1
            ref.run(ins, out)
            outs.append(np.asarray(out["out"]).copy())
        assert ref.gemm == "per_expert"
        assert len(ref.warnings) == 1 and why in ref.warnings[0], ref.warnings
        assert gpu.counts[rank]["gemm"] == 2 * len(ref.plan.experts) * 2  # eager, captured; replayed: none

    with pytest.warns(RuntimeWarning, match="two cublasGemmEx per expert"):
        inputs, _, _ = _fake_run(emu, monkeypatch, dims, world, runs, cublas=cublas, gemm=gemm)
    want = REF.simulate(inputs, dims, world)[0]["out"]
    for got in outs:
        assert _rel(from_bf16_bits(np, got).astype(np.float64), want) < 2e-3


def test_the_gemm_mode_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv("CUCO_MOE_REF_GEMM", raising=False)
    assert REF.gemm_wanted() == "auto"
    for mode in ("auto", "grouped", "per_expert"):
        monkeypatch.setenv("CUCO_MOE_REF_GEMM", mode)
        assert REF.gemm_wanted() == mode
    for bad in ("batched", "bad", "", "Auto"):
        monkeypatch.setenv("CUCO_MOE_REF_GEMM", bad)
        with pytest.raises(ValueError, match=f"CUCO_MOE_REF_GEMM={bad!r}: use one of auto, grouped, per_expert$"):
            REF.gemm_wanted()


def test_the_reference_refuses_an_unknown_gemm_mode(emu, monkeypatch):
    with pytest.raises(ValueError, match="gemm='batched': use one of auto, grouped, per_expert$"):
        _fake_run(emu, monkeypatch, dict(T=8, H=64, E=16, I=64, HOT=25), 1, lambda *a: None, gemm="batched")


def test_the_reference_reads_its_gemm_mode_from_the_environment(emu, monkeypatch):
    """gemm=None: CUCO_MOE_REF_GEMM, auto when unset."""
    modes = {}
    for env in (None, "grouped", "per_expert", "auto"):
        if env is None:
            monkeypatch.delenv("CUCO_MOE_REF_GEMM", raising=False)
        else:
            monkeypatch.setenv("CUCO_MOE_REF_GEMM", env)

        def runs(rank, ref, ins, out, gpu, env=env):
            modes[env] = ref.gemm
        _fake_run(emu, monkeypatch, dict(T=8, H=64, E=16, I=64, HOT=25), 1, runs, gemm=None)
    assert modes == {None: "auto", "grouped": "grouped", "per_expert": "per_expert", "auto": "auto"}


@pytest.mark.parametrize("world,dims", [(2, dict(T=24, H=64, E=16, I=64, HOT=60)),
                                        (4, dict(T=9, H=64, E=16, I=64, HOT=25))])
def test_the_grouped_gemm_benchmark_takes_rank_0s_rows_in_the_expert_layout(world, dims):
    """benchmarks/moe_grouped.py times rank 0's expert phase: its rows must be those `simulate`'s
    pipeline puts in rank 0's expert layout, and its counts those rank 0's exchange ends with."""
    from pathlib import Path

    from cuco_tui.harness.worker import load_reference

    bench = load_reference(Path(__file__).resolve().parents[1] / "benchmarks" / "moe_grouped.py")
    counts, tokens, x_all = bench.expert_phase_rows(np, dims, world, 5)
    inputs = _inputs(dims, world, seed=5)
    el = dims["E"] // world
    plans = [REF.dispatch_order(np, inp["topk_idx"], dims["E"]) for inp in inputs]
    sends = [inp["x"][order // 8] for inp, (order, _, _) in zip(inputs, plans)]
    layouts = [REF.Layout(plans[r][2], np.stack([plans[p][2][r * el:(r + 1) * el] for p in range(world)]))
               for r in range(world)]
    arrival = np.concatenate([sends[p][layouts[p].send_off[0]:layouts[p].send_off[1]] for p in range(world)])
    xe = arrival[layouts[0].expert_to_arrival()]
    plan = REF.plan_from_counts(counts, world)
    assert plan.rows == len(tokens) == len(xe) > 0
    assert np.array_equal(x_all[tokens], xe)
    assert np.array_equal(counts[:dims["E"]], plans[0][2])
    assert np.array_equal(plan.layout.recv_counts, layouts[0].recv_counts)


# ---------------------------------------------------------------------------- seed and templates (L0, L1)


def _static_ok(src):
    assert_static_ok(src, SEED)


def test_seed_passes_the_static_checks_and_declares_what_it_does():
    from cuco_tui.design.classify import classify

    _static_ok(SEED)
    assert classify(SEED).inferred() == {"backend": "nccl_host", "placement": "before", "sync": "per_peer",
                                         "issuer": "host", "chunk": "shard", "streams": "1", "comm_sms": "0"}


def test_seed_and_templates_switch_to_per_problem_gemms_where_the_reference_does():
    """grouped_gemm.cuh.j2 (in the seed and every template) runs a call per problem from the
    reference's auto threshold on: the same measurements, one number."""
    assert f"constexpr int kPerProblemRows = {REF.PER_EXPERT_MIN_ROWS};" in SEED
    assert "rows >= (long long)kPerProblemRows * call.count" in SEED


@can_compile
def test_seed_compiles_and_stops_with_no_gpu(monkeypatch):
    monkeypatch.setenv("CUCO_NO_GPU", "1")
    r = evaluate(W.seed, W)
    assert r.status == Status.NO_GPU, r.reason


def _book():
    from cuco_tui.agents.offline import StrategyBook

    return StrategyBook.load(W.root, W.seed)


def test_every_strategy_renders_every_knob_setting_through_l0():
    book = _book()
    assert {s.name for s in book.strategies} >= {"host_sequential", "dispatch_overlap", "chunked_pipeline",
                                                  "ipc_dispatch", "expert_pipeline", "arrival_pipeline"}
    assert book.render(book.get("host_sequential"), {}) == SEED
    for s in book.strategies:
        for values in itertools.product(*s.knobs.values()):
            knobs = s.normalized(dict(zip(s.knobs, values)))
            _static_ok(book.render(s, knobs))


def test_fast_path_is_the_ipc_store_dispatch():
    from cuco_tui.agents.base import ProposalRequest
    from cuco_tui.agents.offline import OfflineAgent
    from cuco_tui.core.records import CandidateRecord

    seed = CandidateRecord(id="c0000", generation=0, island=0, kind="seed", parents=(), source=SEED, design={},
                           rationale="seed", agent="workload", status="measured", speedup=1.0)
    p = OfflineAgent(W).propose(ProposalRequest(kind="fast_path", workload=W, parents=(seed,)))
    assert p.error == "" and p.design["backend"] == "cuda_ipc" and p.design["knobs"]["strategy"] == "ipc_dispatch"


def _every_point(book):
    """{rendered source: (strategy, knobs)} for every knob combination of every strategy,
    normalized (knobs a template ignores are pinned), one entry per distinct source."""
    out = {}
    for s in book.strategies:
        for values in itertools.product(*s.knobs.values()):
            knobs = s.normalized(dict(zip(s.knobs, values)))
            out.setdefault(book.render(s, knobs), (s.name, knobs))
    return out


@can_compile
def test_every_strategy_point_compiles_and_stops_with_no_gpu(tmp_path, monkeypatch):
    """What `cuco eval FILE --workload moe_dispatch_combine` does without a GPU, for every point
    of the offline agent's space: L0 and L1 pass and the cascade stops at no_gpu. The builds run
    in parallel into the session's build cache first; the cascade then finds them built."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    from cuco_tui.toolchain import BuildCache, compile_candidate

    book = _book()
    points = _every_point(book)
    named = {(name, tuple(sorted(knobs.items()))) for name, knobs in points.values()}
    for name, knobs in [("dispatch_overlap", {"comm_priority": "same"}), ("chunked_pipeline", {"chunks": 8}),
                        ("ipc_dispatch", {"mover": "copy_engine", "mover_blocks": 16}),
                        ("ipc_dispatch", {"mover": "ipc", "mover_blocks": 64}),
                        ("expert_pipeline", {"mover": "ipc", "groups": 8, "mover_blocks": 64, "results": "separate"}),
                        ("expert_pipeline", {"mover": "copy_engine", "groups": 4, "mover_blocks": 16,
                                             "results": "separate"}),
                        ("arrival_pipeline", {"mover": "copy_engine", "chunks": 1, "mover_blocks": 16}),
                        ("arrival_pipeline", {"mover": "ipc", "chunks": 8, "mover_blocks": 64})]:
        assert (name, tuple(sorted(knobs.items()))) in named, (name, knobs)
    assert sum(name == "arrival_pipeline" for name, _ in points.values()) == 16
    paths = []
    for i, (text, (name, knobs)) in enumerate(points.items()):
        path = tmp_path / (f"{i:03d}-{name}" + "".join(f"-{v}" for v in knobs.values()) + ".cu")
        path.write_text(text)
        paths.append(path)
    toolchain, cache = discover(), BuildCache()
    with ThreadPoolExecutor(max(1, min(4, (os.cpu_count() or 2)))) as pool:
        builds = list(pool.map(lambda path: (path, compile_candidate(path, toolchain, cache)), paths))
    failed = [f"{path.name}:\n" + "\n".join(d.render() for d in r.diagnostics) for path, r in builds if not r.ok]
    assert not failed, "\n".join(failed)
    monkeypatch.setenv("CUCO_NO_GPU", "1")
    for path in paths:
        r = evaluate(path, W)
        assert r.status == Status.NO_GPU, f"{path.name}: {r.status} {r.reason}"


# ---------------------------------------------------------------------------- on GPUs


def _gpus():
    from cuco_tui.harness.gpus import inventory

    return inventory().count


def _one_gpu_reference(dims, graphs=True, seed=11, gemm="grouped"):
    """A reference on a one-rank communicator (NCCL send/recv to itself), its inputs filled."""
    import cupy
    from cupy.cuda import nccl

    class Env:
        pass

    env = Env()
    env.comm = nccl.NcclCommunicator(1, nccl.get_unique_id(), 0)
    env.stream = cupy.cuda.Stream(non_blocking=True)
    env.world, env.rank, env.dims = 1, 0, dims
    io = REF.io_spec(dims, 1)
    inputs = {n: cupy.empty(s, dtype=KINDS[d]) for n, s, d in io["inputs"]}
    outputs = {n: cupy.empty(s, dtype=KINDS[d]) for n, s, d in io["outputs"]}
    with env.stream:
        REF.fill_inputs(cupy, inputs, dims, 1, 0, seed=seed)
    return REF.Reference(env, graphs=graphs, gemm=gemm), env, inputs, outputs


# The verify shapes, and one with many route blocks (128) and counters (256 experts x 128 blocks).
_ONE_GPU_SHAPES = [(s.name, s.dims) for s in W.verify_shapes] + [
    ("many-blocks", dict(T=4096, H=64, E=256, I=64, HOT=60))]


@pytest.mark.gpu
@pytest.mark.parametrize("gemm", REF.GEMM_MODES)
@pytest.mark.parametrize("name,dims", _ONE_GPU_SHAPES, ids=[n for n, _ in _ONE_GPU_SHAPES])
def test_reference_matches_float64_on_one_gpu(name, dims, gemm):
    """The CuPy reference (NCCL send/recv to itself on a one-rank communicator, cuBLAS, the raw
    kernels) against float64 and against `simulate`, with all experts on the one rank: three
    runs on one routing, so the expert GEMMs run eagerly, then captured, then replayed. Its
    index plans on the device are dispatch_order's exactly. Both expert phases: the grouped
    GEMMs, two GEMMs per expert, and auto (the reference: grouped at the verify shapes, a few
    dozen rows an expert; per expert at many-blocks, 128 on average)."""
    import cupy

    ref, env, inputs, outputs = _one_gpu_reference(dims, gemm=gemm)
    host = {k: cupy.asnumpy(v) for k, v in inputs.items()}
    want = REF.expected([host], dims, 1)[0]["out"]
    sim = REF.simulate([host], dims, 1)[0]["out"]
    _, pos, counts = REF.dispatch_order(np, host["topk_idx"], dims["E"])
    outs = []
    for attempt in ("eager", "capture", "replay"):
        with env.stream:
            outputs["out"].fill(0x7FC1)  # poisoned: anything left unwritten fails
        ref.run(inputs, outputs)
        env.stream.synchronize()
        got = from_bf16_bits(np, cupy.asnumpy(outputs["out"])).astype(np.float64)
        assert _rel(got, want) < 1e-2, (name, attempt)
        assert _rel(got, sim) < 5e-3, (name, attempt)
        outs.append(got)
    assert np.array_equal(cupy.asnumpy(ref.pos), pos)
    assert np.array_equal(cupy.asnumpy(ref.counts[:dims["E"]]), counts)
    assert ref.warnings == [], ref.warnings  # the capture worked, the grouped GEMM too
    assert ref.gemm == gemm
    if gemm == "auto":
        assert ref.ways(ref.plan) == ("per_expert" if name == "many-blocks" else "grouped",) * 2
    assert any(slot.graph is not None for slot in ref.graphs.slots.items.values())
    # A graph replays the eager launches (cuBLAS may pick another algorithm under capture: close, not equal).
    assert _rel(outs[2], outs[0]) < 2e-3 and np.array_equal(outs[1], outs[2])
    assert ref.comm_bytes() == 0  # one rank: nothing crosses a link
    env.comm.destroy()


@pytest.mark.gpu
def test_reference_without_graphs_matches_with_graphs_on_one_gpu():
    import cupy

    dims = W.verify_shapes[0].dims
    results = []
    for graphs in (False, True):
        ref, env, inputs, outputs = _one_gpu_reference(dims, graphs=graphs)
        for _ in range(3):
            ref.run(inputs, outputs)
        env.stream.synchronize()
        results.append(from_bf16_bits(np, cupy.asnumpy(outputs["out"])).astype(np.float64))
        captured = any(slot.graph is not None for slot in ref.graphs.slots.items.values())
        assert captured == graphs and ref.warnings == []
        env.comm.destroy()
    assert _rel(results[1], results[0]) < 2e-3


@pytest.mark.gpu
def test_grouped_gemms_match_per_expert_gemms_on_one_gpu():
    """The same routing through every expert phase: outputs within bf16 rounding of each other."""
    import cupy

    dims = W.verify_shapes[1].dims  # heavy skew: experts from a handful of rows to hundreds
    results = {}
    for gemm in REF.GEMM_MODES:
        ref, env, inputs, outputs = _one_gpu_reference(dims, gemm=gemm)
        for _ in range(3):
            ref.run(inputs, outputs)
        env.stream.synchronize()
        results[gemm] = from_bf16_bits(np, cupy.asnumpy(outputs["out"])).astype(np.float64)
        assert ref.gemm == gemm and ref.warnings == []
        env.comm.destroy()
    assert np.isfinite(results["grouped"]).all()
    assert _rel(results["grouped"], results["per_expert"]) < 2e-3
    assert _rel(results["grouped"], results["auto"]) < 2e-3


VERIFY_ONLY = EvalOptions(world=2, bench=False)


@pytest.mark.gpu
def test_seed_is_verified_on_two_gpus():
    if _gpus() < 2:
        pytest.skip("needs 2 GPUs")
    r = evaluate(W.seed, W, VERIFY_ONLY)
    assert r.status == Status.MEASURED, r.reason + "\n" + "\n".join(d.render() for d in r.diagnostics)
    assert len(r.verifications) >= 2 * len(W.verify_shapes) and all(v.ok for v in r.verifications)


@pytest.mark.gpu
def test_reference_is_not_slower_than_the_seed():
    """The seed is the reference in C (same plan, same GEMMs, the same one host sync): a
    reference slower than it would inflate every speedup the search reports. Before the
    reference lost its per-iteration host work (CuPy sort and bincount with two hidden syncs,
    Python loops of GEMM launches) the seed ran 1.15-1.2x faster on 2 x H200. Now the seed may
    be at most 5 % faster, at a GEMM-bound shape and at the launch-bound one (256 experts, few
    rows each); far faster than the seed, the reference would have gone wrong."""
    if _gpus() < 2:
        pytest.skip("needs 2 GPUs")
    shapes = ("prefill-4k-hot", "decode-1k-e256-hot")
    r = evaluate(W.seed, W, EvalOptions(world=2, shapes=shapes))
    assert r.status == Status.MEASURED, r.reason
    assert sorted(t.shape for t in r.timings) == sorted(shapes)
    for t in r.timings:
        assert t.candidate.n >= 20 and len(t.per_rank) == 2
        assert 0.8 < t.speedup <= 1.05, t


@pytest.mark.gpu
@pytest.mark.parametrize("strategy", ["dispatch_overlap", "ipc_dispatch", "expert_pipeline"])
def test_template_is_verified_on_two_gpus(tmp_path, strategy):
    if _gpus() < 2:
        pytest.skip("needs 2 GPUs")
    book = _book()
    s = book.get(strategy)
    path = tmp_path / f"{strategy}.cu"
    path.write_text(book.render(s, s.default_knobs()))
    r = evaluate(path, W, VERIFY_ONLY)
    assert r.status == Status.MEASURED, r.reason + "\n" + r.deadlock_report + "\n".join(
        d.render() for d in r.diagnostics)
