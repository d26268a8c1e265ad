// fused_gemm_bench.h: what the benchmark's driver and its per-configuration units share.
#ifndef CUCO_FUSED_GEMM_BENCH_H_
#define CUCO_FUSED_GEMM_BENCH_H_

#include "cuco_tile_gemm.cuh"

namespace tg = cuco::tile_gemm;

// The kernel configurations the gemm_allgather template can produce (its `tile` and `cluster` knobs).
#define CUCO_BENCH_CONFIGS(X) X(0, 128, 256, 2, 1) X(1, 128, 256, 1, 2) X(2, 256, 128, 2, 1) X(3, 256, 128, 1, 2)

struct Runner {
  virtual ~Runner() = default;
  virtual int init(const tg::Setup& s, char* error, size_t len) = 0;
  virtual cudaError_t launch(cudaStream_t stream, unsigned long long epoch) = 0;
  virtual int ctas() const = 0;
  virtual int band() const = 0;
  virtual int smem() const = 0;
  virtual int params_bytes() const = 0;
  virtual void release() = 0;
};

#define CUCO_DECLARE(i, bm, bn, cm, cn) Runner* make_runner_##i();
CUCO_BENCH_CONFIGS(CUCO_DECLARE)

#endif  // CUCO_FUSED_GEMM_BENCH_H_
