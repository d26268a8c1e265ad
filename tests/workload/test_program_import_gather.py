"""The gather patterns of ParallelKernelBench's GEMM problems, imported from small programs of
tests/workload/programs/ at 2 CPU ranks: all-gather along K → matmul (a list concatenated along dim
1; the transposed slice gathered into one tensor, C^T computed and returned transposed), matmul →
all-gather along dim 1, and matmul → all-reduce whose K each rank holds whole at any world size.
Each is named and mapped; the written reference's expected() is the program's math computed here
with NumPy; the seed declares its knobs and `cuco workload check` passes, compiling it where nvcc is;
an offline search without a GPU compiles the overlapping variants (slow)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from cuco_tui.agents.offline.strategy import StrategyBook  # noqa: E402
from cuco_tui.cli.workload_check import check_workload  # noqa: E402
from cuco_tui.toolchain.toolchain import discover  # noqa: E402
from cuco_tui.workload.manifest import load_workload  # noqa: E402
from cuco_tui.workload.program.gloo_run import GlooRanks  # noqa: E402
from cuco_tui.workload.program.importer import import_program  # noqa: E402
from repo_paths import REPO  # noqa: E402

PROGRAMS = Path(__file__).parent / "programs"
K_RANK = 96  # matmul_ar_fixed_k.py's K per rank

# program -> (the line the import prints, the seed's overlap knob and a value of it that overlaps)
CASES = {
    "ag_k_cat": ("all-gather along K → matmul: mapped", ("kPerPeer", 1)),
    "ag_k_transposed": ("all-gather along K → matmul: mapped", ("kPerPeer", 1)),
    "mm_allgather_cols": ("matmul → all-gather along dim 1: mapped", ("kChunks", 4)),
    "matmul_ar_fixed_k": ("matmul → all-reduce: mapped", ("kChunks", 4)),
}


@pytest.fixture(scope="module")
def ranks():
    with GlooRanks(2) as pool:
        yield pool


@pytest.fixture(scope="module")
def imported(tmp_path_factory, ranks):
    made = {}

    def get(name: str):
        if name not in made:
            made[name] = import_program(PROGRAMS / f"{name}.py", 2, parent=tmp_path_factory.mktemp(name), ranks=ranks)
        return made[name]

    return get


def _reference(root: Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"ref_{root.name}", root / "reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _f64(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)


def _inputs(ref, dims: dict, seed: int) -> list[dict]:
    out = []
    for rank in range(2):
        spec = ref.io_spec(dims, 2, rank)
        bufs = {n: np.zeros(s, dtype=np.uint16) for n, s, _ in spec["inputs"]}
        ref.fill_inputs(np, bufs, dims, 2, rank, seed)
        out.append(bufs)
    return out


def _want(name: str, inputs: list[dict]) -> list[np.ndarray]:
    """Each rank's answer, from the program's math."""
    x = [_f64(r["x"]) for r in inputs]
    b = [_f64(r["b"]) for r in inputs]
    if name.startswith("ag_k"):  # [x_0 | x_1] @ b_r
        return [np.concatenate(x, axis=1) @ b[r] for r in range(2)]
    if name == "mm_allgather_cols":  # [x_0 @ b_0 | x_1 @ b_1] on every rank
        return [np.concatenate([x[p] @ b[p] for p in range(2)], axis=1)] * 2
    return [x[0] @ b[0] + x[1] @ b[1]] * 2


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_gemm_problems_gather_patterns_are_mapped_and_their_reference_is_the_program(imported, ranks, name):
    said, (knob, _) = CASES[name]
    made = imported(name)
    assert any(said in line for line in made.lines), made.lines
    w = load_workload(made.root)
    dims = dict(w.verify_shapes[0].dims)
    if name == "matmul_ar_fixed_k":  # the per-rank K, the same at every world size; no K that would change
        assert "K" not in w.dim_names and all(s.dims["KR"] == K_RANK for s in w.verify_shapes + w.bench_shapes)
        assert 'cuco::dim(ctx, "KR")' in w.seed.read_text()
    ref = _reference(made.root)
    M, N = dims["M"], dims["N"]
    assert ref.io_spec(dims, 2, 1)["outputs"] == [("y", (M, N), "bf16")]
    inputs = _inputs(ref, dims, seed=3)
    got = ref.PROGRAM.expected(inputs, dims, 2, ranks=ranks)
    for rank, want in enumerate(_want(name, inputs)):
        assert np.allclose(got[rank]["y"], want, rtol=1e-10, atol=1e-10), rank
    # The offline agent's space: the seed's own knobs, the overlap among them.
    book = StrategyBook.load(made.root, w.seed)
    [seed] = book.strategies
    assert CASES[name][1][1] in seed.knobs[knob]
    findings = check_workload(made.root, compile_seed=discover().can_compile, probe_timeout=900)
    assert not [f for f in findings if f.level != "ok"], findings


def test_the_program_returning_the_transposed_product_is_read_back_in_its_order(imported):
    """solution returns C^T transposed, a view with column-major strides: the harness's y [M, N] holds
    it row-major (the reference agreed with the program's CPU run, or the import would have failed)."""
    record = json.loads((imported("ag_k_transposed").root / "program.json").read_text())
    [match] = record["patterns"]
    assert match["roles"] == {"x": 0, "b": 1, "b_layout": "as_is", "output": 0} and not match["problem"]
    assert [b["layout"] for b in record["layout"]["inputs"]] == ["as_is", "as_is"]


def test_a_weight_gathered_under_fsdp_is_gemm_allgathers_problem_transposed(imported, ranks):
    """fsdp_linear.py gathers its weight's shards: gemm_allgather's x is the shards, b the rank's tokens
    transposed, y the result transposed (M = the program's N, renamed N_prog; N = its T); all five
    of gemm_allgather's templates offered; expected() is x_r @ W^T, computed here."""
    made = imported("fsdp_linear")
    line = next(line for line in made.lines if line.startswith("pattern: all-gather of a weight"))
    assert ": mapped (seed = gemm_allgather's" in line and "N is N_prog" in line, line
    w = load_workload(made.root)
    assert w.dim_names == ("T", "K", "N_prog", "M", "N")
    for shape in w.verify_shapes + w.bench_shapes:
        assert (shape.dims["M"], shape.dims["N"]) == (shape.dims["N_prog"], shape.dims["T"])
    assert {s.name for s in StrategyBook.load(made.root, w.seed).strategies} == {
        "host_sequential", "host_chunked", "lsa_gather", "peer_pipeline", "fused_tile"}
    ref = _reference(made.root)
    dims = dict(w.verify_shapes[0].dims)
    T, K, N = dims["T"], dims["K"], dims["N_prog"]
    assert ref.io_spec(dims, 2, 0) == {"inputs": [("b", (K, T // 2), "bf16"), ("x", (N // 2, K), "bf16")],
                                       "outputs": [("y", (N, T // 2), "bf16")]}
    inputs = _inputs(ref, dims, seed=5)
    whole = np.concatenate([_f64(r["x"]) for r in inputs])  # the weight [N, K]
    got = ref.PROGRAM.expected(inputs, dims, 2, ranks=ranks)
    for rank in range(2):  # y^T = W @ x_r^T, x_r^T being b
        assert np.allclose(got[rank]["y"], whole @ _f64(inputs[rank]["b"]), rtol=1e-10, atol=1e-10)
    findings = check_workload(made.root, compile_seed=False, probe_timeout=900)
    assert not [f for f in findings if f.level == "error"], findings


def test_a_weight_gather_with_tokens_fixed_per_rank_says_why_it_is_not_mapped(tmp_path, ranks):
    text = (PROGRAMS / "fsdp_linear.py").read_text().replace("torch.randn(T // world, K,", "torch.randn(T, K,")
    (tmp_path / "fsdp_fixed_t.py").write_text(text)
    made = import_program(tmp_path / "fsdp_fixed_t.py", 2, parent=tmp_path / "w", ranks=ranks)
    line = next(line for line in made.lines if line.startswith("pattern: all-gather of a weight"))
    assert "not mapped (the tokens per rank at verify are fixed per rank" in line, line


@pytest.mark.slow
@pytest.mark.skipif(not discover().can_compile, reason="no CUDA toolchain here: the cascade cannot compile")
@pytest.mark.parametrize("name", ["ag_k_transposed", "mm_allgather_cols", "matmul_ar_fixed_k"])
def test_an_offline_search_compiles_the_overlapping_variants(tmp_path, name):
    from cuco_tui.lineage import SessionRepo

    main = "import sys; from cuco_tui.cli import main; sys.exit(main())"
    env = dict(os.environ, CUCO_NO_GPU="1")
    env.pop("ANTHROPIC_API_KEY", None)
    run = lambda *args: subprocess.run([sys.executable, "-c", main, *args], env=env, capture_output=True,  # noqa: E731
                                       text=True, timeout=1800, cwd=REPO)
    made = run("workload", "import", str(PROGRAMS / f"{name}.py"), "--world", "2", "--dir", str(tmp_path))
    assert made.returncode == 0, made.stderr
    session = tmp_path / "s"
    out = run("search", "--workload", str(tmp_path / name), "--agent", "offline", "--generations", "2", "--seed", "0",
              "--session", str(session), "--json")
    assert out.returncode == 0, out.stderr[-3000:]
    repo = SessionRepo.open(session)
    try:
        records = repo.records(with_source=True)
    finally:
        repo.close()
    knob, value = CASES[name][1]
    compiled = [r for r in records if r.status == "no_gpu"]
    overlapping = [r for r in compiled if r.design.get("knobs", {}).get(knob) == value]
    assert overlapping, [(r.id, r.status, r.design.get("knobs")) for r in records]
    assert f"constexpr int {knob} = {value};" in overlapping[0].source
