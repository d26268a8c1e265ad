"""gemm_allgather's fused_tile strategy (a persistent CUTLASS GEMM waiting per row chunk, from
cuco_tile_gemm.cuh) and the toolchain's CUTLASS support.

Every point of the strategy's offline space is rendered and checked at L0 (fast). Compiling is
minutes per kernel configuration (CUTLASS templates), so each distinct configuration (the
`tile` and `cluster` knobs) is compiled once, with the other knobs varied across those builds
so both movers and every tile order are compiled too: marked slow (deselect with -m "not slow").
"""

from __future__ import annotations

import itertools
import stat
from pathlib import Path

import pytest

from cuco_tui.agents.offline.strategy import StrategyBook
from cuco_tui.design.space import Capabilities, DesignPoint, parse_design, violations
from cuco_tui.evaluate.static_checks import check_static, is_rejected
from cuco_tui.evaluate.sync_checks import check_sync
from cuco_tui.source.regions import design_of
from cuco_tui.toolchain import BuildCache, compile_candidate
from cuco_tui.toolchain.nvcc import CUTLASS_TIMEOUT, uses_cutlass
from cuco_tui.toolchain.toolchain import (Library, Toolchain, cutlass_report, cutlass_version, discover,
                                          find_cutlass)
from cuco_tui.workload.manifest import load_workload

W = load_workload("gemm_allgather")
SEED = W.seed.read_text()
BOOK = StrategyBook.load(W.root, W.seed)
FUSED = BOOK.get("fused_tile")
TOOLCHAIN = discover()


def every_point() -> list[dict]:
    """The strategy's offline space: every knob combination, normalized, without repeats."""
    seen, out = set(), []
    for values in itertools.product(*FUSED.knobs.values()):
        knobs = FUSED.normalized(dict(zip(FUSED.knobs, values)))
        key = tuple(sorted(knobs.items()))
        if key not in seen:
            seen.add(key)
            out.append(knobs)
    return out


def test_every_point_renders_and_passes_l0():
    points = every_point()
    # 5 chunk counts x (copy engine + 3 store-kernel sizes) x 2 tiles x 2 clusters x 3 orders
    assert len(points) == 5 * 4 * 2 * 2 * 3
    sources = set()
    for knobs in points:
        src = BOOK.render(FUSED, knobs)
        diags = check_static(src, SEED, "fused.cu") + check_sync(src, "fused.cu")
        assert not is_rejected(diags), (knobs, [d.render() for d in diags])
        assert not [d for d in diags if d.severity == "warning"], (knobs, [d.render() for d in diags])
        declared = parse_design(design_of(src))
        assert declared == FUSED.point(knobs), knobs
        assert not violations(declared, Capabilities(world=8)), knobs
        assert declared.placement == "fused"
        assert uses_cutlass(src)
        sources.add(src)
    assert len(sources) == len(points), "two knob settings render the same candidate"


def test_design_points_follow_the_mover():
    ce = FUSED.point({**FUSED.default_knobs(), "chunks": 1})
    assert (ce.backend, ce.issuer, ce.comm_sms, ce.sync, ce.chunk) == ("copy_engine", "host", "0", "per_peer", "shard")
    sm = FUSED.point({**FUSED.default_knobs(), "mover": "sm_store", "mover_blocks": 32, "chunks": 8})
    assert (sm.backend, sm.issuer, sm.comm_sms, sm.sync, sm.chunk) == ("cuda_ipc", "multi_cta", "32", "per_chunk", "8")
    # A store kernel's size matters only with the store kernel.
    assert FUSED.normalized({**FUSED.default_knobs(), "mover_blocks": 8}) == FUSED.default_knobs()


def test_fused_placement_needs_something_a_kernel_can_wait_on():
    ok = DesignPoint("copy_engine", "fused", "per_chunk", "host", "4", "2", "0")
    assert violations(ok) == []
    (why,) = violations(ok.with_(backend="nccl_host"))
    assert "fused into compute" in why and "copy engines" in why


# ---------------------------------------------------------------- the toolchain and CUTLASS


def fake_cutlass(root: Path, version: tuple[int, int, int] = (4, 2, 0)) -> Path:
    inc = root / "include"
    (inc / "cutlass").mkdir(parents=True)
    (inc / "cute").mkdir()
    (inc / "cutlass" / "cutlass.h").write_text("// fake\n")
    (inc / "cute" / "tensor.hpp").write_text("// fake\n")
    major, minor, patch = version
    (inc / "cutlass" / "version.h").write_text(
        f"#define CUTLASS_MAJOR {major}\n#define CUTLASS_MINOR {minor}\n#define CUTLASS_PATCH {patch}\n")
    return inc


def test_cutlass_is_found_through_the_environment_first(tmp_path):
    inc = fake_cutlass(tmp_path / "checkout", (4, 3, 1))
    found, problem = find_cutlass({"CUCO_CUTLASS_HOME": str(tmp_path / "checkout")})
    assert (found, problem) == (inc, "")
    assert cutlass_version(found) == "4.3.1"
    found, problem = find_cutlass({"CUCO_CUTLASS_HOME": str(inc)})  # the include folder itself
    assert found == inc
    found, problem = find_cutlass({"CUCO_CUTLASS_HOME": str(tmp_path / "nowhere")})
    assert found is None and "CUCO_CUTLASS_HOME" in problem and "cutlass.h" in problem


def test_cutlass_from_the_package_when_installed():
    found, problem = find_cutlass({})
    if found is None:
        assert "pip install nvidia-cutlass" in problem or "nvidia-cutlass" in problem
        pytest.skip("nvidia-cutlass is not installed here")
    assert (found / "cutlass" / "cutlass.h").is_file() and "cutlass_library" in str(found)
    ok, detail, fix = cutlass_report(TOOLCHAIN)
    assert ok and TOOLCHAIN.cutlass_version in detail and fix == ""


def test_uses_cutlass_reads_include_lines_only():
    assert uses_cutlass('#include "cuco_tile_gemm.cuh"\n')
    assert uses_cutlass("  #  include <cute/tensor.hpp>\n")
    assert uses_cutlass("#include <cutlass/gemm/collective/collective_builder.hpp>\n")
    assert not uses_cutlass('// #include "cuco_tile_gemm.cuh"\n#include "cuco_runtime.cuh"\n')
    assert not uses_cutlass(SEED)


def _fake_toolchain(tmp_path: Path, cutlass: Path | None) -> Toolchain:
    libs = []
    for name, soname in (("nccl", "libnccl.so.2"), ("cublas", "libcublas.so.13")):
        root = tmp_path / name
        (root / "include").mkdir(parents=True)
        (root / "lib").mkdir()
        (root / "lib" / soname).write_bytes(b"")
        libs.append(Library(name, root / "include", root / "lib", soname))
    nvcc = tmp_path / "fake-nvcc"
    # Records its arguments and writes the library named after -o.
    nvcc.write_text('#!/bin/bash\necho "$@" > "$(dirname "$0")/args.txt"\nout=""\n'
                    'while [ $# -gt 0 ]; do if [ "$1" = -o ]; then out="$2"; fi; shift; done\necho built > "$out"\n')
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IEXEC)
    runtime = tmp_path / "runtime"
    runtime.mkdir(exist_ok=True)
    return Toolchain(nvcc, "fake 1.0", libs[0], libs[1], runtime, (), cutlass, "4.2.0" if cutlass else "",
                     "" if cutlass else "the CUTLASS headers were not found: pip install nvidia-cutlass")


def test_a_cutlass_candidate_gets_its_flags_and_others_do_not(tmp_path):
    inc = fake_cutlass(tmp_path / "cutlass")
    tc = _fake_toolchain(tmp_path, inc)
    cache = BuildCache(tmp_path / "cache")
    fused = tmp_path / "fused.cu"
    fused.write_text(BOOK.render(FUSED, FUSED.default_knobs()))
    r = compile_candidate(fused, tc, cache)
    assert r.ok
    args = (tmp_path / "args.txt").read_text().split()
    assert f"-I{inc}" in args and "-DNDEBUG" in args and "--expt-relaxed-constexpr" in args
    assert "-gencode=arch=compute_90a,code=sm_90a" in args
    plain = tmp_path / "seed.cu"
    plain.write_text(SEED)
    r2 = compile_candidate(plain, tc, cache)
    assert r2.ok
    args = (tmp_path / "args.txt").read_text().split()
    assert "-DNDEBUG" not in args and not any(a.startswith(f"-I{inc}") for a in args)
    assert CUTLASS_TIMEOUT >= 600


def test_a_cutlass_candidate_without_cutlass_is_a_toolchain_diagnostic(tmp_path):
    tc = _fake_toolchain(tmp_path, None)
    fused = tmp_path / "fused.cu"
    fused.write_text(BOOK.render(FUSED, FUSED.default_knobs()))
    r = compile_candidate(fused, tc, BuildCache(tmp_path / "cache"))
    assert not r.ok and not (tmp_path / "args.txt").exists()  # nvcc never ran
    (d,) = r.diagnostics
    assert d.code == "toolchain" and "CUTLASS" in d.message and "nvidia-cutlass" in d.message


def test_the_header_is_shipped_with_the_runtime():
    header = TOOLCHAIN.runtime_include / "cuco_tile_gemm.cuh"
    text = header.read_text()
    assert "fused_gemm_kernel" in text and "wait_geq" in text and "fence.proxy.async" in text
    pyproject = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    assert '"harness/runtime/*.cuh"' in pyproject and "nvidia-cutlass" in pyproject


# ---------------------------------------------------------------- real compiles (slow)

# One build per kernel configuration; the other knobs vary so that both movers, every tile
# order and the extreme chunk counts are compiled as well.
CONFIG_BUILDS = [
    {"tile": "128x256", "cluster": "2x1"},  # the defaults: copy engines, 4 chunks, auto order
    {"tile": "128x256", "cluster": "1x2", "mover": "sm_store", "mover_blocks": 8, "chunks": 1,
     "tile_order": "arrival"},
    {"tile": "256x128", "cluster": "2x1", "mover": "sm_store", "mover_blocks": 32, "chunks": 16,
     "tile_order": "square"},
    {"tile": "256x128", "cluster": "1x2", "chunks": 2, "tile_order": "arrival"},
]
can_compile = pytest.mark.skipif(not TOOLCHAIN.can_compile or TOOLCHAIN.cutlass is None,
                                 reason="needs nvcc, NCCL, cuBLAS and the CUTLASS headers (pip install nvidia-cutlass)")


def test_the_builds_cover_every_kernel_configuration():
    configs = {(b["tile"], b["cluster"]) for b in CONFIG_BUILDS}
    assert configs == set(itertools.product(FUSED.knobs["tile"], FUSED.knobs["cluster"]))
    for key in ("mover", "tile_order"):
        assert {b.get(key, FUSED.default_knobs()[key]) for b in CONFIG_BUILDS} == set(FUSED.knobs[key])


@pytest.mark.slow
@can_compile
@pytest.mark.parametrize("knobs", CONFIG_BUILDS, ids=lambda k: f"{k['tile']}-{k['cluster']}")
def test_each_kernel_configuration_compiles(tmp_path, knobs):
    path = tmp_path / "fused.cu"
    path.write_text(BOOK.render(FUSED, {**FUSED.default_knobs(), **knobs}))
    r = compile_candidate(path, TOOLCHAIN, BuildCache())  # the session's cache (conftest)
    assert r.ok, "\n".join(d.render() for d in r.diagnostics)
    assert "-DNDEBUG" in r.command
