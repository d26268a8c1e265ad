"""A workload from a PyTorch program (`cuco workload import`, cuco_tui.workload.program), on the CPU:
each small program of tests/workload/programs/ imported at 2 ranks (the program run in float64
under gloo on 2 CPU processes the file starts once, one call traced), the pattern it holds
recognized and, where the tool maps it, the seed, templates and buffers written for it; the written
reference's fill_inputs and expected checked against the program's math computed here with NumPy."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from cuco_tui.agents.offline.strategy import StrategyBook  # noqa: E402
from cuco_tui.cli.workload_check import check_workload  # noqa: E402
from cuco_tui.evaluate.static_checks import check_static, is_rejected  # noqa: E402
from cuco_tui.workload.manifest import load_workload  # noqa: E402
from cuco_tui.core.workload import WorkloadError  # noqa: E402
from cuco_tui.workload.program.gloo_run import GlooRanks  # noqa: E402
from cuco_tui.workload.program.importer import import_program  # noqa: E402
from cuco_tui.workload.program.record import NO_SEED_MARK  # noqa: E402
from cuco_tui.toolchain.toolchain import discover  # noqa: E402

from program_helpers import BAD, BAD_AT_THE_CLI, program_variant  # noqa: E402

PROGRAMS = Path(__file__).parent / "programs"


@pytest.fixture(scope="module")
def ranks():
    """2 CPU ranks for every import and expected() of this file: each job loads its program afresh
    in torch's starting state (test_gloo_ranks), and each rank imports torch once instead of twice a
    test. An import on ranks of its own: the CLI tests (test_workload_import_cli), and the probe of
    `cuco workload check` runs the written reference's expected() on ranks of its own."""
    with GlooRanks(2) as pool:
        yield pool


@pytest.fixture(scope="module")
def imported(tmp_path_factory, ranks):
    """name -> the ImportReport of tests/workload/programs/<name>.py at 2 ranks, each made once."""
    made = {}

    def get(name: str):
        if name not in made:
            made[name] = import_program(PROGRAMS / f"{name}.py", 2, parent=tmp_path_factory.mktemp(name), ranks=ranks)
        return made[name]

    return get


def _record(root: Path) -> dict:
    return json.loads((root / "program.json").read_text())


def _reference(root: Path):
    """The written reference.py, imported as the harness imports it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"ref_{root.name}", root / "reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _buffers(ref, dims: dict, world: int, seed: int) -> list[dict]:
    kinds = {"bf16": np.uint16, "f32": np.float32}
    out = []
    for rank in range(world):
        spec = ref.io_spec(dims, world, rank)
        inputs = {n: np.zeros(s, dtype=kinds[d]) for n, s, d in spec["inputs"]}
        ref.fill_inputs(np, inputs, dims, world, rank, seed)
        out.append(inputs)
    return out


def _f64(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)


def _expected(ref, inputs: list[dict], dims: dict, ranks: GlooRanks) -> list[dict]:
    """The written reference's expected() at 2 ranks, on this file's ranks (reference.py's own
    expected(), on ranks of its own: test_the_reference_fills_..., and the probe of _check_is_clean)."""
    return ref.PROGRAM.expected(inputs, dims, 2, ranks=ranks)


def _check_is_clean(root: Path) -> None:
    # The probe (python, then 2 ranks importing torch) took over its default 120 s on a 2-core
    # machine under load: a limit for a hang, not for this machine's speed.
    findings = check_workload(root, compile_seed=False, probe_timeout=900)
    assert not [f for f in findings if f.level == "error"], findings


def test_an_allgather_linear_gets_gemm_allgathers_seed_and_templates(imported):
    made = imported("ag_linear")
    root = made.root
    assert any("all-gather → linear + bias: mapped" in line for line in made.lines), made.lines
    layout = _record(root)["layout"]
    assert [(b["name"], b["index"], b["layout"]) for b in layout["inputs"]] == \
        [("x", 0, "as_is"), ("b", 1, "transposed"), ("bias", 2, "as_is")]
    w = load_workload(root)
    assert w.dim_names == ("M", "K", "N") and w.divisible == {"M": 64, "N": 64, "K": 64}
    assert w.split_dims == ("M", "N") and w.world_sizes == (2, 4, 8) and w.dtype == "bf16"
    seed = w.seed.read_text()
    assert seed.count("EVOLVE-BLOCK-START") == 2 and "program_epilogue" in seed and "ncclAllGather" in seed
    # The offline agent's space: every template of gemm_allgather, rendered into this seed's first block.
    book = StrategyBook.load(root, w.seed)
    assert {s.name for s in book.strategies} == {"host_sequential", "host_chunked", "lsa_gather", "peer_pipeline",
                                                 "fused_tile"}
    for s in book.strategies:
        src = book.render(s, s.default_knobs())
        assert not is_rejected(check_static(src, seed, f"{s.name}.cu")), s.name
        assert "program_epilogue" in src  # the epilogue block stays the seed's
    _check_is_clean(root)


def test_the_reference_fills_the_candidates_layout_and_expects_the_programs_answer(imported):
    """fill_inputs gives b = w transposed (the program's weight in nn.Linear's layout), fresh values per
    seed; expected() is y_r = concat(x) @ w_r^T + bias_r, computed here with NumPy."""
    root = imported("ag_linear").root
    ref = _reference(root)
    dims = dict(load_workload(root).verify_shapes[0].dims)
    one, two = _buffers(ref, dims, 2, seed=1), _buffers(ref, dims, 2, seed=2)
    assert one[0]["b"].shape == (dims["K"], dims["N"] // 2)
    assert not np.array_equal(one[0]["x"], two[0]["x"]) and not np.array_equal(one[0]["x"], one[1]["x"])
    import torch

    torch.manual_seed(1 * 7919 + 1)  # the adapter's seeding of rank 1 at seed 1
    prog = ref.PROGRAM._module()
    x, w, b = prog.make_inputs(1, 2, **dims, dtype=torch.bfloat16, device="cpu")
    assert np.array_equal(one[1]["b"], w.t().contiguous().view(torch.int16).numpy().view(np.uint16))
    want_full = np.concatenate([_f64(r["x"]) for r in one])
    got = ref.expected(one, dims, 2)
    for rank in range(2):
        want = want_full @ _f64(one[rank]["b"]) + _f64(one[rank]["bias"])
        assert got[rank]["y"].shape == want.shape
        assert np.allclose(got[rank]["y"], want, rtol=1e-10, atol=1e-10)


def test_a_matmul_reduce_scatter_with_a_residual_gets_a_seed_with_knobs(imported, ranks):
    made = imported("matmul_rs_residual")
    root = made.root
    assert any("matmul → reduce-scatter + residual: mapped" in line for line in made.lines), made.lines
    w = load_workload(root)
    assert set(w.split_dims) == {"M", "K"}
    assert not (root / "templates").exists()
    seed = w.seed.read_text()
    assert "ncclReduceScatter" in seed and "cuco-knob: 1 2 4 8" in seed and "residual" in seed
    ref = _reference(root)
    dims = dict(w.verify_shapes[0].dims)
    M, K, N = dims["M"], dims["K"], dims["N"]
    spec = ref.io_spec(dims, 2, 1)
    assert spec["inputs"] == [("x", (M, K // 2), "bf16"), ("b", (K // 2, N), "bf16"), ("residual", (M // 2, N), "bf16")]
    assert spec["outputs"] == [("y", (M // 2, N), "bf16")]
    inputs = _buffers(ref, dims, 2, seed=3)
    total = sum(_f64(r["x"]) @ _f64(r["b"]) for r in inputs)
    got = _expected(ref, inputs, dims, ranks)
    for rank in range(2):
        want = total[rank * M // 2:(rank + 1) * M // 2] + _f64(inputs[rank]["residual"])
        assert np.allclose(got[rank]["y"], want, rtol=1e-10, atol=1e-10)
    assert w.rtol == 0.04  # bf16 summed over the ranks
    _check_is_clean(root)


def test_a_linear_all_reduce_derives_the_patterns_dims(imported):
    made = imported("linear_ar")
    w = load_workload(made.root)
    assert any("linear → all-reduce: mapped" in line for line in made.lines), made.lines
    assert w.dim_names == ("T", "H", "F", "M", "K", "N")
    for shape in w.verify_shapes + w.bench_shapes:  # M = T rows, K = F (split), N = H
        d = shape.dims
        assert (d["M"], d["K"], d["N"]) == (d["T"], d["F"], d["H"])
    layout = _record(made.root)["layout"]
    assert [(b["name"], b["layout"]) for b in layout["inputs"]] == [("x", "as_is"), ("b", "transposed")]
    assert "ncclAllReduce" in w.seed.read_text()
    _check_is_clean(made.root)


def test_a_matmul_copied_before_its_all_reduce_is_the_pattern(imported, ranks):
    """ParallelKernelBench's gemm + all-reduce clones the product and all-reduces the copy: the
    pattern is followed back through the copy (it was not named at all)."""
    made = imported("matmul_copy_allreduce")
    assert any("matmul → all-reduce: mapped" in line for line in made.lines), made.lines
    w = load_workload(made.root)
    assert "ncclAllReduce" in w.seed.read_text()
    ref = _reference(made.root)
    dims = dict(w.verify_shapes[0].dims)
    inputs = _buffers(ref, dims, 2, seed=5)
    total = sum(_f64(r["x"]) @ _f64(r["b"]) for r in inputs)
    for got in _expected(ref, inputs, dims, ranks):
        assert np.allclose(got["y"], total, rtol=1e-10, atol=1e-10)
    _check_is_clean(made.root)


def test_a_program_without_a_pattern_imports_with_a_placeholder_seed(imported):
    made = imported("gelu_mlp")
    assert any(line.startswith("pattern: none the tool knows") for line in made.lines), made.lines
    record = _record(made.root)
    assert record["summary"] == "collectives: all_gather x1, broadcast x1; ops: gelu x1, mul x1"
    assert [b["name"] for b in record["layout"]["inputs"]] == ["x"]  # the program's own names
    assert [b["name"] for b in record["layout"]["outputs"]] == ["out"]
    findings = check_workload(made.root, compile_seed=False)
    assert not [f for f in findings if f.level == "error"], findings
    warned = {f.item: f.detail for f in findings if f.level == "warning"}
    assert "placeholder" in warned["seed"]
    assert "all_gather x1, broadcast x1" in warned["offline agent"] and "gelu" in warned["offline agent"]


def test_a_program_that_splits_no_dim_imports(imported):
    """Every rank holds whole tensors (ParallelKernelBench's collectives): no split dim, so the
    manifest's [divisible] is empty (its comment was rendered from the largest entry and the import
    ended in a traceback)."""
    made = imported("replicated_sum")
    manifest = load_workload(made.root)
    assert not manifest.split_dims and not manifest.divisible
    assert _record(made.root)["summary"] == "collectives: all_reduce x1; ops: mul x1"
    _check_is_clean(made.root)


def test_ranks_whose_inputs_differ_in_shape_import(imported, ranks):
    """A scatter's root holds [W, M, H], the other ranks [M, H]: the written reference's expected runs
    each rank on its own inputs in its own shapes (it read every rank's as rank 0's shapes, and the
    import ended in "the written reference does not reproduce ...; please report this")."""
    made = imported("scatter_from_root")
    ref = _reference(made.root)
    dims = {"M": 16, "H": 24}
    assert [ref.io_spec(dims, 2, r)["inputs"][0][1] for r in (0, 1)] == [(2, 16, 24), (16, 24)]
    inputs = _buffers(ref, dims, 2, seed=3)
    want = _expected(ref, inputs, dims, ranks)
    rows = _f64(inputs[0]["x"])
    for r in range(2):
        np.testing.assert_allclose(want[r]["out"], 2 * rows[r])
    _check_is_clean(made.root)


def test_an_all_gather_into_a_stacked_output_runs_under_gloo(imported, ranks):
    """NCCL takes all_gather_into_tensor's output stacked, [W, M, H]; gloo took only [W*M, H], and the
    import was refused with gloo's "invalid tensor size" (ParallelKernelBench's allgather problems)."""
    made = imported("stacked_gather")
    ref = _reference(made.root)
    dims = {"M": 16, "H": 24}
    inputs = _buffers(ref, dims, 2, seed=4)
    total = sum(_f64(r["x"]) for r in inputs)
    for got in _expected(ref, inputs, dims, ranks):
        assert np.allclose(got["out"], total, rtol=1e-12, atol=1e-12)


def test_a_program_that_uses_autograd_imports(imported, ranks):
    """solution runs in the grad mode it sets itself: a gradient step (ParallelKernelBench's DDP and
    ZeRO problems) was refused with "element 0 of tensors does not require grad", the tool having
    run it under torch.no_grad()."""
    made = imported("grad_allreduce")
    ref = _reference(made.root)
    dims = {"B": 24, "D": 16, "O": 8}
    inputs = _buffers(ref, dims, 2, seed=6)
    grads = [2 * _f64(r["x"]).T @ (_f64(r["x"]) @ _f64(r["w"]) - _f64(r["y"])) for r in inputs]
    for got in _expected(ref, inputs, dims, ranks):  # each rank's own w: the mean of the ranks' gradients
        assert np.allclose(got["out"], (grads[0] + grads[1]) / 2, rtol=1e-10, atol=1e-10)


def test_a_ring_of_batched_point_to_point_ops_imports(imported, ranks):
    """batch_isend_irecv (ring attention's exchange) is sized on the meta device: the fake process
    group had no backend for it there, and the import was refused with "No backend type associated
    with device type meta"."""
    made = imported("ring_pass")
    ref = _reference(made.root)
    dims = {"S": 16, "D": 24}
    inputs = _buffers(ref, dims, 2, seed=8)
    mine = [_f64(r["x"]) for r in inputs]
    for rank, got in enumerate(_expected(ref, inputs, dims, ranks)):
        assert np.allclose(got["out"], mine[rank] + mine[1 - rank], rtol=1e-12, atol=1e-12)


def test_integer_inputs_reach_the_program_as_integers(imported, ranks):
    """The reference's expected() hands the program its integer inputs as integers and its bool ones as
    bool (it made every input float64, and indexing with them failed: "the written reference does not
    reproduce ...; please report this", ParallelKernelBench's vocab-parallel cross-entropy)."""
    made = imported("indexed_rows")
    ref = _reference(made.root)
    dims = {"V": 32, "D": 16, "T": 8}
    assert [d for _, _, d in ref.io_spec(dims, 2, 0)["inputs"]] == ["bf16", "i64", "u8"]
    kinds = {"bf16": np.uint16, "i64": np.int64, "u8": np.uint8}
    inputs = []
    for rank in range(2):
        spec = ref.io_spec(dims, 2, rank)
        bufs = {n: np.zeros(s, dtype=kinds[d]) for n, s, d in spec["inputs"]}
        ref.fill_inputs(np, bufs, dims, 2, rank, 9)
        inputs.append(bufs)
    total = sum(np.where(r["keep"][:, None] != 0, _f64(r["table"])[r["idx"]], 0.0) for r in inputs)
    for got in _expected(ref, inputs, dims, ranks):
        assert np.allclose(got["out"], total, rtol=1e-12, atol=1e-12)


def test_a_program_that_prints_much_runs_under_gloo(tmp_path):
    """The ranks' output goes to files: a rank printing more than a pipe holds, before a collective its
    peer waits in, does not stall the run (it did while the output went to pipes read one rank after
    the other)."""
    from cuco_tui.workload.program.gloo_run import run_gloo

    program = tmp_path / "chatty.py"
    program.write_text((PROGRAMS / "ag_linear.py").read_text().replace(
        "    world = dist.get_world_size()\n", "    world = dist.get_world_size()\n    print('x' * (1 << 20))\n"))
    run = run_gloo(program, 2, {"verify": {"M": 512, "K": 128, "N": 512}}, tmp_path, timeout=240)
    assert run.output(0, 1, 0).shape == (512, 256)


@pytest.mark.parametrize("name", sorted(set(BAD) - set(BAD_AT_THE_CLI)))
def test_a_bad_file_is_refused_in_one_line_and_nothing_is_written(tmp_path, ranks, name):
    """What `cuco workload import` says in one line (the CLI's own refusal of a bad file at each stage:
    tests/cli/test_workload_import_cli.py)."""
    old, new, said = BAD[name]
    path = program_variant(tmp_path, name, old, new)
    parent = tmp_path / "workloads"
    with pytest.raises(WorkloadError) as refused:
        import_program(path, 2, parent=parent, ranks=ranks)
    assert said in str(refused.value) and "\n" not in str(refused.value), str(refused.value)
    assert not parent.exists()


def test_a_program_that_reads_item_is_sized_on_the_cpu(imported, ranks):
    """`.item()` has no value on the meta device, where the tool sizes every shape: such a program was
    refused (ParallelKernelBench's loss problems 23 and 25); it is sized on the CPU instead, and its
    reference computes what the program computes."""
    made = imported("item_loss")
    ref = _reference(made.root)
    dims = {"T": 32, "H": 48}
    names = [n for n, _, _ in ref.io_spec(dims, 2, 0)["inputs"]]
    assert names == ["pred", "target"]
    inputs = _buffers(ref, dims, 2, seed=10)
    want = sum(((_f64(r["pred"]) - _f64(r["target"])) ** 2).sum(axis=1) for r in inputs) / 64
    for got in _expected(ref, inputs, dims, ranks):
        assert np.allclose(got["out"], want, rtol=1e-10, atol=1e-10)
    _check_is_clean(made.root)


def test_a_program_too_large_to_size_on_the_cpu_is_refused_in_one_line(tmp_path, ranks):
    """Sized on the CPU only while a rank's inputs are small (CPU_SIZING_BYTES): a bench shape of
    512 MiB a rank is refused with both reasons, and nothing is written."""
    text = (PROGRAMS / "item_loss.py").read_text().replace('"bench": dict(T=1024, H=512)',
                                                            '"bench": dict(T=65536, H=2048)')
    path = tmp_path / "big_loss.py"
    path.write_text(text)
    with pytest.raises(WorkloadError) as err:
        import_program(path, 2, parent=tmp_path / "out", ranks=ranks)
    message = str(err.value)
    assert "\n" not in message and ".item()" in message and "512 MiB of inputs at bench" in message
    assert not (tmp_path / "out").exists()


def test_the_tolerance_leaves_room_for_the_programs_own_rounding(imported):
    """A running sum in bf16 drifts from float64 past the 4 % a summed output gets: the import
    measures how far (the program in bf16 on the CPU, the float64 run's inputs rounded to it) and
    widens the tolerance to twice that, saying so; a plain all-reduce keeps the default."""
    drift = load_workload(imported("running_sum").root, search=imported("running_sum").root.parent)
    text = (drift.root / "manifest.toml").read_text()
    assert drift.rtol > 0.04, text
    assert "widened from 0.04: the program itself in bfloat16 is" in text
    plain = load_workload(imported("replicated_sum").root, search=imported("replicated_sum").root.parent)
    assert plain.rtol == 0.04
    assert "the program itself in bfloat16 is" in (plain.root / "manifest.toml").read_text()


def test_the_widened_tolerance_is_rounded_up_and_a_failed_measurement_keeps_the_default_and_says_why():
    from cuco_tui.workload.program.precision import widened

    assert widened(0.04, "w", 0.0301, "", "bfloat16", "verify") == (
        0.061, "w; widened from 0.04: the program itself in bfloat16 is 0.03 from float64 at verify (CPU), and a "
               "candidate may round as far again")
    assert widened(0.02, "w", 0.004, "", "bfloat16", "verify")[0] == 0.02
    assert widened(0.02, "w", None, "the program in bfloat16 on the CPU failed (no kernel)", "bfloat16", "v") == (
        0.02, "w (the program's own rounding not measured: the program in bfloat16 on the CPU failed (no kernel))")
    kept, why = widened(0.04, "w", 0.61, "", "bfloat16", "verify")  # a flipped choice: no tolerance can help
    assert kept == 0.04 and "kept, though the program itself in bfloat16 is 0.61 from float64" in why


def test_an_index_output_that_its_rounding_flips_is_refused_in_one_line(tmp_path, ranks):
    """An argmax that bf16 flips cannot be checked against float64 (no candidate could pass; it once
    also widened the tolerance of the sums to 1.3): the import names the output and writes nothing."""
    with pytest.raises(WorkloadError) as exc:
        import_program(PROGRAMS / "sum_and_argmax.py", 2, parent=tmp_path / "out", ranks=ranks)
    message = str(exc.value)
    assert "\n" not in message and "output 1 (int64) of solution in bfloat16 differs from its float64 run" in message
    assert "return the values they pick" in message and not (tmp_path / "out").exists()


def _epilogue_kernel(root: Path) -> str:
    seed = load_workload(root).seed.read_text()
    return seed[seed.index("__global__ void program_epilogue"):seed.index("static int launch_epilogue")]


def _check_compiles(root: Path) -> None:
    """`cuco workload check` finds no error, compiling the seed where nvcc is."""
    findings = check_workload(root, compile_seed=discover().can_compile, probe_timeout=900)
    assert not [f for f in findings if f.level == "error"], findings


def _gelu_tanh(v: np.ndarray) -> np.ndarray:
    return 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v ** 3)))


def test_an_activation_after_the_linear_is_part_of_the_epilogue(imported, ranks):
    """all-gather → linear + bias → gelu (tanh form): mapped, the seed's epilogue kernel adds the bias
    then applies the same GELU, it compiles where nvcc is, and expected() is the program's answer."""
    made = imported("ag_linear_gelu")
    root = made.root
    assert any("all-gather → linear + bias → gelu_tanh: mapped" in line for line in made.lines), made.lines
    kernel = _epilogue_kernel(root)
    assert kernel.index("bias[i % cols]") < kernel.index("tanhf(0.79788456080286536f")
    ref = _reference(root)
    dims = dict(load_workload(root).verify_shapes[0].dims)
    inputs = _buffers(ref, dims, 2, seed=4)
    full = np.concatenate([_f64(r["x"]) for r in inputs])
    for rank, got in enumerate(_expected(ref, inputs, dims, ranks)):
        want = _gelu_tanh(full @ _f64(inputs[rank]["b"]) + _f64(inputs[rank]["bias"]))
        assert np.allclose(got["y"], want, rtol=1e-10, atol=1e-10)
    _check_compiles(root)


def test_the_epilogue_keeps_the_programs_order_of_activation_and_residual(imported, ranks):
    """matmul → all-reduce → silu + residual: silu(y) + r, not silu(y + r), in the seed and expected()."""
    made = imported("matmul_ar_silu")
    root = made.root
    assert any("matmul → all-reduce → silu + residual: mapped" in line for line in made.lines), made.lines
    assert _record(root)["patterns"][0]["roles"]["epilogue"] == ["silu", "residual"]
    kernel = _epilogue_kernel(root)
    assert kernel.index("v = v / (1.0f + expf(-v));") < kernel.index("v += __bfloat162float(residual[i]);")
    ref = _reference(root)
    dims = dict(load_workload(root).verify_shapes[0].dims)
    inputs = _buffers(ref, dims, 2, seed=6)
    total = sum(_f64(r["x"]) @ _f64(r["b"]) for r in inputs)
    for rank, got in enumerate(_expected(ref, inputs, dims, ranks)):
        want = total / (1 + np.exp(-total)) + _f64(inputs[rank]["residual"])
        assert np.allclose(got["y"], want, rtol=1e-10, atol=1e-10)
    _check_compiles(root)


def test_an_activation_on_part_of_the_result_is_not_mapped(imported):
    """relu_ of half the all-reduced columns: the seed's epilogue kernel covers every element, so the
    pattern is named and not mapped, saying why."""
    made = imported("ar_half_relu")
    assert any(line.startswith("pattern: matmul → all-reduce: not mapped (after the all-reduce, solution runs "
                               "relu_ on part of the result)") for line in made.lines), made.lines
    assert NO_SEED_MARK in (made.root / "seed.cu").read_text()


def test_program_dims_named_like_the_patterns_are_renamed_not_refused(tmp_path, ranks):
    """ag_linear with K and N swapped in make_inputs: the program's K is the pattern's N and its N the
    pattern's K, so both are renamed (K_prog, N_prog) and make_inputs still gets its own K and N."""
    path = program_variant(tmp_path, "swapped_kn", "    x = torch.randn(M // world, K, dtype=dtype, device=device)\n"
                           "    w = torch.randn(N // world, K, dtype=dtype, device=device) / K ** 0.5\n"
                           "    b = torch.randn(N // world, dtype=dtype, device=device)",
                           "    x = torch.randn(M // world, N, dtype=dtype, device=device)\n"
                           "    w = torch.randn(K // world, N, dtype=dtype, device=device) / N ** 0.5\n"
                           "    b = torch.randn(K // world, dtype=dtype, device=device)")
    made = import_program(path, 2, parent=tmp_path / "w", ranks=ranks)
    assert any("all-gather → linear + bias: mapped" in line for line in made.lines), made.lines
    w = load_workload(made.root)
    assert w.dim_names == ("M", "K_prog", "N_prog", "K", "N")
    assert set(w.split_dims) == {"M", "K_prog", "N"}  # the program's split K is K_prog; the pattern splits M, N
    for s in w.verify_shapes + w.bench_shapes:
        assert (s.dims["K"], s.dims["N"]) == (s.dims["N_prog"], s.dims["K_prog"])
    _check_is_clean(made.root)
