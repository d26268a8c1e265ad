"""`cuco export`: a folder that builds on its own (the candidate, the runtime headers it includes,
the nvcc line in a README), a result.json that names the exported file, errors that name the
bundle the user gave."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from cuco_tui.cli import main
from cuco_tui.cli.export import runtime_headers
from cuco_tui.toolchain.toolchain import RUNTIME_INCLUDE, discover
from repo_paths import REPO

EXAMPLE = REPO / "sessions" / "examples" / "gemm_allgather-offline-h200x2.bundle"
KERNEL = "gemm_allgather-offline-h200x2-c0000.cu"  # the seed: no CUTLASS, a few seconds of nvcc


def _build_lines(readme: str) -> list[str]:
    """The README's indented command blocks, each joined into one shell line."""
    blocks, current = [], []
    for line in readme.splitlines() + [""]:
        if line.startswith("    "):
            current.append(line[4:].removesuffix("\\").strip())
        elif current:
            blocks.append(" ".join(current))
            current = []
    return blocks


def test_an_export_holds_what_it_includes_and_names_its_own_file(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["export", str(EXAMPLE), "--candidate", "c0000", "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted([KERNEL, "cuco_runtime.cuh", "cuco_abi.h", "README.md",
                                                            "result.json"])
    assert (out / "cuco_runtime.cuh").read_text() == (RUNTIME_INCLUDE / "cuco_runtime.cuh").read_text()
    saved = json.loads((out / "result.json").read_text())
    assert saved["candidate"] == "c0000" and saved["file"] == KERNEL
    assert saved["result"]["candidate"] == KERNEL  # not the recording machine's scratch path
    readme = (out / "README.md").read_text()
    generic, *here = _build_lines(readme)
    assert generic.startswith("nvcc ") and "-I$NCCL_HOME/include" in generic and f"{KERNEL} -o " in generic
    assert str(RUNTIME_INCLUDE) not in readme and "-I. " in generic
    if discover().can_compile:
        assert len(here) == 1 and str(discover().nccl.include) in here[0]
    assert main(["export", str(EXAMPLE), "--candidate", "c0001", "--out", str(out)]) == 0  # an export's own files
    assert json.loads((out / "result.json").read_text())["candidate"] == "c0001"


def test_the_runtime_headers_are_those_reached_from_the_candidate(tmp_path):
    names = lambda src: [p.name for p in runtime_headers(src)]  # noqa: E731
    assert names('#include "cuco_runtime.cuh"\n') == ["cuco_runtime.cuh", "cuco_abi.h"]
    assert sorted(names('#include "cuco_tile_gemm.cuh"\n#include <nccl.h>\n')) == sorted(
        ["cuco_tile_gemm.cuh", "cuco_arrival.cuh", "cuco_runtime.cuh", "cuco_abi.h"])
    assert names('// #include "cuco_attn.h"\n/* #include "cuco_arrival.cuh" */\n#include <cstdio>\n') == []
    assert names('#  include <cuco_attn.h>\n') == ["cuco_attn.h"]


@pytest.mark.skipif(not discover().can_compile, reason="needs nvcc 13 with the NCCL and cuBLAS headers")
def test_an_exported_candidate_compiles_from_its_folder_alone(tmp_path, capsys):
    """The README's two lines, run in a copy of the folder moved away from where it was written:
    the one for this machine as it is, the generic one with NCCL_HOME, CUBLAS_HOME and CUDA_HOME
    pointed at what this machine has."""
    assert main(["export", str(EXAMPLE), "--candidate", "c0000", "--out", str(tmp_path / "written")]) == 0
    folder = tmp_path / "elsewhere" / "kernel"
    shutil.copytree(tmp_path / "written", folder)
    shutil.rmtree(tmp_path / "written")
    generic, here = _build_lines((folder / "README.md").read_text())
    so = folder / KERNEL.replace(".cu", ".so")
    built = subprocess.run(["bash", "-c", here], cwd=folder, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0 and so.stat().st_size > 0, built.stderr[-3000:]
    so.unlink()
    t = discover()
    homes = {"NCCL_HOME": t.nccl.lib.parent, "CUBLAS_HOME": t.cublas.lib.parent, "CUDA_HOME": t.cudart.parent}
    if not all((home / "include").is_dir() for home in (homes["NCCL_HOME"], homes["CUBLAS_HOME"])) or \
            not (homes["CUDA_HOME"] / "lib64").is_dir():
        pytest.skip(f"this machine's libraries are not laid out as HOME/include and HOME/lib: {homes}")
    env = dict(os.environ, PATH=f"{t.nvcc.parent}:{os.environ['PATH']}", **{k: str(v) for k, v in homes.items()})
    built = subprocess.run(["bash", "-c", generic], cwd=folder, capture_output=True, text=True, timeout=600, env=env)
    assert built.returncode == 0 and so.stat().st_size > 0, built.stderr[-3000:]


def test_errors_of_a_bundle_name_the_bundle_as_given(capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    given = str(EXAMPLE.relative_to(REPO))
    for command in (["export", given, "--candidate", "c9999", "--out", "/nonexistent/never"], ["show", given, "c9999"]):
        assert main(command) == 2
        err = capsys.readouterr().err.strip()
        assert err == f"cuco: no candidate 'c9999' in session {given}", err
    assert not Path("/nonexistent/never").exists()


def test_the_build_line_links_cublaslt_for_a_candidate_that_calls_it():
    from cuco_tui.cli.export import GENERIC, build_line

    seed = (REPO / "workloads" / "gemm_reducescatter" / "seed.cu").read_text()
    assert "cublasLt" not in build_line(GENERIC, seed, "k.cu", quote=False)
    lt = seed.replace("#include <cublas_v2.h>", "#include <cublasLt.h>\n#include <cublas_v2.h>", 1)
    assert "-l:libcublasLt.so.13" in build_line(GENERIC, lt, "k.cu", quote=False)
