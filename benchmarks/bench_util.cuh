// bench_util.cuh: what the one-GPU GEMM benchmarks (fused_gemm_bench.cu, grouped_gemm_bench.cu)
// share: checked CUDA and cuBLAS calls that end the run (exit 2) naming the call, the same
// hashed bf16 inputs every run, and the median and quartiles of timed repetitions.
#ifndef CUCO_BENCH_UTIL_CUH_
#define CUCO_BENCH_UTIL_CUH_

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

// Uniform values in [-scale, scale), from a hash of the index: the same inputs every run.
__global__ void fill_bf16(__nv_bfloat16* p, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 16; h *= 0x7feb352du; h ^= h >> 15; h *= 0x846ca68bu; h ^= h >> 16;
    p[i] = __float2bfloat16(((h >> 8) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * scale);
  }
}

__host__ __device__ inline float bf16_to_float(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

struct Stats {
  double median = 0, q1 = 0, q3 = 0;
};

template <class T>
Stats stats_of(std::vector<T> v) {
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

#endif  // CUCO_BENCH_UTIL_CUH_
