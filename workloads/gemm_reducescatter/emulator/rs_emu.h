// rs_emu.h: what gemm_reducescatter's candidates use beyond the CPU model of CUDA, NCCL and cuBLAS
// in workloads/cp_attention/emulator/ (emu_runtime.h), for the emulated tests of
// tests/workloads/gemm_reducescatter/. A test includes this file before the candidate. Not part
// of any candidate.
//
//  - NCCL's reduce-scatter and reduce (sum; bf16 or fp32): collectives matched in call order per
//    communicator, as emu_runtime.h's all-gather; complete when every rank has joined. bf16 sums
//    are rounded after every addition, in ring order (the rank after the owner first, the owner
//    last), as NCCL's ring adds a received bf16 piece to its own and rounds.
//  - The copy engines' batched copies (cudaMemcpyBatchAsync and cudaMemcpy3DBatchAsync, the
//    runtime's tg::ce_copy and tg::ce_copy_2d): a copy on the stream, held by a schedule
//    perturbation like any copy (the rank worker's interposer holds both too).
//  - cuStreamWriteValue64 found through cudaGetDriverEntryPointByVersion (the runtime's
//    tg::FlagWriter): a 64-bit store on the stream, after the stream's earlier operations (the
//    real write is fenced after them). Not perturbed: the interposer does not stand in front of
//    driver entry points either.
//  - Device-side names cuco_arrival.cuh and the candidates use: __ldcg, __shfl_sync, min.
//  - cuda.h beside this file: the driver types of those declarations.
//  - cublasLt.h beside this file: the CPU model of the cuBLASLt calls (handles, descriptors,
//    layouts, preferences, the heuristic, cublasLtMatmul with D = alpha op(A) op(B) + beta C on
//    the stream, held like a cuBLAS GEMM), which ce_fold's fold makes; documented at its top.
#pragma once

#include <cuda_runtime.h>  // the emulator's stub: emu_runtime.h

#include <cuda.h>  // this folder's stub

#include <memory>
#include <type_traits>

// ---------------------------------------------------------------- device-side names

template <class T>
inline T __ldcg(const T* p) {
  return *p;
}

template <class T>
inline T min(T a, T b) {
  return b < a ? b : a;
}

// __shfl_sync(mask, v, src): every lane gets lane `src`'s v (the warp exchanges through the
// emulator's per-warp slots, as __shfl_xor_sync does).
template <class T>
T __shfl_sync(unsigned, T v, int src) {
  static_assert(sizeof(T) <= 8, "one 8-byte slot per lane");
  EmuWarp& w = emu_warp();
  const unsigned lane = emu_lane();
  memcpy(&w.raw[lane][0], &v, sizeof(T));
  w.bar.arrive_and_wait();
  T r;
  memcpy(&r, &w.raw[(unsigned)src & 31u][0], sizeof(T));
  w.bar.arrive_and_wait();
  return r;
}

// ---------------------------------------------------------------- copy engines

#define CUDART_VERSION 13000
enum { cudaErrorSymbolNotFound = 500 };
enum cudaMemcpySrcAccessOrder { cudaMemcpySrcAccessOrderInvalid = 0, cudaMemcpySrcAccessOrderStream = 1 };
enum cudaMemcpyFlags { cudaMemcpyFlagDefault = 0, cudaMemcpyFlagPreferOverlapWithCompute = 1 };
struct cudaMemcpyAttributes {
  cudaMemcpySrcAccessOrder srcAccessOrder;
  unsigned int flags;
};

inline cudaError_t cudaMemcpyBatchAsync(void* const* dsts, const void* const* srcs, const size_t* sizes, size_t count,
                                        cudaMemcpyAttributes* attrs, size_t* attrs_idxs, size_t num_attrs,
                                        cudaStream_t s) {
  if (count == 0 || num_attrs != 1 || attrs_idxs[0] != 0 || attrs[0].srcAccessOrder != cudaMemcpySrcAccessOrderStream)
    emu_die("cudaMemcpyBatchAsync: the emulator takes one attribute set, stream-ordered sources");
  emu_perturb_before(s, CUCO_OP_COPY);
  for (size_t i = 0; i < count; ++i) {
    void* dst = dsts[i];
    const void* src = srcs[i];
    const size_t bytes = sizes[i];
    emu_check_stream(s)->enqueue("memcpy (batched, copy engine)", [dst, src, bytes] { memcpy(dst, src, bytes); });
  }
  return cudaSuccess;
}

// The 2D copy of a K slice (tg::ce_copy_2d): pointer operands, one op, rows `rowLength` bytes apart.
enum cudaMemcpy3DOperandType { cudaMemcpyOperandTypePointer = 1 };
struct cudaExtent {
  size_t width, height, depth;
};
inline cudaExtent make_cudaExtent(size_t w, size_t h, size_t d) { return cudaExtent{w, h, d}; }
struct cudaMemcpy3DOperand {
  cudaMemcpy3DOperandType type;
  struct {
    struct {
      void* ptr;
      size_t rowLength, layerHeight;
    } ptr;
  } op;
};
struct cudaMemcpy3DBatchOp {
  cudaMemcpy3DOperand src, dst;
  cudaExtent extent;
  cudaMemcpySrcAccessOrder srcAccessOrder;
  unsigned int flags;
};

inline cudaError_t cudaMemcpy3DBatchAsync(size_t n, cudaMemcpy3DBatchOp* ops, unsigned long long flags, cudaStream_t s) {
  if (n != 1 || flags != 0 || ops[0].extent.depth != 1 || ops[0].srcAccessOrder != cudaMemcpySrcAccessOrderStream ||
      ops[0].src.type != cudaMemcpyOperandTypePointer || ops[0].dst.type != cudaMemcpyOperandTypePointer)
    emu_die("cudaMemcpy3DBatchAsync: the emulator takes one 2D pointer-to-pointer copy, stream-ordered");
  emu_perturb_before(s, CUCO_OP_COPY);
  const cudaMemcpy3DBatchOp op = ops[0];
  emu_check_stream(s)->enqueue("memcpy 2D (batched, copy engine)", [op] {
    const size_t sp = op.src.op.ptr.rowLength ? op.src.op.ptr.rowLength : op.extent.width;
    const size_t dp = op.dst.op.ptr.rowLength ? op.dst.op.ptr.rowLength : op.extent.width;
    for (size_t row = 0; row < op.extent.height; ++row)
      memcpy((char*)op.dst.op.ptr.ptr + row * dp, (const char*)op.src.op.ptr.ptr + row * sp, op.extent.width);
  });
  return cudaSuccess;
}

// ---------------------------------------------------------------- stream-ordered flag writes

enum cudaDriverEntryPointQueryResult { cudaDriverEntryPointSuccess = 0, cudaDriverEntryPointSymbolNotFound = 1 };
#define cudaEnableDefault 0x0ull

inline CUresult emu_stream_write_value64(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags) {
  if (flags != 0) emu_die("cuStreamWriteValue64: the emulator writes with the default (fenced) flags only");
  uint64_t* p = reinterpret_cast<uint64_t*>(addr);
  emu_check_stream(stream)->enqueue("stream write value", [p, value] { __atomic_store_n(p, (uint64_t)value, __ATOMIC_SEQ_CST); });
  return CUDA_SUCCESS;
}

inline cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned int, unsigned long long,
                                                    cudaDriverEntryPointQueryResult* status) {
  *fn = nullptr;
  *status = cudaDriverEntryPointSymbolNotFound;
  if (std::string(symbol) == "cuStreamWriteValue64") {
    *fn = reinterpret_cast<void*>(&emu_stream_write_value64);
    *status = cudaDriverEntryPointSuccess;
  }
  return cudaSuccess;
}

// ---------------------------------------------------------------- NCCL reductions

typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;

inline float emu_nccl_get(ncclDataType_t t, const void* p, size_t i) {
  if (t == ncclBfloat16) return emu_bf2f(((const uint16_t*)p)[i]);
  if (t == ncclFloat32) return ((const float*)p)[i];
  emu_die("NCCL reductions: the emulator sums bf16 or fp32 only");
}
inline float emu_nccl_round(ncclDataType_t t, float v) { return t == ncclBfloat16 ? emu_bf2f(emu_f2bf(v)) : v; }
inline void emu_nccl_put(ncclDataType_t t, void* p, size_t i, float v) {
  if (t == ncclBfloat16)
    ((uint16_t*)p)[i] = emu_f2bf(v);
  else
    ((float*)p)[i] = v;
}

// One collective on the rank's stream: joins seq's meeting with (send, recv); the last rank to join
// runs `finish` over every rank's buffers; every rank leaves once it has run.
inline void emu_nccl_meeting(ncclComm_t c, cudaStream_t s, const char* what, const void* send, void* recv,
                             std::function<void(const std::vector<std::pair<const void*, void*>>&)> finish) {
  if (emu_group_depth > 0) emu_die("the emulator takes no collectives inside NCCL groups");
  const uint64_t seq = c->colls++;
  emu_perturb_before(s, CUCO_OP_NCCL);
  emu_check_stream(s)->enqueue(what, [c, seq, send, recv, finish] {
    EmuNcclGroup* g = c->g;
    std::unique_lock<std::mutex> lock(g->mu);
    EmuColl& coll = g->colls[seq];
    if (coll.bufs.empty()) coll.bufs.resize(g->world);
    coll.bufs[c->rank] = {send, recv};
    if (++coll.joined == g->world) {
      finish(coll.bufs);
      coll.done = true;
      g->cv.notify_all();
      emu_moved();
    }
    emu_wait(g->cv, lock, [&] { return coll.done; });
    if (++coll.left == g->world) g->colls.erase(seq);
  });
}

// Owner r's element i: the sum over every rank's send buffer at `at(src)` + i, starting at rank
// r+1 and ending at r, rounded after each addition.
inline float emu_ring_sum(ncclDataType_t t, const std::vector<std::pair<const void*, void*>>& bufs, int owner,
                          size_t offset, size_t i) {
  const int world = (int)bufs.size();
  float acc = emu_nccl_get(t, bufs[(owner + 1) % world].first, offset + i);
  for (int step = 2; step <= world; ++step)
    acc = emu_nccl_round(t, acc + emu_nccl_get(t, bufs[(owner + step) % world].first, offset + i));
  return acc;
}

inline ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op,
                                      ncclComm_t c, cudaStream_t s) {
  if (op != ncclSum) emu_die("ncclReduceScatter: the emulator sums only");
  emu_nccl_meeting(c, s, "nccl reduce-scatter", send, recv, [count, t](const auto& bufs) {
    // Every owner's sums first, then the writes: a receive buffer may lie inside its send buffer.
    std::vector<std::vector<float>> sums(bufs.size(), std::vector<float>(count));
    for (size_t r = 0; r < bufs.size(); ++r)
      for (size_t i = 0; i < count; ++i) sums[r][i] = emu_ring_sum(t, bufs, (int)r, r * count, i);
    for (size_t r = 0; r < bufs.size(); ++r)
      for (size_t i = 0; i < count; ++i) emu_nccl_put(t, bufs[r].second, i, sums[r][i]);
  });
  return ncclSuccess;
}

inline ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t t, ncclRedOp_t op, int root,
                               ncclComm_t c, cudaStream_t s) {
  if (op != ncclSum) emu_die("ncclReduce: the emulator sums only");
  if (root < 0 || root >= c->g->world) emu_die("ncclReduce with a bad root");
  emu_nccl_meeting(c, s, "nccl reduce", send, recv, [count, t, root](const auto& bufs) {
    std::vector<float> sums(count);
    for (size_t i = 0; i < count; ++i) sums[i] = emu_ring_sum(t, bufs, root, 0, i);
    for (size_t i = 0; i < count; ++i) emu_nccl_put(t, bufs[root].second, i, sums[i]);
  });
  return ncclSuccess;
}
