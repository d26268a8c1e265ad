// cuco_tile_gemm_lib.h: cuco_tile_gemm.cuh's fused GEMM, prebuilt; a candidate that includes this
// header instead compiles in seconds, with no CUTLASS.
//
// The kernel and its launcher are the same code as cuco_tile_gemm.cuh's
// FusedGemm<Config<BM, BN, CM, CN>> (docs/fused_gemm.md), compiled by cuco's toolchain once per
// machine and kernel configuration into a shared library (libcuco_tile_gemm-<config>-<key>.so in
// the build cache) with the C ABI below. The configuration is a value here, not a type:
//
//   constexpr tg::KernelConfig kConfig{128, 256, 2, 1};  // tile BM x BN, cluster CM x CN
//   tg::FusedGemmLib gemm;
//   if (gemm.init(kConfig, setup, ctx->error, CUCO_ERROR_LEN)) return 1;  // once per shape
//   CUCO_TRY_CUDA(ctx, gemm.launch(stream, epoch));                       // once per iteration
//   gemm.release();
//
// Linking: the toolchain links the library of every configuration the candidate writes as
// `KernelConfig{BM, BN, CM, CN}` with literal numbers (all four when it writes none), building it
// first where this machine has not yet; the candidate finds it through its rpath. The libraries
// exist for 128x256 and 256x128 tiles with 2x1 and 1x2 clusters. Each defines one entry point,
// declared weak here: init() of a configuration that was not linked fails with a sentence
// instead of the candidate failing to load.
//
// The rows, flags, arrival order and movers: cuco_arrival.cuh, as with cuco_tile_gemm.cuh.
#ifndef CUCO_TILE_GEMM_LIB_H_
#define CUCO_TILE_GEMM_LIB_H_

#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>

#include <cuda_runtime.h>

#include "cuco_arrival.cuh"

// ---------------------------------------------------------------- the C ABI of the libraries

extern "C" {

// Bump when a struct or function below changes (the library key holds this header's bytes, so a
// candidate never links a library built from another version through cuco's toolchain; the
// check in init() covers a library linked by hand).
#define CUCO_TILE_GEMM_LIB_ABI 2

// tile_gemm::Setup in plain C (enums as ints, the trace as pointer and count). All pointers are
// device pointers of this rank's GPU; flags may be written by peers (CUDA-IPC memory).
typedef struct cuco_tile_gemm_setup {
  int32_t abi;  // CUCO_TILE_GEMM_LIB_ABI
  int32_t world, rank, chunks;
  int64_t M, N, K, rows_per_rank, chunk_rows;
  int32_t own_from_x;  // 1: own rows read from x
  int32_t k_slices;    // K slices of each shard's last chunk (1: not cut)
  int64_t slice_k;     // columns per slice
  int32_t fanout;      // tile_gemm::Fanout
  int32_t order;       // tile_gemm::TileOrder
  int32_t reserved_sms;
  const void* x;
  const void* g[2];
  const void* b;
  void* y;
  const unsigned long long* flags;
  unsigned long long signals;
  cuco_wait_slot* trace_slots;  // the rank's trace (cuco::Trace), for the deadlock report
  int32_t trace_n;
  int32_t site;
} cuco_tile_gemm_setup;

// What init chose, fixed until release.
typedef struct cuco_tile_gemm_info {
  int32_t clusters, ctas, smem_bytes, band;
} cuco_tile_gemm_info;

typedef struct cuco_tile_gemm_api {
  int32_t abi;
  int32_t block_m, block_n, cluster_m, cluster_n;
  // 0 and a GEMM in *gemm, or nonzero after writing a sentence into `error` (*gemm stays null).
  int (*create)(const cuco_tile_gemm_setup* setup, void** gemm, cuco_tile_gemm_info* info, char* error,
                size_t error_len);
  // Enqueues launch `epoch` (1, 2, ...) on `stream`; a cudaError_t.
  int (*launch)(void* gemm, cudaStream_t stream, unsigned long long epoch);
  void (*release)(void* gemm);
} cuco_tile_gemm_api;

// One entry point per configuration, each defined by its library (CUCO_TILE_GEMM_LIB_BUILD is
// set while a library is compiled, where the definition must not be weak).
#ifdef CUCO_TILE_GEMM_LIB_BUILD
#define CUCO_TILE_GEMM_ENTRY(name) const cuco_tile_gemm_api* name(void)
#else
#define CUCO_TILE_GEMM_ENTRY(name) const cuco_tile_gemm_api* name(void) __attribute__((weak))
#endif
CUCO_TILE_GEMM_ENTRY(cuco_tile_gemm_128x256_2x1);
CUCO_TILE_GEMM_ENTRY(cuco_tile_gemm_128x256_1x2);
CUCO_TILE_GEMM_ENTRY(cuco_tile_gemm_256x128_2x1);
CUCO_TILE_GEMM_ENTRY(cuco_tile_gemm_256x128_1x2);
#undef CUCO_TILE_GEMM_ENTRY

}  // extern "C"

namespace cuco {
namespace tile_gemm {

// One kernel configuration: CTA tile block_m x block_n (x 64 along K), cluster cluster_m x cluster_n.
struct KernelConfig {
  int block_m, block_n, cluster_m, cluster_n;
};

inline cuco_tile_gemm_setup setup_to_c(const Setup& s) {
  cuco_tile_gemm_setup c = {};
  const RowLayout& l = s.layout;
  c.abi = CUCO_TILE_GEMM_LIB_ABI;
  c.world = l.world;
  c.rank = l.rank;
  c.chunks = l.chunks;
  c.M = l.M;
  c.N = l.N;
  c.K = l.K;
  c.rows_per_rank = l.rows_per_rank;
  c.chunk_rows = l.chunk_rows;
  c.own_from_x = l.own_from_x ? 1 : 0;
  c.k_slices = l.k_slices;
  c.slice_k = l.slice_k;
  c.fanout = (int32_t)l.fanout;
  c.order = (int32_t)s.order;
  c.reserved_sms = s.reserved_sms;
  c.x = s.x;
  c.g[0] = s.g[0];
  c.g[1] = s.g[1];
  c.b = s.b;
  c.y = s.y;
  c.flags = s.flags;
  c.signals = s.signals;
  c.trace_slots = s.trace.slots;
  c.trace_n = s.trace.n;
  c.site = s.site;
  return c;
}

inline Setup setup_from_c(const cuco_tile_gemm_setup& c) {
  Setup s;
  RowLayout& l = s.layout;
  l.world = c.world;
  l.rank = c.rank;
  l.chunks = c.chunks;
  l.M = c.M;
  l.N = c.N;
  l.K = c.K;
  l.rows_per_rank = c.rows_per_rank;
  l.chunk_rows = c.chunk_rows;
  l.own_from_x = c.own_from_x != 0;
  l.k_slices = c.k_slices;
  l.slice_k = c.slice_k;
  l.fanout = (Fanout)c.fanout;
  s.order = (TileOrder)c.order;
  s.reserved_sms = c.reserved_sms;
  s.x = c.x;
  s.g[0] = c.g[0];
  s.g[1] = c.g[1];
  s.b = c.b;
  s.y = c.y;
  s.flags = c.flags;
  s.signals = c.signals;
  s.trace = Trace{c.trace_slots, c.trace_n};
  s.site = c.site;
  return s;
}

inline int write_error(char* error, size_t len, const char* fmt, ...) {
  if (error != nullptr && len > 0) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(error, len, fmt, args);
    va_end(args);
  }
  return 1;
}

#ifndef CUCO_TILE_GEMM_LIB_BUILD

// The linked library of `k`'s configuration, or nullptr after writing why into `error`.
inline const cuco_tile_gemm_api* linked_library(const KernelConfig& k, char* error, size_t error_len) {
  struct Entry {
    KernelConfig config;
    const cuco_tile_gemm_api* (*entry)(void);
  };
  const Entry entries[] = {{{128, 256, 2, 1}, cuco_tile_gemm_128x256_2x1},
                           {{128, 256, 1, 2}, cuco_tile_gemm_128x256_1x2},
                           {{256, 128, 2, 1}, cuco_tile_gemm_256x128_2x1},
                           {{256, 128, 1, 2}, cuco_tile_gemm_256x128_1x2}};
  for (const Entry& e : entries) {
    const KernelConfig& c = e.config;
    if (c.block_m != k.block_m || c.block_n != k.block_n || c.cluster_m != k.cluster_m || c.cluster_n != k.cluster_n)
      continue;
    if (e.entry == nullptr) {  // weak and unresolved: no library of this configuration was loaded
      write_error(error, error_len,
                  "the fused GEMM library of %dx%d tiles, %dx%d clusters is not linked: cuco's toolchain links "
                  "the configurations a candidate writes as tg::KernelConfig{%d, %d, %d, %d} with literal numbers",
                  k.block_m, k.block_n, k.cluster_m, k.cluster_n, k.block_m, k.block_n, k.cluster_m, k.cluster_n);
      return nullptr;
    }
    const cuco_tile_gemm_api* api = e.entry();
    if (api == nullptr || api->abi != CUCO_TILE_GEMM_LIB_ABI) {
      write_error(error, error_len, "the fused GEMM library of %dx%d tiles, %dx%d clusters speaks ABI %d, this header %d",
                  k.block_m, k.block_n, k.cluster_m, k.cluster_n, api ? api->abi : -1, CUCO_TILE_GEMM_LIB_ABI);
      return nullptr;
    }
    return api;
  }
  write_error(error, error_len,
              "tg::KernelConfig{%d, %d, %d, %d} has no fused GEMM library: tiles 128x256 or 256x128, clusters "
              "2x1 or 1x2", k.block_m, k.block_n, k.cluster_m, k.cluster_n);
  return nullptr;
}

// The fused GEMM of one configuration from its library, set up once per shape and launched once
// per iteration: FusedGemm<Config<...>>'s API, the configuration given to init().
class FusedGemmLib {
 public:
  // 0, or a nonzero code after writing a sentence into `error`.
  int init(const KernelConfig& config, const Setup& s, char* error, size_t error_len) {
    release();
    const cuco_tile_gemm_api* api = linked_library(config, error, error_len);
    if (api == nullptr) return 1;
    const cuco_tile_gemm_setup c = setup_to_c(s);
    void* gemm = nullptr;
    cuco_tile_gemm_info info = {};
    if (int rc = api->create(&c, &gemm, &info, error, error_len)) return rc;
    api_ = api;
    gemm_ = gemm;
    info_ = info;
    return 0;
  }

  // Enqueue launch number `epoch` (1, 2, ...): reads g[epoch % 2], waits for flags >= epoch * signals.
  cudaError_t launch(cudaStream_t stream, unsigned long long epoch) {
    if (gemm_ == nullptr) return cudaErrorInvalidValue;  // launched without a successful init
    return (cudaError_t)api_->launch(gemm_, stream, epoch);
  }

  void release() {
    if (gemm_ != nullptr) api_->release(gemm_);
    gemm_ = nullptr;
    api_ = nullptr;
    info_ = cuco_tile_gemm_info{};
  }

  int clusters() const { return info_.clusters; }
  int ctas() const { return info_.ctas; }
  int smem_bytes() const { return info_.smem_bytes; }
  int band() const { return info_.band; }

 private:
  const cuco_tile_gemm_api* api_ = nullptr;
  void* gemm_ = nullptr;
  cuco_tile_gemm_info info_ = {};
};

#endif  // CUCO_TILE_GEMM_LIB_BUILD

}  // namespace tile_gemm
}  // namespace cuco

#endif  // CUCO_TILE_GEMM_LIB_H_
