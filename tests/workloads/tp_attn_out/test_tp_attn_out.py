"""tp_attn_out, the workload added through `cuco workload new`: its folder passes the workload
check, every point of its seed's knob space passes L0 (and a spread of them compiles), its
reference's numerics are what float64 says within the tolerance (and a wrong pipeline is not), the
offline agent searches its knobs, and on one GPU its reference matches float64."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from cuco_tui.cli.workload_check import check_workload
from cuco_tui.evaluate.static_checks import check_static, is_rejected
from cuco_tui.harness.bf16 import from_bf16_bits, to_bf16_bits
from cuco_tui.core.reference import reference_module
from cuco_tui.harness.verify import compare
from cuco_tui.source.knobs import seed_knobs, with_knobs
from cuco_tui.workload.manifest import load_workload

W = load_workload("tp_attn_out")
REF = reference_module(W.reference)
SEED = W.seed.read_text()


def _inputs(dims, world, seed=3):
    out = []
    for rank in range(world):
        spec = REF.io_spec(dims, world, rank)
        inputs = {n: np.zeros(s, dtype=np.uint16) for n, s, _ in spec["inputs"]}
        REF.fill_inputs(np, inputs, dims, world, rank, seed)
        out.append(inputs)
    return out


def _bf16(v):
    return from_bf16_bits(np, to_bf16_bits(np, np.asarray(v, dtype=np.float32))).astype(np.float64)


def _bits(v):
    return to_bf16_bits(np, np.asarray(v, dtype=np.float32))


def _simulate(all_inputs, dims, add_residual=True):
    """The reference's pipeline with its roundings: bf16 partials, their sum, bf16 h, bf16 y."""
    f = lambda v: from_bf16_bits(np, v).astype(np.float64)  # noqa: E731
    partial = sum(_bf16(f(i["a"]) @ f(i["w"])) for i in all_inputs)
    h = _bf16(_bf16(partial) + (f(all_inputs[0]["residual"]) if add_residual else 0.0))
    y = _bf16(h / np.sqrt(np.mean(h * h, axis=1, keepdims=True) + REF.EPS) * f(all_inputs[0]["gamma"]))
    return h, y


@pytest.mark.parametrize("world", [2, 4, 8])
@pytest.mark.parametrize("shape", W.verify_shapes, ids=lambda s: s.name)
def test_the_reference_pipeline_is_within_tolerance_of_float64(world, shape):
    dims = dict(shape.dims)
    all_inputs = _inputs(dims, world)
    want = REF.expected(all_inputs, dims, world)
    assert all(np.array_equal(i["residual"], all_inputs[0]["residual"]) for i in all_inputs)  # replicated
    h, y = _simulate(all_inputs, dims)
    for name, got in (("h", h), ("y", y)):
        c = compare(np, _bits(got), _bits(want[0][name]), "bf16", W.floor)
        assert c.passed(W.rtol), (name, c)


def test_a_pipeline_without_the_residual_fails_the_check():
    dims = dict(W.verify_shapes[0].dims)
    all_inputs = _inputs(dims, 2)
    want = REF.expected(all_inputs, dims, 2)
    h, _ = _simulate(all_inputs, dims, add_residual=False)
    assert not compare(np, _bits(h), _bits(want[0]["h"]), "bf16", W.floor).passed(W.rtol)


def test_the_folder_passes_the_workload_check():
    findings = check_workload(W.root)
    assert [f for f in findings if f.level != "ok"] == []
    assert any(f.item == "seed L1" and f.level == "ok" for f in findings)


def test_every_knob_setting_passes_l0():
    knobs = seed_knobs(SEED)
    assert [k.name for k in knobs] == ["kChunks", "kNcclMaxCtas", "kNormThreads"]
    for values in itertools.product(*(k.choices() for k in knobs)):
        source = with_knobs(SEED, dict(zip([k.name for k in knobs], values)))
        assert not is_rejected(check_static(source, SEED, "knobs.cu")), values


@pytest.mark.parametrize("values", [dict(kChunks=8, kNcclMaxCtas=16, kNormThreads=1024),
                                    dict(kChunks=2, kNcclMaxCtas=8, kNormThreads=128)])
def test_knob_settings_compile(tmp_path, values):
    from cuco_tui.toolchain import compile_candidate
    from cuco_tui.toolchain.toolchain import discover

    tc = discover()
    if not tc.can_compile:
        pytest.skip("no CUDA toolchain: " + "; ".join(tc.problems))
    path = tmp_path / "knobs.cu"
    path.write_text(with_knobs(SEED, values))
    build = compile_candidate(path, tc)
    assert build.ok, [d.render() for d in build.diagnostics]


def test_the_offline_agent_searches_the_seeds_knobs():
    from cuco_tui.agents.base import ProposalRequest
    from cuco_tui.agents.offline import OfflineAgent
    from cuco_tui.core.records import CandidateRecord

    agent = OfflineAgent(W)
    seed = CandidateRecord(id="c0000", generation=0, island=0, kind="seed", parents=(), source=SEED, design={},
                           rationale="", agent="engineer", status="no_gpu")
    sources = set()
    for kind in ("full", "diff", "full", "diff"):
        p = agent.propose(ProposalRequest(kind=kind, workload=W, parents=(seed,)))
        assert p.source and not p.error, p.error
        assert p.design["knobs"]["strategy"] == "seed"
        assert not is_rejected(check_static(p.source, SEED, "p.cu"))
        sources.add(p.source)
    assert len(sources) == 4 and SEED not in sources  # four new knob settings, never the seed's own


@pytest.mark.gpu
@pytest.mark.parametrize("shape", W.verify_shapes, ids=lambda s: s.name)
def test_the_reference_matches_float64_on_one_gpu(shape):
    """The CuPy reference on a one-rank communicator (the all-reduce of one rank is a copy)."""
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
    with env.stream:
        REF.fill_inputs(cupy, inputs, dims, 1, 0, 5)
        for o in outputs.values():
            o.fill(0x7FC1)  # poisoned: anything left unwritten fails
    ref = REF.Reference(env)
    ref.run(inputs, outputs)
    env.stream.synchronize()
    want = REF.expected([{k: cupy.asnumpy(v) for k, v in inputs.items()}], dims, 1)[0]
    for name in ("h", "y"):
        c = compare(np, cupy.asnumpy(outputs[name]), _bits(want[name]), "bf16", W.floor)
        assert c.passed(W.rtol) and c.l2_rel_error < 1e-2, (name, c)
    env.comm.destroy()


def _ring(parts, order):
    acc = parts[order[0]]
    for i in order[1:]:
        acc = _bf16(acc + parts[i])
    return acc


@pytest.mark.parametrize("world", [2, 4, 8])
def test_the_tolerance_holds_any_bf16_all_reduce_order_and_no_dropped_rank(world):
    """Two correct programs may all-reduce bf16 partials in different orders (NCCL's ring or tree,
    chunked or not): the tolerance must pass that, and still fail a rank's partial left out."""
    rng = np.random.default_rng(world)
    T, H = 96, 1024
    worst, dropped = 0.0, []
    for _ in range(6):
        parts = [_bf16(rng.standard_normal((T, H)) / np.sqrt(world)) for _ in range(world)]
        residual = _bf16(rng.standard_normal((T, H)))
        a = _bf16(_ring(parts, list(range(world))) + residual)
        b = _bf16(_ring(parts, list(rng.permutation(world))) + residual)
        worst = max(worst, compare(np, _bits(b), _bits(a), "bf16").max_rel_error)
        short = _bf16(_ring(parts[1:], list(range(world - 1))) + residual) if world > 1 else residual
        dropped.append(compare(np, _bits(short), _bits(a), "bf16").passed(W.rtol))
    assert worst < W.rtol, worst
    assert not any(dropped)
