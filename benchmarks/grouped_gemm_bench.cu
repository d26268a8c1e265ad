// grouped_gemm_bench.cu: the prebuilt grouped GEMM (cuco_grouped_gemm_lib.h) against cuBLAS on one
// GPU, on the expert problems of a MoE rank. Driven by benchmarks/grouped_gemm.py, which computes
// the problems and builds this file linked against every grouped GEMM library it names.
//
//   grouped_gemm_bench PROBLEMS REPS CONFIG...      CONFIG as BMxBN/CMxCN, e.g. 128x256/2x1
//
// PROBLEMS has one line per problem: `label n k groups m_0 ... m_{groups-1}`: group i computes
// d_i [m_i, n] = a_i [m_i, k] @ b_i [k, n], bf16 row-major, the groups' rows consecutive in one
// a and one d (the MoE expert layout), b_i = b + i * k * n. Variants:
//   cublas          one cublasGemmEx per group with rows (the reference's per-expert way)
//   cublas_grouped  one cublasGemmGroupedBatchedEx (the reference's way for small experts)
//   CONFIG          the library, one launch over every group, sizes filled on the device from the
//                   counts (GroupedProblems::fill, outside the timed call), every SM
//   CONFIG/4        the same in four launches of a quarter of the groups each (expert_pipeline's cut)
// Each variant first runs once into a poisoned d and is compared with the cublas result (relative
// L2 error, NaNs counted); then REPS rounds time every variant once each, the order rotated every
// round, the L2 flushed (a write of 4x its size) before each timed call, CUDA events around it.
// One JSON line per problem and variant on stdout; exit status 1 when a check fails.
#include "cuco_grouped_gemm_lib.h"
#include "bench_util.cuh"

#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace gg = cuco::grouped_gemm;

namespace {

constexpr double kRelL2 = 1e-2;  // bf16 results of fp32 sums: the library and cuBLAS round alike

struct Problem {
  std::string label;
  int n = 0, k = 0;
  std::vector<int> m;
  long long rows() const {
    long long r = 0;
    for (int v : m) r += v;
    return r;
  }
};

// sums[0] += (got - want)^2, sums[1] += want^2, sums[2] += NaNs in got.
__global__ void compare(const uint16_t* got, const uint16_t* want, size_t count, double* sums) {
  double e = 0, w = 0, nan = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
    const float g = bf16_to_float(got[i]), r = bf16_to_float(want[i]);
    if (g != g) {
      nan += 1;
      continue;
    }
    e += (double)(g - r) * (g - r);
    w += (double)r * r;
  }
  atomicAdd(&sums[0], e);
  atomicAdd(&sums[1], w);
  atomicAdd(&sums[2], nan);
}

struct Gpu {
  cudaStream_t stream;
  cublasHandle_t cublas;
  cudaEvent_t ev0, ev1;
  void* flush = nullptr;
  size_t flush_bytes = 0;
  double* sums = nullptr;
  int sms = 0;
};

struct Buffers {
  uint16_t *a = nullptr, *b = nullptr, *d = nullptr, *want = nullptr;
  int* counts = nullptr;
};

struct Variant {
  std::string name;
  bool is_lib = false;
  gg::GroupedConfig config{};
  int splits = 1;
  gg::GroupedGemmLib lib;
  gg::GroupedProblems problems;
  std::vector<double> ms;
  double rel_l2 = 0, nans = 0;
  bool ok = true;
  std::string error;
};

// The cuBLAS grouped call's arrays: device pointer arrays, host size arrays, groups with rows only.
struct CublasGrouped {
  std::vector<cublasOperation_t> ta, tb;
  std::vector<int> m, n, k, lda, ldb, ldc, size;
  std::vector<float> alpha, beta;
  const void** a = nullptr;
  const void** b = nullptr;
  void** c = nullptr;
  int count = 0;
};

void cublas_per_group(const Gpu& g, const Problem& p, const Buffers& buf, uint16_t* d) {
  const float one = 1.0f, zero = 0.0f;
  long long row = 0;
  for (size_t i = 0; i < p.m.size(); ++i) {
    const int m = p.m[i];
    if (m > 0)  // row-major d = a b as column-major d^T = b^T a^T
      CHECK_BLAS(cublasGemmEx(g.cublas, CUBLAS_OP_N, CUBLAS_OP_N, p.n, m, p.k, &one, buf.b + (size_t)i * p.k * p.n,
                      CUDA_R_16BF, p.n, buf.a + (size_t)row * p.k, CUDA_R_16BF, p.k, &zero, d + (size_t)row * p.n,
                      CUDA_R_16BF, p.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    row += m;
  }
}

void cublas_grouped_init(CublasGrouped& cg, const Problem& p, const Buffers& buf, uint16_t* d) {
  std::vector<const void*> a, b;
  std::vector<void*> c;
  long long row = 0;
  for (size_t i = 0; i < p.m.size(); ++i) {
    const int m = p.m[i];
    if (m > 0) {
      cg.ta.push_back(CUBLAS_OP_N);
      cg.tb.push_back(CUBLAS_OP_N);
      cg.m.push_back(p.n);
      cg.n.push_back(m);
      cg.k.push_back(p.k);
      cg.lda.push_back(p.n);
      cg.ldb.push_back(p.k);
      cg.ldc.push_back(p.n);
      cg.size.push_back(1);
      cg.alpha.push_back(1.0f);
      cg.beta.push_back(0.0f);
      a.push_back(buf.b + (size_t)i * p.k * p.n);
      b.push_back(buf.a + (size_t)row * p.k);
      c.push_back(d + (size_t)row * p.n);
    }
    row += m;
  }
  cg.count = (int)a.size();
  CHECK_CUDA(cudaMalloc(&cg.a, a.size() * sizeof(void*)));
  CHECK_CUDA(cudaMalloc(&cg.b, b.size() * sizeof(void*)));
  CHECK_CUDA(cudaMalloc(&cg.c, c.size() * sizeof(void*)));
  CHECK_CUDA(cudaMemcpy(cg.a, a.data(), a.size() * sizeof(void*), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(cg.b, b.data(), b.size() * sizeof(void*), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(cg.c, c.data(), c.size() * sizeof(void*), cudaMemcpyHostToDevice));
}

void cublas_grouped_release(CublasGrouped& cg) {
  cudaFree(cg.a);
  cudaFree(cg.b);
  cudaFree(cg.c);
}

void cublas_grouped_run(const Gpu& g, const CublasGrouped& cg) {
  CHECK_BLAS(cublasGemmGroupedBatchedEx(g.cublas, cg.ta.data(), cg.tb.data(), cg.m.data(), cg.n.data(), cg.k.data(),
                                cg.alpha.data(), cg.a, CUDA_R_16BF, cg.lda.data(), cg.b, CUDA_R_16BF, cg.ldb.data(),
                                cg.beta.data(), cg.c, CUDA_R_16BF, cg.ldc.data(), cg.count, cg.size.data(),
                                CUBLAS_COMPUTE_32F));
}

// The library's calls: `splits` consecutive ranges of the groups, all rows of each.
int lib_init(Variant& v, const Problem& p, const Buffers& buf, const Gpu& g) {
  char error[1024] = "";
  const int groups = (int)p.m.size();
  const int per = (groups + v.splits - 1) / v.splits;
  if (v.lib.init(v.config, per, 0, error, sizeof error) || v.problems.init(v.splits, per, error, sizeof error)) {
    v.error = error;
    return 1;
  }
  for (int c = 0; c < v.splits; ++c) {
    gg::FillSpec& s = v.problems.spec(c);
    s = gg::FillSpec{};
    s.counts = buf.counts;
    s.sources = 1;
    s.source_stride = groups;
    s.experts = groups;
    s.first = std::min(c * per, groups);
    s.groups = std::min(per, groups - s.first);
    s.tile_rows = 128;
    s.n = p.n;
    s.k = p.k;
    s.a = (const char*)buf.a;
    s.a_row = (int64_t)p.k * 2;
    s.b = (const char*)buf.b;
    s.b_expert = (int64_t)p.k * p.n * 2;
    s.d = (char*)buf.d;
    s.d_row = (int64_t)p.n * 2;
  }
  CHECK_CUDA(v.problems.upload(g.stream));
  CHECK_CUDA(v.problems.fill(g.stream));
  CHECK_CUDA(cudaStreamSynchronize(g.stream));
  return 0;
}

void lib_run(Variant& v, const Gpu& g) {
  for (int c = 0; c < v.splits; ++c) CHECK_CUDA(v.lib.launch(v.problems.problems(c), g.stream));
}

bool parse_config(const std::string& text, gg::GroupedConfig& c) {
  return sscanf(text.c_str(), "%dx%d/%dx%d", &c.block_m, &c.block_n, &c.cluster_m, &c.cluster_n) == 4;
}

std::vector<Problem> read_problems(const char* path) {
  std::vector<Problem> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream s(line);
    Problem p;
    int groups = 0;
    if (!(s >> p.label >> p.n >> p.k >> groups)) continue;
    p.m.resize(groups);
    for (int& v : p.m) s >> v;
    if (!s) {
      fprintf(stderr, "bad problem line: %s\n", line.c_str());
      exit(2);
    }
    out.push_back(p);
  }
  return out;
}

bool run_problem(Gpu& g, const Problem& p, int reps, const std::vector<std::string>& configs) {
  const long long rows = p.rows();
  const int groups = (int)p.m.size();
  Buffers buf;
  CHECK_CUDA(cudaMalloc(&buf.a, (size_t)rows * p.k * 2));
  CHECK_CUDA(cudaMalloc(&buf.b, (size_t)groups * p.k * p.n * 2));
  CHECK_CUDA(cudaMalloc(&buf.d, (size_t)rows * p.n * 2));
  CHECK_CUDA(cudaMalloc(&buf.want, (size_t)rows * p.n * 2));
  CHECK_CUDA(cudaMalloc(&buf.counts, groups * sizeof(int)));
  CHECK_CUDA(cudaMemcpy(buf.counts, p.m.data(), groups * sizeof(int), cudaMemcpyHostToDevice));
  fill_bf16<<<4 * g.sms, 512, 0, g.stream>>>((__nv_bfloat16*)buf.a, (size_t)rows * p.k, 17u, 1.0f);
  fill_bf16<<<4 * g.sms, 512, 0, g.stream>>>((__nv_bfloat16*)buf.b, (size_t)groups * p.k * p.n, 29u, 1.0f / std::sqrt((float)p.k));
  CHECK_CUDA(cudaGetLastError());
  cublas_per_group(g, p, buf, buf.want);
  CHECK_CUDA(cudaStreamSynchronize(g.stream));

  CublasGrouped cg;
  cublas_grouped_init(cg, p, buf, buf.d);
  std::vector<Variant> variants(2);
  variants[0].name = "cublas";
  variants[1].name = "cublas_grouped";
  for (const std::string& text : configs)
    for (int splits : {1, 4}) {
      Variant v;
      if (!parse_config(text, v.config)) {
        fprintf(stderr, "bad configuration %s (BMxBN/CMxCN)\n", text.c_str());
        exit(2);
      }
      v.is_lib = true;
      v.splits = splits;
      v.name = splits == 1 ? text : text + "/" + std::to_string(splits);
      variants.push_back(std::move(v));
    }
  for (Variant& v : variants)
    if (v.is_lib && lib_init(v, p, buf, g)) v.ok = false;

  auto run = [&](Variant& v) {
    if (v.name == "cublas")
      cublas_per_group(g, p, buf, buf.d);
    else if (v.name == "cublas_grouped")
      cublas_grouped_run(g, cg);
    else
      lib_run(v, g);
  };
  const size_t elems = (size_t)rows * p.n;
  for (Variant& v : variants) {
    if (!v.ok) continue;
    CHECK_CUDA(cudaMemsetAsync(buf.d, 0xff, elems * 2, g.stream));  // 0xffff: a NaN in every element
    run(v);
    CHECK_CUDA(cudaMemsetAsync(g.sums, 0, 3 * sizeof(double), g.stream));
    compare<<<2 * g.sms, 256, 0, g.stream>>>(buf.d, buf.want, elems, g.sums);
    double sums[3];
    CHECK_CUDA(cudaMemcpyAsync(sums, g.sums, sizeof sums, cudaMemcpyDeviceToHost, g.stream));
    CHECK_CUDA(cudaStreamSynchronize(g.stream));
    v.rel_l2 = sums[1] > 0 ? std::sqrt(sums[0] / sums[1]) : 0;
    v.nans = sums[2];
    if (!(v.rel_l2 <= kRelL2) || v.nans > 0) {
      v.ok = false;
      char why[256];
      snprintf(why, sizeof why, "differs from cuBLAS: relative L2 %.3g, %.0f NaN", v.rel_l2, v.nans);
      v.error = why;
    }
  }
  std::vector<size_t> order;
  for (size_t i = 0; i < variants.size(); ++i)
    if (variants[i].ok) order.push_back(i);
  for (int round = 0; round < reps; ++round) {
    std::vector<size_t> o = order;
    if (!o.empty()) std::rotate(o.begin(), o.begin() + round % o.size(), o.end());
    for (size_t i : o) {
      CHECK_CUDA(cudaMemsetAsync(g.flush, round & 0xff, g.flush_bytes, g.stream));
      CHECK_CUDA(cudaEventRecord(g.ev0, g.stream));
      run(variants[i]);
      CHECK_CUDA(cudaEventRecord(g.ev1, g.stream));
      CHECK_CUDA(cudaEventSynchronize(g.ev1));
      float ms = 0;
      CHECK_CUDA(cudaEventElapsedTime(&ms, g.ev0, g.ev1));
      variants[i].ms.push_back(ms);
    }
  }
  double flop = 0;
  for (int m : p.m) flop += 2.0 * m * p.n * p.k;
  bool all_ok = true;
  for (Variant& v : variants) {
    const Stats st = stats_of(v.ms);
    all_ok &= v.ok;
    std::string err;
    for (char ch : v.error) err += (ch == '"' || ch == '\\') ? '\'' : ch;
    printf("{\"problem\": \"%s\", \"n\": %d, \"k\": %d, \"groups\": %d, \"rows\": %lld, \"variant\": \"%s\", "
           "\"ok\": %s, \"error\": \"%s\", \"rel_l2\": %.3g, \"median_ms\": %.5f, \"q1_ms\": %.5f, \"q3_ms\": %.5f, "
           "\"tflops\": %.1f, \"reps\": %zu}\n",
           p.label.c_str(), p.n, p.k, groups, rows, v.name.c_str(), v.ok ? "true" : "false", err.c_str(), v.rel_l2,
           st.median, st.q1, st.q3, st.median > 0 ? flop / (st.median * 1e9) : 0.0, v.ms.size());
    v.problems.release();
    v.lib.release();
  }
  fflush(stdout);
  cublas_grouped_release(cg);
  cudaFree(buf.a);
  cudaFree(buf.b);
  cudaFree(buf.d);
  cudaFree(buf.want);
  cudaFree(buf.counts);
  return all_ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s PROBLEMS REPS [BMxBN/CMxCN ...]\n", argv[0]);
    return 2;
  }
  const std::vector<Problem> problems = read_problems(argv[1]);
  const int reps = atoi(argv[2]);
  const std::vector<std::string> configs(argv + 3, argv + argc);
  Gpu g;
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  g.sms = prop.multiProcessorCount;
  CHECK_CUDA(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking));
  CHECK_BLAS(cublasCreate(&g.cublas));
  CHECK_BLAS(cublasSetStream(g.cublas, g.stream));
  CHECK_CUDA(cudaEventCreate(&g.ev0));
  CHECK_CUDA(cudaEventCreate(&g.ev1));
  g.flush_bytes = (size_t)std::max(prop.l2CacheSize, 1 << 20) * 4;
  CHECK_CUDA(cudaMalloc(&g.flush, g.flush_bytes));
  CHECK_CUDA(cudaMalloc(&g.sums, 3 * sizeof(double)));
  fprintf(stderr, "%s, %d SMs, %zu problems, %d repetitions\n", prop.name, g.sms, problems.size(), reps);
  bool ok = true;
  for (const Problem& p : problems) ok &= run_problem(g, p, reps, configs);
  return ok ? 0 : 1;
}
