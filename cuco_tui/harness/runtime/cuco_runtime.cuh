// cuco_runtime.cuh: what a candidate kernel gets from the cuco harness.
//
//  - cuBLAS and NCCL, included here; the NCCL device API, cooperative groups and libcu++'s
//    <cuda/atomic> when the candidate names them (below);
//  - flag signals with release/acquire order at system scope: store_release, atomic_add_release,
//    load_acquire (what cuda::atomic_ref<T, cuda::thread_scope_system> does, without its header);
//  - the rank context (cuco_ctx, see cuco_abi.h): rank, world size, device, the harness's
//    input and output buffers, the problem dimensions, a fresh NCCL unique id;
//  - host helpers: a NCCL communicator from that id, NCCL device-API (LSA) setup with
//    symmetric windows and a device communicator, CUDA-IPC peer pointers;
//  - trace points: waits that record, per block, where they wait, for what and in which
//    function, in pinned host memory the harness reads while a kernel hangs. The deadlock report
//    finds from the function where the candidate launched the kernel that waits; name a wait
//    where the host launches it, with CUCO_WAIT_SITE("arrived") passed into the kernel, and the
//    report also says which handshake stalled.
//
// Error handling: host helpers return 0 or a nonzero code after writing a sentence into
// ctx->error. The CUCO_TRY_* macros are the one place where a macro returns from the
// caller; they exist so that every CUDA, NCCL and cuBLAS call in a candidate is checked.
#ifndef CUCO_RUNTIME_CUH_
#define CUCO_RUNTIME_CUH_

#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cublas_v2.h>
#include <nccl.h>
#ifdef CUCO_WITH_DRIVER_API  // the driver API (stream memory operations): named by the candidate
#include <cuda.h>
#endif

// Each of <cuda/atomic>, <cooperative_groups.h> and <nccl_device.h> pulls in libcu++ and costs
// about 2.5 s of nvcc per compile (a 2-core machine: 3 s without them, 5.5 s with any), more than
// half of a small candidate's build. So they come in only for a candidate that names what they
// declare: cuco's toolchain defines CUCO_WITH_LIBCUDACXX, CUCO_WITH_COOPERATIVE_GROUPS and
// CUCO_WITH_NCCL_DEVICE from the source (toolchain/nvcc.py, runtime_defines); a candidate may
// also define them, or include the headers itself, before including this one.
#if defined(CUCO_WITH_LIBCUDACXX) || defined(CUCO_WITH_NCCL_DEVICE)
#include <cuda/atomic>
#endif
#ifdef CUCO_WITH_COOPERATIVE_GROUPS
#include <cooperative_groups.h>
#endif
#ifdef CUCO_WITH_NCCL_DEVICE
#include <nccl_device.h>
#endif

#include <cfloat>
#include <climits>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <type_traits>

#include "cuco_abi.h"

#define CUCO_EXPORT extern "C" __attribute__((visibility("default")))

// The wait site of a trace point: the source line, so a report can point at it. (The function
// that waits is recorded too, without being passed: each wait's last parameter defaults to
// __builtin_FUNCTION(), the name of the function that calls it.)
#define CUCO_SITE __LINE__

// A named wait site, built on the host where the wait is launched and passed into the kernel
// (a cuco::WaitSite parameter), so that a hang report names the handshake and its launch line:
//   wait_flag<<<1, 1, 0, stream>>>(flags, peer, epoch, trace, CUCO_WAIT_SITE("arrived"));
#define CUCO_WAIT_SITE(label) ::cuco::WaitSite((label), __LINE__)

namespace cuco {

constexpr int kMaxPeers = 64;

// ---------------------------------------------------------------- errors (host)

inline int fail(cuco_ctx* ctx, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  vsnprintf(ctx->error, CUCO_ERROR_LEN, fmt, args);
  va_end(args);
  return 1;
}

inline int check_cuda(cuco_ctx* ctx, cudaError_t e, const char* what, int line) {
  if (e == cudaSuccess) return 0;
  return fail(ctx, "line %d: %s failed: %s (%s)", line, what, cudaGetErrorString(e), cudaGetErrorName(e));
}

inline int check_nccl(cuco_ctx* ctx, ncclResult_t r, const char* what, int line) {
  if (r == ncclSuccess || r == ncclInProgress) return 0;
  return fail(ctx, "line %d: %s failed: %s", line, what, ncclGetErrorString(r));
}

#define CUCO_TRY_CUDA(ctx, expr) \
  do { if (int cuco_rc_ = ::cuco::check_cuda((ctx), (expr), #expr, __LINE__)) return cuco_rc_; } while (0)
#define CUCO_TRY_NCCL(ctx, expr) \
  do { if (int cuco_rc_ = ::cuco::check_nccl((ctx), (expr), #expr, __LINE__)) return cuco_rc_; } while (0)
#define CUCO_TRY(expr) \
  do { if (int cuco_rc_ = (expr)) return cuco_rc_; } while (0)

inline int check_cublas(cuco_ctx* ctx, cublasStatus_t s, const char* what, int line) {
  if (s == CUBLAS_STATUS_SUCCESS) return 0;
  return fail(ctx, "line %d: %s failed: %s", line, what, cublasGetStatusString(s));
}
#define CUCO_TRY_CUBLAS(ctx, expr) \
  do { if (int cuco_rc_ = ::cuco::check_cublas((ctx), (expr), #expr, __LINE__)) return cuco_rc_; } while (0)

// ---------------------------------------------------------------- rank context (host)

// The problem dimension called `name` (e.g. "M"), or -1 when the workload has none.
inline int64_t dim(const cuco_ctx* ctx, const char* name) {
  for (int i = 0; i < ctx->n_dims; ++i)
    if (strncmp(ctx->dim_names[i], name, CUCO_NAME_LEN) == 0) return ctx->dims[i];
  return -1;
}

inline const cuco_buffer* find_buffer(const cuco_buffer* list, int n, const char* name) {
  for (int i = 0; i < n; ++i)
    if (strncmp(list[i].name, name, CUCO_NAME_LEN) == 0) return &list[i];
  return nullptr;
}
inline const cuco_buffer* input(const cuco_ctx* ctx, const char* name) {
  return find_buffer(ctx->inputs, ctx->n_inputs, name);
}
inline const cuco_buffer* output(const cuco_ctx* ctx, const char* name) {
  return find_buffer(ctx->outputs, ctx->n_outputs, name);
}

// ---------------------------------------------------------------- NCCL communicator (host)

// The candidate's own communicator over the harness's group, from ctx->nccl_id.
inline int comm_init(cuco_ctx* ctx, ncclComm_t* comm) {
  CUCO_TRY_CUDA(ctx, cudaSetDevice(ctx->device));
  ncclUniqueId id;
  static_assert(sizeof(id.internal) == CUCO_NCCL_ID_BYTES, "NCCL unique id size changed");
  memcpy(id.internal, ctx->nccl_id, CUCO_NCCL_ID_BYTES);
  CUCO_TRY_NCCL(ctx, ncclCommInitRank(comm, ctx->world, id, ctx->rank));
  return 0;
}

// ---------------------------------------------------------------- NCCL device API: LSA (host)

// Memory every rank of the LSA team can load from and store to, registered as a
// symmetric window. Collective: every rank calls it with the same size.
struct SymmetricBuffer {
  void* ptr = nullptr;
  ncclWindow_t window = nullptr;
  size_t bytes = 0;
};

inline int symmetric_alloc(cuco_ctx* ctx, ncclComm_t comm, size_t bytes, SymmetricBuffer* out) {
  out->bytes = bytes;
  CUCO_TRY_NCCL(ctx, ncclMemAlloc(&out->ptr, bytes));
  CUCO_TRY_NCCL(ctx, ncclCommWindowRegister(comm, out->ptr, bytes, &out->window, NCCL_WIN_COLL_SYMMETRIC));
  return 0;
}

inline int symmetric_free(cuco_ctx* ctx, ncclComm_t comm, SymmetricBuffer* buf) {
  if (buf->window) CUCO_TRY_NCCL(ctx, ncclCommWindowDeregister(comm, buf->window));
  if (buf->ptr) CUCO_TRY_NCCL(ctx, ncclMemFree(buf->ptr));
  *buf = SymmetricBuffer{};
  return 0;
}

#ifdef CUCO_WITH_NCCL_DEVICE
// A device communicator with `lsa_barriers` LSA barriers (one per block that syncs).
// NCCL 2.28 has no requirements initializer: value-initialize, as its examples do.
inline int lsa_devcomm_create(cuco_ctx* ctx, ncclComm_t comm, int lsa_barriers, ncclDevComm* out) {
  ncclDevCommRequirements_t reqs = {};
  reqs.lsaBarrierCount = lsa_barriers;
  CUCO_TRY_NCCL(ctx, ncclDevCommCreate(comm, &reqs, out));
  if (out->lsaSize != ctx->world)
    return fail(ctx, "the LSA team has %d ranks but the group has %d: device-initiated load/store "
                "needs every rank on one NVLink domain", out->lsaSize, ctx->world);
  return 0;
}

inline int lsa_devcomm_destroy(cuco_ctx* ctx, ncclComm_t comm, ncclDevComm* dc) {
  CUCO_TRY_NCCL(ctx, ncclDevCommDestroy(comm, dc));
  return 0;
}
#endif  // CUCO_WITH_NCCL_DEVICE

// ---------------------------------------------------------------- CUDA-IPC peer pointers (host)

// A buffer on every rank, with pointers to all ranks' copies (peers[rank] is the local one).
// Handles travel through one NCCL all-gather on the candidate's communicator. Collective.
struct PeerBuffers {
  void* local = nullptr;
  void* peers[kMaxPeers] = {};
  size_t bytes = 0;
  int rank = 0;
  int world = 0;
};

inline int peer_alloc(cuco_ctx* ctx, ncclComm_t comm, size_t bytes, cudaStream_t stream, PeerBuffers* out) {
  if (ctx->world > kMaxPeers) return fail(ctx, "peer_alloc supports at most %d ranks", kMaxPeers);
  out->bytes = bytes;
  out->rank = ctx->rank;
  out->world = ctx->world;
  CUCO_TRY_CUDA(ctx, cudaMalloc(&out->local, bytes));
  cudaIpcMemHandle_t mine;
  CUCO_TRY_CUDA(ctx, cudaIpcGetMemHandle(&mine, out->local));
  const size_t hbytes = sizeof(cudaIpcMemHandle_t);
  char* dev_handles = nullptr;
  CUCO_TRY_CUDA(ctx, cudaMalloc(&dev_handles, hbytes * ctx->world));
  CUCO_TRY_CUDA(ctx, cudaMemcpyAsync(dev_handles + hbytes * ctx->rank, &mine, hbytes, cudaMemcpyHostToDevice, stream));
  CUCO_TRY_NCCL(ctx, ncclAllGather(dev_handles + hbytes * ctx->rank, dev_handles, hbytes, ncclUint8, comm, stream));
  cudaIpcMemHandle_t all[kMaxPeers];
  CUCO_TRY_CUDA(ctx, cudaMemcpyAsync(all, dev_handles, hbytes * ctx->world, cudaMemcpyDeviceToHost, stream));
  CUCO_TRY_CUDA(ctx, cudaStreamSynchronize(stream));
  CUCO_TRY_CUDA(ctx, cudaFree(dev_handles));
  for (int p = 0; p < ctx->world; ++p) {
    if (p == ctx->rank) { out->peers[p] = out->local; continue; }
    CUCO_TRY_CUDA(ctx, cudaIpcOpenMemHandle(&out->peers[p], all[p], cudaIpcMemLazyEnablePeerAccess));
  }
  return 0;
}

inline int peer_free(cuco_ctx* ctx, PeerBuffers* buf) {
  for (int p = 0; p < buf->world; ++p)
    if (p != buf->rank && buf->peers[p]) CUCO_TRY_CUDA(ctx, cudaIpcCloseMemHandle(buf->peers[p]));
  if (buf->local) CUCO_TRY_CUDA(ctx, cudaFree(buf->local));
  *buf = PeerBuffers{};
  return 0;
}

// ---------------------------------------------------------------- trace points (device)

// Passed by value into kernels: where this rank's wait slots live.
struct Trace {
  cuco_wait_slot* slots;
  int n;
};

inline Trace trace_of(const cuco_ctx* ctx) { return Trace{ctx->trace, ctx->trace_slots}; }

// Where a wait was launched and what it waits for, by name: a label of up to 23 characters
// (longer ones are cut) and the host line. Passed by value into kernels (28 bytes).
struct WaitSite {
  int line;
  char label[CUCO_WAIT_LABEL_LEN];
  __host__ __device__ WaitSite(const char* name, int at) : line(at), label{} {
    for (int i = 0; name != nullptr && i < CUCO_WAIT_LABEL_LEN - 1 && name[i] != 0; ++i) label[i] = name[i];
  }
};

#ifdef __CUDACC__

// ---------------------------------------------------------------- flag signals (device)

// A flag another rank (or the host) reads: stored, added to or loaded with release/acquire order
// at system scope, on 4- or 8-byte integers, in any memory a generic address reaches (own, peer,
// mapped host). The PTX is what cuda::atomic_ref<T, cuda::thread_scope_system> emits on sm_70+;
// where no device code is compiled (the CPU emulator), the compiler's atomics stand in.
template <typename T, typename V>
__device__ inline void store_release(T* flag, V value) {
  static_assert(std::is_integral<std::remove_cv_t<T>>::value && (sizeof(T) == 4 || sizeof(T) == 8),
                "a flag is a 4- or 8-byte integer");
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(T) == 8)
    asm volatile("st.release.sys.b64 [%0], %1;" ::"l"(flag), "l"((unsigned long long)value) : "memory");
  else
    asm volatile("st.release.sys.b32 [%0], %1;" ::"l"(flag), "r"((unsigned)value) : "memory");
#else
  __atomic_store_n(flag, (T)value, __ATOMIC_RELEASE);
#ifdef CUCO_FLAG_STORED
  CUCO_FLAG_STORED(flag);  // the CPU emulator: a peer waiting on it may move (emu_progress.h)
#endif
#endif
}

// Returns the value before the addition. (`value` is converted to the flag's type: an epoch of
// uint64_t is unsigned long, a flag of unsigned long long.)
template <typename T, typename V>
__device__ inline T atomic_add_release(T* flag, V value) {
  static_assert(std::is_integral<std::remove_cv_t<T>>::value && (sizeof(T) == 4 || sizeof(T) == 8),
                "a flag is a 4- or 8-byte integer");
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(T) == 8) {
    unsigned long long old;
    asm volatile("atom.add.release.sys.u64 %0, [%1], %2;" : "=l"(old) : "l"(flag), "l"((unsigned long long)value)
                 : "memory");
    return (T)old;
  } else {
    unsigned old;
    asm volatile("atom.add.release.sys.u32 %0, [%1], %2;" : "=r"(old) : "l"(flag), "r"((unsigned)value) : "memory");
    return (T)old;
  }
#else
  const T old = __atomic_fetch_add(flag, (T)value, __ATOMIC_RELEASE);
#ifdef CUCO_FLAG_STORED
  CUCO_FLAG_STORED(flag);
#endif
  return old;
#endif
}

template <typename T>
__device__ inline T load_acquire(const T* flag) {
  static_assert(std::is_integral<std::remove_cv_t<T>>::value && (sizeof(T) == 4 || sizeof(T) == 8),
                "a flag is a 4- or 8-byte integer");
#if defined(__CUDA_ARCH__)
  if constexpr (sizeof(T) == 8) {
    unsigned long long v;
    asm volatile("ld.acquire.sys.b64 %0, [%1];" : "=l"(v) : "l"(flag) : "memory");
    return (T)v;
  } else {
    unsigned v;
    asm volatile("ld.acquire.sys.b32 %0, [%1];" : "=r"(v) : "l"(flag) : "memory");
    return (T)v;
  }
#else
  const T v = __atomic_load_n(flag, __ATOMIC_ACQUIRE);
#ifdef CUCO_FLAG_LOADED
  CUCO_FLAG_LOADED(flag, v);  // the CPU emulator: a load of a flag spins, let its other threads run
#endif
  return v;
#endif
}

// ---------------------------------------------------------------- trace points, continued (device)

__device__ inline volatile cuco_wait_slot* slot_of(Trace t) {
  if (t.slots == nullptr || t.n <= 0) return nullptr;
  const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  return t.slots + (block % t.n);
}

// Why no __threadfence_system and no host reads on the fast path: the slots are read by the
// host only after a step overran its limit (seconds), when every posted write has long landed,
// so ordering between the fields does not matter; but a system fence or a read over PCIe costs
// 1-2 us each, on the critical path of every pipelined wait (measured: +6.5 % on a 4-chunk IPC
// pipeline with two fences and a read per wait). A wait therefore touches host memory only once
// it has spun longer than kWaitGracePolls, and then only with posted writes.
constexpr uint32_t kWaitGracePolls = 256;

static_assert(offsetof(cuco_wait_slot, function) % 8 == 0, "the function's name is written in 8-byte words");

// The name of the function that waits (a string literal, __builtin_FUNCTION()), into the slot in
// four 8-byte posted writes rather than 32 single bytes: read up to its NUL, the rest zero, cut
// to leave a NUL at the end. Bytes go into the words little-endian, as GPUs and x86 store them.
__device__ inline void record_function(volatile cuco_wait_slot* s, const char* name) {
  volatile uint64_t* words = reinterpret_cast<volatile uint64_t*>(s->function);
  bool ended = name == nullptr;
  for (int w = 0; w < CUCO_WAIT_FUNCTION_LEN / 8; ++w) {
    uint64_t word = 0;
    for (int b = 0; b < 8; ++b) {
      const int i = 8 * w + b;
      ended = ended || i == CUCO_WAIT_FUNCTION_LEN - 1 || name[i] == 0;
      if (!ended) word |= (uint64_t)(unsigned char)name[i] << (8 * b);
    }
    words[w] = word;
  }
}

// Called by one thread of the block once it has waited past the grace polls: records the wait
// (`label`: its name, nullptr for an unnamed one; `function`: the function that waits) and
// returns the slot's count of finished waits (read now, while the thread waits anyway).
__device__ inline uint64_t wait_begin(Trace t, int site, const char* label, const char* function, int kind, int peer,
                                      uint64_t id, uint64_t expected, uint64_t observed) {
  volatile cuco_wait_slot* s = slot_of(t);
  if (!s) return 0;
  s->site = site;
  for (int i = 0; i < CUCO_WAIT_LABEL_LEN; ++i) s->label[i] = label != nullptr ? label[i] : 0;
  record_function(s, function);
  s->kind = kind;
  s->peer = peer;
  s->id = id;
  s->expected = expected;
  s->observed = observed;
  s->state = CUCO_WAIT_WAITING;
  return s->completed;
}

__device__ inline void wait_observe(Trace t, uint64_t observed) {
  volatile cuco_wait_slot* s = slot_of(t);
  if (s) s->observed = observed;
}

// `completed_before`: what wait_begin returned; written back plus one, so no read here.
__device__ inline void wait_end(Trace t, uint64_t observed, uint64_t completed_before) {
  volatile cuco_wait_slot* s = slot_of(t);
  if (!s) return;
  s->observed = observed;
  s->completed = completed_before + 1;
  s->state = CUCO_WAIT_DONE;
}

// Spin (one thread) until *flag >= expected, with acquire order at system scope. A wait that
// is satisfied within the grace polls leaves no trace (it cannot be part of a hang); a longer
// one is recorded, its observed value refreshed every 1024 polls so a hang shows how far it
// got, and its slot's `completed` counts it when it ends.
template <typename T>
__device__ inline T wait_geq_at(Trace t, int site, const char* label, const char* function, int peer, uint64_t id,
                                const T* flag, T expected) {
  T seen = load_acquire(flag);
  uint32_t polls = 1;
  for (; seen < expected && polls < kWaitGracePolls; ++polls) seen = load_acquire(flag);
  if (seen >= expected) return seen;
  const uint64_t done =
      wait_begin(t, site, label, function, CUCO_WAIT_FLAG, peer, id, (uint64_t)expected, (uint64_t)seen);
  for (; seen < expected; ++polls) {
    if ((polls & 1023u) == 0) wait_observe(t, (uint64_t)seen);
    seen = load_acquire(flag);
  }
  wait_end(t, (uint64_t)seen, done);
  return seen;
}

// The wait at a named site (CUCO_WAIT_SITE("arrived"), built where the host launched it): the
// report names the handshake and the launch line. `function`: leave it to its default.
template <typename T>
__device__ inline T wait_geq(Trace t, const WaitSite& site, int peer, uint64_t id, const T* flag, T expected,
                             const char* function = __builtin_FUNCTION()) {
  return wait_geq_at(t, site.line, site.label, function, peer, id, flag, expected);
}

// The wait at a device source line (CUCO_SITE): unnamed; the report shows the line and the id,
// and where the candidate launched the kernel that waits (found from `function`).
template <typename T>
__device__ inline T wait_geq(Trace t, int site, int peer, uint64_t id, const T* flag, T expected,
                             const char* function = __builtin_FUNCTION()) {
  return wait_geq_at(t, site, nullptr, function, peer, id, flag, expected);
}

#ifdef CUCO_WITH_NCCL_DEVICE
// An LSA barrier sync with its wait recorded (peer -1: the whole team; id: the barrier index).
template <typename Coop>
__device__ inline void lsa_barrier_sync_at(Trace t, int site, const char* label, const char* function,
                                           ncclLsaBarrierSession<Coop>& bar, Coop coop, uint32_t barrier_index,
                                           cuda::memory_order order) {
  const bool leader = coop.thread_rank() == 0;
  // The barrier spins inside NCCL, so it is recorded before it starts: posted writes and one
  // read of the slot's count (about 1 us for the leader thread; the barrier itself takes longer).
  const uint64_t done = leader ? wait_begin(t, site, label, function, CUCO_WAIT_BARRIER, -1, barrier_index, 0, 0) : 0;
  bar.sync(coop, order);
  if (leader) wait_end(t, 0, done);
}

template <typename Coop>
__device__ inline void lsa_barrier_sync(Trace t, const WaitSite& site, ncclLsaBarrierSession<Coop>& bar, Coop coop,
                                        uint32_t barrier_index, cuda::memory_order order,
                                        const char* function = __builtin_FUNCTION()) {
  lsa_barrier_sync_at(t, site.line, site.label, function, bar, coop, barrier_index, order);
}

template <typename Coop>
__device__ inline void lsa_barrier_sync(Trace t, int site, ncclLsaBarrierSession<Coop>& bar, Coop coop,
                                        uint32_t barrier_index, cuda::memory_order order,
                                        const char* function = __builtin_FUNCTION()) {
  lsa_barrier_sync_at(t, site, nullptr, function, bar, coop, barrier_index, order);
}
#endif  // CUCO_WITH_NCCL_DEVICE

#endif  // __CUDACC__

}  // namespace cuco

#endif  // CUCO_RUNTIME_CUH_
