// The fused GEMM of cuco_tile_gemm.cuh against cuBLAS on one GPU: gemm_allgather's per-rank
// problem (M x K x N/W, rank 0 of W), every arrival flag already set, so the numbers say what
// the kernel costs as a GEMM; then runs with the flags set late by a second stream, which show
// the kernel waits and still gets every element right, and that the copy-engine mover's copies
// need no SM. Built and run by benchmarks/fused_gemm.py with fused_gemm_configs.cu (one unit
// per kernel configuration). Prints JSON objects on stdout (one per shape and pass), progress
// on stderr.
#include "fused_gemm_bench.h"
#include "bench_util.cuh"

#include <cublasLt.h>
#include <cublas_v2.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

struct ConfigName {
  int bm, bn, cm, cn;
  Runner* (*make)();
};
#define CUCO_LIST(i, bm, bn, cm, cn) ConfigName{bm, bn, cm, cn, make_runner_##i},
static const ConfigName kConfigs[] = {CUCO_BENCH_CONFIGS(CUCO_LIST)};

// The harness's measure: max over elements of |y - ref| / (|ref| + rms(ref)); NaN counts apart.
struct Check {
  double max_rel = 0;
  size_t nan = 0;
};

static double rms_of(const std::vector<uint16_t>& ref) {
  double sq = 0;
  for (uint16_t r : ref) { const double f = bf16_to_float(r); sq += f * f; }
  return std::sqrt(sq / std::max<size_t>(ref.size(), 1));
}

static Check compare(const std::vector<uint16_t>& y, const std::vector<uint16_t>& ref, double rms) {
  Check c;
  for (size_t i = 0; i < y.size(); ++i) {
    const double a = bf16_to_float(y[i]), b = bf16_to_float(ref[i]);
    if (!std::isfinite(a)) { ++c.nan; continue; }
    c.max_rel = std::max(c.max_rel, std::fabs(a - b) / (std::fabs(b) + rms));
  }
  return c;
}

static std::vector<uint16_t> download(const void* p, size_t n) {
  std::vector<uint16_t> h(n);
  CHECK_CUDA(cudaMemcpy(h.data(), p, n * 2, cudaMemcpyDeviceToHost));
  return h;
}

struct Blas {
  cublasHandle_t handle = nullptr;
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 64ull << 20;
};

// Row-major Y[M, n] = A[M, K] @ B[K, n] is column-major Y^T = B^T A^T: m = n, n = M, k = K.
static void gemm_ex(Blas& b, cudaStream_t s, const void* A, const void* B, void* Y, int M, int n, int K) {
  const float alpha = 1.0f, beta = 0.0f;
  CHECK_BLAS(cublasSetStream(b.handle, s));
  CHECK_BLAS(cublasGemmEx(b.handle, CUBLAS_OP_N, CUBLAS_OP_N, n, M, K, &alpha, B, CUDA_R_16BF, n, A, CUDA_R_16BF, K,
                          &beta, Y, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  std::vector<cublasLtMatmulHeuristicResult_t> algos;
  int best = -1;
};

static LtPlan lt_plan(Blas& b, int M, int n, int K) {
  LtPlan p;
  CHECK_BLAS(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t op = CUBLAS_OP_N;
  CHECK_BLAS(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op, sizeof op));
  CHECK_BLAS(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op, sizeof op));
  CHECK_BLAS(cublasLtMatrixLayoutCreate(&p.la, CUDA_R_16BF, n, K, n));
  CHECK_BLAS(cublasLtMatrixLayoutCreate(&p.lb, CUDA_R_16BF, K, M, K));
  CHECK_BLAS(cublasLtMatrixLayoutCreate(&p.lc, CUDA_R_16BF, n, M, n));
  cublasLtMatmulPreference_t pref;
  CHECK_BLAS(cublasLtMatmulPreferenceCreate(&pref));
  CHECK_BLAS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &b.workspace_bytes,
                                                  sizeof b.workspace_bytes));
  p.algos.resize(8);
  int found = 0;
  CHECK_BLAS(cublasLtMatmulAlgoGetHeuristic(b.lt, p.desc, p.la, p.lb, p.lc, p.lc, pref, 8, p.algos.data(), &found));
  p.algos.resize(found);
  cublasLtMatmulPreferenceDestroy(pref);
  return p;
}

static void lt_run(Blas& b, LtPlan& p, int algo, cudaStream_t s, const void* A, const void* B, void* Y) {
  const float alpha = 1.0f, beta = 0.0f;
  CHECK_BLAS(cublasLtMatmul(b.lt, p.desc, &alpha, B, p.la, A, p.lb, &beta, Y, p.lc, Y, p.lc, &p.algos[algo].algo,
                            b.workspace, b.workspace_bytes, s));
}

struct Options {
  std::vector<std::array<int64_t, 3>> shapes;
  int world = 2;
  int reps = 30;
  int warmup = 5;
  int chunks = 4;
  int late_delay_us = 200;
  bool timing = true;  // --late-only: skip the timing pass
  bool late = true;    // --no-late: skip the late-flags pass
};

static void usage() {
  fprintf(stderr, "usage: fused_gemm_bench [--shape M,K,N]... [--world W] [--reps R] [--warmup N] [--chunks C] "
                  "[--late-delay-us D] [--no-late | --late-only]\n");
  exit(2);
}

static Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* { if (i + 1 >= argc) usage(); return argv[++i]; };
    if (a == "--shape") {
      long long m, k, n;
      if (sscanf(next(), "%lld,%lld,%lld", &m, &k, &n) != 3) usage();
      o.shapes.push_back({m, k, n});
    } else if (a == "--world") o.world = atoi(next());
    else if (a == "--reps") o.reps = atoi(next());
    else if (a == "--warmup") o.warmup = atoi(next());
    else if (a == "--chunks") o.chunks = atoi(next());
    else if (a == "--late-delay-us") o.late_delay_us = atoi(next());
    else if (a == "--no-late") o.late = false;
    else if (a == "--late-only") o.timing = false;
    else usage();
  }
  if (o.shapes.empty()) usage();
  if (o.world < 2 || o.reps < 3 || o.warmup < 0 || o.chunks < 1) usage();
  return o;
}

struct Variant {
  std::string name;
  std::string kind;  // "cublas", "cublaslt", "fused"
  Runner* runner = nullptr;
  int config = -1;
  tg::TileOrder order = tg::TileOrder::Auto;
  int reserved = 0;
  std::vector<float> ms;
  Check check;
  bool ok = true;
  std::string why;
};

static const char* order_name(tg::TileOrder o) {
  return o == tg::TileOrder::Auto ? "auto" : o == tg::TileOrder::Arrival ? "arrival" : "square";
}

static void sleep_us(void* arg) { std::this_thread::sleep_for(std::chrono::microseconds(*(int*)arg)); }

struct Gpu {
  cudaDeviceProp prop;
  Blas blas;
  cudaStream_t stream, side;
  cudaEvent_t ev0, ev1, evj;
  void* flush = nullptr;
  size_t flush_bytes = 0;
  tg::FlagWriter writer;
};

// One shape's inputs and cuBLAS's result, which every variant is checked against.
struct Problem {
  int64_t M, K, N, n, R;
  int W;
  void *A = nullptr, *B = nullptr, *Yref = nullptr, *Y = nullptr;
  std::vector<uint16_t> ref;
  double ref_rms = 0;
};

static float elapsed(Gpu& g) {
  float ms = 0;
  CHECK_CUDA(cudaEventSynchronize(g.ev1));
  CHECK_CUDA(cudaEventElapsedTime(&ms, g.ev0, g.ev1));
  return ms;
}

static tg::Setup setup_for(const Problem& pb, const ConfigName& cfg, int chunks, const void* g0, const void* flags) {
  tg::Setup s;
  s.layout = tg::make_row_layout(pb.M, pb.n, pb.K, pb.W, 0, chunks, cfg.bm);
  s.x = pb.A;  // rank 0's own rows are the first R rows of A
  s.g[0] = g0;
  s.g[1] = g0;
  s.b = pb.B;
  s.y = pb.Y;
  s.flags = (const unsigned long long*)flags;
  return s;
}

// Every variant verified against cuBLAS, then timed interleaved: each round runs every variant
// once, the order rotating and reversing round by round, so clock drift under sustained load
// hits all alike; the L2 is flushed (a write of 4x its size) before each timed call.
static void timing_pass(Gpu& g, Problem& pb, const Options& opt) {
  const int64_t M = pb.M, K = pb.K, n = pb.n;
  void* flags_all = nullptr;
  const tg::RowLayout probe = tg::make_row_layout(M, n, K, pb.W, 0, opt.chunks, 128);
  const size_t flag_bytes = sizeof(unsigned long long) * (size_t)std::max(probe.flag_count(), 1) * 4;
  CHECK_CUDA(cudaMalloc(&flags_all, flag_bytes));
  std::vector<unsigned long long> big(flag_bytes / 8, 1ull << 62);  // every flag far past any target
  CHECK_CUDA(cudaMemcpy(flags_all, big.data(), flag_bytes, cudaMemcpyHostToDevice));

  auto library = [](const char* name, const char* kind) {
    Variant v;
    v.name = name;
    v.kind = kind;
    return v;
  };
  std::vector<Variant> vars;
  vars.push_back(library("cublasGemmEx", "cublas"));
  LtPlan lt = lt_plan(g.blas, (int)M, (int)n, (int)K);
  float best = 1e30f;  // the best of cuBLASLt's heuristics, by a short timing of each
  for (int a = 0; a < (int)lt.algos.size(); ++a) {
    for (int w = 0; w < 2; ++w) lt_run(g.blas, lt, a, g.stream, pb.A, pb.B, pb.Y);
    CHECK_CUDA(cudaEventRecord(g.ev0, g.stream));
    for (int w = 0; w < 5; ++w) lt_run(g.blas, lt, a, g.stream, pb.A, pb.B, pb.Y);
    CHECK_CUDA(cudaEventRecord(g.ev1, g.stream));
    const float ms = elapsed(g);
    if (ms < best) { best = ms; lt.best = a; }
  }
  fprintf(stderr, "cuBLASLt: %zu heuristic algorithms, best #%d\n", lt.algos.size(), lt.best);
  if (lt.best >= 0) vars.push_back(library("cublasLt-best", "cublaslt"));
  const tg::TileOrder orders[] = {tg::TileOrder::Auto, tg::TileOrder::Arrival, tg::TileOrder::Square};
  for (int c = 0; c < (int)(sizeof kConfigs / sizeof kConfigs[0]); ++c)
    for (tg::TileOrder o : orders) {
      Variant v;
      v.kind = "fused";
      v.config = c;
      v.order = o;
      v.name = std::to_string(kConfigs[c].bm) + "x" + std::to_string(kConfigs[c].bn) + "/" +
               std::to_string(kConfigs[c].cm) + "x" + std::to_string(kConfigs[c].cn) + "/" + order_name(o);
      vars.push_back(v);
    }
  Variant reserved;  // the default with 16 SMs left to a store kernel (the sm_store mover's default)
  reserved.kind = "fused";
  reserved.config = 0;
  reserved.reserved = 16;
  reserved.name = "128x256/2x1/auto/16-SMs-reserved";
  vars.push_back(reserved);

  for (Variant& v : vars) {
    if (v.kind == "cublaslt") {
      lt_run(g.blas, lt, lt.best, g.stream, pb.A, pb.B, pb.Y);
      CHECK_CUDA(cudaStreamSynchronize(g.stream));
      v.check = compare(download(pb.Y, M * n), pb.ref, pb.ref_rms);
      continue;
    }
    if (v.kind != "fused") continue;
    tg::Setup s = setup_for(pb, kConfigs[v.config], opt.chunks, pb.A, flags_all);
    s.order = v.order;
    s.reserved_sms = v.reserved;
    v.runner = kConfigs[v.config].make();
    char err[512] = {0};
    if (v.runner->init(s, err, sizeof err)) {
      v.ok = false;
      v.why = err;
      fprintf(stderr, "%s: setup failed: %s\n", v.name.c_str(), err);
      continue;
    }
    CHECK_CUDA(cudaMemsetAsync(pb.Y, 0xFF, M * n * 2, g.stream));  // NaN: an unwritten element shows
    CHECK_CUDA(v.runner->launch(g.stream, 1));
    CHECK_CUDA(cudaStreamSynchronize(g.stream));
    v.check = compare(download(pb.Y, M * n), pb.ref, pb.ref_rms);
    v.ok = v.check.nan == 0 && v.check.max_rel <= 0.02;
    fprintf(stderr, "%-34s ctas %3d band %2d smem %6d params %4d B: max rel err %.2e, NaN %zu%s\n", v.name.c_str(),
            v.runner->ctas(), v.runner->band(), v.runner->smem(), v.runner->params_bytes(), v.check.max_rel,
            v.check.nan, v.ok ? "" : "  FAILED");
    if (!v.ok) v.why = "wrong result";
  }

  std::vector<int> live;
  for (int i = 0; i < (int)vars.size(); ++i)
    if (vars[i].ok) live.push_back(i);
  unsigned long long epoch = 1;
  for (int round = 0; round < opt.warmup + opt.reps && !live.empty(); ++round) {
    std::vector<int> order = live;
    std::rotate(order.begin(), order.begin() + round % order.size(), order.end());
    if (round % 2) std::reverse(order.begin(), order.end());
    for (int i : order) {
      Variant& v = vars[i];
      CHECK_CUDA(cudaMemsetAsync(g.flush, round & 0xff, g.flush_bytes, g.stream));
      CHECK_CUDA(cudaEventRecord(g.ev0, g.stream));
      if (v.kind == "cublas") gemm_ex(g.blas, g.stream, pb.A, pb.B, pb.Y, (int)M, (int)n, (int)K);
      else if (v.kind == "cublaslt") lt_run(g.blas, lt, lt.best, g.stream, pb.A, pb.B, pb.Y);
      else CHECK_CUDA(v.runner->launch(g.stream, ++epoch));
      CHECK_CUDA(cudaEventRecord(g.ev1, g.stream));
      const float ms = elapsed(g);
      if (round >= opt.warmup) v.ms.push_back(ms);
    }
  }

  const double flop = 2.0 * (double)M * n * K;
  printf("{\"part\": \"timing\", \"M\": %lld, \"K\": %lld, \"N\": %lld, \"world\": %d, \"gemm\": [%lld, %lld, %lld], "
         "\"chunks\": %d, \"lt_algos\": %zu, \"variants\": [",
         (long long)M, (long long)K, (long long)pb.N, pb.W, (long long)M, (long long)K, (long long)n, opt.chunks,
         lt.algos.size());
  for (size_t i = 0; i < vars.size(); ++i) {
    const Variant& v = vars[i];
    const Stats st = stats_of(v.ms);
    printf("%s{\"name\": \"%s\", \"kind\": \"%s\", \"ok\": %s, \"why\": \"%s\", \"max_rel_err\": %.3e, \"nan\": %zu, "
           "\"median_ms\": %.5f, \"q1_ms\": %.5f, \"q3_ms\": %.5f, \"tflops\": %.1f, \"reps\": %zu, \"ctas\": %d, "
           "\"band\": %d, \"smem\": %d, \"ms\": [",
           i ? ", " : "", v.name.c_str(), v.kind.c_str(), v.ok ? "true" : "false", v.why.c_str(), v.check.max_rel,
           v.check.nan, st.median, st.q1, st.q3, st.median > 0 ? flop / (st.median * 1e9) : 0.0, v.ms.size(),
           v.runner ? v.runner->ctas() : 0, v.runner ? v.runner->band() : 0, v.runner ? v.runner->smem() : 0);
    for (size_t j = 0; j < v.ms.size(); ++j) printf("%s%.5f", j ? ", " : "", v.ms[j]);
    printf("]}");
  }
  printf("]}\n");
  fflush(stdout);
  for (Variant& v : vars)
    if (v.runner) { v.runner->release(); delete v.runner; }
  cublasLtMatrixLayoutDestroy(lt.la);
  cublasLtMatrixLayoutDestroy(lt.lb);
  cublasLtMatrixLayoutDestroy(lt.lc);
  cublasLtMatmulDescDestroy(lt.desc);
  CHECK_CUDA(cudaFree(flags_all));
}

// Flags set late, the default configuration: the peer half of a fresh gather buffer is poisoned
// (NaN), a second stream sleeps `late_delay_us` on the host, then copies the peer rows in chunk
// by chunk, each chunk followed by its flag write, while the GEMM is launched at once and must
// wait for every chunk. Mode "h2d": from pinned host memory (copy engines for certain). Mode
// "ce_d2d": device to device on this GPU with tg::ce_copy, what the copy-engine mover does when
// ranks share a GPU; it hangs if that copy needs an SM (the GEMM holds them all), which is why
// it runs last, in its own pass, under the driver's time limit.
static void late_pass(Gpu& g, Problem& pb, const Options& opt, const char* mode) {
  const int64_t M = pb.M, K = pb.K, n = pb.n, R = pb.R;
  const bool h2d = strcmp(mode, "h2d") == 0;
  const ConfigName& cfg = kConfigs[0];
  void *G2 = nullptr, *flags = nullptr, *host = nullptr;
  const size_t peer_bytes = (size_t)(M - R) * K * 2;
  CHECK_CUDA(cudaMalloc(&G2, M * K * 2));
  tg::Setup s = setup_for(pb, cfg, opt.chunks, G2, nullptr);
  const tg::RowLayout& l = s.layout;
  const size_t flag_bytes = sizeof(unsigned long long) * (size_t)l.flag_count();
  CHECK_CUDA(cudaMalloc(&flags, flag_bytes));
  CHECK_CUDA(cudaMemset(flags, 0, flag_bytes));
  s.flags = (const unsigned long long*)flags;
  if (h2d) {
    CHECK_CUDA(cudaMallocHost(&host, peer_bytes));
    CHECK_CUDA(cudaMemcpy(host, (char*)pb.A + R * K * 2, peer_bytes, cudaMemcpyDeviceToHost));
  }
  // Where row `row` (of G, a peer's) comes from.
  auto src_of = [&](int64_t row) {
    return h2d ? (const char*)host + (row - R) * K * 2 : (const char*)pb.A + row * K * 2;
  };
  Runner* late = cfg.make();
  char err[512] = {0};
  if (late->init(s, err, sizeof err)) {
    fprintf(stderr, "late %s: setup failed: %s\n", mode, err);
    exit(2);
  }
  fprintf(stderr, "late %s: starting (a hang here means the copy waited for an SM)\n", mode);
  std::vector<float> times;
  Check check;
  int delay = opt.late_delay_us;
  for (int rep = 0; rep < 3; ++rep) {
    const unsigned long long e = rep + 1;
    CHECK_CUDA(cudaMemsetAsync((char*)G2 + R * K * 2, 0xFF, peer_bytes, g.stream));
    CHECK_CUDA(cudaMemsetAsync(pb.Y, 0xFF, M * n * 2, g.stream));
    CHECK_CUDA(cudaEventRecord(g.evj, g.stream));
    CHECK_CUDA(cudaStreamWaitEvent(g.side, g.evj, 0));
    CHECK_CUDA(cudaLaunchHostFunc(g.side, sleep_us, &delay));
    for (int step = 1; step < pb.W; ++step) {
      const int p = tg::sender_at(0, pb.W, step);
      for (int c = 0; c < l.chunks; ++c) {
        const int64_t row0 = l.chunk_row0(p, c);
        const size_t bytes = l.chunk_len(c) * K * 2;
        char* dst = (char*)G2 + row0 * K * 2;
        if (h2d) CHECK_CUDA(cudaMemcpyAsync(dst, src_of(row0), bytes, cudaMemcpyHostToDevice, g.side));
        else CHECK_CUDA(tg::ce_copy(dst, src_of(row0), bytes, g.side));
        if (int rc = g.writer.post(g.side, (unsigned long long*)flags + l.flag_index(p, c), e)) {
          fprintf(stderr, "cuStreamWriteValue64 failed: %d\n", rc);
          exit(2);
        }
      }
    }
    CHECK_CUDA(cudaEventRecord(g.ev0, g.stream));
    CHECK_CUDA(late->launch(g.stream, e));
    CHECK_CUDA(cudaEventRecord(g.ev1, g.stream));
    CHECK_CUDA(cudaEventRecord(g.evj, g.side));
    CHECK_CUDA(cudaStreamWaitEvent(g.stream, g.evj, 0));
    CHECK_CUDA(cudaStreamSynchronize(g.stream));
    times.push_back(elapsed(g));
    if (rep == 0) check = compare(download(pb.Y, M * n), pb.ref, pb.ref_rms);
  }
  // The copies alone, for comparison.
  CHECK_CUDA(cudaEventRecord(g.ev0, g.side));
  if (h2d) CHECK_CUDA(cudaMemcpyAsync((char*)G2 + R * K * 2, host, peer_bytes, cudaMemcpyHostToDevice, g.side));
  else CHECK_CUDA(tg::ce_copy((char*)G2 + R * K * 2, (const char*)pb.A + R * K * 2, peer_bytes, g.side));
  CHECK_CUDA(cudaEventRecord(g.ev1, g.side));
  const float copy_ms = elapsed(g);
  const double ms = stats_of(times).median;
  const bool ok = check.nan == 0 && check.max_rel <= 0.02;
  fprintf(stderr, "late %s: %.3f ms (delay %d us; the copies alone %.3f ms, %.0f GB/s), max rel err %.2e, NaN %zu%s\n",
          mode, ms, opt.late_delay_us, copy_ms, peer_bytes / (copy_ms * 1e6), check.max_rel, check.nan,
          ok ? "" : "  FAILED");
  printf("{\"part\": \"late\", \"mode\": \"%s\", \"M\": %lld, \"K\": %lld, \"N\": %lld, \"ok\": %s, \"ms\": %.5f, "
         "\"delay_us\": %d, \"copy_ms\": %.5f, \"max_rel_err\": %.3e, \"nan\": %zu}\n",
         mode, (long long)M, (long long)K, (long long)pb.N, ok ? "true" : "false", ms, opt.late_delay_us, copy_ms,
         check.max_rel, check.nan);
  fflush(stdout);
  late->release();
  delete late;
  if (host) CHECK_CUDA(cudaFreeHost(host));
  CHECK_CUDA(cudaFree(G2));
  CHECK_CUDA(cudaFree(flags));
}

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  Gpu g;
  CHECK_CUDA(cudaSetDevice(0));
  CHECK_CUDA(cudaGetDeviceProperties(&g.prop, 0));
  fprintf(stderr, "device: %s, %d SMs, L2 %d MB\n", g.prop.name, g.prop.multiProcessorCount, g.prop.l2CacheSize >> 20);
  CHECK_BLAS(cublasCreate(&g.blas.handle));
  CHECK_BLAS(cublasLtCreate(&g.blas.lt));
  CHECK_CUDA(cudaMalloc(&g.blas.workspace, g.blas.workspace_bytes));
  CHECK_CUDA(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking));
  CHECK_CUDA(cudaStreamCreateWithFlags(&g.side, cudaStreamNonBlocking));
  CHECK_CUDA(cudaEventCreate(&g.ev0));
  CHECK_CUDA(cudaEventCreate(&g.ev1));
  CHECK_CUDA(cudaEventCreateWithFlags(&g.evj, cudaEventDisableTiming));
  g.flush_bytes = (size_t)std::max(g.prop.l2CacheSize, 1 << 20) * 4;
  CHECK_CUDA(cudaMalloc(&g.flush, g.flush_bytes));
  CHECK_CUDA(g.writer.init());
  printf("{\"part\": \"device\", \"device\": \"%s\", \"sms\": %d, \"l2_mb\": %d}\n", g.prop.name,
         g.prop.multiProcessorCount, g.prop.l2CacheSize >> 20);
  fflush(stdout);

  auto run_shapes = [&](auto&& body) {
    for (const auto& shape : opt.shapes) {
      Problem pb;
      pb.M = shape[0]; pb.K = shape[1]; pb.N = shape[2];
      pb.W = opt.world;
      pb.n = pb.N / pb.W;
      pb.R = pb.M / pb.W;
      fprintf(stderr, "\n== M=%lld K=%lld N=%lld: per-rank GEMM %lld x %lld x %lld\n", (long long)pb.M,
              (long long)pb.K, (long long)pb.N, (long long)pb.M, (long long)pb.K, (long long)pb.n);
      CHECK_CUDA(cudaMalloc(&pb.A, pb.M * pb.K * 2));
      CHECK_CUDA(cudaMalloc(&pb.B, pb.K * pb.n * 2));
      CHECK_CUDA(cudaMalloc(&pb.Yref, pb.M * pb.n * 2));
      CHECK_CUDA(cudaMalloc(&pb.Y, pb.M * pb.n * 2));
      fill_bf16<<<1024, 256, 0, g.stream>>>((__nv_bfloat16*)pb.A, pb.M * pb.K, 1234u, 1.0f);
      fill_bf16<<<1024, 256, 0, g.stream>>>((__nv_bfloat16*)pb.B, pb.K * pb.n, 999u,
                                            (float)(1.7320508 / std::sqrt((double)pb.K)));
      gemm_ex(g.blas, g.stream, pb.A, pb.B, pb.Yref, (int)pb.M, (int)pb.n, (int)pb.K);
      CHECK_CUDA(cudaStreamSynchronize(g.stream));
      pb.ref = download(pb.Yref, pb.M * pb.n);
      pb.ref_rms = rms_of(pb.ref);
      body(pb);
      for (void* p : {pb.A, pb.B, pb.Yref, pb.Y}) CHECK_CUDA(cudaFree(p));
    }
  };
  if (opt.timing) run_shapes([&](Problem& pb) { timing_pass(g, pb, opt); });
  // Every shape from host memory first; the copy-engine mode, which would hang if its copies
  // needed SMs, after all of them.
  if (opt.late) {
    run_shapes([&](Problem& pb) { late_pass(g, pb, opt, "h2d"); });
    run_shapes([&](Problem& pb) { late_pass(g, pb, opt, "ce_d2d"); });
  }
  return 0;
}
