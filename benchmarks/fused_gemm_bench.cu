// The fused GEMM of cuco_tile_gemm.cuh against cuBLAS on one GPU: gemm_allgather's per-rank
// problem (M x K x N/W, rank 0 of W), every arrival flag already set, so the numbers say what
// the kernel costs as a GEMM; then one run with the flags set late by a second stream, which
// shows the kernel waits and still gets every element right. Built and run by
// benchmarks/fused_gemm.py with fused_gemm_configs.cu (one unit per kernel configuration).
// Prints one JSON object per shape on stdout, progress on stderr.
#include "fused_gemm_bench.h"

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

#define CHECK_CUDA(expr)                                                                               \
  do {                                                                                                 \
    cudaError_t e_ = (expr);                                                                           \
    if (e_ != cudaSuccess) {                                                                           \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_));    \
      exit(2);                                                                                         \
    }                                                                                                  \
  } while (0)
#define CHECK_BLAS(expr)                                                                               \
  do {                                                                                                 \
    cublasStatus_t s_ = (expr);                                                                        \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                                 \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #expr, cublasGetStatusString(s_)); \
      exit(2);                                                                                         \
    }                                                                                                  \
  } while (0)

struct ConfigName {
  int bm, bn, cm, cn;
  Runner* (*make)();
};
#define CUCO_LIST(i, bm, bn, cm, cn) ConfigName{bm, bn, cm, cn, make_runner_##i},
static const ConfigName kConfigs[] = {CUCO_BENCH_CONFIGS(CUCO_LIST)};

// Uniform values in [-scale, scale), from a hash of the index: the same inputs every run.
__global__ void fill_bf16(__nv_bfloat16* p, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 16; h *= 0x7feb352du; h ^= h >> 15; h *= 0x846ca68bu; h ^= h >> 16;
    p[i] = __float2bfloat16(((h >> 8) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * scale);
  }
}

struct Stats {
  double median = 0, q1 = 0, q3 = 0;
};

static Stats stats_of(std::vector<float> v) {
  Stats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    const double pos = q * (v.size() - 1);
    const size_t lo = (size_t)pos;
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - lo);
  };
  s.median = at(0.5); s.q1 = at(0.25); s.q3 = at(0.75);
  return s;
}

static float bf16_to_float(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// The harness's measure: max over elements of |y - ref| / (|ref| + rms(ref)); NaN counts apart.
struct Check {
  double max_rel = 0;
  size_t nan = 0;
};

static Check compare(const std::vector<uint16_t>& y, const std::vector<uint16_t>& ref) {
  double sq = 0;
  for (uint16_t r : ref) { const double f = bf16_to_float(r); sq += f * f; }
  const double rms = std::sqrt(sq / std::max<size_t>(ref.size(), 1));
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
  bool late = true;
};

static void usage() {
  fprintf(stderr, "usage: fused_gemm_bench [--shape M,K,N]... [--world W] [--reps R] [--warmup N] [--chunks C] "
                  "[--late-delay-us D] [--no-late]\n");
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

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  int device = 0;
  CHECK_CUDA(cudaSetDevice(device));
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, device));
  fprintf(stderr, "device: %s, %d SMs, L2 %d MB\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  Blas blas;
  CHECK_BLAS(cublasCreate(&blas.handle));
  CHECK_BLAS(cublasLtCreate(&blas.lt));
  CHECK_CUDA(cudaMalloc(&blas.workspace, blas.workspace_bytes));
  cudaStream_t stream, side;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CHECK_CUDA(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  cudaEvent_t ev0, ev1, evj;
  CHECK_CUDA(cudaEventCreate(&ev0));
  CHECK_CUDA(cudaEventCreate(&ev1));
  CHECK_CUDA(cudaEventCreateWithFlags(&evj, cudaEventDisableTiming));
  const size_t flush_bytes = (size_t)std::max(prop.l2CacheSize, 1 << 20) * 4;
  void* flush = nullptr;
  CHECK_CUDA(cudaMalloc(&flush, flush_bytes));
  tg::FlagWriter writer;
  CHECK_CUDA(writer.init());

  printf("{\"device\": \"%s\", \"sms\": %d, \"l2_mb\": %d}\n", prop.name, prop.multiProcessorCount,
         prop.l2CacheSize >> 20);
  fflush(stdout);

  for (const auto& shape : opt.shapes) {
    const int64_t M = shape[0], K = shape[1], N = shape[2];
    const int W = opt.world;
    const int64_t n = N / W, R = M / W;
    fprintf(stderr, "\n== M=%lld K=%lld N=%lld: per-rank GEMM %lld x %lld x %lld\n", (long long)M, (long long)K,
            (long long)N, (long long)M, (long long)K, (long long)n);
    void *A, *B, *Yref, *Y, *G2, *flags_all, *flags_late;
    CHECK_CUDA(cudaMalloc(&A, M * K * 2));
    CHECK_CUDA(cudaMalloc(&B, K * n * 2));
    CHECK_CUDA(cudaMalloc(&Yref, M * n * 2));
    CHECK_CUDA(cudaMalloc(&Y, M * n * 2));
    CHECK_CUDA(cudaMalloc(&G2, M * K * 2));
    fill_bf16<<<1024, 256, 0, stream>>>((__nv_bfloat16*)A, M * K, 1234u, 1.0f);
    fill_bf16<<<1024, 256, 0, stream>>>((__nv_bfloat16*)B, K * n, 999u, (float)(1.7320508 / std::sqrt((double)K)));
    const tg::RowLayout layout = tg::make_row_layout(M, n, K, W, 0, opt.chunks, 128);
    const size_t flag_bytes = sizeof(unsigned long long) * std::max(layout.flag_count(), 1) * 2;
    CHECK_CUDA(cudaMalloc(&flags_all, flag_bytes));
    CHECK_CUDA(cudaMalloc(&flags_late, flag_bytes));
    {
      std::vector<unsigned long long> big(flag_bytes / 8, 1ull << 62);  // every flag far past any target
      CHECK_CUDA(cudaMemcpy(flags_all, big.data(), flag_bytes, cudaMemcpyHostToDevice));
      CHECK_CUDA(cudaMemset(flags_late, 0, flag_bytes));
    }
    gemm_ex(blas, stream, A, B, Yref, (int)M, (int)n, (int)K);
    CHECK_CUDA(cudaStreamSynchronize(stream));
    const std::vector<uint16_t> ref = download(Yref, M * n);

    std::vector<Variant> vars;
    auto library = [](const char* name, const char* kind) {
      Variant v;
      v.name = name;
      v.kind = kind;
      return v;
    };
    vars.push_back(library("cublasGemmEx", "cublas"));
    LtPlan lt = lt_plan(blas, (int)M, (int)n, (int)K);
    {
      // The best of cuBLASLt's top heuristics, by a short timing of each.
      float best = 1e30f;
      for (int a = 0; a < (int)lt.algos.size(); ++a) {
        for (int w = 0; w < 2; ++w) lt_run(blas, lt, a, stream, A, B, Y);
        CHECK_CUDA(cudaEventRecord(ev0, stream));
        for (int w = 0; w < 5; ++w) lt_run(blas, lt, a, stream, A, B, Y);
        CHECK_CUDA(cudaEventRecord(ev1, stream));
        CHECK_CUDA(cudaEventSynchronize(ev1));
        float ms = 0;
        CHECK_CUDA(cudaEventElapsedTime(&ms, ev0, ev1));
        if (ms < best) { best = ms; lt.best = a; }
      }
      fprintf(stderr, "cuBLASLt: %zu heuristic algorithms, best #%d\n", lt.algos.size(), lt.best);
      if (lt.best >= 0) vars.push_back(library("cublasLt-best", "cublaslt"));
    }
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
    {
      Variant v;  // the default with 16 SMs left to a store kernel (the sm_store mover's default)
      v.kind = "fused";
      v.config = 0;
      v.reserved = 16;
      v.name = "128x256/2x1/auto/16-SMs-reserved";
      vars.push_back(v);
    }

    // Set up and verify every fused variant against cuBLAS before any timing.
    for (Variant& v : vars) {
      if (v.kind != "fused") continue;
      const ConfigName& cfg = kConfigs[v.config];
      tg::Setup s;
      s.layout = tg::make_row_layout(M, n, K, W, 0, opt.chunks, cfg.bm);
      s.x = A;
      s.g[0] = A;
      s.g[1] = A;
      s.b = B;
      s.y = Y;
      s.flags = (const unsigned long long*)flags_all;
      s.order = v.order;
      s.reserved_sms = v.reserved;
      v.runner = cfg.make();
      char err[512] = {0};
      if (v.runner->init(s, err, sizeof err)) {
        v.ok = false;
        v.why = err;
        fprintf(stderr, "%s: setup failed: %s\n", v.name.c_str(), err);
        continue;
      }
      CHECK_CUDA(cudaMemsetAsync(Y, 0xFF, M * n * 2, stream));  // NaN: an unwritten element shows
      CHECK_CUDA(v.runner->launch(stream, 1));
      CHECK_CUDA(cudaStreamSynchronize(stream));
      v.check = compare(download(Y, M * n), ref);
      v.ok = v.check.nan == 0 && v.check.max_rel <= 0.02;
      fprintf(stderr, "%-34s ctas %3d band %2d smem %6d params %4d B: max rel err %.2e, NaN %zu%s\n", v.name.c_str(),
              v.runner->ctas(), v.runner->band(), v.runner->smem(), v.runner->params_bytes(), v.check.max_rel,
              v.check.nan, v.ok ? "" : "  FAILED");
      if (!v.ok) v.why = "wrong result";
    }
    for (Variant& v : vars)
      if (v.kind == "cublaslt") {
        lt_run(blas, lt, lt.best, stream, A, B, Y);
        CHECK_CUDA(cudaStreamSynchronize(stream));
        v.check = compare(download(Y, M * n), ref);
      }

    auto run = [&](Variant& v, unsigned long long epoch) {
      if (v.kind == "cublas") gemm_ex(blas, stream, A, B, Y, (int)M, (int)n, (int)K);
      else if (v.kind == "cublaslt") lt_run(blas, lt, lt.best, stream, A, B, Y);
      else CHECK_CUDA(v.runner->launch(stream, epoch));
    };
    // Interleaved: every round runs every variant once, the order rotating and alternating
    // direction round by round, so clock drift under sustained load hits all alike. The L2 is
    // flushed (a write of 4x its size) before each timed call.
    std::vector<int> live;
    for (int i = 0; i < (int)vars.size(); ++i)
      if (vars[i].ok) live.push_back(i);
    unsigned long long epoch = 1;
    for (int round = 0; round < opt.warmup + opt.reps; ++round) {
      std::vector<int> order = live;
      std::rotate(order.begin(), order.begin() + round % order.size(), order.end());
      if (round % 2) std::reverse(order.begin(), order.end());
      for (int i : order) {
        CHECK_CUDA(cudaMemsetAsync(flush, round & 0xff, flush_bytes, stream));
        CHECK_CUDA(cudaEventRecord(ev0, stream));
        run(vars[i], ++epoch);
        CHECK_CUDA(cudaEventRecord(ev1, stream));
        CHECK_CUDA(cudaEventSynchronize(ev1));
        float ms = 0;
        CHECK_CUDA(cudaEventElapsedTime(&ms, ev0, ev1));
        if (round >= opt.warmup) vars[i].ms.push_back(ms);
      }
    }

    // Flags set late: the peer half of a fresh gather buffer is poisoned (NaN), then a second
    // stream sleeps `late_delay_us` on the host and copies the peer rows in chunk by chunk from
    // pinned host memory (copy engines, no SM), each chunk followed by its flag write; the
    // GEMM is launched at once and must wait for every chunk. Host memory keeps every mover off
    // the SMs the GEMM holds.
    double late_ms = -1, late_h2d_ms = -1;
    Check late_check;
    bool late_ok = false;
    const bool default_ok = std::any_of(vars.begin(), vars.end(), [](const Variant& v) {
      return v.kind == "fused" && v.config == 0 && v.order == tg::TileOrder::Auto && v.reserved == 0 && v.ok;
    });
    if (opt.late && default_ok) {
      const ConfigName& cfg = kConfigs[0];
      Runner* late = cfg.make();
      tg::Setup s;
      s.layout = tg::make_row_layout(M, n, K, W, 0, opt.chunks, cfg.bm);
      s.x = A;
      s.g[0] = G2;
      s.g[1] = G2;
      s.b = B;
      s.y = Y;
      s.flags = (const unsigned long long*)flags_late;
      char err[512] = {0};
      if (late->init(s, err, sizeof err)) {
        fprintf(stderr, "late: setup failed: %s\n", err);
      } else {
        void* host = nullptr;
        const size_t peer_bytes = (size_t)(M - R) * K * 2;
        CHECK_CUDA(cudaMallocHost(&host, peer_bytes));
        CHECK_CUDA(cudaMemcpy(host, (char*)A + R * K * 2, peer_bytes, cudaMemcpyDeviceToHost));
        const tg::RowLayout& l = s.layout;
        std::vector<float> times, h2d;
        for (int rep = 0; rep < 3; ++rep) {
          const unsigned long long e = rep + 1;
          CHECK_CUDA(cudaMemsetAsync((char*)G2 + R * K * 2, 0xFF, peer_bytes, stream));
          CHECK_CUDA(cudaMemsetAsync(Y, 0xFF, M * n * 2, stream));
          CHECK_CUDA(cudaEventRecord(evj, stream));
          CHECK_CUDA(cudaStreamWaitEvent(side, evj, 0));
          int delay = opt.late_delay_us;
          CHECK_CUDA(cudaLaunchHostFunc(side, sleep_us, &delay));
          for (int step = 1; step < W; ++step) {
            const int p = tg::sender_at(0, W, step);
            for (int c = 0; c < l.chunks; ++c) {
              const int64_t row0 = l.chunk_row0(p, c);
              CHECK_CUDA(cudaMemcpyAsync((char*)G2 + row0 * K * 2, (char*)host + (row0 - R) * K * 2,
                                         l.chunk_len(c) * K * 2, cudaMemcpyHostToDevice, side));
              if (int rc = writer.post(side, (unsigned long long*)flags_late + l.flag_index(p, c), e)) {
                fprintf(stderr, "cuStreamWriteValue64 failed: %d\n", rc);
                exit(2);
              }
            }
          }
          CHECK_CUDA(cudaEventRecord(ev0, stream));
          CHECK_CUDA(late->launch(stream, e));
          CHECK_CUDA(cudaEventRecord(ev1, stream));
          CHECK_CUDA(cudaEventRecord(evj, side));
          CHECK_CUDA(cudaStreamWaitEvent(stream, evj, 0));
          CHECK_CUDA(cudaStreamSynchronize(stream));
          float ms = 0;
          CHECK_CUDA(cudaEventElapsedTime(&ms, ev0, ev1));
          times.push_back(ms);
          if (rep == 0) late_check = compare(download(Y, M * n), ref);
        }
        // The copies alone, for comparison.
        CHECK_CUDA(cudaEventRecord(ev0, side));
        CHECK_CUDA(cudaMemcpyAsync((char*)G2 + R * K * 2, host, peer_bytes, cudaMemcpyHostToDevice, side));
        CHECK_CUDA(cudaEventRecord(ev1, side));
        CHECK_CUDA(cudaEventSynchronize(ev1));
        float ms = 0;
        CHECK_CUDA(cudaEventElapsedTime(&ms, ev0, ev1));
        late_h2d_ms = ms;
        late_ms = stats_of(times).median;
        late_ok = late_check.nan == 0 && late_check.max_rel <= 0.02;
        fprintf(stderr, "late flags: %.3f ms (delay %d us + host copies %.3f ms), max rel err %.2e, NaN %zu%s\n",
                late_ms, opt.late_delay_us, late_h2d_ms, late_check.max_rel, late_check.nan, late_ok ? "" : "  FAILED");
        CHECK_CUDA(cudaFreeHost(host));
      }
      late->release();
      delete late;
    }

    const double flop = 2.0 * (double)M * n * K;
    printf("{\"M\": %lld, \"K\": %lld, \"N\": %lld, \"world\": %d, \"gemm\": [%lld, %lld, %lld], \"chunks\": %d, "
           "\"lt_algos\": %zu, \"variants\": [",
           (long long)M, (long long)K, (long long)N, W, (long long)M, (long long)K, (long long)n, opt.chunks,
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
    printf("], \"late\": {\"ran\": %s, \"ok\": %s, \"ms\": %.5f, \"delay_us\": %d, \"h2d_ms\": %.5f, "
           "\"max_rel_err\": %.3e, \"nan\": %zu}}\n",
           late_ms >= 0 ? "true" : "false", late_ok ? "true" : "false", late_ms, opt.late_delay_us, late_h2d_ms,
           late_check.max_rel, late_check.nan);
    fflush(stdout);

    for (Variant& v : vars)
      if (v.runner) { v.runner->release(); delete v.runner; }
    cublasLtMatrixLayoutDestroy(lt.la);
    cublasLtMatrixLayoutDestroy(lt.lb);
    cublasLtMatrixLayoutDestroy(lt.lc);
    cublasLtMatmulDescDestroy(lt.desc);
    for (void* p : {A, B, Yref, Y, G2, flags_all, flags_late}) CHECK_CUDA(cudaFree(p));
  }
  return 0;
}
