"""The prebuilt fused GEMM (cuco_tile_gemm_lib.h): which configurations a candidate names, one
library build per configuration shared by every candidate that names it, the candidate linked
against it, and a failed library build as one diagnostic. A fake nvcc records every call, so
these run anywhere; the real CUTLASS builds are in tests/workloads/gemm_allgather/test_fused_gemm.py.
"""

from __future__ import annotations

import fcntl
import re
import stat
import threading
import time
from pathlib import Path

import pytest

from cuco_tui.agents.offline.strategy import StrategyBook
from cuco_tui.toolchain import BuildCache, compile_candidate
from cuco_tui.toolchain.nvcc import ensure_gemm_library
from cuco_tui.toolchain.tile_gemm_lib import CONFIGS, HEADER, KernelConfig, configs_named, uses_library
from cuco_tui.toolchain.toolchain import RUNTIME_INCLUDE, Library, Toolchain
from cuco_tui.workload.manifest import load_workload

W = load_workload("gemm_allgather")
BOOK = StrategyBook.load(W.root, W.seed)
FUSED = BOOK.get("fused_tile")
DEFAULT = KernelConfig(128, 256, 2, 1)

# Records its arguments (one call a line) and writes the file named after -o. Building the
# library: fails with a CUTLASS-like error when `fail-lib` exists beside it; waits for `release`
# when `hold-lib` exists (announcing itself in `lib-started`), so a test can look at a build in
# progress.
FAKE_NVCC = r"""#!/bin/bash
dir="$(dirname "$0")"
echo "$@" >> "$dir/calls.txt"
lib=0; out=""
for a in "$@"; do case "$a" in *cuco_tile_gemm_lib.cu) lib=1;; esac; done
while [ $# -gt 0 ]; do if [ "$1" = -o ]; then out="$2"; fi; shift; done
if [ $lib = 1 ] && [ -e "$dir/fail-lib" ]; then
  echo "cuco_tile_gemm.cuh(88): error: static assertion failed with \"tile and stages exceed shared memory\""
  echo "1 error detected in the compilation of \"cuco_tile_gemm_lib.cu\"."
  exit 1
fi
if [ $lib = 1 ] && [ -e "$dir/hold-lib" ]; then
  echo x >> "$dir/lib-started"
  for i in $(seq 6000); do [ -e "$dir/release" ] && break; sleep 0.05; done
fi
echo built > "$out"
"""


def fake_toolchain(tmp_path: Path, cutlass_version: str = "4.2.0") -> Toolchain:
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
    return Toolchain(nvcc, "fake 1.0", libs[0], libs[1], RUNTIME_INCLUDE, (), cutlass, cutlass_version, "")


def calls(tmp_path: Path) -> tuple[list[list[str]], list[list[str]]]:
    """(the library builds, the candidate builds) the fake nvcc saw, each as its arguments."""
    path = tmp_path / "calls.txt"
    lines = [line.split() for line in path.read_text().splitlines()] if path.exists() else []
    lib = [a for a in lines if any(x.endswith("cuco_tile_gemm_lib.cu") for x in a)]
    return lib, [a for a in lines if a not in lib]


def candidate(tmp_path: Path, name: str, **knobs) -> Path:
    path = tmp_path / f"{name}.cu"
    path.write_text(BOOK.render(FUSED, FUSED.normalized({**FUSED.default_knobs(), **knobs})))
    return path


# ---------------------------------------------------------------- the configurations a source names


def test_a_candidate_names_the_configurations_it_links():
    src = BOOK.render(FUSED, FUSED.default_knobs())
    assert uses_library(src) and f'#include "{HEADER}"' in src
    assert configs_named(src) == ((DEFAULT,), [])
    two = "#include <cuco_tile_gemm_lib.h>\nauto a = tg::KernelConfig{256, 128, 1, 2};\n" \
          "constexpr cuco::tile_gemm::KernelConfig b(128,256,2,1);\n// tg::KernelConfig{256, 128, 2, 1}\n"
    assert configs_named(two) == ((KernelConfig(128, 256, 2, 1), KernelConfig(256, 128, 1, 2)), [])
    # One computed at run time: any may be asked for, so every library is linked.
    assert configs_named("tg::KernelConfig k{bm, bn, 2, 1};") == (CONFIGS, [])
    assert configs_named("tg::KernelConfig k{64, 128, 1, 1};") == ((), ["tg::KernelConfig{64, 128, 1, 1}"])
    assert not uses_library('// #include "cuco_tile_gemm_lib.h"\n#include "cuco_tile_gemm.cuh"\n')


def test_the_header_declares_an_entry_point_for_every_configuration():
    header = (RUNTIME_INCLUDE / HEADER).read_text()
    for config in CONFIGS:
        assert f"CUCO_TILE_GEMM_ENTRY({config.entry});" in header
        assert (f"{{{{{config.block_m}, {config.block_n}, {config.cluster_m}, {config.cluster_n}}}, "
                f"{config.entry}}}") in header
    # No CUTLASS, directly or through the template header: a candidate compiles in seconds.
    includes = re.findall(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', header, re.M)
    assert includes and not [i for i in includes if i.startswith(("cutlass/", "cute/")) or i == "cuco_tile_gemm.cuh"]


# ---------------------------------------------------------------- built once, shared, linked


def test_the_library_is_built_once_per_configuration_and_shared(tmp_path):
    tc = fake_toolchain(tmp_path)
    cache = BuildCache(tmp_path / "cache")
    first = compile_candidate(candidate(tmp_path, "first"), tc, cache)
    assert first.ok, [d.render() for d in first.diagnostics]
    (lib_call,), (cand_call,) = calls(tmp_path)
    # The library: CUTLASS's flags, the configuration, its symbols hidden, named after its key.
    assert "-DNDEBUG" in lib_call and f"-I{tc.cutlass}" in lib_call and "-DCUCO_TG_BLOCK_M=128" in lib_call
    assert "-DCUCO_TG_ENTRY=cuco_tile_gemm_128x256_2x1" in lib_call
    assert "-fvisibility=hidden,-fvisibility-inlines-hidden" in lib_call
    [library] = cache.root.glob("libcuco_tile_gemm-128x256-2x1-*.so")
    assert f"-soname={library.name}" in lib_call
    # The candidate: no CUTLASS at all, linked against the library, which it finds by its rpath.
    assert "-DNDEBUG" not in cand_call and not any(a.startswith(f"-I{tc.cutlass}") for a in cand_call)
    assert f"-l:{library.name}" in cand_call and f"-rpath={cache.root.resolve()}" in cand_call
    assert "--no-as-needed" in cand_call

    # Another candidate of the same configuration, other knobs: its own build, not the library's.
    second = compile_candidate(candidate(tmp_path, "second", chunks=8, mover="sm_store", tile_order="square"), tc, cache)
    assert second.ok and second.key != first.key
    libs, cands = calls(tmp_path)
    assert len(libs) == 1 and len(cands) == 2 and f"-l:{library.name}" in cands[1]

    # Another configuration builds its own library.
    other = compile_candidate(candidate(tmp_path, "other", tile="256x128", cluster="1x2"), tc, cache)
    assert other.ok
    libs, cands = calls(tmp_path)
    assert len(libs) == 2 and "-DCUCO_TG_ENTRY=cuco_tile_gemm_256x128_1x2" in libs[1]
    [other_lib] = cache.root.glob("libcuco_tile_gemm-256x128-1x2-*.so")
    assert f"-l:{other_lib.name}" in cands[2] and f"-l:{library.name}" not in cands[2]

    # Built from other CUTLASS headers, the library has another key, and so has every candidate.
    newer = fake_toolchain(tmp_path, cutlass_version="4.3.0")
    again = compile_candidate(candidate(tmp_path, "first"), newer, cache)
    assert again.ok and again.key != first.key and not again.cached
    assert len(calls(tmp_path)[0]) == 3 and len(list(cache.root.glob("libcuco_tile_gemm-128x256-2x1-*.so"))) == 2


def test_a_candidate_naming_no_literal_configuration_links_them_all(tmp_path):
    tc = fake_toolchain(tmp_path)
    cache = BuildCache(tmp_path / "cache")
    src = BOOK.render(FUSED, FUSED.default_knobs())
    computed = src.replace("constexpr tg::KernelConfig kConfig{128, 256, 2, 1};",
                           "constexpr int kTile[2] = {128, 256};\n"
                           "constexpr tg::KernelConfig kConfig{kTile[0], kTile[1], 2, 1};")
    assert computed != src
    path = tmp_path / "computed.cu"
    path.write_text(computed)
    r = compile_candidate(path, tc, cache)
    assert r.ok
    libs, (cand,) = calls(tmp_path)
    assert sorted(a for call in libs for a in call if a.startswith("-DCUCO_TG_ENTRY=")) == \
        sorted(f"-DCUCO_TG_ENTRY={c.entry}" for c in CONFIGS)
    assert sum(a.startswith("-l:libcuco_tile_gemm-") for a in cand) == 4


def test_a_configuration_without_a_library_is_refused_before_nvcc(tmp_path):
    tc = fake_toolchain(tmp_path)
    src = BOOK.render(FUSED, FUSED.default_knobs()).replace("kConfig{128, 256, 2, 1}", "kConfig{128, 128, 1, 1}")
    path = tmp_path / "odd.cu"
    path.write_text(src)
    r = compile_candidate(path, tc, BuildCache(tmp_path / "cache"))
    assert not r.ok and calls(tmp_path) == ([], [])
    (d,) = r.diagnostics
    assert d.code == "toolchain" and d.message.startswith("tg::KernelConfig{128, 128, 1, 1} has no fused GEMM library")
    assert "128x256 or 256x128" in d.message


def test_without_cutlass_the_library_cannot_be_built_and_says_so(tmp_path):
    tc = fake_toolchain(tmp_path)
    bare = Toolchain(tc.nvcc, tc.nvcc_version, tc.nccl, tc.cublas, tc.runtime_include, (), None, "",
                     "the CUTLASS headers were not found: `pip install nvidia-cutlass`")
    r = compile_candidate(candidate(tmp_path, "fused"), bare, BuildCache(tmp_path / "cache"))
    assert not r.ok and calls(tmp_path) == ([], [])
    (d,) = r.diagnostics
    assert d.code == "toolchain" and HEADER in d.message and "nvidia-cutlass" in d.message


# ---------------------------------------------------------------- a failed build


def test_a_broken_library_build_is_one_clear_diagnostic(tmp_path):
    tc = fake_toolchain(tmp_path)
    (tmp_path / "fail-lib").write_text("")
    cache = BuildCache(tmp_path / "cache")
    r = compile_candidate(candidate(tmp_path, "fused"), tc, cache)
    assert not r.ok and r.library is None
    (d,) = r.diagnostics
    assert d.severity == "error" and d.code == "toolchain" and "\n" not in d.message
    assert d.message.startswith("building the fused GEMM library of 128x256 tiles, 2x1 clusters failed")
    assert "(nvcc exit 1)" in d.message and "static assertion failed" in d.message
    assert "tile and stages exceed shared memory" in r.log  # nvcc's output, for whoever looks closer
    libs, cands = calls(tmp_path)
    assert len(libs) == 1 and cands == []  # the candidate's own nvcc never ran
    assert not list(cache.root.glob("libcuco_tile_gemm-*.so"))

    # The same sources fail the same way: the next candidate of that configuration is told at
    # once, without another minute of nvcc; another configuration still tries its own.
    again = compile_candidate(candidate(tmp_path, "again", chunks=2), tc, cache)
    assert [x.message for x in again.diagnostics] == [d.message] and len(calls(tmp_path)[0]) == 1
    compile_candidate(candidate(tmp_path, "other", tile="256x128"), tc, cache)
    assert len(calls(tmp_path)[0]) == 2


def test_prebuilding_a_library_is_what_a_candidate_links(tmp_path):
    tc = fake_toolchain(tmp_path)
    cache = BuildCache(tmp_path / "cache")
    lib = ensure_gemm_library(DEFAULT, tc, cache)
    assert lib.ok and not lib.cached and lib.path.parent == cache.root
    r = compile_candidate(candidate(tmp_path, "fused"), tc, cache)
    libs, (cand,) = calls(tmp_path)
    assert r.ok and len(libs) == 1 and f"-l:{lib.path.name}" in cand
    assert ensure_gemm_library(DEFAULT, tc, cache).cached
    bare = Toolchain(tc.nvcc, tc.nvcc_version, tc.nccl, tc.cublas, tc.runtime_include, (), None, "",
                     "the CUTLASS headers were not found: `pip install nvidia-cutlass`")
    missing = ensure_gemm_library(DEFAULT, bare, cache)
    assert not missing.ok and "CUTLASS headers were not found" in missing.problem


# ---------------------------------------------------------------- one build per configuration at a time


def _lock_held(path: Path) -> bool:
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False


def _wait_for(condition, what: str, limit_s: float = 120.0) -> None:
    """Waits for an event another process announces (a file appearing); the limit only stops a
    broken test from hanging the run."""
    deadline = time.monotonic() + limit_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what}")
        time.sleep(0.02)


def test_a_configuration_builds_under_its_own_lock_while_others_build_beside_it(tmp_path):
    tc = fake_toolchain(tmp_path)
    cache = BuildCache(tmp_path / "cache")
    (tmp_path / "hold-lib").write_text("")
    results = {}

    def build(name: str, **knobs) -> None:
        results[name] = compile_candidate(candidate(tmp_path, name, **knobs), tc, cache)

    first = threading.Thread(target=build, args=("first",))
    first.start()
    try:
        _wait_for(lambda: (tmp_path / "lib-started").exists(), "the first library build to start")
        # The build in progress holds its configuration's lock; another configuration's is free,
        # and its build goes ahead (released at once: `release` is written before it starts).
        assert _lock_held(cache.root / "cuco_tile_gemm-128x256-2x1.lock")
        assert not _lock_held(cache.root / "cuco_tile_gemm-256x128-2x1.lock")
        second = threading.Thread(target=build, args=("second",), kwargs={"chunks": 8})
        second.start()
        (tmp_path / "release").write_text("")
        build("other", tile="256x128")
        second.join()
    finally:
        (tmp_path / "release").write_text("")
        first.join()
    assert all(r.ok for r in results.values()), {k: [d.render() for d in r.diagnostics] for k, r in results.items()}
    entries = [a for call in calls(tmp_path)[0] for a in call if a.startswith("-DCUCO_TG_ENTRY=")]
    assert sorted(entries) == ["-DCUCO_TG_ENTRY=cuco_tile_gemm_128x256_2x1", "-DCUCO_TG_ENTRY=cuco_tile_gemm_256x128_2x1"]
