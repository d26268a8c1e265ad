"""moe_dispatch_combine's GPU reference without a GPU: its host logic (route grid, plans, the
choice of GEMMs, the graph cache) and its kernels run as C++ on the CPU (moe_emulator.py), each
against the CPU reference's index plans and `simulate`; and the kernels compiled with NVRTC."""

import numpy as np
import pytest

from cuco_tui.harness.bf16 import from_bf16_bits
from moe_common import REF


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
