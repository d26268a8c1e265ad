"""moe_dispatch_combine on the CPU: the manifest and its buffers, the routing generator, and the
reference's math and index plans (against an independent float64 computation). The GPU
reference's host logic and kernels are in test_moe_reference_kernels.py, the Reference class on
fake GPUs in test_moe_reference_class.py, the seed and the strategy templates through L0 and L1
in test_moe_templates.py, the tests on GPUs (marker `gpu`) in test_moe_gpu.py."""

import numpy as np
import pytest

from cuco_tui.harness.bf16 import from_bf16_bits
from cuco_tui.core.workload import WorkloadError
from moe_common import REF, W, _inputs, _rel


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
