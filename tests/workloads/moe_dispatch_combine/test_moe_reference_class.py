"""moe_dispatch_combine's Reference class on fake GPUs (moe_fake_gpu.py): its buffers, offsets,
kernel arguments and graph handling checked against `simulate`, what it does per iteration
counted, its choice of expert GEMMs and its fallbacks; and the grouped-GEMM benchmark's rows."""

import numpy as np
import pytest

from cuco_tui.harness.bf16 import from_bf16_bits
from moe_common import REF, _inputs, _rel
from moe_fake_gpu import _FakeArray, _fake_run
from repo_paths import REPO


# ---------------------------------------------------------------------------- the Reference class on the CPU


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
        assert ref.ways(ref.plan) == ((gemm,) * 2 if gemm in ("per_expert", "cutlass") else ("grouped",) * 2)

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
    assert REF.gemm_wanted() is None  # the fastest way the process has (the Reference decides)
    monkeypatch.setenv("CUCO_MOE_REF_GEMM", "")
    assert REF.gemm_wanted() is None
    for mode in ("cutlass", "auto", "grouped", "per_expert"):
        monkeypatch.setenv("CUCO_MOE_REF_GEMM", mode)
        assert REF.gemm_wanted() == mode
    for bad in ("batched", "bad", "Auto"):
        monkeypatch.setenv("CUCO_MOE_REF_GEMM", bad)
        with pytest.raises(ValueError, match=f"CUCO_MOE_REF_GEMM={bad!r}: use one of cutlass, auto, grouped, "
                                             f"per_expert$"):
            REF.gemm_wanted()


def test_the_reference_refuses_an_unknown_gemm_mode(emu, monkeypatch):
    with pytest.raises(ValueError, match="gemm='batched': use one of cutlass, auto, grouped, per_expert$"):
        _fake_run(emu, monkeypatch, dict(T=8, H=64, E=16, I=64, HOT=25), 1, lambda *a: None, gemm="batched")


def test_the_reference_takes_the_grouped_gemm_library_where_the_harness_loaded_it(emu, monkeypatch):
    """Unset, the mode is cutlass where the library is loaded, else auto with a warning that says the
    speedups overstate; asked for by name without the library, one sentence."""
    monkeypatch.delenv("CUCO_MOE_REF_GEMM", raising=False)
    dims = dict(T=8, H=64, E=16, I=64, HOT=25)
    seen = {}

    def runs(rank, ref, ins, out, gpu):
        seen["mode"], seen["warnings"] = ref.gemm, list(ref.warnings)

    _fake_run(emu, monkeypatch, dims, 1, runs, gemm=None, library=True)
    assert seen == {"mode": "cutlass", "warnings": []}
    with pytest.warns(RuntimeWarning, match="grouped GEMM library .* is not loaded"):
        _fake_run(emu, monkeypatch, dims, 1, runs, gemm=None, library=False)
    assert seen["mode"] == "auto"
    assert seen["warnings"] == ["the prebuilt grouped GEMM library (cuco_grouped_gemm_lib.h, 128x256 tiles) is not "
                                "loaded: the expert phase runs cuBLAS, 1.02-1.33x slower on the bench shapes, so "
                                "speedups against this reference overstate (`cuco doctor` says what the library needs)"]
    with pytest.raises(RuntimeError, match=r"^gemm=cutlass, but the prebuilt grouped GEMM library "
                                           r"\(cuco_grouped_gemm_lib.h, 128x256 tiles\) is not loaded$"):
        _fake_run(emu, monkeypatch, dims, 1, runs, gemm="cutlass", library=False)
    # Loaded but refusing this GPU: the same fallback, saying why.
    with pytest.warns(RuntimeWarning, match="refused this GPU"):
        _fake_run(emu, monkeypatch, dims, 1, runs, gemm=None, library="refuses")
    assert seen["mode"] == "auto" and seen["warnings"][0].startswith(
        "the prebuilt grouped GEMM library refused this GPU (grouped GEMM: 232448 bytes of shared memory")
    # Rows the library cannot read with TMA (16-byte rows): cuBLAS, before the library is asked.
    with pytest.warns(RuntimeWarning, match="multiples of 8"):
        _fake_run(emu, monkeypatch, dict(T=8, H=64, E=16, I=60, HOT=25), 1, runs, gemm=None, library=True)
    assert seen["mode"] == "auto" and seen["warnings"][0].startswith(
        "the prebuilt grouped GEMM needs H and I multiples of 8 (H=64, I=60)")


@pytest.mark.filterwarnings("ignore:the prebuilt grouped GEMM library")
def test_the_reference_reads_its_gemm_mode_from_the_environment(emu, monkeypatch):
    """gemm=None: CUCO_MOE_REF_GEMM, auto when unset and the grouped GEMM library is not loaded."""
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

    from cuco_tui.core.reference import reference_module

    bench = reference_module(REPO / "benchmarks" / "moe_grouped.py")
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


def test_the_reference_calls_the_configuration_the_harness_preloads():
    from cuco_tui.toolchain.grouped_gemm_lib import REFERENCE_CONFIG

    assert REF.CUTLASS_ENTRY == REFERENCE_CONFIG.entry


def test_a_failing_grouped_gemm_launch_falls_back_to_cublas_with_the_right_answer(emu, monkeypatch):
    """A launch error of the library (not a wrong answer: those are the float64 checks') makes the
    reference run cuBLAS from then on, saying so, instead of failing the evaluation."""
    dims, world = dict(T=24, H=64, E=16, I=64, HOT=25), 2
    seen = {}

    def runs(rank, ref, ins, out, gpu):
        ref.run(ins, out)
        seen[rank] = (ref.gemm, list(ref.warnings))

    with pytest.warns(RuntimeWarning, match="failed"):
        inputs, outs, _ = _fake_run(emu, monkeypatch, dims, world, runs, gemm=None, library="fails")
    want = REF.simulate(inputs, dims, world)
    for rank in range(world):
        assert seen[rank] == ("auto", ["the expert phase runs cuBLAS (auto): the prebuilt grouped GEMM failed: the "
                                       "grouped GEMM's launch returned CUDA error 98"])
        assert _rel(from_bf16_bits(np, outs[rank]).astype(np.float64), want[rank]["out"]) < 2e-3
