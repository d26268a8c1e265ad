from pathlib import Path

import pytest

from cuco_tui.workload.manifest import WorkloadError, list_workloads, load_workload


def test_gemm_allgather_manifest_loads():
    w = load_workload("gemm_allgather")
    assert w.name == "gemm_allgather"
    assert w.dim_names == ("M", "K", "N")
    assert 2 in w.world_sizes
    assert len(w.bench_shapes) >= 3
    assert w.seed.name == "seed.cu" and w.seed.exists()
    assert w.reference.exists() and w.task.exists()
    assert w.repetitions >= 20
    assert 0 < w.rtol < 0.1
    assert any(p.name == "lsa_allgather.cu" for p in w.candidates())


def test_every_shape_divides_at_every_world_size():
    w = load_workload("gemm_allgather")
    for world in w.world_sizes:
        w.check_world(world)


def test_a_bench_shape_where_allgather_rivals_the_gemm():
    # bytes gathered per rank vs GEMM flops: at ~200 GB/s and ~700 TFLOP/s the all-gather of
    # (W-1)/W*M*K*2 bytes takes at least a third of the 2*M*K*N/W flop GEMM on some shape.
    w = load_workload("gemm_allgather")
    world = 2
    ratios = []
    for s in w.bench_shapes:
        M, K, N = s.dims["M"], s.dims["K"], s.dims["N"]
        t_ag = (world - 1) / world * M * K * 2 / 200e9
        t_gemm = 2 * M * K * N / world / 700e12
        ratios.append(t_ag / t_gemm)
    assert max(ratios) > 1.0 and min(ratios) < 0.5


def test_world_size_not_supported():
    w = load_workload("gemm_allgather")
    with pytest.raises(WorkloadError, match="runs on 2, 4, 8 GPUs, not 3"):
        w.check_world(3)


def test_unknown_workload_names_the_known_ones():
    with pytest.raises(WorkloadError, match="gemm_allgather"):
        load_workload("no_such_workload")
    assert "gemm_allgather" in list_workloads()


def _write(tmp_path: Path, text: str) -> Path:
    root = tmp_path / "wl"
    root.mkdir()
    (root / "seed.cu").write_text("// seed\n")
    (root / "reference.py").write_text("")
    (root / "task.md").write_text("task\n")
    (root / "manifest.toml").write_text(text)
    return root


BASE = """
name = "wl"
world_sizes = [2]
dims = ["M"]
seed = "seed.cu"
reference = "reference.py"
task = "task.md"
[[verify]]
M = 64
[[bench]]
name = "b"
M = 128
"""


def test_manifest_errors_name_the_field(tmp_path):
    with pytest.raises(WorkloadError, match="not valid TOML"):
        load_workload(_write(tmp_path, "name = [\n"))


def test_missing_dimension_in_shape(tmp_path):
    root = _write(tmp_path, BASE.replace("[[bench]]\nname = \"b\"\nM = 128", "[[bench]]\nname = \"b\"\nK = 1"))
    with pytest.raises(WorkloadError, match=r"\[\[bench\]\] b lacks M"):
        load_workload(root)


def test_too_few_repetitions(tmp_path):
    root = _write(tmp_path, BASE + "[timing]\nrepetitions = 5\n")
    with pytest.raises(WorkloadError, match="at least 20"):
        load_workload(root)


def test_missing_seed_file(tmp_path):
    root = _write(tmp_path, BASE.replace('seed = "seed.cu"', 'seed = "gone.cu"'))
    with pytest.raises(WorkloadError, match="gone.cu, which does not exist"):
        load_workload(root)


@pytest.mark.parametrize("table, what", [
    ('floor = "x"', "floor"), ("floor = -0.1", "floor"), ("floor = 1.5", "floor"), ("rtol = 0", "rtol"),
])
def test_a_bad_tolerance_names_the_field(tmp_path, table, what):
    root = _write(tmp_path, BASE + f"[tolerance]\n{table}\n")
    with pytest.raises(WorkloadError, match=rf"\[tolerance\] {what} must be a number"):
        load_workload(root)


def test_the_tolerance_floor_defaults_to_none(tmp_path):
    w = load_workload(_write(tmp_path, BASE))
    assert (w.rtol, w.floor) == (0.02, 0.0)
    assert load_workload("cp_attention").floor == 0.25


@pytest.mark.parametrize("text, match", [
    ("[timming]\nwarmup = 5\n", r"unknown field `timming`; did you mean `timing`\?"),
    ("[timing]\nrepetition = 30\n", r"unknown field `repetition` in \[timing\]; did you mean `repetitions`\?"),
    ("[tolerance]\nrtoll = 0.01\n", r"unknown field `rtoll` in \[tolerance\]"),
])
def test_an_unknown_field_is_named_not_ignored(tmp_path, text, match):
    root = _write(tmp_path, BASE + text)
    with pytest.raises(WorkloadError, match=match):
        load_workload(root)


def test_an_unknown_dim_in_a_shape_is_named(tmp_path):
    root = _write(tmp_path, BASE.replace("[[bench]]\nname = \"b\"\nM = 128", "[[bench]]\nname = \"b\"\nM = 128\nQ = 4"))
    with pytest.raises(WorkloadError, match=r"unknown field `Q` in \[\[bench\]\] b"):
        load_workload(root)


def test_a_misspelt_dtype_is_refused(tmp_path):
    root = _write(tmp_path, BASE.replace('dtype = "bf16"', 'dtype = "bf61"') if 'dtype = "bf16"' in BASE
                  else 'dtype = "bf61"\n' + BASE)
    with pytest.raises(WorkloadError, match=r"`dtype` must be one of bf16, .*not 'bf61'"):
        load_workload(root)


def test_the_manifest_dtypes_are_the_abis():
    from cuco_tui.core.workload import DTYPES
    from cuco_tui.harness.abi import DTYPES as ABI_DTYPES

    assert set(DTYPES) == set(ABI_DTYPES)


@pytest.mark.parametrize("name", ["manifest.toml", "seed.cu", "task.md"])
def test_a_file_that_is_not_utf8_is_named_with_its_byte(tmp_path, name):
    root = _write(tmp_path, BASE)
    path = root / name
    text = path.read_bytes()
    at = min(12, len(text) - 1)
    path.write_bytes(text[:at] + b"\xff" + text[at:])
    with pytest.raises(WorkloadError) as caught:
        load_workload(root)
    message = str(caught.value)
    assert message == f"{path} is not UTF-8 text (byte 0xff at offset {at}); save it as UTF-8"
    assert "\n" not in message


def test_the_commands_that_load_a_workload_say_so_in_one_line(tmp_path, capsys, monkeypatch):
    from cuco_tui.cli import main, tui_main
    from cli_helpers import one_line_error

    monkeypatch.setenv("CUCO_NO_GPU", "1")
    root = _write(tmp_path, BASE)
    (root / "task.md").write_bytes(b"caf\xe9\n")  # latin-1
    said = f"{root / 'task.md'} is not UTF-8 text (byte 0xe9 at offset 3)"
    for run, args in ((main, ["eval", str(root / "seed.cu")]),
                      (main, ["search", "--workload", str(root)]), (tui_main, ["--workload", str(root)])):
        one_line_error(capsys, run(args), said)
    assert main(["workload", "check", str(root), "--no-compile"]) == 1  # a finding, in check's own table
    out = capsys.readouterr()
    assert [line for line in out.out.splitlines() if said in line] and "Traceback" not in out.out + out.err
