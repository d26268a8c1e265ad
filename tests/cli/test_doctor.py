"""`cuco doctor` on this machine (nvcc and the pip NCCL/cuBLAS, no GPU) and with a broken setup."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from rich.console import Console

from cuco_tui.toolchain import BuildCache
from cuco_tui.toolchain import attention as attn
from cuco_tui.toolchain.toolchain import discover
from cuco_tui.toolchain.toolchain import nccl_version
from cuco_tui.cli.doctor import render_checks, summary
from cuco_tui.cli.machine_checks import Check, attention_checks, grouped_gemm_check, nvlink_matrix, run_checks
from cuco_tui.harness.gpus import GpuInfo, GpuInventory
from cudnn_helpers import fake_cudnn


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


def as_text(renderable) -> str:
    console = Console(width=200, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


@pytest.fixture(scope="module")
def checks() -> list[Check]:
    mp = pytest.MonkeyPatch()
    mp.setenv("CUCO_NO_GPU", "1")  # the same answer whether or not this host has a GPU
    mp.delenv("CUCO_NVCC", raising=False)
    try:
        return run_checks()
    finally:
        mp.undo()


def test_nvcc_found_with_version(checks):
    nvcc = by_name(checks)["nvcc"]
    assert nvcc.ok, nvcc.detail
    assert "nvcc" in nvcc.detail and "CUDA 13" in nvcc.detail


def test_nccl_found_with_version(checks):
    nccl = by_name(checks)["NCCL"]
    assert nccl.ok, nccl.detail
    assert nccl.detail.startswith("2.28.9")
    assert by_name(checks)["NCCL device API (LSA)"].ok


def test_cublas_and_runtime_header(checks):
    assert by_name(checks)["cuBLAS"].ok
    assert by_name(checks)["runtime header"].ok


def test_no_gpu_is_a_not_ok_check_with_a_fix(checks):
    gpu = by_name(checks)["GPUs (NVML)"]
    assert not gpu.ok
    assert gpu.needed_for == "run"
    assert "no GPU" in gpu.detail
    assert gpu.fix.endswith("compiled only") and len(gpu.fix.split()) > 5
    assert summary(checks) == "can compile candidates, but cannot run them: no GPU"


def test_informational_lines(checks):
    names = by_name(checks)
    multicast = names["NVLink multicast off"]
    assert multicast.ok and "NCCL_NVLS_ENABLE=0" in multicast.detail and "NVSHMEM_DISABLE_NVLS=1" in multicast.detail
    for module in ("textual", "anthropic", "git", "jinja2"):
        assert names[f"python: {module}"].ok
    assert "ANTHROPIC_API_KEY" in names


def test_render_has_marks_and_fixes(checks):
    text = as_text(render_checks(checks))
    assert "✓" in text and "✗" in text
    assert "nvcc" in text and "2.28.9" in text
    assert "compiled only" in text


def test_attention_lines_are_there_and_never_essential(checks):
    names = by_name(checks)
    cudnn, library = names["cuDNN (attention)"], names["attention library"]
    assert cudnn.needed_for == "" and library.needed_for == ""
    if cudnn.ok:  # this machine has cuDNN and the frontend (the `attention` extra)
        assert "cuDNN 9." in cudnn.detail and "frontend 1." in cudnn.detail
        assert library.detail.startswith(("built: ", "not built yet: "))
    else:
        assert "cuco-tui[attention]" in cudnn.fix or "NVRTC" in cudnn.fix


@pytest.fixture
def no_attention_packages(monkeypatch, tmp_path):
    monkeypatch.setattr(attn, "package_dir", lambda name: None)
    monkeypatch.setattr(attn, "_include_roots", lambda: [])
    (tmp_path / "cuda").mkdir()
    return {"CUDA_HOME": str(tmp_path / "cuda")}


def test_attention_without_cudnn_says_how_to_install_it(no_attention_packages, tmp_path):
    cudnn, library = attention_checks(discover(), no_attention_packages, BuildCache(tmp_path / "cache"))
    assert not cudnn.ok and not library.ok
    assert "frontend headers not found" in cudnn.detail
    assert cudnn.fix.startswith(attn.find_cudnn(no_attention_packages).problem)
    if not Path("/usr/local/cuda/include/cudnn.h").exists():
        assert "cuDNN not found" in cudnn.detail and "cuco-tui[attention]" in cudnn.fix
    assert "cannot be built" in library.detail
    assert not (tmp_path / "cache").exists()  # the doctor builds nothing


def test_attention_found_and_whether_it_is_built(no_attention_packages, tmp_path):
    env = fake_cudnn(tmp_path)
    toolchain = dataclasses.replace(discover(), nvcc=Path("/fake/nvcc"), nvcc_version="fake 13.0")
    cache = BuildCache(tmp_path / "cache")
    cudnn, library = attention_checks(toolchain, env, cache)
    assert cudnn.ok and "cuDNN 9.10.2" in cudnn.detail and "frontend 1.13.0" in cudnn.detail
    assert env["CUCO_CUDNN_HOME"] in cudnn.detail and env["CUCO_CUDNN_FRONTEND_INCLUDE"] in cudnn.detail
    assert library.ok and library.detail.startswith("not built yet: ") and str(cache.root) in library.detail
    assert not cache.root.exists()

    found = attn.find_cudnn(env)  # the name ensure_library would give it
    built = cache.root / f"libcuco_attn-{attn._key(found, toolchain, attn.build_flags(found, toolchain))}.so"
    built.parent.mkdir()
    built.touch()
    cudnn, library = attention_checks(toolchain, env, cache)
    assert library.ok and library.detail == f"built: {built}"

    cudnn, library = attention_checks(dataclasses.replace(toolchain, nvcc=None), env, cache)
    assert cudnn.ok and not library.ok and "no nvcc" in library.detail


def test_the_grouped_gemm_line_says_whether_the_moe_reference_has_its_library(checks, tmp_path):
    """Never essential (the reference falls back to cuBLAS); built or not, or why it cannot be."""
    from cuco_tui.toolchain.grouped_gemm_lib import REFERENCE_CONFIG
    from cuco_tui.toolchain.nvcc import gemm_library_flags
    from cuco_tui.toolchain.tile_gemm_lib import library_path

    line = by_name(checks)["grouped GEMM library (128x256 tiles)"]
    assert line.needed_for == ""
    toolchain, cache = discover(), BuildCache(tmp_path / "cache")
    if toolchain.nvcc is None or toolchain.cutlass is None:
        pytest.skip("needs nvcc and the CUTLASS headers")
    got = grouped_gemm_check(toolchain, {}, cache)
    assert got.ok and got.detail.startswith("not built yet: ") and str(cache.root) in got.detail
    assert not cache.root.exists()  # the doctor builds nothing
    built = library_path(REFERENCE_CONFIG, toolchain, cache, gemm_library_flags(toolchain))
    built.parent.mkdir(parents=True)
    built.touch()
    assert grouped_gemm_check(toolchain, {}, cache) == Check(line.name, True, f"built: {built}")
    no_cutlass = grouped_gemm_check(dataclasses.replace(toolchain, cutlass=None), {}, cache)
    assert not no_cutlass.ok and no_cutlass.detail.startswith("cannot be built: ")
    assert no_cutlass.fix.startswith("pip install nvidia-cutlass (used by moe_dispatch_combine's reference")
    no_nvcc = grouped_gemm_check(dataclasses.replace(toolchain, nvcc=None), {}, cache)
    assert not no_nvcc.ok and "no nvcc" in no_nvcc.detail


def test_missing_nvcc_fails_with_a_fix(monkeypatch, tmp_path):
    missing = tmp_path / "cuda" / "bin" / "nvcc"
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    monkeypatch.setenv("CUCO_NVCC", str(missing))
    monkeypatch.setenv("CUCO_NO_GPU", "1")
    checks = run_checks()
    nvcc = by_name(checks)["nvcc"]
    assert not nvcc.ok
    assert str(missing) in nvcc.detail
    assert "CUCO_NVCC" in nvcc.fix
    assert summary(checks).startswith("cannot compile: nvcc")


def test_api_key_is_never_printed(monkeypatch):
    secret = "sk-ant-test-not-a-real-key-0123456789"
    monkeypatch.setenv("ANTHROPIC_API_KEY", secret)
    monkeypatch.setenv("CUCO_NO_GPU", "1")
    checks = run_checks()
    key = by_name(checks)["ANTHROPIC_API_KEY"]
    assert key.ok
    assert secret not in as_text(render_checks(checks)) + summary(checks)


def test_nccl_version_parsing(tmp_path):
    (tmp_path / "nccl.h").write_text("#define NCCL_MAJOR 2\n#define NCCL_MINOR 30\n#define NCCL_PATCH 1\n")
    assert nccl_version(tmp_path) == "2.30.1"
    (tmp_path / "nccl.h").write_text("/* no version */\n")
    assert nccl_version(tmp_path) == ""
    assert nccl_version(None) == ""


def test_nvlink_matrix():
    inv = GpuInventory(
        (GpuInfo(0, "H100", 81559, None, {1: 18}), GpuInfo(1, "H100", 81559, None, {0: 18}), GpuInfo(2, "H100", 81559)),
        driver="580.00",
    )
    lines = nvlink_matrix(inv).splitlines()
    assert lines[0].split() == ["GPU0", "GPU1", "GPU2"]
    assert lines[1].split() == ["GPU0", "-", "18", "0"]
    assert lines[3].split() == ["GPU2", "0", "0", "-"]


def test_summary_all_good():
    checks = [Check("nvcc", True, "x", needed_for="compile"), Check("GPUs (NVML)", True, "y", needed_for="run")]
    assert summary(checks) == "everything needed to compile and run candidates is here"
