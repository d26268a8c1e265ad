"""A compiler killed from outside (a second Ctrl-C, the OOM killer) says nothing of the source: the
candidate build and the libraries built once per machine (fused GEMM, schedule perturber) keep
no failure for it, and the next call builds again; a compiler that ran to its end and refused is
kept, so it is not rebuilt for every evaluation. A fake nvcc plays each case, so these run anywhere."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from cuco_tui.toolchain import BuildCache, compile_candidate
from cuco_tui.toolchain.nvcc import ensure_gemm_library
from cuco_tui.toolchain.perturb import ensure_perturb_library
from cuco_tui.toolchain.process import definite_failure, killed
from cuco_tui.toolchain.tile_gemm_lib import KernelConfig
from cuco_tui.toolchain.toolchain import RUNTIME_INCLUDE, Library, Toolchain

# `mode` beside it chooses: "sigkill" (nvcc itself killed), "cicc" (a compiler it started killed:
# nvcc's own words, exit 255), "error" (a real compile error, exit 1); no file: success.
FAKE_NVCC = r"""#!/bin/bash
dir="$(dirname "$0")"
echo x >> "$dir/calls.txt"
mode="$(cat "$dir/mode" 2>/dev/null)"
case "$mode" in
  sigkill) kill -9 $$ ;;
  cicc) echo "nvcc error   : 'cicc' died due to signal 9 (Kill signal)" >&2; exit 255 ;;
  error) echo "x.cu(3): error: identifier \"boom\" is undefined" >&2; exit 1 ;;
esac
while [ $# -gt 0 ]; do if [ "$1" = -o ]; then out="$2"; fi; shift; done
printf 'ELF' > "$out"
"""


def toolchain(tmp_path: Path) -> Toolchain:
    libs = []
    for name, soname in (("nccl", "libnccl.so.2"), ("cublas", "libcublas.so.13")):
        root = tmp_path / name
        (root / "include").mkdir(parents=True, exist_ok=True)
        (root / "lib").mkdir(exist_ok=True)
        (root / "lib" / soname).write_bytes(b"")
        libs.append(Library(name, root / "include", root / "lib", soname))
    cutlass = tmp_path / "cutlass" / "include"
    (cutlass / "cutlass").mkdir(parents=True, exist_ok=True)
    nvcc = tmp_path / "fake-nvcc"
    nvcc.write_text(FAKE_NVCC)
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IEXEC)
    return Toolchain(nvcc, "fake 1.0", libs[0], libs[1], RUNTIME_INCLUDE, (), cutlass, "4.2.0", "")


def calls(tmp_path: Path) -> int:
    try:
        return len((tmp_path / "calls.txt").read_text().splitlines())
    except FileNotFoundError:
        return 0


def candidate_build(tc: Toolchain, cache: BuildCache, tmp_path: Path):
    source = tmp_path / "cand.cu"
    source.write_text('#include "cuco_harness.h"\nextern "C" int cuco_candidate_version() { return 3; }\n')
    return compile_candidate(source, tc, cache)


def gemm_library(tc: Toolchain, cache: BuildCache, tmp_path: Path):
    return ensure_gemm_library(KernelConfig(128, 256, 2, 1), tc, cache)


def perturber(tc: Toolchain, cache: BuildCache, tmp_path: Path):
    return ensure_perturb_library(tc, cache)


BUILDS = {"candidate": candidate_build, "fused GEMM library": gemm_library, "schedule perturber": perturber}


def succeeded(result) -> bool:
    return bool(result.ok)


def problem(result) -> str:
    if hasattr(result, "diagnostics"):
        return " ".join(d.message for d in result.diagnostics)
    return str(result.problem)


@pytest.mark.parametrize("build", BUILDS)
@pytest.mark.parametrize("mode", ["sigkill", "cicc"])
def test_a_killed_compiler_is_not_kept_as_a_failure(tmp_path, build, mode):
    tc, cache = toolchain(tmp_path), BuildCache(tmp_path / "cache")
    (tmp_path / "mode").write_text(mode)
    first = BUILDS[build](tc, cache, tmp_path)
    assert not succeeded(first) and "killed" in problem(first)
    made = calls(tmp_path)
    assert made >= 1
    (tmp_path / "mode").unlink()  # the machine is quiet again: the same source builds
    again = BUILDS[build](tc, cache, tmp_path)
    assert succeeded(again) and calls(tmp_path) > made


@pytest.mark.parametrize("build", BUILDS)
def test_a_real_compile_error_is_kept_and_not_compiled_again(tmp_path, build):
    tc, cache = toolchain(tmp_path), BuildCache(tmp_path / "cache")
    (tmp_path / "mode").write_text("error")
    first = BUILDS[build](tc, cache, tmp_path)
    assert not succeeded(first) and "killed" not in problem(first)
    made = calls(tmp_path)
    (tmp_path / "mode").unlink()
    again = BUILDS[build](tc, cache, tmp_path)
    assert not succeeded(again) and calls(tmp_path) == made


def test_what_counts_as_a_definite_failure():
    assert definite_failure(1, "x.cu(3): error: boom")
    assert not definite_failure(None, "")  # a timeout
    assert not definite_failure(-9, "")
    assert not definite_failure(255, "nvcc error   : 'ptxas' died due to signal 11")
    assert killed(-9, "") and killed(255, "'cicc' died due to signal 9") and not killed(1, "error")
