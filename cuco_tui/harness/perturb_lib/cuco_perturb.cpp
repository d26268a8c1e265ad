// cuco_perturb.cpp: the schedule perturber of L2 verification, a small interposer between a
// candidate and the CUDA runtime, NCCL and cuBLAS.
//
// The rank worker loads this library with RTLD_GLOBAL before the candidate. The candidate links
// the shared CUDA runtime (toolchain/nvcc.py), NCCL and cuBLAS, so its calls to the functions
// below bind here first; each is passed on unchanged to the library the candidate depends on
// (found through the candidate's own handle, cuco_perturb_bind). While the harness has the
// perturbation enabled (only around cuco_launch), each such call first asks the policy of
// cuco_perturb.h how long to hold its stream back and, for a nonzero hold, enqueues a host
// function that sleeps that long on the same stream: everything the candidate enqueues after it
// on that stream waits, and the GPU stays free for the other ranks (which matters when ranks
// share a GPU and take turns on it; a spinning kernel would hold the GPU through its turn).
// Holds are skipped on a stream that is being captured into a graph (they would be replayed with
// it) and while a CUDA error is pending (a failing hold must not hide or replace the candidate's).
//
// Built by cuco_tui/toolchain/perturb.py with nvcc as plain C++ (no device code, no runtime
// linked in), once per machine, like the attention library.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>
#include <time.h>

#include <atomic>
#include <cstdint>
#include <mutex>

#include "cuco_perturb.h"

#define CUCO_PERTURB_API extern "C" __attribute__((visibility("default")))

namespace {

std::mutex g_mu;  // guards the policy and the counters below
cuco_perturb_policy g_policy;
std::atomic<bool> g_enabled{false};
uint64_t g_skipped = 0;  // holds not enqueued: stream capturing, or a CUDA error pending
uint64_t g_errors = 0;   // holds the runtime refused
void* g_handle = nullptr;  // the candidate's dlopen handle: its dependencies are the real libraries
thread_local bool t_inside = false;  // in a call of ours into a library: no holds from within it

// While a forwarded call runs: a library that calls another interposed function (cuBLAS calling
// cuBLASLt, say) gets it passed on as is, so one ordering point is held back once.
struct Inside {
  bool was;
  Inside() : was(t_inside) { t_inside = true; }
  ~Inside() { t_inside = was; }
};

// The real functions, looked up on first use and again after each bind.
struct Real {
  const char* name;
  std::atomic<void*> fn;
};

void* lookup(const char* name) {
  void* fn = nullptr;
  if (g_handle != nullptr) fn = dlsym(g_handle, name);
  if (fn == nullptr) fn = dlsym(RTLD_NEXT, name);
  if (fn == nullptr) {
    static const char* const kLibraries[] = {"libcudart.so.13", "libnccl.so.2", "libcublas.so.13",
                                             "libcublasLt.so.13"};
    for (const char* lib : kLibraries) {
      void* h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD);
      if (h != nullptr) {
        fn = dlsym(h, name);
        dlclose(h);
      }
      if (fn != nullptr) break;
    }
  }
  return fn;
}

template <typename Fn>
Fn real(Real& r) {
  void* fn = r.fn.load(std::memory_order_acquire);
  if (fn == nullptr) {
    fn = lookup(r.name);
    r.fn.store(fn, std::memory_order_release);
  }
  return reinterpret_cast<Fn>(fn);
}

#define CUCO_REAL(name) Real real_##name{#name, {nullptr}}
CUCO_REAL(cudaMemcpyAsync);
CUCO_REAL(cudaMemcpy2DAsync);
CUCO_REAL(cudaMemcpyPeerAsync);
CUCO_REAL(cudaMemcpyBatchAsync);
CUCO_REAL(cudaMemcpy3DBatchAsync);
CUCO_REAL(cudaMemsetAsync);
CUCO_REAL(cudaEventRecord);
CUCO_REAL(cudaEventRecordWithFlags);
CUCO_REAL(cudaStreamWaitEvent);
CUCO_REAL(cudaLaunchKernel);
CUCO_REAL(__cudaLaunchKernel);
CUCO_REAL(cudaLaunchKernelExC);
CUCO_REAL(cudaLaunchCooperativeKernel);
CUCO_REAL(cudaGraphLaunch);
CUCO_REAL(cudaLaunchHostFunc);
CUCO_REAL(cudaStreamIsCapturing);
CUCO_REAL(cudaPeekAtLastError);
CUCO_REAL(cudaGetLastError);
CUCO_REAL(ncclAllGather);
CUCO_REAL(ncclAllReduce);
CUCO_REAL(ncclReduceScatter);
CUCO_REAL(ncclBroadcast);
CUCO_REAL(ncclReduce);
CUCO_REAL(ncclAlltoAll);
CUCO_REAL(ncclSend);
CUCO_REAL(ncclRecv);
CUCO_REAL(cublasGetStream_v2);
CUCO_REAL(cublasGemmEx);
CUCO_REAL(cublasGemmStridedBatchedEx);
CUCO_REAL(cublasGemmBatchedEx);
CUCO_REAL(cublasLtMatmul);
#undef CUCO_REAL

Real* const kAll[] = {&real_cudaMemcpyAsync, &real_cudaMemcpy2DAsync, &real_cudaMemcpyPeerAsync,
                      &real_cudaMemcpyBatchAsync, &real_cudaMemcpy3DBatchAsync, &real_cudaMemsetAsync, &real_cudaEventRecord, &real_cudaEventRecordWithFlags,
                      &real_cudaStreamWaitEvent, &real_cudaLaunchKernel, &real___cudaLaunchKernel,
                      &real_cudaLaunchKernelExC, &real_cudaLaunchCooperativeKernel, &real_cudaGraphLaunch,
                      &real_cudaLaunchHostFunc, &real_cudaStreamIsCapturing, &real_cudaPeekAtLastError,
                      &real_cudaGetLastError, &real_ncclAllGather, &real_ncclAllReduce, &real_ncclReduceScatter,
                      &real_ncclBroadcast, &real_ncclReduce, &real_ncclAlltoAll, &real_ncclSend, &real_ncclRecv,
                      &real_cublasGetStream_v2, &real_cublasGemmEx, &real_cublasGemmStridedBatchedEx,
                      &real_cublasGemmBatchedEx, &real_cublasLtMatmul};

void CUDART_CB sleep_for(void* us) {
  const uint64_t n = (uint64_t)(uintptr_t)us;
  timespec t{(time_t)(n / 1000000u), (long)(n % 1000000u) * 1000L};
  while (nanosleep(&t, &t) != 0) {
  }
}

// Enqueue a hold of `us` on `stream`; 0 when enqueued, 1 when skipped, -1 when refused.
int hold(cudaStream_t stream, uint32_t us) {
  auto peek = real<cudaError_t (*)(void)>(real_cudaPeekAtLastError);
  auto capturing = real<cudaError_t (*)(cudaStream_t, cudaStreamCaptureStatus*)>(real_cudaStreamIsCapturing);
  auto host_func = real<cudaError_t (*)(cudaStream_t, cudaHostFn_t, void*)>(real_cudaLaunchHostFunc);
  auto clear = real<cudaError_t (*)(void)>(real_cudaGetLastError);
  if (peek == nullptr || capturing == nullptr || host_func == nullptr || clear == nullptr) return -1;
  t_inside = true;
  int rc = 1;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (peek() == cudaSuccess) {
    if (capturing(stream, &status) != cudaSuccess) {
      clear();  // e.g. the legacy stream while another stream captures: leave it alone
    } else if (status == cudaStreamCaptureStatusNone) {
      rc = host_func(stream, sleep_for, (void*)(uintptr_t)us) == cudaSuccess ? 0 : -1;
      if (rc != 0) clear();
    }
  }
  t_inside = false;
  return rc;
}

// Before a candidate's ordering point of class `op` on `stream`.
void before(cudaStream_t stream, int op) {
  if (!g_enabled.load(std::memory_order_acquire) || t_inside) return;
  std::lock_guard<std::mutex> lock(g_mu);
  const uint32_t us = cuco_perturb_draw(&g_policy, op);
  if (us == 0) return;
  const int rc = hold(stream, us);
  if (rc > 0) ++g_skipped;
  if (rc < 0) ++g_errors;
}

cudaStream_t stream_of(cublasHandle_t handle) {
  auto get = real<cublasStatus_t (*)(cublasHandle_t, cudaStream_t*)>(real_cublasGetStream_v2);
  cudaStream_t s = nullptr;
  if (get == nullptr || get(handle, &s) != CUBLAS_STATUS_SUCCESS) return nullptr;
  return s;
}

}  // namespace

// ---------------------------------------------------------------- the harness's C API

typedef struct cuco_perturb_stats {
  uint64_t calls;       // ordering points seen while enabled
  uint64_t delayed;     // ... held back
  uint64_t delayed_us;  // the holds, summed
  uint64_t skipped;     // holds not enqueued (stream capturing, CUDA error pending)
  uint64_t errors;      // holds the runtime refused
  uint64_t per_class[CUCO_OP_CLASSES];
} cuco_perturb_stats;

CUCO_PERTURB_API int cuco_perturb_version(void) { return CUCO_PERTURB_VERSION; }

// Where the real functions are: the dlopen handle of the candidate (its dependencies). 0: done.
CUCO_PERTURB_API int cuco_perturb_bind(void* handle) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_handle = handle;
  for (Real* r : kAll) r->fn.store(nullptr, std::memory_order_release);
  return handle != nullptr ? 0 : -1;
}

// A new round: the perturbation of `seed` for this rank, with counters and budget reset.
CUCO_PERTURB_API void cuco_perturb_configure(uint64_t seed, int rank, int world, uint32_t unit_us) {
  std::lock_guard<std::mutex> lock(g_mu);
  cuco_perturb_init(&g_policy, seed, rank, world, unit_us);
  g_skipped = g_errors = 0;
}

CUCO_PERTURB_API void cuco_perturb_enable(int on) { g_enabled.store(on != 0, std::memory_order_release); }

// The policy's next draw for class `op`, without enqueueing anything (tests, and the emulator's twin).
CUCO_PERTURB_API uint32_t cuco_perturb_draw_next(int op) {
  std::lock_guard<std::mutex> lock(g_mu);
  return cuco_perturb_draw(&g_policy, op);
}

// Hold `stream` back `us` microseconds (the late start of a rank). 0: enqueued.
CUCO_PERTURB_API int cuco_perturb_hold(void* stream, uint32_t us) { return hold((cudaStream_t)stream, us); }

CUCO_PERTURB_API uint32_t cuco_perturb_start_delay_us(void) {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_policy.start_delay_us;
}

CUCO_PERTURB_API int cuco_perturb_target(void) {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_policy.target;
}

CUCO_PERTURB_API const char* cuco_perturb_kind(void) {
  std::lock_guard<std::mutex> lock(g_mu);
  return cuco_perturb_kind_name(g_policy.kind);
}

CUCO_PERTURB_API int cuco_perturb_describe_into(char* buf, int len) {
  std::lock_guard<std::mutex> lock(g_mu);
  return cuco_perturb_describe(&g_policy, buf, len > 0 ? (size_t)len : 0);
}

CUCO_PERTURB_API void cuco_perturb_get_stats(cuco_perturb_stats* out) {
  std::lock_guard<std::mutex> lock(g_mu);
  out->calls = g_policy.calls;
  out->delayed = g_policy.delayed;
  out->delayed_us = g_policy.delayed_us;
  out->skipped = g_skipped;
  out->errors = g_errors;
  for (int i = 0; i < CUCO_OP_CLASSES; ++i) out->per_class[i] = g_policy.per_class[i];
}

// ---------------------------------------------------------------- the interposed calls

// The body of every interposed function after its hold: the real one, called as it was called.
#define CUCO_FORWARD(type, fail, name, params, args) \
  auto fn = real<type(*) params>(real_##name);      \
  if (fn == nullptr) return fail;                   \
  Inside inside;                                    \
  return fn args

CUCO_PERTURB_API cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                                             cudaStream_t stream) {
  before(stream, CUCO_OP_COPY);
  CUCO_FORWARD(cudaError_t, cudaErrorSymbolNotFound, cudaMemcpyAsync,
               (void*, const void*, size_t, cudaMemcpyKind, cudaStream_t), (dst, src, count, kind, stream));
}

CUCO_PERTURB_API cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                               size_t height, cudaMemcpyKind kind, cudaStream_t stream) {
  before(stream, CUCO_OP_COPY);
  CUCO_FORWARD(cudaError_t, cudaErrorSymbolNotFound, cudaMemcpy2DAsync,
               (void*, size_t, const void*, size_t, size_t, size_t, cudaMemcpyKind, cudaStream_t),
               (dst, dpitch, src, spitch, width, height, kind, stream));
}

CUCO_PERTURB_API cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device,
                                                 size_t count, cudaStream_t stream) {
  before(stream, CUCO_OP_COPY);
  CUCO_FORWARD(cudaError_t, cudaErrorSymbolNotFound, cudaMemcpyPeerAsync,
               (void*, int, const void*, int, size_t, cudaStream_t), (dst, dst_device, src, src_device, count, stream));
}

// The runtime's copy-engine mover (cuco_arrival.cuh, ce_copy) asks for the copy engines with a
// batch of one copy; its copies are held like any other.
CUCO_PERTURB_API cudaError_t cudaMemcpyBatchAsync(void* const* dsts, const void* const* srcs, const size_t* sizes,
                                                  size_t count, cudaMemcpyAttributes* attrs, size_t* attrs_idxs,
                                                  size_t num_attrs, cudaStream_t stream) {
  before(stream, CUCO_OP_COPY);
  CUCO_FORWARD(cudaError_t, cudaErrorSymbolNotFound, cudaMemcpyBatchAsync,
               (void* const*, const void* const*, const size_t*, size_t, cudaMemcpyAttributes*, size_t*, size_t,
                cudaStream_t),
               (dsts, srcs, sizes, count, attrs, attrs_idxs, num_attrs, stream));
}

// Its K-slice copies (ce_copy_2d) are a batch of one 2D copy.
CUCO_PERTURB_API cudaError_t cudaMemcpy3DBatchAsync(size_t num_ops, cudaMemcpy3DBatchOp* ops, unsigned long long flags,
                                                    cudaStream_t stream) {
  before(stream, CUCO_OP_COPY);
  CUCO_FORWARD(cudaError_t, cudaErrorSymbolNotFound, cudaMemcpy3DBatchAsync,
               (size_t, cudaMemcpy3DBatchOp*, unsigned long long, cudaStream_t), (num_ops, ops, flags, stream));
}

CUCO_PERTURB_API cudaError_t cudaMemsetAsync(void* dst, int value, size_t count, cudaStream_t stream) {
  before(stream, CUCO_OP_COPY);
  CUCO_FORWARD(cudaError_t, cudaErrorSymbolNotFound, cudaMemsetAsync, (void*, int, size_t, cudaStream_t),
               (dst, value, count, stream));
}

CUCO_PERTURB_API cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  before(stream, CUCO_OP_EVENT);
  CUCO_FORWARD(cudaError_t, cudaErrorSymbolNotFound, cudaEventRecord, (cudaEvent_t, cudaStream_t), (event, stream));
}

CUCO_PERTURB_API cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags) {
  before(stream, CUCO_OP_EVENT);
  CUCO_FORWARD(cudaError_t, cudaErrorSymbolNotFound, cudaEventRecordWithFlags,
               (cudaEvent_t, cudaStream_t, unsigned int), (event, stream, flags));
}

CUCO_PERTURB_API cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  before(stream, CUCO_OP_EVENT);
  CUCO_FORWARD(cudaError_t, cudaErrorSymbolNotFound, cudaStreamWaitEvent, (cudaStream_t, cudaEvent_t, unsigned int),
               (stream, event, flags));
}

CUCO_PERTURB_API cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args, size_t smem,
                                              cudaStream_t stream) {
  before(stream, CUCO_OP_KERNEL);
  CUCO_FORWARD(cudaError_t, cudaErrorSymbolNotFound, cudaLaunchKernel,
               (const void*, dim3, dim3, void**, size_t, cudaStream_t), (func, grid, block, args, smem, stream));
}

// What nvcc 13's launch stubs (kernel<<<...>>>) call.
CUCO_PERTURB_API cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void** args, size_t smem,
                                                cudaStream_t stream) {
  before(stream, CUCO_OP_KERNEL);
  CUCO_FORWARD(cudaError_t, cudaErrorSymbolNotFound, __cudaLaunchKernel,
               (cudaKernel_t, dim3, dim3, void**, size_t, cudaStream_t), (kernel, grid, block, args, smem, stream));
}

CUCO_PERTURB_API cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func, void** args) {
  if (config != nullptr) before(config->stream, CUCO_OP_KERNEL);
  CUCO_FORWARD(cudaError_t, cudaErrorSymbolNotFound, cudaLaunchKernelExC,
               (const cudaLaunchConfig_t*, const void*, void**), (config, func, args));
}

CUCO_PERTURB_API cudaError_t cudaLaunchCooperativeKernel(const void* func, dim3 grid, dim3 block, void** args,
                                                         size_t smem, cudaStream_t stream) {
  before(stream, CUCO_OP_KERNEL);
  CUCO_FORWARD(cudaError_t, cudaErrorSymbolNotFound, cudaLaunchCooperativeKernel,
               (const void*, dim3, dim3, void**, size_t, cudaStream_t), (func, grid, block, args, smem, stream));
}

CUCO_PERTURB_API cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  before(stream, CUCO_OP_KERNEL);
  CUCO_FORWARD(cudaError_t, cudaErrorSymbolNotFound, cudaGraphLaunch, (cudaGraphExec_t, cudaStream_t), (exec, stream));
}

CUCO_PERTURB_API ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t type,
                                            ncclComm_t comm, cudaStream_t stream) {
  before(stream, CUCO_OP_NCCL);
  CUCO_FORWARD(ncclResult_t, ncclSystemError, ncclAllGather,
               (const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t),
               (send, recv, count, type, comm, stream));
}

CUCO_PERTURB_API ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                                            ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  before(stream, CUCO_OP_NCCL);
  CUCO_FORWARD(ncclResult_t, ncclSystemError, ncclAllReduce,
               (const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t),
               (send, recv, count, type, op, comm, stream));
}

CUCO_PERTURB_API ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t type,
                                                ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  before(stream, CUCO_OP_NCCL);
  CUCO_FORWARD(ncclResult_t, ncclSystemError, ncclReduceScatter,
               (const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t),
               (send, recv, count, type, op, comm, stream));
}

CUCO_PERTURB_API ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type, int root,
                                            ncclComm_t comm, cudaStream_t stream) {
  before(stream, CUCO_OP_NCCL);
  CUCO_FORWARD(ncclResult_t, ncclSystemError, ncclBroadcast,
               (const void*, void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t),
               (send, recv, count, type, root, comm, stream));
}

CUCO_PERTURB_API ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                                         ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  before(stream, CUCO_OP_NCCL);
  CUCO_FORWARD(ncclResult_t, ncclSystemError, ncclReduce,
               (const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t, cudaStream_t),
               (send, recv, count, type, op, root, comm, stream));
}

CUCO_PERTURB_API ncclResult_t ncclAlltoAll(const void* send, void* recv, size_t count, ncclDataType_t type,
                                           ncclComm_t comm, cudaStream_t stream) {
  before(stream, CUCO_OP_NCCL);
  CUCO_FORWARD(ncclResult_t, ncclSystemError, ncclAlltoAll,
               (const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t),
               (send, recv, count, type, comm, stream));
}

CUCO_PERTURB_API ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                                       cudaStream_t stream) {
  before(stream, CUCO_OP_NCCL);
  CUCO_FORWARD(ncclResult_t, ncclSystemError, ncclSend,
               (const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t),
               (send, count, type, peer, comm, stream));
}

CUCO_PERTURB_API ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                                       cudaStream_t stream) {
  before(stream, CUCO_OP_NCCL);
  CUCO_FORWARD(ncclResult_t, ncclSystemError, ncclRecv, (void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t),
               (recv, count, type, peer, comm, stream));
}

CUCO_PERTURB_API cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m,
                                             int n, int k, const void* alpha, const void* a, cudaDataType at, int lda,
                                             const void* b, cudaDataType bt, int ldb, const void* beta, void* c,
                                             cudaDataType ct, int ldc, cublasComputeType_t compute,
                                             cublasGemmAlgo_t algo) {
  if (g_enabled.load(std::memory_order_acquire)) before(stream_of(handle), CUCO_OP_GEMM);
  CUCO_FORWARD(cublasStatus_t, CUBLAS_STATUS_NOT_INITIALIZED, cublasGemmEx,
               (cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*, const void*,
                cudaDataType, int, const void*, cudaDataType, int, const void*, void*, cudaDataType, int,
                cublasComputeType_t, cublasGemmAlgo_t),
               (handle, ta, tb, m, n, k, alpha, a, at, lda, b, bt, ldb, beta, c, ct, ldc, compute, algo));
}

CUCO_PERTURB_API cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void* alpha,
    const void* a, cudaDataType at, int lda, long long sa, const void* b, cudaDataType bt, int ldb, long long sb,
    const void* beta, void* c, cudaDataType ct, int ldc, long long sc, int batch, cublasComputeType_t compute,
    cublasGemmAlgo_t algo) {
  if (g_enabled.load(std::memory_order_acquire)) before(stream_of(handle), CUCO_OP_GEMM);
  CUCO_FORWARD(cublasStatus_t, CUBLAS_STATUS_NOT_INITIALIZED, cublasGemmStridedBatchedEx,
               (cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*, const void*,
                cudaDataType, int, long long, const void*, cudaDataType, int, long long, const void*, void*,
                cudaDataType, int, long long, int, cublasComputeType_t, cublasGemmAlgo_t),
               (handle, ta, tb, m, n, k, alpha, a, at, lda, sa, b, bt, ldb, sb, beta, c, ct, ldc, sc, batch, compute,
                algo));
}

CUCO_PERTURB_API cublasStatus_t cublasGemmBatchedEx(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb,
                                                    int m, int n, int k, const void* alpha, const void* const a[],
                                                    cudaDataType at, int lda, const void* const b[], cudaDataType bt,
                                                    int ldb, const void* beta, void* const c[], cudaDataType ct,
                                                    int ldc, int batch, cublasComputeType_t compute,
                                                    cublasGemmAlgo_t algo) {
  if (g_enabled.load(std::memory_order_acquire)) before(stream_of(handle), CUCO_OP_GEMM);
  CUCO_FORWARD(cublasStatus_t, CUBLAS_STATUS_NOT_INITIALIZED, cublasGemmBatchedEx,
               (cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*, const void* const*,
                cudaDataType, int, const void* const*, cudaDataType, int, const void*, void* const*, cudaDataType, int,
                int, cublasComputeType_t, cublasGemmAlgo_t),
               (handle, ta, tb, m, n, k, alpha, a, at, lda, b, bt, ldb, beta, c, ct, ldc, batch, compute, algo));
}

CUCO_PERTURB_API cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                                               const void* a, cublasLtMatrixLayout_t adesc, const void* b,
                                               cublasLtMatrixLayout_t bdesc, const void* beta, const void* c,
                                               cublasLtMatrixLayout_t cdesc, void* d, cublasLtMatrixLayout_t ddesc,
                                               const cublasLtMatmulAlgo_t* algo, void* workspace, size_t workspace_bytes,
                                               cudaStream_t stream) {
  before(stream, CUCO_OP_GEMM);
  CUCO_FORWARD(cublasStatus_t, CUBLAS_STATUS_NOT_INITIALIZED, cublasLtMatmul,
               (cublasLtHandle_t, cublasLtMatmulDesc_t, const void*, const void*, cublasLtMatrixLayout_t, const void*,
                cublasLtMatrixLayout_t, const void*, const void*, cublasLtMatrixLayout_t, void*,
                cublasLtMatrixLayout_t, const cublasLtMatmulAlgo_t*, void*, size_t, cudaStream_t),
               (handle, desc, alpha, a, adesc, b, bdesc, beta, c, cdesc, d, ddesc, algo, workspace, workspace_bytes,
                stream));
}
