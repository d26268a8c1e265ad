import importlib.util

import numpy as np
import pytest

from cuco_tui.toolchain.toolchain import discover
from cuco_tui.evaluate.cascade import evaluate
from cuco_tui.core.result import Status
from cuco_tui.harness.bf16 import from_bf16_bits
from cuco_tui.core.workload import WorkloadError
from cuco_tui.workload.manifest import load_workload

W = load_workload("kv_transfer")


def _ref():
    spec = importlib.util.spec_from_file_location("kv_ref", W.reference)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_manifest():
    assert W.world_sizes == (2,)
    assert len(W.bench_shapes) >= 3
    W.check_world(2)
    with pytest.raises(WorkloadError):
        W.check_world(4)


def test_buffers_differ_by_role():
    ref = _ref()
    dims = W.verify_shapes[0].dims
    prefill, decode = ref.io_spec(dims, 2, 0), ref.io_spec(dims, 2, 1)
    assert [n for n, _, _ in prefill["inputs"]] == ["x", "w"] and prefill["outputs"] == []
    assert decode["inputs"] == [] and decode["outputs"][0][1] == (dims["L"], dims["S"], 2 * dims["D"])


def test_reference_formula_matches_float64_per_layer():
    ref = _ref()
    dims = {"L": 3, "S": 5, "H": 4, "D": 2}
    inputs = []
    for rank in range(2):
        spec = ref.io_spec(dims, 2, rank)
        bufs = {n: np.empty(s, dtype=np.uint16) for n, s, _ in spec["inputs"]}
        ref.fill_inputs(np, bufs, dims, 2, rank, seed=9)
        inputs.append(bufs)
    out = ref.expected(inputs, dims, 2)
    assert out[0] == {}
    x = from_bf16_bits(np, inputs[0]["x"]).astype(np.float64)
    w = from_bf16_bits(np, inputs[0]["w"]).astype(np.float64)
    for layer in range(3):
        manual = np.array([[sum(x[s, h] * w[layer, h, d] for h in range(4)) for d in range(4)] for s in range(5)])
        assert np.allclose(out[1]["kv"][layer], manual)


@pytest.mark.skipif(not discover().can_compile, reason="needs nvcc, NCCL and cuBLAS headers")
def test_seed_compiles_and_stops_with_no_gpu(monkeypatch):
    monkeypatch.setenv("CUCO_NO_GPU", "1")
    r = evaluate(W.seed, W)
    assert r.status == Status.NO_GPU, r.reason


@pytest.mark.skipif(not discover().can_compile, reason="needs nvcc, NCCL and cuBLAS headers")
def test_every_strategy_template_passes_l0_and_compiles(tmp_path):
    from cuco_tui.agents.offline import StrategyBook
    from cuco_tui.toolchain import BuildCache, compile_candidate
    from cuco_tui.design.classify import check_declaration
    from cuco_tui.evaluate.static_checks import check_static, is_rejected

    book = StrategyBook.load(W.root, W.seed)
    assert {s.name for s in book.strategies} >= {"host_sequential", "host_layered", "ce_pull", "ce_push", "ipc_push"}
    for s in book.strategies:
        src = book.render(s, s.default_knobs())
        assert not is_rejected(check_static(src, W.seed.read_text(), "c.cu"))
        assert check_declaration(src) == []
        path = tmp_path / f"{s.name}.cu"
        path.write_text(src)
        r = compile_candidate(path, discover(), BuildCache())  # the session's cache (conftest): built once a run
        assert r.ok, "\n".join(d.render() for d in r.diagnostics)


def _gpus():
    from cuco_tui.harness.gpus import inventory

    return inventory().count


# 16 groups on the 4-layer verify shape: the templates clamp the groups to the layers.
@pytest.mark.gpu
@pytest.mark.parametrize("strategy, knobs", [
    ("host_layered", {"groups": 4}),
    ("ce_pull", {"groups": 4}),
    ("ce_pull", {"groups": 16}),
    ("ce_push", {"groups": 4}),
    ("ce_push", {"groups": 16}),
    ("ipc_push", {"groups": 4, "mover_blocks": 16}),
    ("ipc_push", {"groups": 8, "mover_blocks": 64}),
])
def test_template_is_verified_on_two_gpus(tmp_path, strategy, knobs):
    from cuco_tui.agents.offline import StrategyBook
    from cuco_tui.evaluate.cascade import EvalOptions

    if _gpus() < 2:
        pytest.skip("needs 2 GPUs")
    book = StrategyBook.load(W.root, W.seed)
    s = book.get(strategy)
    path = tmp_path / f"{strategy}.cu"
    path.write_text(book.render(s, {**s.default_knobs(), **knobs}))
    r = evaluate(path, W, EvalOptions(world=2, bench=False))
    assert r.status == Status.VERIFIED, r.reason + "\n" + r.deadlock_report + "\n".join(
        d.render() for d in r.diagnostics)
    assert r.verifications and all(v.ok for v in r.verifications)
