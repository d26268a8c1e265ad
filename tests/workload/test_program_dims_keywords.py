"""A program whose `solution` takes dims beside its tensors, as keyword-only parameters named as
make_inputs' dims (tests/workload/programs/head_softmax.py): the import sizes, runs and traces it
with the shape's values given, its reference's expected() is its math computed here with NumPy, and
a keyword that is no dim is refused in one line with nothing written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from cuco_tui.core.workload import WorkloadError  # noqa: E402
from cuco_tui.workload.manifest import load_workload  # noqa: E402
from cuco_tui.workload.program.importer import import_program  # noqa: E402
from program_helpers import bf16_as_f64, written_reference  # noqa: E402

PROGRAM = Path(__file__).parent / "programs" / "head_softmax.py"



def test_solution_is_given_the_dims_it_takes_by_keyword(tmp_path):
    made = import_program(PROGRAM, 2, parent=tmp_path)
    w = load_workload(made.root)
    dims = dict(w.verify_shapes[0].dims)
    ref = written_reference(made.root)
    assert [b[0] for b in ref.io_spec(dims, 2, 0)["inputs"]] == ["x"]  # H is a dim, not an input
    inputs = []
    for rank in range(2):
        bufs = {n: np.zeros(s, dtype=np.uint16) for n, s, _ in ref.io_spec(dims, 2, rank)["inputs"]}
        ref.fill_inputs(np, bufs, dims, 2, rank, 1)
        inputs.append(bufs)
    full = np.concatenate([bf16_as_f64(r["x"]) for r in inputs]).reshape(dims["M"], dims["H"], dims["D"])
    e = np.exp(full - full.max(-1, keepdims=True))
    want = (e / e.sum(-1, keepdims=True)).reshape(dims["M"], -1)
    for got in ref.expected(inputs, dims, 2):
        assert np.allclose(got["out"], want, rtol=1e-10, atol=1e-12)


def test_a_keyword_that_is_no_dim_is_refused_in_one_line(tmp_path):
    bad = tmp_path / "bad_keyword.py"
    bad.write_text(PROGRAM.read_text().replace("def solution(x, *, H):", "def solution(x, *, HEADS):")
                   .replace("view(full.shape[0], H, -1)", "view(full.shape[0], HEADS, -1)"))
    with pytest.raises(WorkloadError) as err:
        import_program(bad, 2, parent=tmp_path / "w")
    assert "solution takes the keyword HEADS, which is not a dim of make_inputs (M, H, D)" in str(err.value)
    assert len(str(err.value).splitlines()) == 1 and not (tmp_path / "w").exists()


def test_the_dims_solution_takes_are_its_keyword_only_ones_or_all_but_its_inputs_with_kwargs():
    from cuco_tui.workload.program.user_module import dims_for

    dims = {"M": 8, "H": 2, "D": 4}

    def keyword(x, *, H, D=64):
        return x

    def every(x, H, **rest):  # H is an input here: given positionally, never twice
        return x

    assert dims_for(keyword, dims) == {"H": 2, "D": 4}
    assert dims_for(every, dims) == {"M": 8, "D": 4}
    assert dims_for(lambda x: x, dims) == {}
