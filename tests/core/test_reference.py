"""A workload's reference through the one loader and its protocol (core/reference.py): every
shipped workload's reference.py meets it (buffers, fresh inputs, the float64 answer, the work it
counts), a malformed io_spec is refused in the contract's words, and the rank's buffers follow
the typed spec (allocated here with NumPy, the other array module a reference takes)."""

from __future__ import annotations

import numpy as np
import pytest

from cuco_tui.core.reference import (Buffer, IoSpec, ModuleRankReference, ReferenceContractError, load_reference,
                                     parse_io_spec)
from cuco_tui.harness.rank_reference import buffers
from cuco_tui.workload.manifest import REPO_WORKLOADS, load_workload

WORKLOADS = sorted(p.name for p in REPO_WORKLOADS.iterdir() if (p / "manifest.toml").exists())
NUMPY = {"bf16": np.uint16, "f16": np.uint16, "f32": np.float32, "i32": np.int32, "i64": np.int64, "u8": np.uint8}


@pytest.mark.parametrize("name", WORKLOADS)
def test_every_workload_reference_meets_the_protocol(name):
    w = load_workload(name)
    ref = load_reference(w.reference)
    assert ref.missing() == [] and ref.missing_methods() == []
    shape = min(w.verify_shapes, key=lambda s: np.prod(list(s.dims.values())))
    dims, world = dict(shape.dims), min(w.world_sizes)
    all_inputs = []
    for rank in range(world):
        spec = ref.io_spec(dims, world, rank)
        assert (spec.inputs or spec.outputs) and all(isinstance(b, Buffer) for b in spec.inputs + spec.outputs)
        inputs = {b.name: np.zeros(b.shape, dtype=NUMPY[b.dtype]) for b in spec.inputs}
        ref.fill_inputs(np, inputs, dims, world, rank, seed=3)
        all_inputs.append(inputs)
    answers = ref.expected(all_inputs, dims, world)
    for rank, answer in enumerate(answers):
        assert {b.name: b.shape for b in ref.io_spec(dims, world, rank).outputs} == \
            {k: tuple(np.shape(v)) for k, v in answer.items()}
    for bench in w.bench_shapes:  # what the search's TFLOP/s and GB/s come from
        assert ref.flops(dict(bench.dims), world) == int(ref.module.flops(dict(bench.dims), world))
        assert ref.comm_bytes(dict(bench.dims), world) == int(ref.module.comm_bytes(dict(bench.dims), world))


def test_what_a_reference_does_not_count_is_none(tmp_path):
    path = tmp_path / "reference.py"
    path.write_text("def io_spec(dims, world, rank=0):\n    return {'inputs': [('x', (4,), 'f32')], 'outputs': []}\n"
                    "class Reference:\n    def __init__(self, env):\n        self.env = env\n")
    ref = load_reference(path)
    assert ref.missing() == ["fill_inputs", "expected"] and ref.missing_methods() == ["run", "parts"]
    assert ref.flops({}, 2) is None and ref.comm_bytes({}, 2) is None and not ref.counts_rank_bytes()
    rank = ModuleRankReference(ref.module.Reference(None))
    assert rank.comm_bytes() is None and rank.warnings() == []
    (tmp_path / "broken.py").write_text("import not_a_module_anywhere\n")
    with pytest.raises(ModuleNotFoundError):
        load_reference(tmp_path / "broken.py")


@pytest.mark.parametrize("spec,says", [
    ({"inputs": [("x", (4,), "f64")], "outputs": []}, "io_spec(here): buffer 'x' has dtype 'f64'; use one of"),
    ({"inputs": [("x", (4, 0), "f32")], "outputs": []}, "io_spec(here): buffer 'x' has shape (4, 0); every extent"),
    ({"inputs": [("x", (4,), "f32")], "outputs": [("x", (4,), "f32")]}, "io_spec(here): buffer 'x' is named twice"),
    ({"inputs": [("x", (4,))]}, "io_spec(here): each inputs entry is (name, shape, dtype)"),
    ([("x", (4,), "f32")], "io_spec(here) must return {'inputs': [...], 'outputs': [...]}"),
])
def test_a_malformed_io_spec_is_refused_in_the_contracts_words(spec, says):
    with pytest.raises(ReferenceContractError) as caught:
        parse_io_spec(spec, "(here)")
    assert says in str(caught.value)


def test_a_ranks_buffers_follow_the_typed_spec():
    spec = parse_io_spec({"inputs": [("x", (4, 2), "bf16"), ("idx", [3], "i32")], "outputs": [("y", (4,), "f32")]})
    assert spec == IoSpec((Buffer("x", (4, 2), "bf16"), Buffer("idx", (3,), "i32")), (Buffer("y", (4,), "f32"),))
    inputs, outputs, expected, dtypes = buffers(np, spec)
    assert [(n, a.shape, a.dtype) for n, a in inputs.items()] == [("x", (4, 2), np.uint16), ("idx", (3,), np.int32)]
    assert [(n, a.shape, a.dtype) for n, a in outputs.items()] == [("y", (4,), np.float32)]
    assert expected.keys() == outputs.keys() and expected["y"] is not outputs["y"]
    assert dtypes == {"x": "bf16", "idx": "i32", "y": "f32"}
