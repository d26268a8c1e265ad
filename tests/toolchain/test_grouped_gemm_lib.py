"""The prebuilt grouped GEMM (cuco_grouped_gemm_lib.h, issue 32): which configurations a candidate
names, one library build per configuration shared by the candidates that name it, the candidate
linked against it, and what goes wrong as one line. A fake nvcc records every call, so these run
anywhere; the header is compiled by the real nvcc where there is one, and the real CUTLASS builds
are in tests/workloads/moe_dispatch_combine/test_moe_grouped_gemm.py (slow)."""

from __future__ import annotations

import re
import stat
import subprocess
from pathlib import Path

import pytest

from cuco_tui.agents.offline.strategy import StrategyBook
from cuco_tui.toolchain import BuildCache, compile_candidate
from cuco_tui.toolchain.grouped_gemm_lib import CONFIGS, HEADER, GroupedConfig, configs_named, uses_library
from cuco_tui.toolchain.nvcc import ensure_gemm_library, gemm_libraries_named
from cuco_tui.toolchain.tile_gemm_lib import KernelConfig
from cuco_tui.toolchain.toolchain import RUNTIME_INCLUDE, Library, Toolchain, discover
from cuco_tui.workload.manifest import load_workload

W = load_workload("moe_dispatch_combine")
BOOK = StrategyBook.load(W.root, W.seed)
ONE = GroupedConfig(128, 256, 1, 1)  # the templates' gemm=cutlass_grouped
TWO = GroupedConfig(128, 256, 1, 2)  # gemm=cutlass_grouped_1x2

# Records its arguments (one call a line) and writes the file named after -o. A library build
# (either library's source) fails with a CUTLASS-like error when `fail-lib` exists beside it.
FAKE_NVCC = r"""#!/bin/bash
dir="$(dirname "$0")"
echo "$@" >> "$dir/calls.txt"
lib=0; out=""
for a in "$@"; do case "$a" in *_gemm_lib.cu) lib=1;; esac; done
while [ $# -gt 0 ]; do if [ "$1" = -o ]; then out="$2"; fi; shift; done
if [ $lib = 1 ] && [ -e "$dir/fail-lib" ]; then
  echo "cuco_grouped_gemm_lib.cu(57): error: incomplete type \"CollectiveOp\" is not allowed"
  echo "1 error detected in the compilation of \"cuco_grouped_gemm_lib.cu\"."
  exit 1
fi
echo built > "$out"
"""


def fake_toolchain(tmp_path: Path, cutlass: bool = True) -> Toolchain:
    libs = []
    for name, soname in (("nccl", "libnccl.so.2"), ("cublas", "libcublas.so.13")):
        root = tmp_path / name
        (root / "include").mkdir(parents=True, exist_ok=True)
        (root / "lib").mkdir(exist_ok=True)
        (root / "lib" / soname).write_bytes(b"")
        libs.append(Library(name, root / "include", root / "lib", soname))
    include = tmp_path / "cutlass" / "include"
    (include / "cutlass").mkdir(parents=True, exist_ok=True)
    nvcc = tmp_path / "fake-nvcc"
    nvcc.write_text(FAKE_NVCC)
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IEXEC)
    problem = "" if cutlass else "the CUTLASS headers were not found (pip install nvidia-cutlass)"
    return Toolchain(nvcc, "fake 1.0", libs[0], libs[1], RUNTIME_INCLUDE, (), include if cutlass else None,
                     "4.2.0" if cutlass else "", problem)


def calls(tmp_path: Path) -> tuple[list[list[str]], list[list[str]]]:
    """(the library builds, the candidate builds) the fake nvcc saw, each as its arguments."""
    path = tmp_path / "calls.txt"
    lines = [line.split() for line in path.read_text().splitlines()] if path.exists() else []
    lib = [a for a in lines if any(x.endswith("_gemm_lib.cu") for x in a)]
    return lib, [a for a in lines if a not in lib]


def candidate(tmp_path: Path, name: str, strategy: str, **knobs) -> Path:
    s = BOOK.get(strategy)
    path = tmp_path / f"{name}.cu"
    path.write_text(BOOK.render(s, s.normalized({**s.default_knobs(), **knobs})))
    return path


# ---------------------------------------------------------------- the configurations a source names


def test_a_candidate_names_the_configurations_it_links():
    for strategy in ("arrival_pipeline", "expert_pipeline"):
        s = BOOK.get(strategy)
        for gemm, config in (("cutlass_grouped", ONE), ("cutlass_grouped_1x2", TWO)):
            src = BOOK.render(s, s.normalized({**s.default_knobs(), "gemm": gemm}))
            assert uses_library(src) and f'#include "{HEADER}"' in src
            assert configs_named(src) == ((config,), [])
            assert gemm_libraries_named(src) == ((config,), "")
        # The cuBLAS way links nothing: the template's code as before.
        cublas = BOOK.render(s, s.normalized({**s.default_knobs(), "gemm": "cublas"}))
        assert not uses_library(cublas) and gemm_libraries_named(cublas) == ((), "")
    assert configs_named("gg::GroupedConfig k{bm, 128, 1, 1};") == (CONFIGS, [])  # computed: every one
    assert configs_named("constexpr gg::GroupedConfig k{64, 128, 1, 1};") == ((), ["gg::GroupedConfig{64, 128, 1, 1}"])
    assert configs_named("// gg::GroupedConfig{64, 64, 1, 1}\nauto k = gg::GroupedConfig(128,256,1,2);") == ((TWO,), [])
    # Both headers: both libraries, each read from its own type's name.
    both = ('#include "cuco_tile_gemm_lib.h"\n#include "cuco_grouped_gemm_lib.h"\n'
            "tg::KernelConfig a{128, 256, 2, 1}; gg::GroupedConfig b{128, 256, 1, 1};\n")
    assert gemm_libraries_named(both) == ((KernelConfig(128, 256, 2, 1), ONE), "")


def test_the_header_declares_an_entry_point_for_every_configuration():
    header = (RUNTIME_INCLUDE / HEADER).read_text()
    for config in CONFIGS:
        assert f"CUCO_GROUPED_GEMM_ENTRY({config.entry});" in header
        assert (f"{{{{{config.block_m}, {config.block_n}, {config.cluster_m}, {config.cluster_n}}}, "
                f"{config.entry}}}") in header
    includes = re.findall(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', header, re.M)
    assert includes and not [i for i in includes if i.startswith(("cutlass/", "cute/")) or i.endswith(".cuh")]


# ---------------------------------------------------------------- built once, shared, linked


def test_the_library_is_built_once_per_configuration_and_linked(tmp_path):
    tc = fake_toolchain(tmp_path)
    cache = BuildCache(tmp_path / "cache")
    first = compile_candidate(candidate(tmp_path, "arrival", "arrival_pipeline", gemm="cutlass_grouped"), tc, cache)
    assert first.ok, [d.render() for d in first.diagnostics]
    (lib_call,), (cand_call,) = calls(tmp_path)
    assert lib_call[-3].endswith("grouped_gemm_lib/cuco_grouped_gemm_lib.cu")
    assert "-DNDEBUG" in lib_call and f"-I{tc.cutlass}" in lib_call and "-DCUCO_GG_CLUSTER_M=1" in lib_call
    assert "-DCUCO_GG_ENTRY=cuco_grouped_gemm_128x256_1x1" in lib_call
    assert "-fvisibility=hidden,-fvisibility-inlines-hidden" in lib_call
    [library] = (tmp_path / "cache").glob("libcuco_grouped_gemm-128x256-1x1-*.so")
    assert f"-soname={library.name}" in lib_call
    # The candidate: no CUTLASS, linked against the library, found by its rpath.
    assert "-DNDEBUG" not in cand_call and not any(a.startswith(f"-I{tc.cutlass}") for a in cand_call)
    assert f"-l:{library.name}" in cand_call and "--no-as-needed" in cand_call
    assert f"-rpath={cache.root.resolve()}" in cand_call

    # expert_pipeline with the same configuration links the same library, built once.
    second = compile_candidate(candidate(tmp_path, "expert", "expert_pipeline", gemm="cutlass_grouped"), tc, cache)
    assert second.ok
    libs, cands = calls(tmp_path)
    assert len(libs) == 1 and f"-l:{library.name}" in cands[1]
    # 1x2 clusters: a library of its own.
    third = compile_candidate(candidate(tmp_path, "two", "expert_pipeline", gemm="cutlass_grouped_1x2"), tc, cache)
    assert third.ok
    libs, cands = calls(tmp_path)
    assert len(libs) == 2 and "-DCUCO_GG_ENTRY=cuco_grouped_gemm_128x256_1x2" in libs[1]
    assert not any(a.startswith("-l:libcuco_grouped_gemm-128x256-1x1") for a in cands[2])
    # The cuBLAS way builds and links no library.
    plain = compile_candidate(candidate(tmp_path, "plain", "arrival_pipeline", gemm="cublas"), tc, cache)
    assert plain.ok
    libs, cands = calls(tmp_path)
    assert len(libs) == 2 and not any("grouped_gemm" in a for a in cands[3])


def test_editing_the_header_changes_the_library_key(tmp_path):
    """The library key holds the runtime headers' bytes, this one's among them."""
    from cuco_tui.toolchain.nvcc import gemm_library_flags
    from cuco_tui.toolchain.tile_gemm_lib import library_path

    runtime = tmp_path / "runtime"
    runtime.mkdir()
    for h in RUNTIME_INCLUDE.iterdir():
        if h.is_file():
            (runtime / h.name).write_bytes(h.read_bytes())
    tc = fake_toolchain(tmp_path)
    tc = Toolchain(tc.nvcc, tc.nvcc_version, tc.nccl, tc.cublas, runtime, (), tc.cutlass, tc.cutlass_version, "")
    cache = BuildCache(tmp_path / "cache")
    before = library_path(ONE, tc, cache, gemm_library_flags(tc))
    (runtime / HEADER).write_text((runtime / HEADER).read_text() + "\n// edited\n")
    after = library_path(ONE, tc, cache, gemm_library_flags(tc))
    assert before != after and before.name.startswith("libcuco_grouped_gemm-128x256-1x1-")


# ---------------------------------------------------------------- what goes wrong, in one line


def test_a_configuration_without_a_library_is_one_diagnostic_before_nvcc(tmp_path):
    tc = fake_toolchain(tmp_path)
    src = candidate(tmp_path, "arrival", "arrival_pipeline", gemm="cutlass_grouped")
    src.write_text(src.read_text().replace("gg::GroupedConfig kGrouped{128, 256, 1, 1}",
                                           "gg::GroupedConfig kGrouped{64, 128, 1, 1}"))
    r = compile_candidate(src, tc, BuildCache(tmp_path / "cache"))
    assert not r.ok and [d.code for d in r.diagnostics] == ["toolchain"]
    assert r.diagnostics[0].message == ("gg::GroupedConfig{64, 128, 1, 1} has no grouped GEMM library "
                                        "(cuco_grouped_gemm_lib.h): tiles 128x128 (clusters 1x1, 2x1), "
                                        "128x256 (1x1, 1x2, 2x1) or 256x128 (2x1)")
    assert calls(tmp_path) == ([], [])


def test_no_cutlass_is_one_diagnostic(tmp_path):
    tc = fake_toolchain(tmp_path, cutlass=False)
    r = compile_candidate(candidate(tmp_path, "e", "expert_pipeline", gemm="cutlass_grouped"), tc,
                          BuildCache(tmp_path / "cache"))
    assert not r.ok and len(r.diagnostics) == 1
    assert r.diagnostics[0].message == ("cannot compile: the candidate includes cuco_grouped_gemm_lib.h, whose library "
                                        "is built from CUTLASS, but the CUTLASS headers were not found (pip install "
                                        "nvidia-cutlass) (run `cuco doctor`)")
    assert calls(tmp_path) == ([], [])
    lib = ensure_gemm_library(ONE, tc, BuildCache(tmp_path / "cache"))
    assert not lib.ok and lib.problem.startswith("cannot build the grouped GEMM library of 128x256 tiles, 1x1 clusters")


def test_a_failed_library_build_is_one_line_and_remembered(tmp_path):
    tc = fake_toolchain(tmp_path)
    (tmp_path / "fail-lib").write_text("")
    cache = BuildCache(tmp_path / "cache")
    r = compile_candidate(candidate(tmp_path, "a", "arrival_pipeline", gemm="cutlass_grouped"), tc, cache)
    assert not r.ok and len(r.diagnostics) == 1
    message = r.diagnostics[0].message
    assert message.startswith("building the grouped GEMM library of 128x256 tiles, 1x1 clusters failed after ")
    assert message.endswith('(nvcc exit 1): cuco_grouped_gemm_lib.cu(57): error: incomplete type "CollectiveOp" '
                            "is not allowed")
    # The same sources fail the same way: answered from the record, nvcc not run again.
    again = compile_candidate(candidate(tmp_path, "b", "expert_pipeline", gemm="cutlass_grouped"), tc, cache)
    assert not again.ok and again.diagnostics[0].message == message
    assert len(calls(tmp_path)[0]) == 1


# ---------------------------------------------------------------- the header, compiled for real

HEADER_CHECK = r"""
#include "cuco_grouped_gemm_lib.h"
namespace gg = cuco::grouped_gemm;

int use(cudaStream_t s, const int* counts, char* error, size_t len) {
  gg::GroupedGemmLib gemm;
  gg::GroupedProblems problems;
  if (gemm.init(gg::GroupedConfig{128, 128, 1, 1}, 8, 0, error, len)) return 1;
  if (problems.init(2, 8, error, len)) return 1;
  problems.spec(0) = gg::FillSpec{};
  problems.spec(0).counts = counts;
  if (problems.upload(s) != cudaSuccess || problems.fill(s) != cudaSuccess) return 1;
  if (gemm.launch(problems.problems(0), s) != cudaSuccess) return 1;
  problems.release();
  gemm.release();
  return 0;
}
"""


@pytest.mark.skipif(not discover().can_compile, reason="needs nvcc")
def test_the_header_compiles_on_its_own_without_cutlass(tmp_path):
    tc = discover()
    src = tmp_path / "header_check.cu"
    src.write_text(HEADER_CHECK)
    r = subprocess.run([str(tc.nvcc), "-std=c++17", "-gencode=arch=compute_90a,code=sm_90a", "-Xcompiler",
                        "-Wall,-Wextra,-Werror", f"-I{RUNTIME_INCLUDE}", "-c", str(src), "-o", str(tmp_path / "o.o")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr


# ---------------------------------------------------------------- the reference's library, preloaded


def test_a_workload_whose_reference_calls_the_library_gets_it_preloaded(monkeypatch, tmp_path):
    """moe_dispatch_combine lists it: the reference configuration is built (once per machine) and its
    path goes to the ranks' preload; a failed build is a note, and the reference falls back."""
    from cuco_tui.evaluate import cascade
    from cuco_tui.evaluate.cascade import harness_libraries
    from cuco_tui.toolchain.grouped_gemm_lib import REFERENCE_CONFIG
    from cuco_tui.toolchain.tile_gemm_lib import GemmLibrary

    asked = []

    def built(config, toolchain, cache):
        asked.append(config)
        return GemmLibrary(config, tmp_path / "libcuco_grouped_gemm-128x256-1x1-k.so", "")

    monkeypatch.setattr(cascade, "ensure_gemm_library", built)
    assert W.libraries == ("grouped_gemm",)
    preload, problem, note = harness_libraries(W, None, fake_toolchain(tmp_path), BuildCache(tmp_path / "c"),
                                               lambda p: None)
    assert preload == [str(tmp_path / "libcuco_grouped_gemm-128x256-1x1-k.so")] and problem == note == ""
    assert asked == [REFERENCE_CONFIG] == [GroupedConfig(128, 256, 1, 1)]
    monkeypatch.setattr(cascade, "ensure_gemm_library", lambda c, t, k: GemmLibrary(c, None, "nvcc exit 1: boom"))
    assert harness_libraries(W, None, fake_toolchain(tmp_path), BuildCache(tmp_path / "c"), lambda p: None) == (
        [], "", "the reference's grouped GEMM library is missing: nvcc exit 1: boom")
    gemm = load_workload("gemm_allgather")  # lists no library: nothing built
    monkeypatch.setattr(cascade, "ensure_gemm_library", lambda *a: pytest.fail("built for a workload without it"))
    assert harness_libraries(gemm, None, fake_toolchain(tmp_path), BuildCache(tmp_path / "c"), lambda p: None) == (
        [], "", "")


LAYOUT_PROGRAM = r"""
#include "cuco_grouped_gemm_lib.h"
#include <cstddef>
#include <cstdio>
#define OFF(T, f) printf(#T "." #f " %zu\n", offsetof(T, f))
int main() {
  printf("setup %zu problems %zu info %zu api %zu\n", sizeof(cuco_grouped_gemm_setup),
         sizeof(cuco_grouped_gemm_problems), sizeof(cuco_grouped_gemm_info), sizeof(cuco_grouped_gemm_api));
  OFF(cuco_grouped_gemm_problems, shapes); OFF(cuco_grouped_gemm_problems, host_shapes);
  OFF(cuco_grouped_gemm_info, workspace_bytes);
  OFF(cuco_grouped_gemm_api, create); OFF(cuco_grouped_gemm_api, launch); OFF(cuco_grouped_gemm_api, release);
  printf("abi %d\n", CUCO_GROUPED_GEMM_LIB_ABI);
  return 0;
}
"""


def test_the_python_bindings_lay_out_the_c_abi_as_the_header_does(tmp_path):
    """cuco_tui/harness/grouped_gemm.py's ctypes structures against the header, compiled for the host."""
    import ctypes

    from cuco_tui.harness import grouped_gemm as py

    tc = discover()
    if tc.nvcc is None:
        pytest.skip("needs nvcc")
    src, exe = tmp_path / "layout.cu", tmp_path / "layout"
    src.write_text(LAYOUT_PROGRAM)
    build = subprocess.run([str(tc.nvcc), f"-I{RUNTIME_INCLUDE}", str(src), "-o", str(exe)], capture_output=True,
                           text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    got = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60).stdout.split("\n")
    assert got[0] == (f"setup {ctypes.sizeof(py.Setup)} problems {ctypes.sizeof(py.Problems)} "
                      f"info {ctypes.sizeof(py.Info)} api {ctypes.sizeof(py.Api)}")
    assert got[1:7] == [f"cuco_grouped_gemm_problems.shapes {py.Problems.shapes.offset}",
                        f"cuco_grouped_gemm_problems.host_shapes {py.Problems.host_shapes.offset}",
                        f"cuco_grouped_gemm_info.workspace_bytes {py.Info.workspace_bytes.offset}",
                        f"cuco_grouped_gemm_api.create {py.Api.create.offset}",
                        f"cuco_grouped_gemm_api.launch {py.Api.launch.offset}",
                        f"cuco_grouped_gemm_api.release {py.Api.release.offset}"]
    assert got[7] == f"abi {py.ABI}"


def test_the_bindings_find_nothing_where_no_library_is_loaded():
    from cuco_tui.harness import grouped_gemm as py

    assert py.loaded("cuco_grouped_gemm_128x256_1x1") is None
    assert py.loaded("cuco_grouped_gemm_128x256_1x1", ["/nonexistent/libcuco_grouped_gemm.so"]) is None
