// emu_runtime.h: a CPU model of the parts of the CUDA runtime, NCCL and cuBLAS that this
// workload's candidates use, so that a whole candidate (cuco_init / cuco_launch / cuco_teardown,
// every rank at once) runs in one process on a machine without a GPU. Not part of any candidate;
// the stub headers beside it (cuda_runtime.h, nccl.h, ...) include this file.
//
//  - "Device memory" is host memory, one address space for every rank (so CUDA-IPC handles carry
//    the pointer). Each allocation ends at a page boundary followed by an inaccessible page, and
//    cudaFree makes it inaccessible: overruns and use after free crash instead of passing.
//  - A stream is an OS thread running its operations in order; kernels run there (cuda_cpu.h),
//    so a kernel that spins on a flag blocks its stream only, as on a GPU. Before each operation
//    a stream may sleep a random moment (up to 30 us, 0.3 ms or 3 ms, drawn per stream from the
//    run's seed): races show up as wrong answers or crashes.
//  - Events: a wait enqueued on a stream blocks it until the event's latest record (at the time
//    of the wait call) has run.
//  - NCCL: send/recv match in order per (source, destination), a rank to itself too; an operation (or a group of them)
//    completes when all its parts are matched; all-gather completes when every rank has joined.
//  - cuBLAS (emu_cublas.h): cublasGemmStridedBatchedEx, cublasGemmEx and cublasGemmGroupedBatchedEx
//    in float on the handle's stream (bf16 or fp32 operands).
//  - A watchdog ends the process after EMU_TIMEOUT_S seconds with what each stream waits for.
//  - Schedule perturbations, as L2 verification applies them on GPUs (the policy of
//    cuco_tui/harness/perturb_lib/cuco_perturb.h, shared with the rank worker's interposer): while a
//    rank's perturbation is enabled (a driver enables it around cuco_launch), each of its copies,
//    event records and waits, kernel launches, NCCL calls and GEMMs is preceded on its stream by
//    the hold the policy draws for it, in the order the rank's host thread enqueues them. With
//    settling on, a late rank's hold also lasts until the rest of the run has settled
//    (emu_progress.h: which streams and rank threads wait, and since when).
#pragma once

#include "cuda_cpu.h"

#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <type_traits>

#include "emu_progress.h"

// The runtime's flag loads (cuco::load_acquire) spin like these: let the other streams run; its
// flag stores may let a waiting peer move (emu_progress.h).
#define CUCO_FLAG_LOADED(flag, v) emu_flag_loaded((const void*)(flag), (uint64_t)(v))
#define CUCO_FLAG_STORED(flag) emu_moved()

// ---------------------------------------------------------------- atomics (cuda/atomic)

namespace cuda {
enum memory_order { memory_order_relaxed, memory_order_consume, memory_order_acquire, memory_order_release,
                    memory_order_acq_rel, memory_order_seq_cst };
enum thread_scope { thread_scope_system, thread_scope_device, thread_scope_block, thread_scope_thread };
template <class T, thread_scope S = thread_scope_system>
struct atomic_ref {
  using U = std::remove_const_t<T>;
  U* p;
  explicit atomic_ref(T& r) : p(const_cast<U*>(&r)) {}
  U load(memory_order = memory_order_seq_cst) const {
    U v = __atomic_load_n(p, __ATOMIC_SEQ_CST);
    emu_flag_loaded(p, (uint64_t)v);  // loads of flags spin: let the other streams run
    return v;
  }
  void store(U v, memory_order = memory_order_seq_cst) const {
    __atomic_store_n(p, v, __ATOMIC_SEQ_CST);
    emu_moved();
  }
  U fetch_add(U v, memory_order = memory_order_seq_cst) const {
    const U old = __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
    emu_moved();
    return old;
  }
};
}  // namespace cuda

// ---------------------------------------------------------------- errors, types

typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorInvalidValue = 1 };
enum cudaMemcpyKind { cudaMemcpyHostToHost, cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice,
                      cudaMemcpyDefault };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
#define cudaStreamNonBlocking 0x01
#define cudaEventDisableTiming 0x02
#define cudaIpcMemLazyEnablePeerAccess 0x01

inline const char* cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : "emulated error"; }
inline const char* cudaGetErrorName(cudaError_t e) { return e == cudaSuccess ? "cudaSuccess" : "cudaErrorEmulated"; }

[[noreturn]] inline void emu_die(const char* what) {
  fprintf(stderr, "emulator: %s\n", what);
  fflush(stderr);
  _exit(5);
}

// ---------------------------------------------------------------- memory

inline std::mutex emu_alloc_mu;
inline std::map<void*, std::pair<void*, size_t>> emu_allocs;  // pointer -> (mapping, accessible bytes)

inline cudaError_t cudaMalloc(void** out, size_t bytes) {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  const size_t body = (bytes + page - 1) / page * page;
  unsigned char* base = (unsigned char*)mmap(nullptr, body + page, PROT_READ | PROT_WRITE,
                                             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) return cudaErrorInvalidValue;
  mprotect(base + body, page, PROT_NONE);  // guard page right after the buffer
  size_t lead = body - bytes;
  lead -= lead % 256;  // cudaMalloc aligns to 256 bytes: the end lies within 255 bytes of the guard
  memset(base, 0x7f, body);  // "uninitialized": huge values, so reading them shows in the answer
  *out = base + lead;
  std::lock_guard<std::mutex> lock(emu_alloc_mu);
  emu_allocs[*out] = {base, body};
  return cudaSuccess;
}
template <class T>
cudaError_t cudaMalloc(T** out, size_t bytes) {
  return cudaMalloc((void**)out, bytes);
}

// The memory stays mapped but inaccessible: a later access (a peer still reading) crashes.
inline cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  std::lock_guard<std::mutex> lock(emu_alloc_mu);
  auto it = emu_allocs.find(p);
  if (it == emu_allocs.end()) emu_die("cudaFree of a pointer cudaMalloc did not return");
  mprotect(it->second.first, it->second.second, PROT_NONE);
  emu_allocs.erase(it);
  return cudaSuccess;
}

// Pinned host memory: host memory either way here, with the same guard page.
inline cudaError_t cudaMallocHost(void** out, size_t bytes) { return cudaMalloc(out, bytes); }
template <class T>
cudaError_t cudaMallocHost(T** out, size_t bytes) {
  return cudaMalloc((void**)out, bytes);
}
inline cudaError_t cudaFreeHost(void* p) { return cudaFree(p); }

// ---------------------------------------------------------------- streams and events

struct EmuOp {
  std::string what;
  std::function<void()> run;
};

struct EmuStream;
inline std::mutex emu_streams_mu;
inline std::vector<EmuStream*> emu_streams;
inline unsigned emu_seed = 1;
inline thread_local int emu_device = 0;
// Optional, per rank: the delay scale of every stream the rank creates from now on, in place of
// the one drawn from the seed (0, the default: drawn). A driver sets it to make one rank's streams
// lag far behind the other's, so that a candidate running ahead of its peer shows.
inline unsigned emu_rank_max_delay_us[64] = {};

struct EmuStream {
  int rank;
  int index;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<EmuOp> q;
  bool busy = false, stop = false;
  std::string current;
  std::thread th;
  std::mt19937 rng;

  unsigned max_delay_us;  // before each operation, a random sleep up to this: some streams lag far behind
  EmuActor* actor;        // its thread, for a hold that waits until the run has settled (emu_progress.h)

  EmuStream(int r, int i) : rank(r), index(i), rng(emu_seed * 7919u + (unsigned)r * 131u + (unsigned)i) {
    const unsigned scales[3] = {30, 300, 3000};
    max_delay_us = scales[rng() % 3];
    if (r >= 0 && r < 64 && emu_rank_max_delay_us[r]) max_delay_us = emu_rank_max_delay_us[r];
    actor = emu_actor_new();
    th = std::thread([this] { loop(); });
  }
  void loop() {
    emu_actor_enter(actor);
    for (;;) {
      EmuOp op;
      {
        std::unique_lock<std::mutex> lock(mu);
        emu_wait(cv, lock, [&] { return stop || !q.empty(); });
        if (q.empty()) {
          emu_mark(kEmuDone);
          return;
        }
        op = std::move(q.front());
        q.pop_front();
        busy = true;
        current = op.what;
      }
      ++emu_op_serial;
      if (rng() % 2) std::this_thread::sleep_for(std::chrono::microseconds(rng() % max_delay_us));
      op.run();
      {
        std::lock_guard<std::mutex> lock(mu);
        busy = false;
        current.clear();
      }
      cv.notify_all();
      emu_moved();
    }
  }
  void enqueue(std::string what, std::function<void()> run) {
    {
      std::lock_guard<std::mutex> lock(mu);
      q.push_back(EmuOp{std::move(what), std::move(run)});
    }
    cv.notify_all();
    emu_moved();
  }
  void drain() {
    std::unique_lock<std::mutex> lock(mu);
    emu_wait(cv, lock, [&] { return q.empty() && !busy; });
  }
  std::string status() {
    std::lock_guard<std::mutex> lock(mu);
    std::string s = "rank " + std::to_string(rank) + " stream " + std::to_string(index) + ": ";
    s += busy ? "running " + current : std::string("idle");
    if (!q.empty()) s += "; next " + q.front().what + " (" + std::to_string(q.size()) + " queued)";
    return s;
  }
};
typedef EmuStream* cudaStream_t;

#include "emu_perturb.h"  // needs EmuStream

inline cudaStream_t emu_stream_create() {
  std::lock_guard<std::mutex> lock(emu_streams_mu);
  int index = 0;
  for (EmuStream* s : emu_streams)
    if (s->rank == emu_device) ++index;
  EmuStream* s = new EmuStream(emu_device, index);
  emu_streams.push_back(s);
  return s;
}
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
  *s = emu_stream_create();
  return cudaSuccess;
}
inline cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned, int) {
  *s = emu_stream_create();
  return cudaSuccess;
}
inline cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, 0); }
inline cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  *least = 0;
  *greatest = -5;
  return cudaSuccess;
}
inline EmuStream* emu_check_stream(cudaStream_t s) {
  if (!s) emu_die("work enqueued on the legacy default stream (0)");
  return s;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  emu_check_stream(s)->drain();
  return cudaSuccess;
}
inline cudaError_t cudaDeviceSynchronize() {
  std::vector<EmuStream*> mine;
  {
    std::lock_guard<std::mutex> lock(emu_streams_mu);
    for (EmuStream* s : emu_streams)
      if (s->rank == emu_device && !s->stop) mine.push_back(s);
  }
  for (EmuStream* s : mine) s->drain();
  return cudaSuccess;
}
inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
  s->drain();
  {
    std::lock_guard<std::mutex> lock(s->mu);
    s->stop = true;
  }
  s->cv.notify_all();
  s->th.join();
  return cudaSuccess;  // the object stays (the watchdog may still list it)
}
inline cudaError_t cudaSetDevice(int d) {
  emu_device = d;
  return cudaSuccess;
}
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
template <class F>
cudaError_t cudaFuncSetAttribute(F, cudaFuncAttribute, int) {
  return cudaSuccess;
}

struct EmuEvent {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t recorded = 0, completed = 0;
};
typedef EmuEvent* cudaEvent_t;
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
  *e = new EmuEvent();
  return cudaSuccess;
}
inline cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }
inline cudaError_t cudaEventDestroy(cudaEvent_t) { return cudaSuccess; }  // kept: pending waits may name it
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  emu_perturb_before(s, CUCO_OP_EVENT);
  uint64_t seq;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    seq = ++e->recorded;
  }
  emu_check_stream(s)->enqueue("event record", [e, seq] {
    {
      std::lock_guard<std::mutex> lock(e->mu);
      if (seq > e->completed) e->completed = seq;
    }
    e->cv.notify_all();
  });
  return cudaSuccess;
}
inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
  emu_perturb_before(s, CUCO_OP_EVENT);
  uint64_t target;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    target = e->recorded;
  }
  emu_check_stream(s)->enqueue("event wait", [e, target] {
    std::unique_lock<std::mutex> lock(e->mu);
    emu_wait(e->cv, lock, [&] { return e->completed >= target; });
  });
  return cudaSuccess;
}

inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s) {
  emu_perturb_before(s, CUCO_OP_COPY);
  if (kind == cudaMemcpyHostToDevice) {  // pageable host memory: staged at the call
    auto staged = std::make_shared<std::vector<unsigned char>>((const unsigned char*)src,
                                                               (const unsigned char*)src + bytes);
    emu_check_stream(s)->enqueue("memcpy H2D", [dst, staged] { memcpy(dst, staged->data(), staged->size()); });
  } else {
    emu_check_stream(s)->enqueue("memcpy", [dst, src, bytes] { memcpy(dst, src, bytes); });
  }
  return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t s) {
  emu_perturb_before(s, CUCO_OP_COPY);
  emu_check_stream(s)->enqueue("memset", [dst, value, bytes] { memset(dst, value, bytes); });
  return cudaSuccess;
}

// kernel<<<grid, block, smem, stream>>>(args...), rewritten by the test into this call.
template <class Kernel, class... Args>
void emu_enqueue_kernel(const char* name, cudaStream_t s, dim3 grid, dim3 block, Kernel kernel, Args... args) {
  emu_perturb_before(s, CUCO_OP_KERNEL);
  emu_check_stream(s)->enqueue(std::string("kernel ") + name, [=] { emu_launch(grid, block, kernel, args...); });
}

// ---------------------------------------------------------------- CUDA IPC

struct cudaIpcMemHandle_t {
  char reserved[64];
};
inline cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* h, void* p) {
  memset(h, 0, sizeof *h);
  memcpy(h->reserved, &p, sizeof p);
  return cudaSuccess;
}
inline cudaError_t cudaIpcOpenMemHandle(void** p, cudaIpcMemHandle_t h, unsigned) {
  memcpy(p, h.reserved, sizeof *p);
  return cudaSuccess;
}
inline cudaError_t cudaIpcCloseMemHandle(void*) { return cudaSuccess; }

// ---------------------------------------------------------------- NCCL

typedef enum { ncclSuccess = 0, ncclUnhandledCudaError = 1, ncclSystemError = 2, ncclInternalError = 3,
               ncclInvalidArgument = 4, ncclInvalidUsage = 5, ncclRemoteError = 6, ncclInProgress = 7 } ncclResult_t;
typedef enum { ncclInt8 = 0, ncclUint8 = 1, ncclInt32 = 2, ncclUint32 = 3, ncclInt64 = 4, ncclUint64 = 5,
               ncclFloat16 = 6, ncclFloat32 = 7, ncclFloat64 = 8, ncclBfloat16 = 9 } ncclDataType_t;
inline size_t emu_nccl_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
  }
}
typedef struct {
  char internal[128];
} ncclUniqueId;
inline const char* ncclGetErrorString(ncclResult_t r) { return r == ncclSuccess ? "no error" : "emulated NCCL error"; }

struct EmuP2P {
  bool send;
  int peer;
  void* buf;
  size_t bytes;
  bool done = false;
};
struct EmuColl {
  int joined = 0, left = 0;
  bool done = false;
  std::vector<std::pair<const void*, void*>> bufs;
};
struct EmuNcclGroup {
  int world;
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::pair<int, int>, std::deque<EmuP2P*>> sends, recvs;  // (src, dst)
  std::map<uint64_t, EmuColl> colls;
};
struct ncclComm {
  EmuNcclGroup* g;
  int rank;
  uint64_t colls = 0;
  uint64_t splits = 0;  // communicators split from this one so far (each rank splits in the same order)
};
typedef ncclComm* ncclComm_t;

inline std::mutex emu_nccl_mu;
inline std::map<std::string, EmuNcclGroup*> emu_nccl_groups;

inline ncclResult_t ncclCommInitRank(ncclComm_t* comm, int world, ncclUniqueId id, int rank) {
  std::lock_guard<std::mutex> lock(emu_nccl_mu);
  EmuNcclGroup*& g = emu_nccl_groups[std::string(id.internal, sizeof id.internal)];
  if (!g) {
    g = new EmuNcclGroup();
    g->world = world;
  }
  *comm = new ncclComm{g, rank};
  return ncclSuccess;
}
inline ncclResult_t ncclCommDestroy(ncclComm_t) { return ncclSuccess; }
// A communicator whose SMs are capped (maxCTAs, minCTAs): the CPU model has no SMs to cap, so the
// config changes nothing here; the seeds of imported programs take it (their kNcclMaxCtas knob).
typedef struct {
  int maxCTAs, minCTAs;
} ncclConfig_t;
#define NCCL_CONFIG_INITIALIZER \
  {}
// Every rank of the parent with the same color in a group of its own, ranked by key then parent rank;
// here every rank gives the same color (a duplicate of the parent, as the seeds use it), which is
// what the model supports.
inline ncclResult_t ncclCommSplit(ncclComm_t parent, int color, int key, ncclComm_t* comm, void* config) {
  (void)key;
  (void)config;
  const std::string id = "split " + std::to_string((uintptr_t)parent->g) + " " + std::to_string(color) + " " +
                         std::to_string(++parent->splits);
  std::lock_guard<std::mutex> lock(emu_nccl_mu);
  EmuNcclGroup*& g = emu_nccl_groups[id];
  if (!g) {
    g = new EmuNcclGroup();
    g->world = parent->g->world;
  }
  *comm = new ncclComm{g, parent->rank};
  return ncclSuccess;
}
inline ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int world, ncclUniqueId id, int rank, ncclConfig_t*) {
  return ncclCommInitRank(comm, world, id, rank);
}

// Match one send or recv against the other side's queue (under g->mu).
inline void emu_p2p_post(ncclComm_t c, EmuP2P* item) {
  EmuNcclGroup* g = c->g;
  const std::pair<int, int> key = item->send ? std::make_pair(c->rank, item->peer) : std::make_pair(item->peer, c->rank);
  auto& other = item->send ? g->recvs[key] : g->sends[key];
  if (other.empty()) {
    (item->send ? g->sends[key] : g->recvs[key]).push_back(item);
    return;
  }
  EmuP2P* match = other.front();
  other.pop_front();
  if (match->bytes != item->bytes) emu_die("NCCL send and recv sizes differ");
  EmuP2P* s = item->send ? item : match;
  EmuP2P* r = item->send ? match : item;
  memcpy(r->buf, s->buf, s->bytes);
  s->done = r->done = true;
}

struct EmuPending {
  ncclComm_t comm;
  cudaStream_t stream;
  EmuP2P item;
};
inline thread_local int emu_group_depth = 0;
inline thread_local std::vector<EmuPending> emu_group_ops;

inline void emu_p2p_submit(std::vector<EmuPending> ops) {
  cudaStream_t s = ops.front().stream;
  for (auto& op : ops)
    if (op.stream != s || op.comm != ops.front().comm) emu_die("one NCCL group on several streams or comms");
  auto shared = std::make_shared<std::vector<EmuPending>>(std::move(ops));
  emu_check_stream(s)->enqueue("nccl send/recv", [shared] {
    ncclComm_t c = shared->front().comm;
    EmuNcclGroup* g = c->g;
    std::unique_lock<std::mutex> lock(g->mu);
    for (auto& op : *shared) emu_p2p_post(c, &op.item);
    g->cv.notify_all();
    emu_moved();  // a peer's side may be matched now
    emu_wait(g->cv, lock, [&] {
      for (auto& op : *shared)
        if (!op.item.done) return false;
      return true;
    });
  });
}
inline ncclResult_t ncclGroupStart() {
  ++emu_group_depth;
  return ncclSuccess;
}
inline ncclResult_t ncclGroupEnd() {
  if (--emu_group_depth == 0 && !emu_group_ops.empty()) {
    std::vector<EmuPending> ops;
    ops.swap(emu_group_ops);
    emu_p2p_submit(std::move(ops));
  }
  return ncclSuccess;
}
inline ncclResult_t emu_p2p(bool send, const void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c,
                            cudaStream_t s) {
  // A rank may send to itself (NCCL matches it with its own recv, as any other peer's).
  if (peer < 0 || peer >= c->g->world) emu_die("NCCL send/recv with a bad peer");
  emu_perturb_before(s, CUCO_OP_NCCL);  // at each call, in a group too, as the interposer holds the stream
  EmuPending op{c, s, EmuP2P{send, peer, const_cast<void*>(buf), count * emu_nccl_size(t)}};
  if (emu_group_depth > 0) {
    emu_group_ops.push_back(op);
  } else {
    emu_p2p_submit({op});
  }
  return ncclSuccess;
}
inline ncclResult_t ncclSend(const void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s) {
  return emu_p2p(true, buf, count, t, peer, c, s);
}
inline ncclResult_t ncclRecv(void* buf, size_t count, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t s) {
  return emu_p2p(false, buf, count, t, peer, c, s);
}
inline ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t t, ncclComm_t c,
                                  cudaStream_t s) {
  if (emu_group_depth > 0) emu_die("the emulator takes no collectives inside NCCL groups");
  const uint64_t seq = c->colls++;
  const size_t bytes = count * emu_nccl_size(t);
  emu_perturb_before(s, CUCO_OP_NCCL);
  emu_check_stream(s)->enqueue("nccl all-gather", [c, seq, send, recv, bytes] {
    EmuNcclGroup* g = c->g;
    std::unique_lock<std::mutex> lock(g->mu);
    EmuColl& coll = g->colls[seq];
    if (coll.bufs.empty()) coll.bufs.resize(g->world);
    coll.bufs[c->rank] = {send, recv};
    if (++coll.joined == g->world) {
      for (int r = 0; r < g->world; ++r)
        for (int src = 0; src < g->world; ++src)
          memmove((unsigned char*)coll.bufs[r].second + (size_t)src * bytes, coll.bufs[src].first, bytes);
      coll.done = true;
      g->cv.notify_all();
      emu_moved();
    }
    emu_wait(g->cv, lock, [&] { return coll.done; });
    if (++coll.left == g->world) g->colls.erase(seq);
  });
  return ncclSuccess;
}

// The device API and symmetric memory (LSA): declared for cuco_runtime.cuh, not emulated.
typedef void* ncclWindow_t;
#define NCCL_WIN_COLL_SYMMETRIC 0x01
struct ncclDevComm {
  int lsaSize = 0;
};
struct ncclDevCommRequirements_t {
  int lsaBarrierCount = 0;
};
template <class Coop>
struct ncclLsaBarrierSession;
inline ncclResult_t ncclMemAlloc(void**, size_t) { return ncclInvalidUsage; }
inline ncclResult_t ncclMemFree(void*) { return ncclInvalidUsage; }
inline ncclResult_t ncclCommWindowRegister(ncclComm_t, void*, size_t, ncclWindow_t*, int) { return ncclInvalidUsage; }
inline ncclResult_t ncclCommWindowDeregister(ncclComm_t, ncclWindow_t) { return ncclInvalidUsage; }
inline ncclResult_t ncclDevCommCreate(ncclComm_t, const ncclDevCommRequirements_t*, ncclDevComm*) {
  return ncclInvalidUsage;
}
inline ncclResult_t ncclDevCommDestroy(ncclComm_t, const ncclDevComm*) { return ncclInvalidUsage; }

#include "emu_cublas.h"

// After the harness's stream has finished a launch, every other stream of the rank must be done
// too (the rule: work on other streams is joined back before cuco_launch returns). A stream may
// still be finishing the event record that joined it.
inline void emu_check_joined(int rank, cudaStream_t harness) {
  std::lock_guard<std::mutex> lock(emu_streams_mu);
  for (EmuStream* s : emu_streams) {
    if (s->rank != rank || s == harness) continue;
    std::lock_guard<std::mutex> slock(s->mu);
    if (!s->q.empty() || (s->busy && s->current != "event record")) {
      fprintf(stderr, "emulator: rank %d: the launch's stream finished but a stream of the candidate has work left "
              "(not joined back): %s, %zu queued\n", rank, s->busy ? s->current.c_str() : "idle", s->q.size());
      fflush(stderr);
      _exit(6);
    }
  }
}

// ---------------------------------------------------------------- watchdog

inline void emu_watchdog(double seconds, std::atomic<bool>* done) {
  std::thread([=] {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!done->load()) {
      if (std::chrono::steady_clock::now() > until) {
        fprintf(stderr, "emulator: no end after %.0f s (a hang?); the streams:\n", seconds);
        std::lock_guard<std::mutex> lock(emu_streams_mu);
        for (EmuStream* s : emu_streams) fprintf(stderr, "  %s\n", s->status().c_str());
        fflush(stderr);
        _exit(4);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }).detach();
}
