"""gemm_allgather's fused_tile strategy (a persistent CUTLASS GEMM waiting per row chunk, from
cuco_tile_gemm.cuh, prebuilt per kernel configuration and linked through cuco_tile_gemm_lib.h) and
the toolchain's CUTLASS support.

Every point of the strategy's offline space is rendered and checked at L0 (fast). Building a
kernel configuration's library is minutes (CUTLASS templates), so each distinct configuration (the
`tile` and `cluster` knobs) is built once, with the other knobs varied across the candidates
that link it so both movers and every tile order are compiled too: marked slow (deselect with
-m "not slow"). The library's flow with a fake nvcc: tests/toolchain/test_tile_gemm_lib.py.
"""

from __future__ import annotations

import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from cuco_tui.agents.offline.strategy import StrategyBook
from cuco_tui.design.space import Capabilities, DesignPoint, parse_design, violations
from cuco_tui.evaluate.static_checks import check_static, is_rejected
from cuco_tui.evaluate.sync_checks import check_sync
from cuco_tui.source.regions import design_of
from cuco_tui.toolchain import BuildCache, compile_candidate
from cuco_tui.toolchain.nvcc import CUTLASS_TIMEOUT, nvcc_flags, uses_cutlass
from cuco_tui.toolchain.tile_gemm_lib import KernelConfig, configs_named, uses_library
from cuco_tui.toolchain.toolchain import (Library, Toolchain, cutlass_report, cutlass_version, discover,
                                          find_cutlass)
from cuco_tui.workload.manifest import load_workload
from repo_paths import REPO
from strategy_helpers import every_point

W = load_workload("gemm_allgather")
SEED = W.seed.read_text()
BOOK = StrategyBook.load(W.root, W.seed)
FUSED = BOOK.get("fused_tile")
TOOLCHAIN = discover()


def test_every_point_renders_and_passes_l0():
    points = every_point(FUSED)
    # 5 chunk counts x (copy engine with 4 K-slice counts x 3 fanouts + 3 store-kernel sizes x 2 fanouts)
    # x 2 tiles x 2 clusters x 3 orders (the store kernel has no pacing: paced is its ring)
    assert len(points) == 5 * (4 * 3 + 3 * 2) * 2 * 2 * 3
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
        # No CUTLASS in the candidate: it links the library of its one kernel configuration.
        assert uses_library(src) and not uses_cutlass(src)
        bm, bn = map(int, knobs["tile"].split("x"))
        cm, cn = map(int, knobs["cluster"].split("x"))
        assert configs_named(src) == ((KernelConfig(bm, bn, cm, cn),), [])
        sources.add(src)
    assert len(sources) == len(points), "two knob settings render the same candidate"


def test_paced_is_offered_only_where_a_ring_has_steps_to_pace():
    """At W = 2 the ring has one step: paced waits for nothing and would run as the ring does,
    under another source; the space leaves it out there, and offers it from W = 3."""
    points = every_point(FUSED)
    at = {w: [k for k in points if FUSED.valid(k, Capabilities(world=w))] for w in (2, 4)}
    assert not [k for k in at[2] if k["fanout"] == "paced"]
    assert len([k for k in at[4] if k["fanout"] == "paced"]) == 5 * 4 * 2 * 2 * 3
    assert len(at[2]) == len(points) - 5 * 4 * 2 * 2 * 3


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


def template_api(src: str) -> str:
    """A fused_tile render rewritten to instantiate cuco_tile_gemm.cuh's template itself, as a
    hand-written candidate (or benchmarks/fused_gemm.py) does, instead of linking the library."""
    m = re.search(r"constexpr tg::KernelConfig kConfig\{(\d+), (\d+), (\d+), (\d+)\};", src)
    out = src.replace('#include "cuco_tile_gemm_lib.h"', '#include "cuco_tile_gemm.cuh"').replace(
        m.group(0), f"using Cfg = tg::Config<{', '.join(m.groups())}>;").replace(
        "tg::FusedGemmLib gemm;", "tg::FusedGemm<Cfg> gemm;").replace("kConfig.block_m", "Cfg::kBlockM").replace(
        "c->gemm.init(kConfig, s,", "c->gemm.init(s,")
    assert "kConfig" not in out and "FusedGemmLib" not in out
    return out


DIRECT = template_api(BOOK.render(FUSED, FUSED.default_knobs()))


def test_a_cutlass_candidate_gets_its_flags_and_others_do_not(tmp_path):
    inc = fake_cutlass(tmp_path / "cutlass")
    tc = _fake_toolchain(tmp_path, inc)
    cache = BuildCache(tmp_path / "cache")
    fused = tmp_path / "fused.cu"
    fused.write_text(DIRECT)
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


@pytest.mark.parametrize("source", [DIRECT, BOOK.render(FUSED, FUSED.default_knobs())], ids=["direct", "library"])
def test_a_cutlass_candidate_without_cutlass_is_a_toolchain_diagnostic(tmp_path, source):
    tc = _fake_toolchain(tmp_path, None)
    fused = tmp_path / "fused.cu"
    fused.write_text(source)
    r = compile_candidate(fused, tc, BuildCache(tmp_path / "cache"))
    assert not r.ok and not (tmp_path / "args.txt").exists()  # nvcc never ran
    (d,) = r.diagnostics
    assert d.code == "toolchain" and "CUTLASS" in d.message and "nvidia-cutlass" in d.message


def test_editing_a_runtime_cuh_header_changes_the_build_key(tmp_path):
    tc = _fake_toolchain(tmp_path, None)
    (tc.runtime_include / "cuco_tile_gemm.cuh").write_text("// one\n")
    before = tc.fingerprint()
    (tc.runtime_include / "cuco_tile_gemm.cuh").write_text("// two\n")
    assert tc.fingerprint() != before


def test_the_headers_are_shipped_with_the_runtime():
    gemm = (TOOLCHAIN.runtime_include / "cuco_tile_gemm.cuh").read_text()
    arrival = (TOOLCHAIN.runtime_include / "cuco_arrival.cuh").read_text()
    assert "fused_gemm_kernel" in gemm and '#include "cuco_arrival.cuh"' in gemm
    assert "wait_geq" in arrival and "fence.proxy.async" in arrival
    assert not re.search(r'#\s*include\s*[<"](cutlass|cute)/', arrival)  # the protocol needs no CUTLASS
    assert not uses_cutlass('#include "cuco_arrival.cuh"\n')
    lib = (TOOLCHAIN.runtime_include / "cuco_tile_gemm_lib.h").read_text()
    assert '#include "cuco_arrival.cuh"' in lib and "class FusedGemmLib" in lib and "struct KernelConfig" in lib
    assert not re.search(r'#\s*include\s*[<"](cutlass/|cute/|cuco_tile_gemm\.cuh)', lib)
    pyproject = (REPO / "pyproject.toml").read_text()
    assert '"harness/runtime/*.cuh"' in pyproject and "nvidia-cutlass" in pyproject
    assert '"harness/runtime/*.h"' in pyproject and '"harness/tile_gemm_lib/*.cu"' in pyproject


# ---------------------------------------------------------------- the benchmark's reading of its results

BENCH = REPO / "benchmarks" / "fused_gemm.py"


def _bench():
    import importlib.util

    spec = importlib.util.spec_from_file_location("fused_gemm_bench_py", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PTXAS = """ptxas info    : 11 bytes gmem
ptxas info    : Compiling entry function '_ZN4cuco9tile_gemm17fused_gemm_kernelINS0_6ConfigILi128ELi256ELi2ELi1EEEEEvNS0_6ParamsIT_EE' for 'sm_90a'
ptxas info    : Function properties for _ZN4cuco9tile_gemm17fused_gemm_kernelINS0_6ConfigILi128ELi256ELi2ELi1EEEEEvNS0_6ParamsIT_EE
    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 168 registers, used 2 barriers
ptxas info    : Compiling entry function '_Z10fill_bf16P13__nv_bfloat16mjf' for 'sm_90a'
ptxas info    : Used 12 registers
"""


def test_the_benchmark_reads_ptxas_resource_usage():
    (u,) = _bench().resource_usage(PTXAS)
    assert u == {"kernel": "128x256/2x1", "registers": 168, "stack": 8, "spill_stores": 4, "spill_loads": 4}


def _variant(name, kind, ms, ok=True):
    return {"name": name, "kind": kind, "ok": ok, "why": "" if ok else "wrong result", "median_ms": ms,
            "q1_ms": ms * 0.99, "q3_ms": ms * 1.01, "tflops": 700.0}


def test_the_benchmark_table_compares_the_faster_cublas_with_the_default_and_the_best():
    timing = [{"M": 4096, "K": 8192, "N": 8192, "gemm": [4096, 8192, 4096], "variants": [
        _variant("cublasGemmEx", "cublas", 0.40), _variant("cublasLt-best", "cublaslt", 0.38),
        _variant("128x256/2x1/auto", "fused", 0.40), _variant("256x128/1x2/square", "fused", 0.39),
        _variant("128x256/2x1/auto/16-SMs-reserved", "fused", 0.35)]}]
    late = [{"mode": "h2d", "M": 4096, "K": 8192, "N": 8192, "ok": True, "ms": 1.2, "copy_ms": 1.0},
            {"mode": "ce_d2d", "M": 4096, "K": 8192, "N": 8192, "ok": True, "ms": 0.5, "copy_ms": 0.2}]
    table, good = _bench().report(timing, late)
    row = table.splitlines()[-1]
    assert "cublasLt-best" in row and "95.0%" in row  # 0.38 / 0.40
    assert "256x128/1x2/square 0.390 (97.4%)" in row  # the reserved-SM variant is not a candidate for best
    assert good
    late[1]["ok"] = False
    assert not _bench().report(timing, late)[1]
    timing[0]["variants"][3]["median_ms"] = 0.41  # best now the default at 95.0%: still on target
    assert _bench().report(timing, late[:1])[1]
    timing[0]["variants"][2]["median_ms"] = 0.42
    assert not _bench().report(timing, late[:1])[1]  # 90.5%, under the target


# ---------------------------------------------------------------- real compiles (slow)

# One kernel configuration's library built here (a minute of nvcc on 2 cores, CUTLASS's whole
# kernel template), linked by three candidates whose other knobs vary, and a fourth that finds it
# built (REUSE), so that both movers, every store-kernel size, every tile order, both fanouts and
# the extreme chunk counts are compiled against it. The library's
# other configurations differ only in the template's tile and cluster sizes: every one of them is
# built (with each knob changed alone) by benchmarks/runs/prebuild.py at the start of every GPU
# call, where a failure stops the call's tests; building them here too cost 80 CPU-s a run of the
# suite on a 2-core machine (issue 36, item 24).
CONFIG_BUILDS = [
    {"tile": "128x256", "cluster": "2x1"},  # the defaults: copy engines, 4 chunks, auto order
    {"tile": "128x256", "cluster": "2x1", "mover": "sm_store", "mover_blocks": 8, "chunks": 1,
     "tile_order": "arrival"},
    {"tile": "128x256", "cluster": "2x1", "mover": "sm_store", "mover_blocks": 32, "chunks": 16,
     "tile_order": "square", "fanout": "all"},
    {"tile": "128x256", "cluster": "2x1", "fanout": "paced", "chunks": 2, "k_slices": 2},  # waits on the copy stream
]
REUSE = {"tile": "128x256", "cluster": "2x1", "mover": "sm_store", "mover_blocks": 16, "chunks": 8,
         "tile_order": "arrival", "fanout": "all"}
can_nvcc = pytest.mark.skipif(not TOOLCHAIN.can_compile, reason="needs nvcc, NCCL and cuBLAS headers")
can_compile = pytest.mark.skipif(not TOOLCHAIN.can_compile or TOOLCHAIN.cutlass is None,
                                 reason="needs nvcc, NCCL, cuBLAS and the CUTLASS headers (pip install nvidia-cutlass)")


def test_the_builds_cover_every_candidate_side_knob_value():
    builds = CONFIG_BUILDS + [REUSE]
    assert len({(b["tile"], b["cluster"]) for b in builds}) == 1  # one library, linked by each
    for key in ("mover", "tile_order", "fanout"):
        assert {b.get(key, FUSED.default_knobs()[key]) for b in builds} == set(FUSED.knobs[key])
    # The store kernel's sizes: with the store kernel (the copy engines ignore it).
    assert {b["mover_blocks"] for b in builds if b.get("mover") == "sm_store"} == set(FUSED.knobs["mover_blocks"])
    assert {1, 16} <= {b.get("chunks", FUSED.default_knobs()["chunks"]) for b in builds}


def test_the_gpu_calls_prebuild_every_kernel_configuration():
    """The configurations the suite does not build are built at the start of every GPU call: the
    prebuild's sources name every tile and cluster combination of the template."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("prebuild", REPO / "benchmarks" / "runs" / "prebuild.py")
    prebuild = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prebuild)
    named = {c.tag for text in prebuild.sources("gemm_allgather").values() if uses_library(text)
             for c in configs_named(text)[0]}
    assert named == {f"{t}-{c}" for t in FUSED.knobs["tile"] for c in FUSED.knobs["cluster"]}


# The schedule is cuco_arrival.cuh's (the fused kernel's, without CUTLASS): a host program that
# includes it alone compiles in 3 CPU-s, against 17 through cuco_tile_gemm.cuh.
SCHEDULE_CHECK = r"""
#include "cuco_arrival.cuh"
#include <array>
#include <set>
namespace tg = cuco::tile_gemm;

// Walks the schedule of one case: every cluster tile exactly once, own rows first, and the
// rows in arrival order; prints the row order.
static int check(int64_t M, int64_t N, int W, int rank, int chunks, int bm, int bn, int cmul, int cnul,
                 tg::TileOrder order, int clusters, tg::Fanout fanout = tg::Fanout::Ring) {
  const tg::RowLayout l = tg::make_row_layout(M, N, 64, W, rank, chunks, bm, fanout);
  const int cm = (int)((M + bm * cmul - 1) / (bm * cmul)), cn = (int)((N + bn * cnul - 1) / (bn * cnul));
  std::vector<int> rows = tg::arrival_rows(l, bm * cmul, cm);
  const int band = tg::band_rows(order, clusters, cm, bm * cmul, bn * cnul, N * 64 * 2 * 1000, 50 << 20);
  tg::Schedule s{rows.data(), cm, cn, band, cm * cn};
  std::set<std::pair<int, int>> seen;
  for (int t = 0; t < s.tiles; ++t) {
    int crow, ccol;
    tg::cluster_tile(s, t, crow, ccol);
    if (crow < 0 || crow >= cm || ccol < 0 || ccol >= cn || !seen.insert({crow, ccol}).second) {
      printf("bad tile %d -> (%d, %d)\n", t, crow, ccol);
      return 1;
    }
  }
  if ((int)seen.size() != cm * cn) { printf("missing tiles\n"); return 1; }
  // Own cluster rows (all rows of this rank) before any row that waits for a peer.
  bool peer_seen = false;
  for (int cr : rows) {
    const int64_t r0 = (int64_t)cr * bm * cmul, r1 = std::min<int64_t>(r0 + bm * cmul, M);
    const bool own = r0 >= rank * l.rows_per_rank && r1 <= (rank + 1) * l.rows_per_rank;
    if (own && peer_seen) { printf("own row %d after a peer row\n", cr); return 1; }
    peer_seen |= !own;
  }
  printf("order");
  for (int cr : rows) printf(" %d", cr);
  printf(" band %d\n", band);
  return 0;
}

// The flags of a layout whose last chunks are cut along K: a distinct slot per (rank, chunk,
// slice), the slices of a last chunk tiling [0, K) in 64-column blocks, other chunks whole.
static int check_slices(int64_t K, int W, int chunks, int wanted) {
  const tg::RowLayout l = tg::make_row_layout(4096, 512, K, W, 0, chunks, 128, tg::Fanout::Ring, wanted);
  std::set<int> slots;
  for (int p = 0; p < W; ++p)
    for (int c = 0; c < l.chunks; ++c) {
      if (c < l.chunks - 1 && l.slices_of(c) != 1) { printf("chunk %d cut\n", c); return 1; }
      int64_t next = 0;
      for (int s = 0; s < l.slices_of(c); ++s) {
        const int idx = l.flag_index(p, c, s);
        if (idx < 0 || idx >= l.flag_count() || !slots.insert(idx).second) { printf("slot %d\n", idx); return 1; }
        if (l.slice_col0(c, s) != next || l.slice_cols(c, s) <= 0 || l.slice_col0(c, s) % 64 != 0) {
          printf("slice %d of K=%lld at %lld\n", s, (long long)K, (long long)l.slice_col0(c, s));
          return 1;
        }
        next += l.slice_cols(c, s);
      }
      if (next != K) { printf("slices cover %lld of %lld\n", (long long)next, (long long)K); return 1; }
    }
  if (l.k_slices > wanted || (l.k_slices > 1 && l.slice_k % 64 != 0)) return 1;
  return 0;
}

int main() {
  int bad = 0;
  for (int64_t K : {64, 512, 4096, 4160, 8192})
    for (int W : {2, 4, 8})
      for (int chunks : {1, 2, 4})
        for (int wanted : {1, 2, 3, 4, 8})
          bad |= check_slices(K, W, chunks, wanted);
  for (auto kw : {std::array<int, 2>{8192, 4}, std::array<int, 2>{4160, 4}, std::array<int, 2>{128, 8}}) {
    const tg::RowLayout l = tg::make_row_layout(4096, 512, kw[0], 2, 0, 2, 128, tg::Fanout::Ring, kw[1]);
    printf("slices K=%d want %d:", kw[0], kw[1]);
    for (int s = 0; s < l.k_slices; ++s) printf(" %lld", (long long)l.slice_cols(1, s));
    printf("\n");
  }
  const tg::TileOrder orders[] = {tg::TileOrder::Auto, tg::TileOrder::Arrival, tg::TileOrder::Square};
  for (int W : {2, 4, 8})
    for (int64_t M : {1536, 8192, 32768})
      for (int64_t N : {64, 512, 7168})
        for (int chunks : {1, 4, 16})
          for (int rank : {0, W - 1})
            for (auto cfg : {std::array<int, 4>{128, 256, 2, 1}, std::array<int, 4>{256, 128, 1, 2}})
              for (auto o : orders)
                for (auto f : {tg::Fanout::Ring, tg::Fanout::All})
                  bad |= check(M, N, W, rank, chunks, cfg[0], cfg[1], cfg[2], cfg[3], o, 66, f) ? 1 : 0;
  printf("case ");
  bad |= check(1536, 512, 4, 1, 1, 128, 256, 1, 1, tg::TileOrder::Arrival, 66);
  printf("case-all ");
  bad |= check(1536, 512, 4, 1, 3, 128, 256, 1, 1, tg::TileOrder::Arrival, 66, tg::Fanout::All);
  printf("%s\n", bad ? "FAILED" : "ALL OK");
  return bad;
}
"""


@can_nvcc
def test_the_schedule_covers_every_tile_once_in_arrival_order(tmp_path):
    src = tmp_path / "schedule_check.cu"
    src.write_text(SCHEDULE_CHECK)
    exe = tmp_path / "schedule_check"
    includes = [f"-I{p}" for p in (TOOLCHAIN.runtime_include, TOOLCHAIN.nccl.include, TOOLCHAIN.cublas.include)]
    build = subprocess.run([str(TOOLCHAIN.nvcc), "-std=c++17", "-O1", "-gencode=arch=compute_90a,code=sm_90a",
                            *includes, str(src), "-o", str(exe)], capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stdout + build.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and run.stdout.rstrip().endswith("ALL OK"), run.stdout[-3000:]
    # Rank 1 of 4, one 128-row tile per cluster row, 3 per shard: its own rows 3-5 first, then the
    # shards as the ring delivers them: rank 0's, rank 3's, rank 2's.
    case = next(line for line in run.stdout.splitlines() if line.startswith("case "))
    assert case == "case order 3 4 5 0 1 2 9 10 11 6 7 8 band 1"
    # The same with 3 chunks per shard sent to every peer at once: chunk 0 of ranks 0, 3, 2, then
    # chunk 1 of each, then chunk 2.
    case = next(line for line in run.stdout.splitlines() if line.startswith("case-all "))
    assert case == "case-all order 3 4 5 0 9 6 1 10 7 2 11 8 band 1"
    # The last chunk's K slices: equal 64-column multiples, the last one shorter where K asks.
    slices = [line for line in run.stdout.splitlines() if line.startswith("slices ")]
    assert slices == ["slices K=8192 want 4: 2048 2048 2048 2048", "slices K=4160 want 4: 1088 1088 1088 896",
                      "slices K=128 want 8: 64 64"]


def _tool_output(*command: str) -> str:
    if shutil.which(command[0]) is None:
        pytest.skip(f"needs {command[0]} (binutils)")
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout


@pytest.mark.slow
@can_compile
@pytest.mark.parametrize("knobs", CONFIG_BUILDS, ids=lambda k: f"{k['tile']}-{k['cluster']}-{k.get('mover', 'ce')}-"
                                                            f"{k.get('tile_order', 'auto')}")
def test_each_kernel_configuration_compiles(tmp_path, knobs):
    """The configuration's library (built once into the session's cache, by the first candidate
    that links it), and a candidate that links it without seeing CUTLASS."""
    path = tmp_path / "fused.cu"
    source = BOOK.render(FUSED, {**FUSED.default_knobs(), **knobs})
    path.write_text(source)
    cache = BuildCache()  # the session's cache (conftest)
    r = compile_candidate(path, TOOLCHAIN, cache)
    assert r.ok, "\n".join(d.render() for d in r.diagnostics)
    [(config,), _] = configs_named(source)
    assert "-DNDEBUG" not in r.command and not any(a.startswith(f"-I{TOOLCHAIN.cutlass}") for a in r.command)
    [name] = [a.removeprefix("-l:") for a in r.command if a.startswith(f"-l:libcuco_tile_gemm-{config.tag}-")]
    library = cache.root / name
    assert library.is_file()

    # The library exports its entry point and none of our C++ (hidden: no clash with a candidate's
    # own copies of the runtime's inline functions); the candidate needs it and finds it by rpath.
    exported = _tool_output("nm", "-D", "--defined-only", str(library))
    assert f" T {config.entry}" in exported and "_ZN4cuco" not in exported
    dynamic = _tool_output("readelf", "-d", str(r.library))
    assert f"[{name}]" in dynamic and str(cache.root.resolve()) in dynamic
    assert f" w {config.entry}" in _tool_output("nm", "-D", str(r.library))


@pytest.mark.slow
@can_compile
def test_a_second_candidate_of_a_configuration_links_its_library_as_built(tmp_path):
    """Another candidate of a configuration whose library is built links that library, not rebuilt."""
    from cuco_tui.toolchain.nvcc import ensure_gemm_library

    cache = BuildCache()  # the session's (conftest)
    [(config,), _] = configs_named(BOOK.render(FUSED, {**FUSED.default_knobs(), **REUSE}))
    lib = ensure_gemm_library(config, TOOLCHAIN, cache)  # built by the first candidate of it, or here
    assert lib.ok, lib.problem
    built = lib.path.stat()
    other = tmp_path / "other.cu"
    other.write_text(BOOK.render(FUSED, FUSED.normalized({**FUSED.default_knobs(), **REUSE})))
    second = compile_candidate(other, TOOLCHAIN, cache)
    assert second.ok, "\n".join(d.render() for d in second.diagnostics)
    assert f"-l:{lib.path.name}" in second.command
    after = lib.path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (built.st_ino, built.st_mtime_ns)  # not rebuilt


C_ABI_CHECK = r"""
#include "cuco_tile_gemm_lib.h"
#include <cstring>
namespace tg = cuco::tile_gemm;

int main() {
  // Every field of a Setup crosses the C ABI both ways.
  tg::Setup s;
  s.layout = tg::make_row_layout(4096, 2048, 100, 4, 3, 4, 128, tg::Fanout::All);
  s.x = (const void*)0x1000;
  s.g[0] = (const void*)0x2000;
  s.g[1] = (const void*)0x3000;
  s.b = (const void*)0x4000;
  s.y = (void*)0x5000;
  s.flags = (const unsigned long long*)0x6000;
  s.signals = 16;
  s.order = tg::TileOrder::Square;
  s.reserved_sms = 16;
  s.trace = cuco::Trace{(cuco_wait_slot*)0x7000, 4096};
  s.site = 123;
  const tg::Setup b = tg::setup_from_c(tg::setup_to_c(s));
  const tg::RowLayout &l = s.layout, &m = b.layout;
  const bool same = l.M == m.M && l.N == m.N && l.K == m.K && l.world == m.world && l.rank == m.rank &&
                    l.rows_per_rank == m.rows_per_rank && l.chunk_rows == m.chunk_rows && l.chunks == m.chunks &&
                    l.own_from_x == m.own_from_x && l.fanout == m.fanout && s.x == b.x && s.g[0] == b.g[0] &&
                    s.g[1] == b.g[1] && s.b == b.b && s.y == b.y && s.flags == b.flags && s.signals == b.signals &&
                    s.order == b.order && s.reserved_sms == b.reserved_sms && s.trace.slots == b.trace.slots &&
                    s.trace.n == b.trace.n && s.site == b.site;
  printf("roundtrip %s\n", same ? "ok" : "FAILED");

  char error[CUCO_ERROR_LEN];
  tg::FusedGemmLib gemm;
  const tg::KernelConfig configs[] = {{128, 256, 2, 1}, {256, 128, 1, 2}, {64, 64, 1, 1}};
  for (const tg::KernelConfig& k : configs) {
    strcpy(error, "(none)");
    const int rc = gemm.init(k, s, error, sizeof error);
    printf("init %dx%d/%dx%d rc=%d: %s\n", k.block_m, k.block_n, k.cluster_m, k.cluster_n, rc, error);
  }
  printf("launch without init: %d\n", (int)gemm.launch(nullptr, 1));
  return 0;
}
"""


@pytest.mark.slow
@can_compile
def test_the_library_answers_through_its_c_abi(tmp_path):
    """A host program links one configuration's library as a candidate does and calls it on the CPU:
    the setup crosses the C ABI intact, the library's refusal comes back as its sentence, and a
    configuration not linked or without a library is a sentence too, not a crash."""
    from cuco_tui.toolchain.nvcc import ensure_gemm_library
    from cuco_tui.toolchain.tile_gemm_lib import link_flags

    lib = ensure_gemm_library(KernelConfig(128, 256, 2, 1), TOOLCHAIN, BuildCache())
    assert lib.ok, lib.problem
    src = tmp_path / "abi_check.cu"
    src.write_text(C_ABI_CHECK)
    exe = tmp_path / "abi_check"
    flags = [f for f in nvcc_flags(TOOLCHAIN) if f != "-shared"] + link_flags([lib])
    build = subprocess.run([str(TOOLCHAIN.nvcc), *flags, str(src), "-o", str(exe)], capture_output=True, text=True,
                           timeout=600)
    assert build.returncode == 0, build.stdout + build.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == "roundtrip ok"
    # K = 100 is refused by the library's own launcher, before it touches a GPU.
    assert lines[1] == "init 128x256/2x1 rc=1: K must be a multiple of 64 and N of 8 (TMA alignment): K=100 N=2048"
    assert lines[2].startswith("init 256x128/1x2 rc=1: the fused GEMM library of 256x128 tiles, 1x2 clusters is "
                               "not linked")
    assert lines[3].startswith("init 64x64/1x1 rc=1: tg::KernelConfig{64, 64, 1, 1} has no fused GEMM library")
    assert lines[4] == "launch without init: 1"  # cudaErrorInvalidValue


# ---------------------------------------------------------------- what the classifier should see

# The kernel, its launcher and the movers live in cuco_tile_gemm.cuh and cuco_arrival.cuh, out of
# the classifier's sight: design/classify/tile_gemm.py knows them by name.
@pytest.mark.parametrize("knobs,expected", [
    ({}, {"backend": "copy_engine", "placement": "fused", "sync": "per_chunk", "issuer": "host", "chunk": "4",
          "streams": "2", "comm_sms": "0"}),
    ({"mover": "sm_store", "mover_blocks": 32, "chunks": 1},
     {"backend": "cuda_ipc", "placement": "fused", "sync": "per_peer", "issuer": "multi_cta", "chunk": "shard",
      "streams": "2", "comm_sms": "32"}),
], ids=["copy_engine", "sm_store"])
def test_the_classifier_sees_a_fused_kernel(knobs, expected):
    from cuco_tui.design.classify import check_declaration, classify

    src = BOOK.render(FUSED, {**FUSED.default_knobs(), **knobs})
    assert classify(src).inferred() == expected
    assert check_declaration(src, "fused.cu") == []


@pytest.mark.parametrize("knobs", [{}, {"mover": "sm_store", "mover_blocks": 32, "chunks": 8, "tile": "256x128",
                                             "cluster": "1x2", "fanout": "all"}], ids=["copy_engine", "sm_store"])
def test_the_library_and_the_template_read_alike(knobs):
    """The template's own FusedGemm<Config<...>> (a hand-written candidate) and the library's
    FusedGemmLib (the strategy) are one fused kernel to the classifier."""
    from cuco_tui.design.classify import check_declaration, classify

    library = BOOK.render(FUSED, {**FUSED.default_knobs(), **knobs})
    direct = template_api(library)
    assert "tg::FusedGemmLib gemm;" in library and "tg::FusedGemm<Cfg> gemm;" in direct
    assert classify(direct).inferred() == classify(library).inferred()
    for src in (library, direct):
        [fused] = [k for k in classify(src).launches if k.computes]
        assert (fused.kernel, fused.waits, fused.pieces) == ("fused_gemm_kernel", True, knobs.get("chunks", 4))
        assert check_declaration(src, "fused.cu") == []


@pytest.mark.parametrize("chunks", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("mover", ["copy_engine", "sm_store"])
def test_every_chunk_count_is_read_from_the_row_layout(chunks, mover):
    from cuco_tui.design.classify import classify

    ev = classify(BOOK.render(FUSED, {**FUSED.default_knobs(), "chunks": chunks, "mover": mover}))
    inferred = ev.inferred()
    assert inferred["chunk"] == (str(chunks) if chunks > 1 else "shard")
    assert inferred["sync"] == ("per_chunk" if chunks > 1 else "per_peer")
    [fused] = [k for k in ev.launches if k.computes]
    assert (fused.kernel, fused.waits, fused.pieces, fused.stream) == ("fused_gemm_kernel", True, chunks, "stream")


def test_the_copy_engine_mover_moves_data_and_its_flag_writes_only_signal():
    from cuco_tui.design.classify import classify

    ev = classify(BOOK.render(FUSED, FUSED.default_knobs()))
    data = [s for s in ev.sites if s.role == "data"]
    assert [(s.what, s.backend) for s in data] == [("tg::ce_copy into peer memory", "copy_engine")]
    [signal] = [s for s in ev.sites if s.role == "signal"]
    assert signal.what.startswith("c->writer.post") and signal.backend == "cuda_ipc"
    assert ev.comm_streams == ("copy_stream",) and ev.issuer == "host"


def test_the_fused_kernel_is_known_by_its_namespace_only():
    from cuco_tui.design.classify import classify

    src = BOOK.render(FUSED, FUSED.default_knobs())
    spelled_out = src.replace("namespace tg = cuco::tile_gemm;\n", "").replace("tg::", "cuco::tile_gemm::")
    assert "tg::" not in spelled_out
    assert classify(spelled_out).inferred() == classify(src).inferred()
    using = src.replace("namespace tg = cuco::tile_gemm;", "using namespace cuco::tile_gemm;").replace("tg::", "")
    assert classify(using).inferred() == classify(src).inferred()
    # Another library's FusedGemm (and its ce_copy) is none of the runtime's: nothing is inferred
    # from it.
    other = src.replace("namespace tg = cuco::tile_gemm;", "namespace tg = other::gemm;")
    ev = classify(other)
    assert not ev.fused and not ev.data_backends and ev.chunking == ""


def test_a_declaration_that_contradicts_the_fused_kernel_warns():
    from cuco_tui.design.classify import check_declaration

    src = BOOK.render(FUSED, FUSED.default_knobs())
    declared = FUSED.point(FUSED.default_knobs())

    def warnings_for(**changes) -> list[str]:
        lie = src.replace(declared.line(), declared.with_(**changes).line())
        return [d.message for d in check_declaration(lie, "fused.cu")]

    [before] = warnings_for(placement="before", sync="per_chunk")
    assert "placement=before" in before and "fused_gemm_kernel" in before
    [chunk] = warnings_for(chunk="8")
    assert "chunk=8" in chunk and "4 pieces per shard" in chunk
    assert any("sync=global" in m for m in warnings_for(sync="global"))


@pytest.mark.parametrize("launch", [
    "tg::fused_gemm_kernel<Cfg><<<c->clusters * 2, Cfg::kThreads, c->smem, stream>>>(c->params)",
    "cudaLaunchKernel((const void*)tg::fused_gemm_kernel<Cfg>, dim3(c->clusters * 2), dim3(Cfg::kThreads), "
    "c->args, c->smem, stream)",
], ids=["chevrons", "api"])
def test_a_direct_launch_of_the_fused_kernel_is_fused_too(launch):
    from cuco_tui.design.classify import check_declaration, classify

    src = BOOK.render(FUSED, FUSED.default_knobs())
    direct = src.replace("c->gemm.launch(stream, e)", launch)
    assert direct != src
    ev = classify(direct)
    [fused] = [k for k in ev.launches if k.computes]
    assert (fused.kernel, fused.waits, fused.pieces, fused.stream) == ("fused_gemm_kernel", True, 4, "stream")
    assert ev.inferred() == classify(src).inferred()
    assert check_declaration(direct, "fused.cu") == []
