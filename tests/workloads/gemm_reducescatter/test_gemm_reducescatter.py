"""gemm_reducescatter's manifest and reference on the CPU: the shapes the contract allows, the
float64 answer against NumPy computed another way at W=2 and W=4, the reference's numerics
(bf16 partials summed in NCCL's ring order) within the tolerance of float64 at every world size,
a tolerance that admits other summation orders and fails a dropped partial, a wrong row block and
rows left unreduced; the folder through `cuco workload check`; on one GPU, the CuPy reference
against float64."""

import numpy as np
import pytest

from cuco_tui.cli.workload_check import check_workload
from cuco_tui.core.workload import WorkloadError
from cuco_tui.harness.verify import compare
from rs_common import REF, SEED, W, bf16, bits, f64, inputs_of


# ---------------------------------------------------------------------------- manifest


def test_the_manifest_splits_rows_and_contraction_and_allows_any_row_count():
    assert W.world_sizes == (2, 4, 8)
    assert W.split_dims == ("M", "K")
    assert W.divisible == {"M": 1, "K": 64, "N": 64}
    for world in W.world_sizes:
        W.check_world(world)
    odd = next(s for s in W.verify_shapes if s.name == "verify-odd")
    # No whole number of 64-row tiles per rank at any world size: the shape that tests the edges.
    assert all((odd.dims["M"] // w) % 64 and odd.dims["M"] % w == 0 for w in W.world_sizes)
    assert [s.name for s in W.bench_shapes] == ["mlp-down-8b", "mlp-down-70b", "long-seq", "short-seq"]
    assert W.rtol == 0.04


def test_a_row_count_that_does_not_split_is_refused():
    from dataclasses import replace

    from cuco_tui.core.workload import Shape

    bad = replace(W, verify_shapes=(Shape("bad", {"M": 100, "K": 512, "N": 128}),))
    bad.check_world(2)  # 50 rows each
    with pytest.raises(WorkloadError, match="M=100"):
        bad.check_world(8)


def test_communication_grows_against_computation_as_k_shrinks():
    """The bench shapes span both regimes: per rank, bytes over flops is (W-1) / K."""
    by_name = {s.name: s.dims for s in W.bench_shapes}
    ratio = {n: REF.comm_bytes(d, 2) / REF.flops(d, 2) for n, d in by_name.items()}
    assert ratio["long-seq"] > 10 * ratio["mlp-down-8b"] > 10 * ratio["mlp-down-70b"] / 2
    d = by_name["mlp-down-8b"]
    assert REF.flops(d, 4) == 2 * 8192 * 3584 * 4096
    assert REF.comm_bytes(d, 4) == 3 * 2048 * 4096 * 2


# ---------------------------------------------------------------------------- the answer


@pytest.mark.parametrize("world", [2, 4])
def test_expected_is_this_ranks_rows_of_the_whole_product(world):
    """float64 `expected` against NumPy computed as one product: [A_0 | A_1 | ...] @ [B_0; B_1; ...]."""
    dims = {"M": 96, "K": 128 * world, "N": 64}
    inputs = inputs_of(dims, world)
    want = REF.expected(inputs, dims, world)
    a = np.concatenate([f64(i["a"]) for i in inputs], axis=1)
    b = np.concatenate([f64(i["b"]) for i in inputs], axis=0)
    full = a @ b
    rows = dims["M"] // world
    assert [w["y"].shape for w in want] == [(rows, dims["N"])] * world
    for r in range(world):
        assert np.allclose(want[r]["y"], full[r * rows:(r + 1) * rows], rtol=1e-12, atol=1e-12)
    assert 0.5 < float(np.sqrt(np.mean(full * full))) < 2.0  # the sum is O(1): B is scaled by 1/sqrt(K)


def test_io_spec_and_inputs_differ_per_rank():
    dims = {"M": 96, "K": 256, "N": 64}
    spec = REF.io_spec(dims, 4, 1)
    assert spec == {"inputs": [("a", (96, 64), "bf16"), ("b", (64, 64), "bf16")], "outputs": [("y", (24, 64), "bf16")]}
    inputs = inputs_of(dims, 4)
    assert not np.array_equal(inputs[0]["a"], inputs[1]["a"])
    again = inputs_of(dims, 4)
    assert all(np.array_equal(x["b"], y["b"]) for x, y in zip(inputs, again))  # the seed decides


def _ring(parts, owner_first):
    """NCCL's ring: start at the rank after the owner, end at the owner, round after each add."""
    world = len(parts)
    acc = parts[(owner_first + 1) % world]
    for step in range(2, world + 1):
        acc = bf16(acc + parts[(owner_first + step) % world])
    return acc


@pytest.mark.parametrize("world", [2, 4, 8])
@pytest.mark.parametrize("shape", W.verify_shapes, ids=lambda s: s.name)
def test_the_reference_pipeline_is_within_tolerance_of_float64(world, shape):
    """The reference's numerics (cuBLAS's bf16 partials, NCCL's bf16 ring) and an fp32 sum rounded
    once both pass against float64 at every verify shape and world size."""
    dims = dict(shape.dims)
    inputs = inputs_of(dims, world)
    want = REF.expected(inputs, dims, world)
    parts = [bf16(f64(i["a"]) @ f64(i["b"])) for i in inputs]
    rows = dims["M"] // world
    for r in range(world):
        block = slice(r * rows, (r + 1) * rows)
        ring = _ring([p[block] for p in parts], r)
        once = bf16(sum(p[block] for p in parts))
        for got in (ring, once):
            c = compare(np, bits(got), bits(want[r]["y"]), "bf16")
            assert c.passed(W.rtol) and c.l2_rel_error < 1e-2, (r, c)


@pytest.mark.parametrize("world", [2, 4, 8])
def test_the_tolerance_holds_any_summation_order_and_nothing_wrong(world):
    """Against the reference's ring order: other rings, a pairwise tree and an fp32 sum rounded once
    pass (partials with fp32 accumulation noise, as two GEMMs give); a dropped partial, the rows of
    another owner, and the own partial alone fail. (The manifest's 2.4% at W=8 is this measurement
    over 12M elements.)"""
    rng = np.random.default_rng(world)
    n, worst, wrong = 400_000, 0.0, []
    for _ in range(2):
        exact = [rng.standard_normal((2, n // 2)) / np.sqrt(world) for _ in range(world)]
        ref_parts = [bf16(x * (1 + 8e-6 * rng.standard_normal(x.shape))) for x in exact]
        parts = [bf16(x * (1 + 8e-6 * rng.standard_normal(x.shape))) for x in exact]
        ref = _ring(ref_parts, 0)
        tree = list(parts)
        while len(tree) > 1:
            tree = [bf16(tree[i] + tree[i + 1]) if i + 1 < len(tree) else tree[i] for i in range(0, len(tree), 2)]
        others = [bf16(sum(parts)), tree[0], _ring([parts[i] for i in rng.permutation(world)], 0)]
        worst = max([worst] + [compare(np, bits(o), bits(ref), "bf16").max_rel_error for o in others])
        dropped = bf16(sum(parts[1:]))
        shifted = np.roll(bf16(sum(parts)), 1, axis=1)  # a row block of another owner: other values
        own_only = parts[0]
        wrong += [compare(np, bits(w), bits(ref), "bf16").passed(W.rtol) for w in (dropped, shifted, own_only)]
    assert worst < 0.75 * W.rtol, worst
    assert not any(wrong)


def test_the_reference_and_its_functions_count_the_same_work():
    from types import SimpleNamespace

    for shape in W.bench_shapes:
        for world in W.world_sizes:
            ref = object.__new__(REF.Reference)
            ref.env = SimpleNamespace(dims=dict(shape.dims), world=world)
            assert ref.comm_bytes() == REF.comm_bytes(dict(shape.dims), world)


def test_the_reference_names_its_communication_part_as_communication():
    """The baseline counts a part as communication by name: the reduce-scatter must be one, or the
    bound would be the sum of two computations."""
    from cuco_tui.evaluate.baseline import COMM_PARTS, ShapeBaseline, bound
    from cuco_tui.core.result import Spread

    ref = object.__new__(REF.Reference)
    ref.gemm = ref.reducescatter = lambda *a: None
    parts = ref.parts({}, {})
    assert set(parts) == {"gemm", "reducescatter"} and "reducescatter" in COMM_PARTS
    s = ShapeBaseline("x", {}, Spread.of([3.0]), {"gemm": Spread.of([1.0]), "reducescatter": Spread.of([2.0])})
    assert bound(s) == 2.0


# ---------------------------------------------------------------------------- the folder and the seed


def test_the_folder_passes_the_workload_check():
    findings = check_workload(W.root)
    assert [f for f in findings if f.level != "ok"] == [], [f.__dict__ for f in findings if f.level != "ok"]
    assert any(f.item == "reference" and f.level == "ok" for f in findings)


def test_the_seed_declares_the_reference_design_and_passes_l0():
    from cuco_tui.design.classify import classify
    from cuco_tui.source.regions import design_of
    from static_helpers import assert_static_ok

    assert_static_ok(SEED, SEED)
    assert design_of(SEED) == {"backend": "nccl_host", "placement": "after", "sync": "global", "issuer": "host",
                               "chunk": "full", "streams": "1", "comm_sms": "0"}
    ev = classify(SEED)
    assert ev.data_backends == ("nccl_host",) and ev.overlap == "none" and ev.streams == 1
    assert "ncclReduceScatter(" in SEED and "cublasGemmEx(" in SEED


# ---------------------------------------------------------------------------- on one GPU


@pytest.mark.gpu
@pytest.mark.parametrize("shape", W.verify_shapes, ids=lambda s: s.name)
def test_the_reference_matches_float64_on_one_gpu(shape):
    """The CuPy reference on a one-rank communicator (a reduce-scatter of one rank is a copy): the
    GEMM's indexing and the copy into y, against float64, twice (nothing left over matters)."""
    import cupy
    from cupy.cuda import nccl

    class Env:
        pass

    dims = dict(shape.dims)
    env = Env()
    env.comm = nccl.NcclCommunicator(1, nccl.get_unique_id(), 0)
    env.stream = cupy.cuda.Stream(non_blocking=True)
    env.world, env.rank, env.dims, env.cupy = 1, 0, dims, cupy
    io = REF.io_spec(dims, 1)
    inputs = {n: cupy.empty(s, dtype=cupy.uint16) for n, s, _ in io["inputs"]}
    outputs = {n: cupy.empty(s, dtype=cupy.uint16) for n, s, _ in io["outputs"]}
    ref = REF.Reference(env)
    for seed in (5, 6):
        with env.stream:
            REF.fill_inputs(cupy, inputs, dims, 1, 0, seed)
            outputs["y"].fill(0x7FC1)  # poisoned: anything left unwritten fails
        ref.run(inputs, outputs)
        env.stream.synchronize()
        want = REF.expected([{k: cupy.asnumpy(v) for k, v in inputs.items()}], dims, 1)[0]["y"]
        c = compare(np, cupy.asnumpy(outputs["y"]), bits(want), "bf16")
        assert c.passed(W.rtol) and c.l2_rel_error < 1e-2, c
    assert ref.comm_bytes() == 0
    env.comm.destroy()
