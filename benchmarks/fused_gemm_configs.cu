// One kernel configuration of the fused GEMM, behind the benchmark's Runner interface: compiled
// once per configuration (-DCUCO_BENCH_ONLY=i, in parallel) by benchmarks/fused_gemm.py.
#include "fused_gemm_bench.h"

#ifndef CUCO_BENCH_ONLY
#error "compile with -DCUCO_BENCH_ONLY=<configuration index>"
#endif

template <class Cfg>
struct RunnerOf final : Runner {
  tg::FusedGemm<Cfg> gemm;
  int init(const tg::Setup& s, char* error, size_t len) override { return gemm.init(s, error, len); }
  cudaError_t launch(cudaStream_t stream, unsigned long long epoch) override { return gemm.launch(stream, epoch); }
  int ctas() const override { return gemm.ctas(); }
  int band() const override { return gemm.band(); }
  int smem() const override { return gemm.smem_bytes(); }
  int params_bytes() const override { return (int)sizeof(typename tg::FusedGemm<Cfg>::KernelParams); }
  void release() override { gemm.release(); }
};

#define CUCO_ONLY_(i, bm, bn, cm, cn)                                               \
  Runner* make_runner_##i() { return new RunnerOf<tg::Config<bm, bn, cm, cn>>(); }
#if CUCO_BENCH_ONLY == 0
CUCO_ONLY_(0, 128, 256, 2, 1)
#elif CUCO_BENCH_ONLY == 1
CUCO_ONLY_(1, 128, 256, 1, 2)
#elif CUCO_BENCH_ONLY == 2
CUCO_ONLY_(2, 256, 128, 2, 1)
#elif CUCO_BENCH_ONLY == 3
CUCO_ONLY_(3, 256, 128, 1, 2)
#else
#error "CUCO_BENCH_ONLY names no configuration"
#endif
