// cuco_grouped_gemm_lib.h: a Hopper grouped GEMM (CUTLASS 3.x ptr-array, prebuilt once per machine)
// whose problem sizes and pointers live in device memory, so that a kernel fills them from counts
// that never visit the host. No CUTLASS here: a candidate that includes this header compiles in
// seconds and is linked against the library.
//
// Group i computes d[i] [m_i, n_i] = a[i] [m_i, k_i] @ b[i] [k_i, n_i]: bf16, row-major and dense
// (leading dimensions k_i, n_i and n_i), fp32 accumulation, one persistent launch for every group
// (CUTLASS's KernelPtrArrayTmaWarpSpecializedCooperative with PersistentTileSchedulerSm90Group).
// A group with m_i = 0 has no tile and is skipped. n_i and k_i must be multiples of 8 (16-byte TMA
// rows) and every pointer 16-byte aligned.
//
//   namespace gg = cuco::grouped_gemm;
//   constexpr gg::GroupedConfig kGrouped{128, 128, 1, 1};     // tile BM x BN (x 64 along K), cluster
//   gg::GroupedGemmLib gemm;                                  // one per stream: launches share a workspace
//   gg::GroupedProblems probs;                                // the device arrays of every call
//   if (gemm.init(kGrouped, max_groups, 0, ctx->error, CUCO_ERROR_LEN)) return 1;  // once per shape
//   if (probs.init(calls, max_groups, ctx->error, CUCO_ERROR_LEN)) return 1;
//   probs.spec(0) = gg::FillSpec{...};  ... probs.upload(stream);  // what each call multiplies, once
//   probs.fill(stream);                                        // per iteration: sizes from the counts
//   gemm.launch(probs.problems(0), stream);                    // one launch per call
//
// Linking: the toolchain links the library of every configuration the candidate writes as
// `gg::GroupedConfig{BM, BN, CM, CN}` with literal numbers (both when it writes none), building
// it first where this machine has not yet (toolchain/grouped_gemm_lib.py); the candidate finds it
// through its rpath. Libraries exist for tiles 128x128 (clusters 1x1, 2x1), 128x256 (1x1, 1x2, 2x1) or 256x128 (2x1). Each defines
// one entry point, declared weak here: init() of a configuration that was not linked fails with
// a sentence instead of the candidate failing to load.
#ifndef CUCO_GROUPED_GEMM_LIB_H_
#define CUCO_GROUPED_GEMM_LIB_H_

#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <new>

#include <cuda_runtime.h>

// ---------------------------------------------------------------- the C ABI of the libraries

extern "C" {

// Bump when a struct or function below changes (the library key holds this header's bytes, so a
// candidate never links a library built from another version through cuco's toolchain; the check
// in create() covers a library linked by hand).
#define CUCO_GROUPED_GEMM_LIB_ABI 1

typedef struct cuco_grouped_gemm_setup {
  int32_t abi;         // CUCO_GROUPED_GEMM_LIB_ABI
  int32_t max_groups;  // the most groups one launch may have (the workspace is sized for it)
  int32_t sms;         // SMs the persistent grid may take: 0 = every SM of the current device
  int32_t reserved;
} cuco_grouped_gemm_setup;

// One launch's groups. The arrays are device memory, read when the kernel runs (a kernel earlier
// on the stream may write them); their layout is CUTLASS's (the library checks it at create).
typedef struct cuco_grouped_gemm_problems {
  int32_t groups;      // <= the setup's max_groups; 0 launches nothing
  int32_t reserved;
  int32_t* shapes;     // [groups][3]: m_i, n_i, k_i
  int64_t* strides;    // [3][groups]: k_i (a's rows), then n_i (b's rows), then n_i (d's rows)
  const void** a;      // [groups] each
  const void** b;
  void** d;
  // Optional, host memory [groups][3] as `shapes`, read at the launch: the grid then covers no more
  // CTAs than there are tiles. nullptr: the grid is every SM given, the sizes read on the device.
  const int32_t* host_shapes;
} cuco_grouped_gemm_problems;

// What create chose, fixed until release.
typedef struct cuco_grouped_gemm_info {
  int32_t sms, smem_bytes;
  int64_t workspace_bytes;
} cuco_grouped_gemm_info;

typedef struct cuco_grouped_gemm_api {
  int32_t abi;
  int32_t block_m, block_n, cluster_m, cluster_n;
  // 0 and a GEMM in *gemm, or nonzero after writing a sentence into `error` (*gemm stays null).
  int (*create)(const cuco_grouped_gemm_setup* setup, void** gemm, cuco_grouped_gemm_info* info, char* error,
                size_t error_len);
  // Enqueues one grouped GEMM on `stream`; a cudaError_t. Launches of one GEMM must be ordered
  // (one stream): they share its workspace.
  int (*launch)(void* gemm, const cuco_grouped_gemm_problems* problems, cudaStream_t stream);
  void (*release)(void* gemm);
} cuco_grouped_gemm_api;

// One entry point per configuration, each defined by its library (CUCO_GROUPED_GEMM_LIB_BUILD is
// set while a library is compiled, where the definition must not be weak).
#ifdef CUCO_GROUPED_GEMM_LIB_BUILD
#define CUCO_GROUPED_GEMM_ENTRY(name) const cuco_grouped_gemm_api* name(void)
#else
#define CUCO_GROUPED_GEMM_ENTRY(name) const cuco_grouped_gemm_api* name(void) __attribute__((weak))
#endif
CUCO_GROUPED_GEMM_ENTRY(cuco_grouped_gemm_128x128_1x1);
CUCO_GROUPED_GEMM_ENTRY(cuco_grouped_gemm_128x128_2x1);
CUCO_GROUPED_GEMM_ENTRY(cuco_grouped_gemm_128x256_1x1);
CUCO_GROUPED_GEMM_ENTRY(cuco_grouped_gemm_128x256_1x2);
CUCO_GROUPED_GEMM_ENTRY(cuco_grouped_gemm_128x256_2x1);
CUCO_GROUPED_GEMM_ENTRY(cuco_grouped_gemm_256x128_2x1);
#undef CUCO_GROUPED_GEMM_ENTRY

}  // extern "C"

namespace cuco {
namespace grouped_gemm {

// One kernel configuration: CTA tile block_m x block_n (x 64 along K), cluster cluster_m x cluster_n.
struct GroupedConfig {
  int block_m, block_n, cluster_m, cluster_n;
};

inline int write_error(char* error, size_t len, const char* fmt, ...) {
  if (error != nullptr && len > 0) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(error, len, fmt, args);
    va_end(args);
  }
  return 1;
}

#ifndef CUCO_GROUPED_GEMM_LIB_BUILD

// ---------------------------------------------------------------- filling the arrays on the device

// What one call (one launch) multiplies, fixed for a shape: the sizes come from `counts` on the
// device when fill() runs. The rows are sorted by expert: expert x's rows follow those of experts
// 0 .. x-1, and it has sum over s < sources of counts[s * source_stride + x] of them. The call's
// groups are experts first .. first + groups - 1 (of `experts`, the range the rows cover); group
// i takes expert x = first + i's rows inside the call's row range, which is every row, or with
// chunks > 0 chunk `chunk` of the total: [cut(chunk), cut(chunk + 1)), cut(q) = total * q / chunks
// rounded up to a multiple of tile_rows (at most total). Rows outside give m_i = 0.
struct FillSpec {
  const int* counts;
  int32_t sources, source_stride, experts, first, groups;
  int32_t chunk, chunks, tile_rows;
  int32_t n, k;
  const char* a;      // a_i = a + (its first row) * a_row
  int64_t a_row;      // bytes between rows
  const char* b;      // b_i = b + x * b_expert
  int64_t b_expert;
  char* d;            // d_i = d + (its first row) * d_row
  int64_t d_row;
  cuco_grouped_gemm_problems out;  // the arrays this call's launch reads (GroupedProblems sets it)
};

constexpr int kFillThreads = 1024;  // one thread per expert: experts <= 1024

__device__ inline long long fill_cut(long long total, int q, int chunks, int tile) {
  if (q >= chunks) return total;
  const long long at = (total * q / chunks + tile - 1) / tile * tile;
  return at < total ? at : total;
}

// Block c fills call c's arrays from the counts: a scan of the experts' rows in shared memory.
static __global__ void __launch_bounds__(kFillThreads) fill_problems(const FillSpec* specs) {
  __shared__ long long scan[kFillThreads];
  const FillSpec& s = specs[blockIdx.x];
  const int t = threadIdx.x;
  long long rows = 0;
  if (t < s.experts)
    for (int src = 0; src < s.sources; ++src) rows += s.counts[(size_t)src * s.source_stride + t];
  scan[t] = rows;
  __syncthreads();
  for (int step = 1; step < kFillThreads; step *= 2) {  // inclusive scan
    const long long add = t >= step ? scan[t - step] : 0;
    __syncthreads();
    scan[t] += add;
    __syncthreads();
  }
  const long long total = s.experts > 0 ? scan[s.experts - 1] : 0;
  const long long lo = s.chunks > 0 ? fill_cut(total, s.chunk, s.chunks, s.tile_rows) : 0;
  const long long hi = s.chunks > 0 ? fill_cut(total, s.chunk + 1, s.chunks, s.tile_rows) : total;
  const int i = t - s.first;
  if (i < 0 || i >= s.groups) return;
  const long long start = scan[t] - rows;
  long long a0 = start > lo ? start : lo;
  const long long b0 = start + rows < hi ? start + rows : hi;
  const long long m = b0 > a0 ? b0 - a0 : 0;
  if (m == 0) a0 = lo;  // no tile reads it; a valid address all the same
  const cuco_grouped_gemm_problems& o = s.out;
  o.shapes[3 * i] = (int32_t)m;
  o.shapes[3 * i + 1] = s.n;
  o.shapes[3 * i + 2] = s.k;
  o.strides[i] = s.k;
  o.strides[o.groups + i] = s.n;
  o.strides[2 * o.groups + i] = s.n;
  o.a[i] = s.a + a0 * s.a_row;
  o.b[i] = s.b + (long long)t * s.b_expert;
  o.d[i] = s.d + a0 * s.d_row;
}

// The device arrays of `calls` launches of up to `max_groups` groups each, in one allocation, and
// the FillSpec of each call (host copy, then uploaded once): fill() is one tiny kernel that sets
// every call's sizes and pointers from the counts, on the stream, with no host sync.
class GroupedProblems {
 public:
  int init(int calls, int max_groups, char* error, size_t error_len) {
    release();
    if (calls <= 0 || max_groups <= 0 || max_groups > kFillThreads)
      return write_error(error, error_len, "grouped GEMM problems: %d calls of %d groups (1..%d groups)", calls,
                         max_groups, kFillThreads);
    calls_ = calls;
    max_groups_ = max_groups;
    const size_t bytes = (size_t)calls * call_bytes() + (size_t)calls * sizeof(FillSpec);
    cudaError_t rc = cudaMalloc(&block_, bytes);
    if (rc != cudaSuccess) {
      block_ = nullptr;
      return write_error(error, error_len, "grouped GEMM problems: cudaMalloc of %zu bytes: %s", bytes,
                         cudaGetErrorString(rc));
    }
    specs_ = new (std::nothrow) FillSpec[calls]();
    if (specs_ == nullptr) return write_error(error, error_len, "grouped GEMM problems: out of host memory");
    return 0;
  }

  int calls() const { return calls_; }

  // Call c's spec, to set before upload(); its `out` is set by upload().
  FillSpec& spec(int c) { return specs_[c]; }

  // The arrays call c's launch reads (its spec's group count).
  cuco_grouped_gemm_problems problems(int c) const {
    char* base = (char*)block_ + (size_t)c * call_bytes();
    const size_t g = (size_t)max_groups_;
    cuco_grouped_gemm_problems p = {};
    p.groups = specs_[c].groups;
    p.strides = (int64_t*)base;                         // 3g int64
    p.a = (const void**)(base + 3 * g * 8);             // g pointers each
    p.b = (const void**)(base + 4 * g * 8);
    p.d = (void**)(base + 5 * g * 8);
    p.shapes = (int32_t*)(base + 6 * g * 8);            // 3g int32
    p.host_shapes = nullptr;
    return p;
  }

  // The specs to the device (once their fields are set; again after any change), on `stream`.
  // A spec whose groups exceed max_groups or whose experts exceed 1024 is refused.
  cudaError_t upload(cudaStream_t stream) {
    for (int c = 0; c < calls_; ++c) {
      FillSpec& s = specs_[c];
      if (s.groups < 0 || s.groups > max_groups_ || s.experts > kFillThreads || s.first < 0 ||
          s.first + s.groups > s.experts)
        return cudaErrorInvalidValue;
      s.out = problems(c);
    }
    return cudaMemcpyAsync(device_specs(), specs_, (size_t)calls_ * sizeof(FillSpec), cudaMemcpyHostToDevice, stream);
  }

  // Every call's sizes and pointers from the counts, when `stream` reaches it.
  cudaError_t fill(cudaStream_t stream) {
    if (block_ == nullptr) return cudaErrorInvalidValue;
    fill_problems<<<calls_, kFillThreads, 0, stream>>>(device_specs());
    return cudaGetLastError();
  }

  void release() {
    if (block_ != nullptr) cudaFree(block_);
    delete[] specs_;
    block_ = nullptr;
    specs_ = nullptr;
    calls_ = max_groups_ = 0;
  }

 private:
  size_t call_bytes() const { return (size_t)max_groups_ * (6 * 8 + 3 * 4 + 4); }  // 8-byte aligned
  FillSpec* device_specs() const { return (FillSpec*)((char*)block_ + (size_t)calls_ * call_bytes()); }

  void* block_ = nullptr;
  FillSpec* specs_ = nullptr;
  int calls_ = 0, max_groups_ = 0;
};

// ---------------------------------------------------------------- the library

// The linked library of `k`'s configuration, or nullptr after writing why into `error`.
inline const cuco_grouped_gemm_api* linked_library(const GroupedConfig& k, char* error, size_t error_len) {
  struct Entry {
    GroupedConfig config;
    const cuco_grouped_gemm_api* (*entry)(void);
  };
  const Entry entries[] = {{{128, 128, 1, 1}, cuco_grouped_gemm_128x128_1x1},
                           {{128, 128, 2, 1}, cuco_grouped_gemm_128x128_2x1},
                           {{128, 256, 1, 1}, cuco_grouped_gemm_128x256_1x1},
                           {{128, 256, 1, 2}, cuco_grouped_gemm_128x256_1x2},
                           {{128, 256, 2, 1}, cuco_grouped_gemm_128x256_2x1},
                           {{256, 128, 2, 1}, cuco_grouped_gemm_256x128_2x1}};
  for (const Entry& e : entries) {
    const GroupedConfig& c = e.config;
    if (c.block_m != k.block_m || c.block_n != k.block_n || c.cluster_m != k.cluster_m || c.cluster_n != k.cluster_n)
      continue;
    if (e.entry == nullptr) {  // weak and unresolved: no library of this configuration was loaded
      write_error(error, error_len,
                  "the grouped GEMM library of %dx%d tiles, %dx%d clusters is not linked: cuco's toolchain links "
                  "the configurations a candidate writes as gg::GroupedConfig{%d, %d, %d, %d} with literal numbers",
                  k.block_m, k.block_n, k.cluster_m, k.cluster_n, k.block_m, k.block_n, k.cluster_m, k.cluster_n);
      return nullptr;
    }
    const cuco_grouped_gemm_api* api = e.entry();
    if (api == nullptr || api->abi != CUCO_GROUPED_GEMM_LIB_ABI) {
      write_error(error, error_len, "the grouped GEMM library of %dx%d tiles, %dx%d clusters speaks ABI %d, this header %d",
                  k.block_m, k.block_n, k.cluster_m, k.cluster_n, api ? api->abi : -1, CUCO_GROUPED_GEMM_LIB_ABI);
      return nullptr;
    }
    return api;
  }
  write_error(error, error_len,
              "gg::GroupedConfig{%d, %d, %d, %d} has no grouped GEMM library: tiles 128x128 (clusters 1x1, 2x1), 128x256 (1x1, 1x2, 2x1) or 256x128 (2x1)",
              k.block_m, k.block_n, k.cluster_m, k.cluster_n);
  return nullptr;
}

// The grouped GEMM of one configuration from its library, created once per shape (its workspace
// sized for max_groups) and launched any number of times on one stream.
class GroupedGemmLib {
 public:
  // 0, or a nonzero code after writing a sentence into `error`. sms = 0: every SM.
  int init(const GroupedConfig& config, int max_groups, int sms, char* error, size_t error_len) {
    release();
    const cuco_grouped_gemm_api* api = linked_library(config, error, error_len);
    if (api == nullptr) return 1;
    cuco_grouped_gemm_setup setup = {};
    setup.abi = CUCO_GROUPED_GEMM_LIB_ABI;
    setup.max_groups = max_groups;
    setup.sms = sms;
    void* gemm = nullptr;
    cuco_grouped_gemm_info info = {};
    if (int rc = api->create(&setup, &gemm, &info, error, error_len)) return rc;
    api_ = api;
    gemm_ = gemm;
    info_ = info;
    return 0;
  }

  cudaError_t launch(const cuco_grouped_gemm_problems& problems, cudaStream_t stream) {
    if (gemm_ == nullptr) return cudaErrorInvalidValue;  // launched without a successful init
    return (cudaError_t)api_->launch(gemm_, &problems, stream);
  }

  void release() {
    if (gemm_ != nullptr) api_->release(gemm_);
    gemm_ = nullptr;
    api_ = nullptr;
    info_ = cuco_grouped_gemm_info{};
  }

  int sms() const { return info_.sms; }
  int smem_bytes() const { return info_.smem_bytes; }
  long long workspace_bytes() const { return info_.workspace_bytes; }

 private:
  const cuco_grouped_gemm_api* api_ = nullptr;
  void* gemm_ = nullptr;
  cuco_grouped_gemm_info info_ = {};
};

#endif  // CUCO_GROUPED_GEMM_LIB_BUILD

}  // namespace grouped_gemm
}  // namespace cuco

#endif  // CUCO_GROUPED_GEMM_LIB_H_
