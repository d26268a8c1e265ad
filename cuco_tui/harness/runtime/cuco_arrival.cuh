// cuco_arrival.cuh: rows that arrive in flagged chunks, and the movers that deliver them.
//
// The protocol beside cuco_tile_gemm.cuh's fused GEMM, without CUTLASS: how a gathered buffer
// G is cut into flagged chunks, the order in which the chunks arrive and the tiles run, the
// device-side wait for them, and two movers (copy engines with stream-ordered flag writes, or
// an SM store kernel).
//
// The rows of G: rank p's shard is rows [p*R, (p+1)*R) with R = M / world, cut into chunks of
// `chunk_rows` rows (the last chunk of a shard may be shorter). The last chunk of every shard may
// further be cut along K into `k_slices` column slices of `slice_k` columns (a multiple of the
// GEMM's 64-column K block), each with its own flag: the tiles of the last rows to land then start
// on their first K blocks while the rest of those rows are still on the link, and only one slice's
// share of a tile's work is left after the last byte. flags[(p * chunks + c) * k_slices + s]
// counts the arrivals of slice s of chunk c of rank p (s = 0 for a chunk that is not cut, which
// then leaves its other slots unused): a chunk or slice is ready for launch e once its flag >= e * signals,
// where `signals` is how many writers post per chunk and launch (1 for a copy engine followed by
// a stream-ordered write; the number of CTAs for a store kernel whose every CTA adds one). Flags
// only grow, so back-to-back launches need no reset. The rank's own rows are never waited for:
// they are read straight from its input X when R is a multiple of the tile height; otherwise
// the caller copies them into G on the GEMM's stream before the launch (stream order, no SM
// left waiting on a copy that might itself want an SM).
#ifndef CUCO_ARRIVAL_CUH_
#define CUCO_ARRIVAL_CUH_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <cuda.h>

#include "cuco_runtime.cuh"

namespace cuco {
namespace tile_gemm {

// ---------------------------------------------------------------- arrival and schedule (device view)

// Where the rows of G come from and when they are ready.
struct Arrival {
  const unsigned long long* flags;  // flags[rank * chunks + chunk], in this rank's memory
  unsigned long long target;        // a chunk is ready once its flag >= target (epoch * signals)
  int64_t rows_per_rank;            // R = M / world
  int64_t chunk_rows;               // rows per flag
  int chunks;                       // row chunks per rank
  int k_slices;                     // flags per chunk: the last chunk's K slices (1: not cut)
  int slice_tiles;                  // 64-column K blocks per slice
  int own_rank;                     // this rank: its rows come from X when own_from_x
  int own_from_x;                   // 1: own rows read from X, never waited for
  int site;                         // the caller's source line, for the deadlock report
  Trace trace;
};

// Which tile a cluster runs next: cluster tiles (CM x CN CTAs) are numbered in processing
// order; cluster rows are taken in arrival order (`rows`), in bands of `band` cluster rows;
// within a band the cluster row changes fastest, so a wave of clusters covers a compact
// rectangle (L2 reuse of both operands) that moves across N and then to the next band.
struct Schedule {
  const int* rows;  // cluster-row indices in processing order, `cm` of them
  int cm;           // cluster rows (ceil(M / (BM * CM)))
  int cn;           // cluster columns (ceil(N / (BN * CN)))
  int band;         // cluster rows per band, >= 1
  int tiles;        // cm * cn
};

#ifdef __CUDACC__

// Cluster tile t -> (cluster row, cluster column). Host-callable, so a test can walk the schedule.
__host__ __device__ inline void cluster_tile(const Schedule& s, int t, int& crow, int& ccol) {
  const int band_tiles = s.band * s.cn;
  const int b = t / band_tiles;
  const int within = t - b * band_tiles;
  const int left = s.cm - b * s.band;
  const int rows = s.band < left ? s.band : left;
#ifdef __CUDA_ARCH__
  crow = __ldg(&s.rows[b * s.band + within % rows]);
#else
  crow = s.rows[b * s.band + within % rows];
#endif
  ccol = within / rows;
}

// Called by the whole producer warp before it loads the A tiles of rows [row0, row1) of G, or
// (when the last chunks are cut along K) before it loads their K blocks of slice `slice`.
// Lane 0 waits for every peer chunk those rows touch (the deadlock report sees a long wait
// through the rank's trace slots, at the caller's site, with the source rank as peer and the
// chunk's flag slot as id); the rank's own rows are always ready (read from X, or copied into G before the
// kernel in stream order). Then every lane fences the generic proxy against the async proxy, so
// that the TMA reads that follow are ordered after what the acquire loads saw. `ready` caches
// the flags (up to 128) this CTA has already found ready: flags only grow within a launch.
__device__ inline void wait_rows(const Arrival& a, int64_t row0, int64_t row1, int slice, uint64_t& ready_lo,
                                 uint64_t& ready_hi) {
  int waited = 0;
  if ((threadIdx.x & 31) == 0) {
    for (int64_t row = row0; row < row1;) {
      const int p = (int)(row / a.rows_per_rank);
      const int64_t in_shard = row - p * a.rows_per_rank;
      const int c = (int)(in_shard / a.chunk_rows);
      const int s = c == a.chunks - 1 ? slice : 0;  // only the last chunk is cut along K
      const int idx = (p * a.chunks + c) * a.k_slices + s;
      // Two scalar words, not an array: a run-time index would put the array in local memory.
      const uint64_t bit = 1ull << (idx & 63);
      const bool cached = idx < 64 ? (ready_lo & bit) != 0 : idx < 128 ? (ready_hi & bit) != 0 : false;
      if (p != a.own_rank && !cached) {
        wait_geq<unsigned long long>(a.trace, a.site, p, (uint64_t)(c * a.k_slices + s), &a.flags[idx], a.target);
        if (idx < 64) ready_lo |= bit;
        else if (idx < 128) ready_hi |= bit;
        waited = 1;
      }
      row = p * a.rows_per_rank + min((int64_t)(c + 1) * a.chunk_rows, a.rows_per_rank);
    }
  }
  if (__shfl_sync(0xffffffffu, waited, 0)) asm volatile("fence.proxy.async.global;" ::: "memory");
}

#endif  // __CUDACC__

// ---------------------------------------------------------------- host side

// How a rank's shard goes out to its peers. Ring: to r+1, r+2, ... one peer after another (one
// copy stream; each peer's chunks land at full link speed, one peer at a time). All: to every
// peer at once, chunk by chunk (a copy stream per peer, or a store kernel that writes chunk c to
// every peer before chunk c+1): at W > 2 the first chunks of every peer land early, the small
// copies' fixed costs overlap across the copy engines, and no peer waits for the others to be
// served. At W = 2 the two are the same.
enum class Fanout { Ring = 0, All = 1 };

// How G's rows are cut into flagged chunks, and where this rank's own rows come from.
struct RowLayout {
  int64_t M = 0, N = 0, K = 0;  // N: this rank's columns (B is [K, N])
  int world = 1, rank = 0;
  int64_t rows_per_rank = 0;
  int64_t chunk_rows = 0;
  int chunks = 0;          // per rank
  int k_slices = 1;        // K slices of each shard's last chunk (1: not cut)
  int64_t slice_k = 0;     // columns per slice, a multiple of 64 (the last slice may be shorter)
  bool own_from_x = false;
  Fanout fanout = Fanout::Ring;  // the order the chunks arrive in (arrival_rows)

  int flag_count() const { return world * chunks * k_slices; }
  int flag_index(int p, int c, int s = 0) const { return (p * chunks + c) * k_slices + s; }
  int64_t chunk_row0(int p, int c) const { return p * rows_per_rank + c * chunk_rows; }
  int64_t chunk_len(int c) const { return std::min(chunk_rows, rows_per_rank - c * chunk_rows); }
  // The flags (and copies) chunk c arrives in: k_slices for the last chunk, else one.
  int slices_of(int c) const { return c == chunks - 1 ? k_slices : 1; }
  // Columns [slice_col0(s), slice_col0(s) + slice_cols(s)) of slice s of a cut chunk (all of K when not cut).
  int64_t slice_col0(int c, int s) const { return slices_of(c) == 1 ? 0 : s * slice_k; }
  int64_t slice_cols(int c, int s) const { return slices_of(c) == 1 ? K : std::min(slice_k, K - s * slice_k); }
};

// `chunks_wanted` pieces per shard, each a multiple of 64 rows (16-byte rows of K bf16 are
// always aligned then); fewer when the shard is too short for that many. `slices_wanted` K slices
// of the last chunk, each a multiple of 64 columns; fewer when K is too narrow for that many.
inline RowLayout make_row_layout(int64_t M, int64_t N, int64_t K, int world, int rank, int chunks_wanted,
                                 int block_m, Fanout fanout = Fanout::Ring, int slices_wanted = 1) {
  RowLayout l;
  l.fanout = fanout;
  l.M = M; l.N = N; l.K = K; l.world = world; l.rank = rank;
  l.rows_per_rank = M / world;
  const int64_t per = (l.rows_per_rank + chunks_wanted - 1) / std::max(chunks_wanted, 1);
  l.chunk_rows = std::max<int64_t>(64, (per + 63) / 64 * 64);
  l.chunks = (int)((l.rows_per_rank + l.chunk_rows - 1) / l.chunk_rows);
  l.own_from_x = l.rows_per_rank % block_m == 0;
  const int64_t blocks = (K + 63) / 64;
  const int64_t per_slice = (blocks + std::max(slices_wanted, 1) - 1) / std::max(slices_wanted, 1);
  l.slice_k = per_slice * 64;
  l.k_slices = (int)((blocks + per_slice - 1) / per_slice);
  return l;
}

// The order in which this rank receives peers' shards when every rank pushes to its peers in
// ring order (rank r sends to r+1, r+2, ... in turn): from r-1 first, then r-2, and so on. The
// mover and the tile schedule both use it, so tiles run in the order their rows land.
inline int sender_at(int rank, int world, int step) { return ((rank - step) % world + world) % world; }
inline int receiver_at(int rank, int world, int step) { return (rank + step) % world; }

enum class TileOrder { Auto = 0, Arrival = 1, Square = 2 };

// The processing order of cluster rows: each cluster row (CM*BM rows of G) is ready when the
// last peer chunk it touches has landed; the rank's own rows are ready at once. Stable sort by
// readiness, so ties keep the natural row order. Ring fanout: every chunk of the first sender,
// then the next sender's; All: chunk 0 of every sender, then chunk 1 of every sender, ...
inline std::vector<int> arrival_rows(const RowLayout& l, int rows_per_cluster_row, int cluster_rows) {
  std::vector<int> position(l.flag_count(), -1);
  int pos = 0;
  if (l.fanout == Fanout::All) {
    for (int c = 0; c < l.chunks; ++c)
      for (int step = 1; step < l.world; ++step) position[l.flag_index(sender_at(l.rank, l.world, step), c)] = pos++;
  } else {
    for (int step = 1; step < l.world; ++step)
      for (int c = 0; c < l.chunks; ++c) position[l.flag_index(sender_at(l.rank, l.world, step), c)] = pos++;
  }
  std::vector<int> ready(cluster_rows, -1);
  for (int cr = 0; cr < cluster_rows; ++cr) {
    const int64_t r0 = (int64_t)cr * rows_per_cluster_row;
    const int64_t r1 = std::min<int64_t>(r0 + rows_per_cluster_row, l.M);
    for (int64_t row = r0; row < r1; row += 64) {
      const int p = (int)(row / l.rows_per_rank);
      const int c = (int)((row - p * l.rows_per_rank) / l.chunk_rows);
      ready[cr] = std::max(ready[cr], position[l.flag_index(p, c)]);
    }
  }
  std::vector<int> order(cluster_rows);
  for (int i = 0; i < cluster_rows; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return ready[a] < ready[b]; });
  return order;
}

// Band height (cluster rows) for a wave of `clusters` clusters. Arrival: one cluster row at a
// time, strictly in arrival order. Square: the wave's footprint in A rows and B columns made
// about equal, which minimizes the bytes a wave pulls from memory. Auto: arrival order when B
// fits comfortably in L2 (nothing to reuse across bands), else square.
inline int band_rows(TileOrder order, int clusters, int cm, int rows_per_cluster_row, int cols_per_cluster_col,
                     int64_t b_bytes, int64_t l2_bytes) {
  if (order == TileOrder::Auto) order = b_bytes * 2 <= l2_bytes ? TileOrder::Arrival : TileOrder::Square;
  if (order == TileOrder::Arrival) return 1;
  const double ideal = std::sqrt((double)clusters * cols_per_cluster_col / rows_per_cluster_row);
  return std::max(1, std::min(cm, (int)(ideal + 0.5)));
}

// What the fused GEMM is set up with (cuco_tile_gemm.cuh's FusedGemm, and the same prebuilt,
// cuco_tile_gemm_lib.h's FusedGemmLib). Pointers: x = this rank's rows [R, K]; g[0], g[1] = the
// two gathered buffers [M, K] (launch e uses g[e % 2], so a peer can fill the next launch's
// buffer while this one is read); b = [K, N]; y = [M, N]; flags = RowLayout::flag_count()
// counters in this rank's memory.
struct Setup {
  RowLayout layout;
  const void* x = nullptr;
  const void* g[2] = {nullptr, nullptr};
  const void* b = nullptr;
  void* y = nullptr;
  const unsigned long long* flags = nullptr;
  unsigned long long signals = 1;  // flag increments per chunk and launch
  TileOrder order = TileOrder::Auto;
  int reserved_sms = 0;             // SMs left free for a communication kernel
  Trace trace{nullptr, 0};
  int site = 0;
};

// ---------------------------------------------------------------- movers

// Stream-ordered 64-bit flag writes (cuStreamWriteValue64, found through the runtime's driver
// entry point, so nothing links libcuda). Such a write needs no SM: it can land while a
// persistent kernel holds every SM, and by default it is fenced after the stream's earlier work
// (a copy's bytes are visible before the flag that announces them). It works on CUDA-IPC peer
// pointers.
// A 64-bit stream memory operation's driver entry point (cuStreamWriteValue64, cuStreamWaitValue64).
using StreamValue64Fn = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);

inline cudaError_t stream_value64_entry(const char* symbol, StreamValue64Fn* out) {
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  void* fn = nullptr;
  const cudaError_t e = cudaGetDriverEntryPointByVersion(symbol, &fn, 12000, cudaEnableDefault, &found);
  if (e != cudaSuccess) return e;
  if (found != cudaDriverEntryPointSuccess || fn == nullptr) return cudaErrorSymbolNotFound;
  *out = reinterpret_cast<StreamValue64Fn>(fn);
  return cudaSuccess;
}

class FlagWriter {
 public:
  cudaError_t init() { return stream_value64_entry("cuStreamWriteValue64", &fn_); }

  // 0 (CUDA_SUCCESS) or the driver's error code.
  int post(cudaStream_t stream, unsigned long long* flag, unsigned long long value) const {
    return (int)fn_((CUstream)stream, (CUdeviceptr)flag, (cuuint64_t)value, 0);
  }

 private:
  StreamValue64Fn fn_ = nullptr;
};

// Stream-ordered waits on a 64-bit flag (cuStreamWaitValue64, GEQ), the counterpart of
// FlagWriter: the stream's later work starts once the flag reaches `value`, with no SM spinning
// (a copy stream can wait while a persistent GEMM holds every SM). Meant for this rank's own
// memory, written by a peer's FlagWriter.
class FlagWaiter {
 public:
  cudaError_t init() { return stream_value64_entry("cuStreamWaitValue64", &fn_); }

  // 0 (CUDA_SUCCESS) or the driver's error code.
  int wait_geq(cudaStream_t stream, const unsigned long long* flag, unsigned long long value) const {
    return (int)fn_((CUstream)stream, (CUdeviceptr)flag, (cuuint64_t)value, CU_STREAM_WAIT_VALUE_GEQ);
  }

 private:
  StreamValue64Fn fn_ = nullptr;
};

// A copy on the copy engines. A plain cudaMemcpyAsync between two buffers of one GPU (ranks
// sharing a GPU, or a rank's own rows) may run as a copy kernel on the SMs, which a persistent
// GEMM spinning on every SM would starve for good; cudaMemcpyBatchAsync with
// cudaMemcpyFlagPreferOverlapWithCompute asks for the copy engines (a hint, which CUDA 13 follows
// for device memory: no SM used, peer copies at full NVLink speed). Stream-ordered like any copy.
inline cudaError_t ce_copy(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
#if CUDART_VERSION >= 12080
  void* dsts[1] = {dst};
  const void* srcs[1] = {src};
  size_t sizes[1] = {bytes};
  cudaMemcpyAttributes attr = {};
  attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  attr.flags = cudaMemcpyFlagPreferOverlapWithCompute;
  size_t first = 0;
  return cudaMemcpyBatchAsync(dsts, srcs, sizes, 1, &attr, &first, 1, stream);
#else
  return cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream);
#endif
}

// A copy of `rows` rows of `width` bytes, `dpitch` / `spitch` bytes apart, on the copy engines:
// a K slice of a row chunk. cudaMemcpy3DBatchAsync takes the same overlap-with-compute hint as
// ce_copy's batch (a plain cudaMemcpy2DAsync within one GPU may run on the SMs).
inline cudaError_t ce_copy_2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t rows,
                              cudaStream_t stream) {
#if CUDART_VERSION >= 12080
  cudaMemcpy3DBatchOp op = {};
  op.src.type = cudaMemcpyOperandTypePointer;
  op.src.op.ptr.ptr = const_cast<void*>(src);
  op.src.op.ptr.rowLength = spitch;  // in elements of one byte
  op.dst.type = cudaMemcpyOperandTypePointer;
  op.dst.op.ptr.ptr = dst;
  op.dst.op.ptr.rowLength = dpitch;
  op.extent = make_cudaExtent(width, rows, 1);
  op.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  op.flags = cudaMemcpyFlagPreferOverlapWithCompute;
  return cudaMemcpy3DBatchAsync(1, &op, 0, stream);
#else
  return cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, rows, cudaMemcpyDeviceToDevice, stream);
#endif
}

// A store kernel's plan: step s pushes this rank's shard to one receiver.
struct PushPlan {
  uint4* dst[kMaxPeers];                   // receiver's G + this rank's shard offset
  unsigned long long* flags[kMaxPeers];    // receiver's flags + flag_index(this rank, 0)
  int k_slices;                            // RowLayout::k_slices: the flag slots per chunk (0 reads as 1)
  int steps;
  int chunk_major;                         // 1 (Fanout::All): chunk c to every receiver before chunk c+1
};

#ifdef __CUDACC__
// SM-driven mover: every CTA copies its share of each chunk with 16-byte loads and stores
// (4 in flight per thread), fences its stores at system scope, and adds one to the chunk's flag
// at the receiver: the receiver's GEMM waits for gridDim.x additions per chunk and launch. It
// moves a chunk whole: a last chunk cut along K gets every slice's flag once the chunk is there.
template <int kThreads>
__global__ void __launch_bounds__(kThreads) push_chunks(PushPlan plan, const uint4* __restrict__ src,
                                                         int64_t chunk_vecs, int64_t shard_vecs, int chunks) {
  const int64_t stride = (int64_t)gridDim.x * kThreads;
  const int pieces = plan.steps * chunks;
  for (int piece = 0; piece < pieces; ++piece) {
    const int s = plan.chunk_major ? piece % plan.steps : piece / chunks;
    const int c = plan.chunk_major ? piece / plan.steps : piece % chunks;
    uint4* __restrict__ dst = plan.dst[s];
    {
      const int64_t lo = (int64_t)c * chunk_vecs;
      const int64_t hi = min(lo + chunk_vecs, shard_vecs);
      int64_t i = lo + (int64_t)blockIdx.x * kThreads + threadIdx.x;
      for (; i + 3 * stride < hi; i += 4 * stride) {
        const uint4 v0 = src[i], v1 = src[i + stride], v2 = src[i + 2 * stride], v3 = src[i + 3 * stride];
        dst[i] = v0;
        dst[i + stride] = v1;
        dst[i + 2 * stride] = v2;
        dst[i + 3 * stride] = v3;
      }
      for (; i < hi; i += stride) dst[i] = src[i];
      __threadfence_system();
      __syncthreads();
      if (threadIdx.x == 0) {
        const int per_chunk = plan.k_slices > 0 ? plan.k_slices : 1;  // a plan written before k_slices: 0
        const int slots = c == chunks - 1 ? per_chunk : 1;
        for (int q = 0; q < slots; ++q) atomic_add_release(&plan.flags[s][c * per_chunk + q], 1ull);
      }
    }
  }
}

// One mover CTA per SM: the dynamic shared memory each asks for (and never touches) keeps two
// from sharing an SM, so the copy spreads over as many SMs as it has CTAs (an SM's own store
// throughput, not the link, limits a small mover). Call once before launching with it.
constexpr int kPushSmemBytes = 120 * 1024;
template <int kThreads>
inline cudaError_t prepare_push() {
  return cudaFuncSetAttribute(push_chunks<kThreads>, cudaFuncAttributeMaxDynamicSharedMemorySize, kPushSmemBytes);
}
#endif  // __CUDACC__

}  // namespace tile_gemm
}  // namespace cuco

#endif  // CUCO_ARRIVAL_CUH_
