// cuco_tile_gemm.cuh: a persistent Hopper GEMM whose tiles wait for their rows to arrive.
//
// Y[M, N] = A[M, K] @ B[K, N] (bf16 in and out, fp32 accumulation, all row-major), where the
// rows of A arrive over time: A is a gathered buffer G whose row chunks land one after another
// (an all-gather's shards, cut into chunks), each chunk announced by an arrival flag in memory
// peers can write. One warp-specialized kernel (CUTLASS's sm90 TMA + wgmma mainloop and TMA
// epilogue, cooperative: one producer warp group, two consumer warp groups) runs the tiles in
// the order their rows arrive; before loading the A tiles of a row chunk, the producer waits
// for that chunk's flag (acquire load at system scope, then a proxy fence so the TMA engine's
// reads are ordered after it). Consumers never wait on flags: they wait on the shared-memory
// pipeline as in any CUTLASS kernel, so a late chunk stalls only the CTAs whose tiles need it.
//
// Used by agent-written candidates, by benchmarks/fused_gemm.py and, built once per machine and
// configuration, by the library behind cuco_tile_gemm_lib.h (which the gemm_allgather template
// `fused_tile` links: a candidate then compiles in seconds): the same code everywhere.
//
// Needs sm_90a, the CUTLASS 4.2 headers and -DNDEBUG (with asserts on, ptxas serializes the
// wgmma pipeline); cuco's toolchain adds all three to any candidate that includes this header.
//
// The rows, flags, arrival order, the wait and the movers: cuco_arrival.cuh (no CUTLASS).
#ifndef CUCO_TILE_GEMM_CUH_
#define CUCO_TILE_GEMM_CUH_

#ifndef NDEBUG
#error "cuco_tile_gemm.cuh needs -DNDEBUG: CUTLASS's asserts make ptxas serialize the wgmma pipeline (cuco's toolchain adds it)"
#endif

#include <algorithm>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <vector>

#include <cute/tensor.hpp>
#include <cute/arch/cluster_sm90.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/arch/reg_reconfig.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/pipeline/pipeline.hpp>

#include "cuco_arrival.cuh"

namespace cuco {
namespace tile_gemm {

// ---------------------------------------------------------------- configuration (types)

// One kernel configuration: CTA tile BM x BN (x 64 along K), cluster CM x CN. The cooperative
// schedule splits BM between the two consumer warp groups, so BM is 128 or 256.
template <int BM, int BN, int CM, int CN>
struct Config {
  static constexpr int kBlockM = BM;
  static constexpr int kBlockN = BN;
  static constexpr int kBlockK = 64;
  static constexpr int kClusterM = CM;
  static constexpr int kClusterN = CN;
  static constexpr int kClusterSize = CM * CN;
  static constexpr int kThreads = 384;  // one producer warp group, two consumer warp groups

  using Element = cutlass::bfloat16_t;
  using TileShape = cute::Shape<cute::Int<BM>, cute::Int<BN>, cute::Int<64>>;
  using ClusterShape = cute::Shape<cute::Int<CM>, cute::Int<CN>, cute::_1>;

  // D = acc (alpha 1, no C): a source-less epilogue, stored through shared memory by TMA.
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float,
      void, cutlass::layout::RowMajor, 8,
      Element, cutlass::layout::RowMajor, 8,
      cutlass::epilogue::TmaWarpSpecializedCooperative>::CollectiveOp;

  // A [M, K] row-major (K-major), B [K, N] row-major (N-major), stages filling what the
  // epilogue leaves of shared memory.
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
      Element, cutlass::layout::RowMajor, 8,
      Element, cutlass::layout::RowMajor, 8,
      float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;

  using TiledMma = typename Mainloop::TiledMma;
  using StrideA = typename Mainloop::StrideA;
  using StrideB = typename Mainloop::StrideB;
  using StrideD = typename Epilogue::StrideD;

  struct SharedStorage {
    struct Pipelines {
      alignas(16) typename Mainloop::PipelineStorage mainloop;
      alignas(16) typename Epilogue::PipelineStorage epi_load;
    } pipelines;
    struct Tensors {  // aligned by its members (the swizzled stage buffers)
      typename Epilogue::TensorStorage epilogue;
      typename Mainloop::TensorStorage mainloop;
    } tensors;
  };

  // Accumulator registers per consumer thread decide how registers are split between roles,
  // as CUTLASS's own cooperative kernel does.
  static constexpr int kAccRegs = BM * BN / 256;
  static constexpr int kLoadRegs = kAccRegs >= 208 ? 24 : 40;
  static constexpr int kMmaRegs = kAccRegs >= 208 ? 240 : 232;

  static_assert(BM == 128 || BM == 256, "the cooperative schedule needs a tile height of 128 or 256");
  static_assert(sizeof(SharedStorage) <= 227 * 1024, "tile and stages exceed shared memory");
};

template <class Cfg>
struct Params {
  typename Cfg::Mainloop::Params load_g;  // A = G [M, K]
  typename Cfg::Mainloop::Params load_x;  // A = X [R, K], this rank's own rows (when own_from_x)
  typename Cfg::Epilogue::Params store;   // D = Y [M, N]
  int64_t M, N, K;
  Schedule schedule;
  Arrival arrival;
};

#ifdef __CUDACC__

template <class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1) fused_gemm_kernel(CUTE_GRID_CONSTANT Params<Cfg> const p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace cute;
  using Mainloop = typename Cfg::Mainloop;
  using Epilogue = typename Cfg::Epilogue;
  using MainloopPipeline = typename Mainloop::MainloopPipeline;
  using EpiLoadPipeline = typename Epilogue::LoadPipeline;
  using EpiStorePipeline = typename Epilogue::StorePipeline;
  using ClusterShape = typename Cfg::ClusterShape;
  constexpr int kMmaThreads = 256;

  extern __shared__ __align__(128) char smem_raw[];
  auto& shared = *reinterpret_cast<typename Cfg::SharedStorage*>(smem_raw);

  const int thread_idx = threadIdx.x;
  const int warp_idx = cutlass::canonical_warp_idx_sync();
  const int warp_group = cutlass::canonical_warp_group_idx();  // 0 producer, 1 and 2 consumers
  const int warp_in_group = warp_idx % 4;
  const uint32_t rank_in_cluster = cute::block_rank_in_cluster();
  const int cta_m = blockIdx.x % Cfg::kClusterM;
  const int cta_n = blockIdx.y;  // gridDim.y == kClusterN
  const int cluster = blockIdx.x / Cfg::kClusterM;
  const int clusters = gridDim.x / Cfg::kClusterM;

  if (warp_idx == 0 && cute::elect_one_sync()) {
    Mainloop::prefetch_tma_descriptors(p.load_g);
    if (p.arrival.own_from_x) Mainloop::prefetch_tma_descriptors(p.load_x);
    Epilogue::prefetch_tma_descriptors(p.store);
  }

  typename MainloopPipeline::Params mp;
  if (warp_group == 0 && warp_in_group == 0) mp.role = MainloopPipeline::ThreadCategory::Producer;
  if (warp_group > 0) mp.role = MainloopPipeline::ThreadCategory::Consumer;
  mp.is_leader = (thread_idx % 128) == 0;
  mp.num_consumers = kMmaThreads;
  mp.num_producers = Mainloop::NumProducerThreadEvents;
  mp.transaction_bytes = p.load_g.tma_transaction_bytes;
  MainloopPipeline pipeline(shared.pipelines.mainloop, mp, ClusterShape{});

  // The epilogue has no source (C), so its load pipeline carries nothing; it is built because
  // the store interface takes it.
  typename EpiLoadPipeline::Params ep;
  if (warp_group > 0) ep.role = EpiLoadPipeline::ThreadCategory::Consumer;
  ep.dst_blockid = rank_in_cluster;
  ep.producer_arv_count = 32;
  ep.consumer_arv_count = kMmaThreads;
  if constexpr (Epilogue::RequiresTransactionBytes) ep.transaction_bytes = p.store.tma_transaction_bytes;
  EpiLoadPipeline epi_load(shared.pipelines.epi_load, ep);
  typename EpiStorePipeline::Params sp;
  sp.always_wait = true;
  EpiStorePipeline epi_store(sp);

  // Every CTA of the cluster must see the barriers initialized before any multicast arrives.
  if constexpr (Cfg::kClusterSize > 1) {
    cute::cluster_arrive_relaxed();
    cute::cluster_wait();
  } else {
    __syncthreads();
  }

  const auto shape_g = make_shape((int)p.M, (int)p.N, (int)p.K, 1);
  const int k_tiles = (int)((p.K + Cfg::kBlockK - 1) / Cfg::kBlockK);
  Mainloop mainloop;
  const int64_t rows_x0 = p.arrival.own_from_x ? (int64_t)p.arrival.own_rank * p.arrival.rows_per_rank : -1;
  const int64_t rows_x1 = p.arrival.own_from_x ? rows_x0 + p.arrival.rows_per_rank : -1;

  if (warp_group == 0) {
    cutlass::arch::warpgroup_reg_dealloc<Cfg::kLoadRegs>();
    if (warp_in_group == 0) {
      auto inputs_g = mainloop.load_init(shape_g, p.load_g);
      auto inputs_x = mainloop.load_init(make_shape((int)p.arrival.rows_per_rank, (int)p.N, (int)p.K, 1), p.load_x);
      auto write = cutlass::make_producer_start_state<MainloopPipeline>();
      uint64_t ready_lo = 0, ready_hi = 0;  // flags this CTA found ready (bit = flag index)
      for (int t = cluster; t < p.schedule.tiles; t += clusters) {
        int crow, ccol;
        cluster_tile(p.schedule, t, crow, ccol);
        const int m_block = crow * Cfg::kClusterM + cta_m;
        const int n_block = ccol * Cfg::kClusterN + cta_n;
        const int64_t row0 = (int64_t)m_block * Cfg::kBlockM;
        const bool from_x = row0 >= rows_x0 && row0 < rows_x1;
        if (from_x) {
          auto k_iter = cute::make_coord_iterator(shape<3>(get<0>(inputs_g)));
          const int m_local = (int)((row0 - rows_x0) / Cfg::kBlockM);
          mainloop.load(p.load_x, pipeline, write, inputs_x, make_coord(m_local, n_block, _, 0), k_iter, k_tiles,
                        thread_idx, rank_in_cluster, shared.tensors.mainloop);
          write.advance(k_tiles);
          continue;
        }
        // Slice by slice: a slice's K blocks load once its flag says they are here (a chunk that
        // is not cut along K has one flag: its later slices find it cached).
        const int64_t row1 = std::min<int64_t>(row0 + Cfg::kBlockM, p.M);
        for (int k0 = 0, slice = 0; k0 < k_tiles; ++slice) {
          const bool last = slice == p.arrival.k_slices - 1;
          const int n = last ? k_tiles - k0 : std::min(p.arrival.slice_tiles, k_tiles - k0);
          if (row0 < p.M) wait_rows(p.arrival, row0, row1, slice, ready_lo, ready_hi);
          auto k_iter = cute::make_coord_iterator(k0, shape<3>(get<0>(inputs_g)));
          mainloop.load(p.load_g, pipeline, write, inputs_g, make_coord(m_block, n_block, _, 0), k_iter, n,
                        thread_idx, rank_in_cluster, shared.tensors.mainloop);
          write.advance(n);
          k0 += n;
        }
      }
      // No CTA of the cluster may exit while a peer CTA can still multicast into it.
      mainloop.load_tail(pipeline, write);
    }
  } else {
    cutlass::arch::warpgroup_reg_alloc<Cfg::kMmaRegs>();
    typename Cfg::TiledMma tiled_mma;
    Epilogue epilogue(p.store, shared.tensors.epilogue);
    typename Mainloop::PipelineState read;
    typename Epilogue::LoadPipelineState epi_load_state;
    auto epi_store_state = cutlass::make_producer_start_state<EpiStorePipeline>();
    const int mma_thread = thread_idx % kMmaThreads;  // CUTLASS's numbering of the consumer threads
    bool stored = false;
    for (int t = cluster; t < p.schedule.tiles; t += clusters) {
      int crow, ccol;
      cluster_tile(p.schedule, t, crow, ccol);
      const int m_block = crow * Cfg::kClusterM + cta_m;
      const int n_block = ccol * Cfg::kClusterN + cta_n;
      auto acc = partition_fragment_C(tiled_mma, take<0, 2>(typename Cfg::TileShape{}));
      mainloop.mma(pipeline, read, acc, k_tiles, mma_thread, shared.tensors.mainloop, p.load_g);
      mainloop.mma_tail(pipeline, read, k_tiles);
      read.advance(k_tiles);
      auto [load_next, store_next] = epilogue.store(
          epi_load, epi_load_state, epi_store, epi_store_state, shape_g, typename Cfg::TileShape{},
          make_coord(m_block, n_block, _, 0), acc, tiled_mma, mma_thread, shared.tensors.epilogue);
      epi_load_state = load_next;
      epi_store_state = store_next;
      stored = true;
    }
    if (stored) epilogue.store_tail(epi_load, epi_load_state, epi_store, epi_store_state);
  }
#else
  if (threadIdx.x == 0 && blockIdx.x == 0) printf("cuco_tile_gemm: built without sm_90a\n");
#endif
}

#endif  // __CUDACC__

// The fused GEMM of one configuration, set up once per shape and launched once per iteration.
template <class Cfg>
class FusedGemm {
 public:
  using KernelParams = Params<Cfg>;

  // 0, or a nonzero code after writing a sentence into `error`.
  int init(const Setup& s, char* error, size_t error_len) {
    setup_ = s;
    const RowLayout& l = s.layout;
    if (l.K % 64 != 0 || l.N % 8 != 0)
      return fail(error, error_len, "K must be a multiple of 64 and N of 8 (TMA alignment): K=%lld N=%lld",
                  (long long)l.K, (long long)l.N);
    // K slices (the last chunk cut along K): whole K blocks, every slice non-empty, together all of K.
    const bool slices_cut_k = l.k_slices == 1 || (l.slice_k > 0 && (int64_t)(l.k_slices - 1) * l.slice_k < l.K &&
                                                  (int64_t)l.k_slices * l.slice_k >= l.K);
    if (l.k_slices < 1 || l.slice_k % Cfg::kBlockK != 0 || !slices_cut_k)
      return fail(error, error_len, "K slices: %d of %lld columns do not cut K=%lld in 64-column blocks", l.k_slices,
                  (long long)l.slice_k, (long long)l.K);
    cudaError_t e = cudaGetDevice(&device_);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device_);
    int l2 = 0;
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device_);
    smem_ = (int)sizeof(typename Cfg::SharedStorage);
    if (e == cudaSuccess)
      e = cudaFuncSetAttribute(fused_gemm_kernel<Cfg>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_);
    if (e != cudaSuccess) return fail(error, error_len, "fused GEMM setup: %s", cudaGetErrorString(e));

    const int m_blocks = (int)((l.M + Cfg::kBlockM - 1) / Cfg::kBlockM);
    const int n_blocks = (int)((l.N + Cfg::kBlockN - 1) / Cfg::kBlockN);
    const int cm = (m_blocks + Cfg::kClusterM - 1) / Cfg::kClusterM;
    const int cn = (n_blocks + Cfg::kClusterN - 1) / Cfg::kClusterN;
    const int tiles = cm * cn;

    // As many clusters as can be resident beside the reserved SMs, never more than tiles.
    cudaLaunchAttribute probe_attr;
    cudaLaunchConfig_t probe = launch_config(dim3(Cfg::kClusterM, Cfg::kClusterN, 1), nullptr, &probe_attr);
    int max_clusters = 0;
    e = cudaOccupancyMaxActiveClusters(&max_clusters, fused_gemm_kernel<Cfg>, &probe);
    if (e != cudaSuccess || max_clusters <= 0)
      return fail(error, error_len, "fused GEMM: no cluster of %dx%d CTAs with %d bytes of shared memory fits (%s)",
                  Cfg::kClusterM, Cfg::kClusterN, smem_, cudaGetErrorString(e));
    const int budget = (sm_count_ - s.reserved_sms) / Cfg::kClusterSize;
    if (budget < 1)
      return fail(error, error_len, "fused GEMM: %d reserved SMs leave no room for a cluster of %d", s.reserved_sms,
                  Cfg::kClusterSize);
    clusters_ = std::max(1, std::min({max_clusters, budget, tiles}));

    const std::vector<int> rows = arrival_rows(l, Cfg::kBlockM * Cfg::kClusterM, cm);
    e = cudaMalloc(&rows_dev_, rows.size() * sizeof(int));
    if (e == cudaSuccess) e = cudaMemcpy(rows_dev_, rows.data(), rows.size() * sizeof(int), cudaMemcpyHostToDevice);
    if (e != cudaSuccess) return fail(error, error_len, "fused GEMM schedule: %s", cudaGetErrorString(e));

    Schedule sched{rows_dev_, cm, cn,
                   band_rows(s.order, clusters_, cm, Cfg::kBlockM * Cfg::kClusterM, Cfg::kBlockN * Cfg::kClusterN,
                             l.K * l.N * 2, l2),
                   tiles};
    for (int parity = 0; parity < 2; ++parity) {
      KernelParams& kp = params_[parity];
      kp.M = l.M; kp.N = l.N; kp.K = l.K;
      kp.schedule = sched;
      kp.arrival = Arrival{s.flags, 0, l.rows_per_rank, l.chunk_rows, l.chunks, l.k_slices,
                           (int)(l.slice_k / Cfg::kBlockK), l.rank, l.own_from_x ? 1 : 0, s.site, s.trace};
      kp.load_g = mainloop_params(s.g[parity], s.b, l.M, l);
      kp.load_x = mainloop_params(l.own_from_x ? s.x : s.g[parity], s.b, l.own_from_x ? l.rows_per_rank : l.M, l);
      typename Cfg::Epilogue::Arguments ea{};
      ea.thread.alpha = 1.0f;
      ea.thread.beta = 0.0f;
      ea.ptr_C = nullptr;
      ea.ptr_D = static_cast<typename Cfg::Element*>(s.y);
      ea.dD = packed_stride_d(l.M, l.N);
      const auto shape = cute::make_shape((int)l.M, (int)l.N, (int)l.K, 1);
      if (!Cfg::Epilogue::can_implement(shape, ea) || !Cfg::Mainloop::can_implement(shape, mainloop_args(s.g[parity], s.b, l.M, l)))
        return fail(error, error_len, "fused GEMM: CUTLASS cannot implement M=%lld N=%lld K=%lld (alignment)",
                    (long long)l.M, (long long)l.N, (long long)l.K);
      kp.store = Cfg::Epilogue::to_underlying_arguments(shape, ea, nullptr);
    }
    return 0;
  }

  // Enqueue launch number `epoch` (1, 2, ...): reads g[epoch % 2], waits for flags >= epoch * signals.
  cudaError_t launch(cudaStream_t stream, unsigned long long epoch) {
    KernelParams& kp = params_[epoch % 2];
    kp.arrival.target = epoch * setup_.signals;
    cudaLaunchAttribute attr;
    cudaLaunchConfig_t cfg = launch_config(dim3(Cfg::kClusterM * clusters_, Cfg::kClusterN, 1), stream, &attr);
    return cudaLaunchKernelEx(&cfg, fused_gemm_kernel<Cfg>, kp);
  }

  void release() {
    if (rows_dev_) cudaFree(rows_dev_);
    rows_dev_ = nullptr;
  }

  int clusters() const { return clusters_; }
  int ctas() const { return clusters_ * Cfg::kClusterSize; }
  int smem_bytes() const { return smem_; }
  int band() const { return params_[0].schedule.band; }

 private:
  static int fail(char* error, size_t len, const char* fmt, ...) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(error, len, fmt, args);
    va_end(args);
    return 1;
  }

  // A launch of `grid` CTAs in clusters of CM x CN; `attr` holds the cluster attribute.
  cudaLaunchConfig_t launch_config(dim3 grid, cudaStream_t stream, cudaLaunchAttribute* attr) const {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(Cfg::kThreads, 1, 1);
    cfg.dynamicSmemBytes = smem_;
    cfg.stream = stream;
    attr->id = cudaLaunchAttributeClusterDimension;
    attr->val.clusterDim.x = Cfg::kClusterM;
    attr->val.clusterDim.y = Cfg::kClusterN;
    attr->val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cfg;
  }

  static typename Cfg::StrideD packed_stride_d(int64_t M, int64_t N) {
    typename Cfg::StrideD d{};
    cute::get<0>(d) = N;
    cute::get<2>(d) = M * N;
    return d;
  }

  static typename Cfg::Mainloop::Arguments mainloop_args(const void* a, const void* b, int64_t rows,
                                                         const RowLayout& l) {
    typename Cfg::StrideA da{};
    cute::get<0>(da) = l.K;
    cute::get<2>(da) = rows * l.K;
    typename Cfg::StrideB db{};
    cute::get<1>(db) = l.N;
    cute::get<2>(db) = l.K * l.N;
    typename Cfg::Mainloop::Arguments args{};
    args.ptr_A = static_cast<const typename Cfg::Element*>(a);
    args.dA = da;
    args.ptr_B = static_cast<const typename Cfg::Element*>(b);
    args.dB = db;
    return args;
  }

  static typename Cfg::Mainloop::Params mainloop_params(const void* a, const void* b, int64_t rows,
                                                        const RowLayout& l) {
    const auto shape = cute::make_shape((int)rows, (int)l.N, (int)l.K, 1);
    return Cfg::Mainloop::to_underlying_arguments(shape, mainloop_args(a, b, rows, l), nullptr);
  }

  Setup setup_;
  KernelParams params_[2] = {};
  int* rows_dev_ = nullptr;
  int device_ = 0, sm_count_ = 0, smem_ = 0, clusters_ = 0;
};

}  // namespace tile_gemm
}  // namespace cuco

#endif  // CUCO_TILE_GEMM_CUH_
