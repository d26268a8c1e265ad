"""The prebuilt CUTLASS grouped GEMM (cuco_grouped_gemm_lib.h, issue 32) and the MoE templates that
use it (knob `gemm` of arrival_pipeline and expert_pipeline): both libraries built for real and
linked by a candidate of each template with each configuration, the C ABI answering on the CPU
(marked slow: a minute or two of nvcc per library); on one GPU the library against a float
reference with uneven, empty and chunk-cut groups whose sizes are filled on the device; on two
GPUs the templates verified with it (marker gpu). The flow with a fake nvcc:
tests/toolchain/test_grouped_gemm_lib.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from cuco_tui.core.result import Status
from cuco_tui.evaluate.cascade import EvalOptions, evaluate
from cuco_tui.toolchain import BuildCache, compile_candidate
from cuco_tui.toolchain.grouped_gemm_lib import CONFIGS, GroupedConfig, configs_named
from cuco_tui.toolchain.nvcc import ensure_gemm_library, nvcc_flags
from cuco_tui.toolchain.tile_gemm_lib import link_flags
from cuco_tui.toolchain.toolchain import discover
from moe_common import W, _book

TOOLCHAIN = discover()
can_compile = pytest.mark.skipif(not TOOLCHAIN.can_compile or TOOLCHAIN.cutlass is None,
                                 reason="needs nvcc, NCCL, cuBLAS and the CUTLASS headers (pip install nvidia-cutlass)")
GROUPED = ["cutlass_grouped", "cutlass_grouped_1x2"]
TEMPLATES = ["arrival_pipeline", "expert_pipeline"]


def _render(strategy: str, **knobs) -> str:
    book = _book()
    s = book.get(strategy)
    return book.render(s, s.normalized({**s.default_knobs(), **knobs}))


def test_both_templates_offer_every_way_and_default_to_cutlass():
    """The offline agent's space holds both CUTLASS ways and cuBLAS for both templates; the default is
    CUTLASS's 128x256 tiles (faster than cuBLAS on every expert problem measured)."""
    book = _book()
    for name in TEMPLATES:
        s = book.get(name)
        assert set(s.knobs["gemm"]) == {"cublas", *GROUPED} and s.default_knobs()["gemm"] == "cutlass_grouped"
    assert [s.name for s in book.strategies if "gemm" in s.knobs] == ["expert_pipeline", "arrival_pipeline"]


def _tool_output(*command: str) -> str:
    if shutil.which(command[0]) is None:
        pytest.skip(f"needs {command[0]} (binutils)")
    return subprocess.run(command, capture_output=True, text=True, check=True).stdout


@pytest.mark.slow
@can_compile
@pytest.mark.parametrize("gemm", GROUPED)
@pytest.mark.parametrize("strategy", TEMPLATES)
def test_a_template_with_the_grouped_gemm_compiles_and_links_its_library(tmp_path, strategy, gemm):
    """The configuration's library (built once into the session's cache by the first candidate that
    links it) exports its entry point only; the candidate, compiled without CUTLASS, needs it and
    finds it by its rpath."""
    source = _render(strategy, gemm=gemm)
    path = tmp_path / f"{strategy}-{gemm}.cu"
    path.write_text(source)
    cache = BuildCache()  # the session's (conftest)
    r = compile_candidate(path, TOOLCHAIN, cache)
    assert r.ok, "\n".join(d.render() for d in r.diagnostics)
    [(config,), _] = configs_named(source)
    assert "-DNDEBUG" not in r.command and not any(a.startswith(f"-I{TOOLCHAIN.cutlass}") for a in r.command)
    [name] = [a.removeprefix("-l:") for a in r.command if a.startswith(f"-l:libcuco_grouped_gemm-{config.tag}-")]
    library = cache.root / name
    exported = _tool_output("nm", "-D", "--defined-only", str(library))
    assert f" T {config.entry}" in exported and "_ZN4cuco" not in exported
    assert f"[{name}]" in _tool_output("readelf", "-d", str(r.library))
    assert f" w {config.entry}" in _tool_output("nm", "-D", str(r.library))


# A host program that links the 1x1 library only, as a candidate would, and calls it; on the CPU
# (no GPU) the library's create fails with its sentence, on a GPU it succeeds.
C_ABI_CHECK = r"""
#include "cuco_grouped_gemm_lib.h"
#include <cstring>
namespace gg = cuco::grouped_gemm;

int main() {
  char error[1024];
  gg::GroupedGemmLib gemm;
  const gg::GroupedConfig configs[] = {{128, 128, 2, 1}, {64, 64, 1, 1}, {128, 128, 1, 1}};
  for (const gg::GroupedConfig& k : configs) {
    strcpy(error, "(none)");
    const int rc = gemm.init(k, 16, 0, error, sizeof error);
    printf("init %dx%d/%dx%d rc=%d: %s\n", k.block_m, k.block_n, k.cluster_m, k.cluster_n, rc, error);
  }
  gemm.release();
  cuco_grouped_gemm_problems none = {};
  printf("launch without init: %d\n", (int)gemm.launch(none, nullptr));
  gg::GroupedProblems problems;
  strcpy(error, "(none)");
  printf("problems rc=%d: %s\n", problems.init(2, 2000, error, sizeof error), error);
  return 0;
}
"""


def _host_program(tmp_path: Path, text: str, libraries) -> Path:
    src = tmp_path / "check.cu"
    src.write_text(text)
    exe = tmp_path / "check"
    flags = [f for f in nvcc_flags(TOOLCHAIN) if f != "-shared"] + link_flags(libraries)
    build = subprocess.run([str(TOOLCHAIN.nvcc), *flags, str(src), "-o", str(exe)], capture_output=True, text=True,
                           timeout=600)
    assert build.returncode == 0, build.stdout + build.stderr
    return exe


@pytest.mark.slow
@can_compile
def test_the_library_answers_through_its_c_abi(tmp_path):
    """A configuration not linked, one without a library and bad sizes are sentences, not crashes;
    the linked one is created (on a GPU) or refused in one sentence (no GPU here)."""
    lib = ensure_gemm_library(GroupedConfig(128, 128, 1, 1), TOOLCHAIN, BuildCache())
    assert lib.ok, lib.problem
    run = subprocess.run([str(_host_program(tmp_path, C_ABI_CHECK, [lib]))], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith("init 128x128/2x1 rc=1: the grouped GEMM library of 128x128 tiles, 2x1 clusters is "
                               "not linked")
    assert lines[1] == ("init 64x64/1x1 rc=1: gg::GroupedConfig{64, 64, 1, 1} has no grouped GEMM library: tiles "
                        "128x128 (clusters 1x1, 2x1), 128x256 (1x1, 1x2, 2x1) or 256x128 (2x1)")
    assert lines[2] == "init 128x128/1x1 rc=0: (none)" or lines[2].startswith("init 128x128/1x1 rc=1: grouped GEMM: ")
    assert lines[3] == "launch without init: 1"  # cudaErrorInvalidValue
    assert lines[4] == "problems rc=1: grouped GEMM problems: 2 calls of 2000 groups (1..1024 groups)"


# On one GPU: groups with uneven, zero and one rows from two sources, their sizes filled on the
# device from the counts; every call of GroupedProblems against a float reference, rows outside a
# call left as they were (poisoned), each configuration.
GPU_CHECK = r"""
#include "cuco_grouped_gemm_lib.h"
#include <cmath>
#include <cstring>
#include <vector>
namespace gg = cuco::grouped_gemm;

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
  printf("FAIL %s: %s\n", #x, cudaGetErrorString(e_)); return 1; } } while (0)

static float from_bf16(uint16_t b) { uint32_t u = (uint32_t)b << 16; float f; memcpy(&f, &u, 4); return f; }
static uint16_t to_bf16(float f) { uint32_t u; memcpy(&u, &f, 4); u += 0x7fff + ((u >> 16) & 1); return u >> 16; }
static const uint16_t kPoison = 0x7FC1;  // a NaN

constexpr int E = 6, S = 2, N = 384, K = 192;
// counts[s * E + x]: rows of expert x from source s; per expert 0, 1, 130, 7, 0, 257 (395 rows).
static const int kCounts[S * E] = {0, 1, 60, 7, 0, 200, 0, 0, 70, 0, 0, 57};

// The rows [lo, hi) of `d` against the float product, every other row still poisoned.
static int check(const char* what, const std::vector<uint16_t>& d, const std::vector<float>& ref, int rows, int lo,
                 int hi) {
  double ms = 0;
  for (float v : ref) ms += (double)v * v;
  const double rms = std::sqrt(ms / ref.size());
  double worst = 0;
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < N; ++j) {
      const uint16_t got = d[(size_t)r * N + j];
      if (r < lo || r >= hi) {
        if (got != kPoison) { printf("%s: row %d written outside the call\n", what, r); return 1; }
        continue;
      }
      const double want = ref[(size_t)r * N + j], g = from_bf16(got);
      const double err = std::fabs(g - want) / (std::fabs(want) + rms);
      if (!(err <= 0.02)) { printf("%s: row %d col %d got %g want %g\n", what, r, j, g, want); return 1; }
      worst = err > worst ? err : worst;
    }
  printf("%s ok %.4f\n", what, worst);
  return 0;
}

static int run(const gg::GroupedConfig& cfg) {
  int start[E + 1] = {0};
  for (int x = 0; x < E; ++x) start[x + 1] = start[x] + kCounts[x] + kCounts[E + x];
  const int R = start[E];
  std::vector<uint16_t> a((size_t)R * K), b((size_t)E * K * N);
  unsigned seed = 12345;
  auto rnd = [&] { seed = seed * 1103515245u + 12345u; return ((seed >> 8) & 0xffff) / 32768.0f - 1.0f; };
  for (auto& v : a) v = to_bf16(rnd());
  for (auto& v : b) v = to_bf16(rnd());
  std::vector<float> ref((size_t)R * N, 0.f);
  for (int x = 0; x < E; ++x)
    for (int r = start[x]; r < start[x + 1]; ++r)
      for (int kk = 0; kk < K; ++kk) {
        const float av = from_bf16(a[(size_t)r * K + kk]);
        const uint16_t* brow = &b[((size_t)x * K + kk) * N];
        for (int j = 0; j < N; ++j) ref[(size_t)r * N + j] += av * from_bf16(brow[j]);
      }
  void *da, *db, *dd[4];
  int* dc;
  CK(cudaMalloc(&da, a.size() * 2));
  CK(cudaMalloc(&db, b.size() * 2));
  CK(cudaMalloc(&dc, sizeof kCounts));
  for (void*& p : dd) CK(cudaMalloc(&p, (size_t)R * N * 2));
  CK(cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dc, kCounts, sizeof kCounts, cudaMemcpyHostToDevice));
  std::vector<uint16_t> poison((size_t)R * N, kPoison);
  for (void* p : dd) CK(cudaMemcpy(p, poison.data(), poison.size() * 2, cudaMemcpyHostToDevice));

  char error[1024] = "";
  gg::GroupedGemmLib gemm;
  gg::GroupedProblems problems;
  if (gemm.init(cfg, E, 0, error, sizeof error) || problems.init(4, E, error, sizeof error)) {
    printf("FAIL init: %s\n", error);
    return 1;
  }
  // 0: every row, every expert; 1: chunk 1 of 3 cut on 128 rows ([256, 384): expert 5 only);
  // 2: experts 2..4 (rows [1, 138)); 3: as 0, with the sizes also given on the host.
  struct Call { int first, groups, chunk, chunks; };
  const Call calls[4] = {{0, E, 0, 0}, {0, E, 1, 3}, {2, 3, 0, 0}, {0, E, 0, 0}};
  for (int c = 0; c < 4; ++c) {
    gg::FillSpec& s = problems.spec(c);
    s = gg::FillSpec{};
    s.counts = dc;
    s.sources = S;
    s.source_stride = E;
    s.experts = E;
    s.first = calls[c].first;
    s.groups = calls[c].groups;
    s.chunk = calls[c].chunk;
    s.chunks = calls[c].chunks;
    s.tile_rows = 128;
    s.n = N;
    s.k = K;
    s.a = (const char*)da;
    s.a_row = K * 2;
    s.b = (const char*)db;
    s.b_expert = (int64_t)K * N * 2;
    s.d = (char*)dd[c];
    s.d_row = N * 2;
  }
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CK(problems.upload(stream));
  CK(problems.fill(stream));
  int32_t host_shapes[E * 3];
  for (int x = 0; x < E; ++x) {
    host_shapes[3 * x] = start[x + 1] - start[x];
    host_shapes[3 * x + 1] = N;
    host_shapes[3 * x + 2] = K;
  }
  for (int round = 0; round < 2; ++round)  // the second launch of each call reuses its parameters
    for (int c = 0; c < 4; ++c) {
      cuco_grouped_gemm_problems p = problems.problems(c);
      if (c == 3) p.host_shapes = host_shapes;
      CK(gemm.launch(p, stream));
    }
  CK(cudaStreamSynchronize(stream));
  const int lo[4] = {0, 256, start[2], 0}, hi[4] = {R, 384, start[5], R};
  const char* names[4] = {"all", "chunk", "experts", "host-shapes"};
  int failed = 0;
  for (int c = 0; c < 4; ++c) {
    std::vector<uint16_t> d((size_t)R * N);
    CK(cudaMemcpy(d.data(), dd[c], d.size() * 2, cudaMemcpyDeviceToHost));
    char what[64];
    snprintf(what, sizeof what, "%dx%d/%dx%d %s", cfg.block_m, cfg.block_n, cfg.cluster_m, cfg.cluster_n, names[c]);
    failed |= check(what, d, ref, R, lo[c], hi[c]);
  }
  problems.release();
  gemm.release();
  return failed;
}

int main() {
  int failed = 0;
  for (const gg::GroupedConfig& cfg : {CONFIGS})
    failed |= run(cfg);
  return failed;
}
"""


@pytest.mark.gpu
@can_compile
def test_the_grouped_gemm_matches_a_float_reference_on_one_gpu(tmp_path):
    from cuco_tui.harness.gpus import inventory

    if inventory().count < 1:
        pytest.skip("needs a GPU")
    libraries = [ensure_gemm_library(c, TOOLCHAIN, BuildCache()) for c in CONFIGS]
    assert all(lib.ok for lib in libraries), [lib.problem for lib in libraries]
    listed = ", ".join(f"gg::GroupedConfig{{{c.block_m}, {c.block_n}, {c.cluster_m}, {c.cluster_n}}}" for c in CONFIGS)
    run = subprocess.run([str(_host_program(tmp_path, GPU_CHECK.replace("{CONFIGS}", "{" + listed + "}"), libraries))],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    done = [line.rsplit(" ", 1)[0] for line in run.stdout.splitlines()]
    assert done == [f"{c.block_m}x{c.block_n}/{c.cluster_m}x{c.cluster_n} {what}" for c in CONFIGS
                    for what in ("all ok", "chunk ok", "experts ok", "host-shapes ok")]


# The templates with the grouped GEMM through verification on two GPUs: each configuration, both
# movers (the store kernel leaves the GEMM fewer SMs), arrival's chunk cuts at 8 chunks.
GPU_POINTS = [("arrival_pipeline", {"gemm": "cutlass_grouped"}),
              ("arrival_pipeline", {"gemm": "cutlass_grouped_1x2", "mover": "ipc", "chunks": 8, "mover_blocks": 64}),
              ("expert_pipeline", {"gemm": "cutlass_grouped", "results": "separate"}),
              ("expert_pipeline", {"gemm": "cutlass_grouped_1x2", "mover": "ipc", "groups": 16})]


@pytest.mark.gpu
@can_compile
@pytest.mark.parametrize("strategy,knobs", GPU_POINTS, ids=lambda v: v if isinstance(v, str) else
                         "-".join(str(x) for x in v.values()))
def test_a_template_with_the_grouped_gemm_is_verified_on_two_gpus(tmp_path, strategy, knobs):
    from cuco_tui.harness.gpus import inventory

    if inventory().count < 2:
        pytest.skip("needs 2 GPUs")
    path = tmp_path / f"{strategy}.cu"
    path.write_text(_render(strategy, **knobs))
    r = evaluate(path, W, EvalOptions(world=2, bench=False))
    assert r.status == Status.VERIFIED, r.reason + "\n" + r.deadlock_report + "\n".join(
        d.render() for d in r.diagnostics)
    assert len(r.verifications) >= 2 * len(W.verify_shapes) and all(v.ok for v in r.verifications)
