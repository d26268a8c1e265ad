// gemm_allgather candidate. Every rank r of W computes Y_r[M, N/W] = AllGather(X)[M, K] @ B_r[K, N/W]
// (bf16 in and out, fp32 accumulation, row-major). Harness buffers: inputs "x" (this rank's
// rows X_r [M/W, K]) and "b" (B_r [K, N/W]), output "y" [M, N/W]. Dimensions "M", "K", "N".
// Everything outside the EVOLVE blocks is frozen: the C ABI below is what the harness calls.
#include "cuco_runtime.cuh"

// EVOLVE-BLOCK-START
// cuco-design: backend=copy_engine placement=fused sync=per_chunk issuer=host chunk=4 streams=2 comm_sms=0
// A fused AllGather + GEMM with a compute kernel of its own (not the runtime's FusedGemm): each
// CTA owns kCols output columns and walks the rows of G in the order they land: its own rows
// first (read straight from x), then each peer's shard chunk by chunk, waiting with
// cuco::wait_geq on that chunk's arrival flag before multiplying its rows. The shards travel by
// cudaMemcpyAsync into the peers' gather buffers (CUDA-IPC pointers) on a second stream, each
// chunk followed by a stream-ordered flag write (FlagWriter, cuStreamWriteValue64) into the
// peer's flags. Flags count up across launches (launch e waits for e): nothing is reset.
// A test candidate for the classifier: simple, not fast.
#include <cuda_bf16.h>

#include "cuco_arrival.cuh"

constexpr int kChunks = 4;
constexpr int kCols = 128;  // threads per CTA, one output column each

__global__ void gemm_as_rows_land(const __nv_bfloat16* g, const __nv_bfloat16* x, const __nv_bfloat16* b,
                                  __nv_bfloat16* y, const unsigned long long* flags, unsigned long long epoch,
                                  int64_t K, int64_t N, int64_t rows_per_rank, int64_t chunk_rows, int rank, int world,
                                  cuco::Trace trace) {
  const int64_t col = (int64_t)blockIdx.x * kCols + threadIdx.x;
  for (int step = 0; step < world; ++step) {
    const int p = (rank - step + world) % world;  // own rows first, then rank-1's, rank-2's, ...
    for (int c = 0; c < kChunks; ++c) {
      const int64_t lo = c * chunk_rows, hi = min(lo + chunk_rows, rows_per_rank);
      if (lo >= hi) break;
      if (step > 0 && threadIdx.x == 0)
        cuco::wait_geq<unsigned long long>(trace, CUCO_SITE, p, (uint64_t)c, &flags[p * kChunks + c], epoch);
      __syncthreads();
      for (int64_t row = lo; row < hi && col < N; ++row) {
        const __nv_bfloat16* a = step == 0 ? x + row * K : g + (p * rows_per_rank + row) * K;
        float acc = 0.0f;
        for (int64_t k = 0; k < K; ++k) acc = fmaf(__bfloat162float(a[k]), __bfloat162float(b[k * N + col]), acc);
        y[(p * rows_per_rank + row) * N + col] = __float2bfloat16(acc);
      }
    }
  }
}

struct Candidate {
  cuco_ctx* ctx;
  ncclComm_t comm;
  cudaStream_t copy_stream;
  cudaEvent_t forked, copies_done;
  cuco::PeerBuffers gathered;  // [M, K] bf16 per rank
  cuco::PeerBuffers flags;     // world * kChunks arrival counters per rank
  cuco::tile_gemm::FlagWriter writer;
  int64_t M, K, N, rows_per_rank, chunk_rows;
  unsigned long long epoch;
};

static int candidate_init(cuco_ctx* ctx, Candidate** out) {
  Candidate* c = new Candidate{};
  *out = c;
  c->ctx = ctx;
  c->M = cuco::dim(ctx, "M");
  c->K = cuco::dim(ctx, "K");
  c->N = cuco::dim(ctx, "N") / ctx->world;
  c->rows_per_rank = c->M / ctx->world;
  c->chunk_rows = (c->rows_per_rank + kChunks - 1) / kChunks;
  CUCO_TRY(cuco::comm_init(ctx, &c->comm));
  CUCO_TRY_CUDA(ctx, cudaStreamCreateWithFlags(&c->copy_stream, cudaStreamNonBlocking));
  CUCO_TRY_CUDA(ctx, cudaEventCreateWithFlags(&c->forked, cudaEventDisableTiming));
  CUCO_TRY_CUDA(ctx, cudaEventCreateWithFlags(&c->copies_done, cudaEventDisableTiming));
  CUCO_TRY_CUDA(ctx, c->writer.init());
  CUCO_TRY(cuco::peer_alloc(ctx, c->comm, (size_t)c->M * c->K * 2, c->copy_stream, &c->gathered));
  const size_t flag_bytes = (size_t)ctx->world * kChunks * sizeof(unsigned long long);
  CUCO_TRY(cuco::peer_alloc(ctx, c->comm, flag_bytes, c->copy_stream, &c->flags));
  // Zeroed before any rank can post: the harness runs a collective between init and launch.
  CUCO_TRY_CUDA(ctx, cudaMemsetAsync(c->flags.local, 0, flag_bytes, c->copy_stream));
  CUCO_TRY_CUDA(ctx, cudaStreamSynchronize(c->copy_stream));
  return 0;
}

static int candidate_launch(Candidate* c, cudaStream_t stream) {
  cuco_ctx* ctx = c->ctx;
  const int W = ctx->world, r = ctx->rank;
  const unsigned long long e = ++c->epoch;
  const size_t row_bytes = (size_t)c->K * 2;
  const char* x = (const char*)cuco::input(ctx, "x")->ptr;
  // The previous launch is finished at this point of `stream`: its readers of G are done.
  CUCO_TRY_CUDA(ctx, cudaEventRecord(c->forked, stream));
  CUCO_TRY_CUDA(ctx, cudaStreamWaitEvent(c->copy_stream, c->forked, 0));
  for (int step = 1; step < W; ++step) {
    const int p = (r + step) % W;  // rank p expects rank r's rows at this step
    char* dst = (char*)c->gathered.peers[p] + r * c->rows_per_rank * row_bytes;
    unsigned long long* peer_flags = (unsigned long long*)c->flags.peers[p];
    for (int k = 0; k < kChunks; ++k) {
      const int64_t lo = k * c->chunk_rows, rows = std::min(c->chunk_rows, c->rows_per_rank - lo);
      if (rows <= 0) break;
      CUCO_TRY_CUDA(ctx, cudaMemcpyAsync(dst + lo * row_bytes, x + lo * row_bytes, rows * row_bytes,
                                         cudaMemcpyDeviceToDevice, c->copy_stream));
      if (int rc = c->writer.post(c->copy_stream, &peer_flags[r * kChunks + k], e))
        return cuco::fail(ctx, "cuStreamWriteValue64 (chunk %d to rank %d) failed: CUresult %d", k, p, rc);
    }
  }
  const dim3 grid((unsigned)((c->N + kCols - 1) / kCols));
  gemm_as_rows_land<<<grid, kCols, 0, stream>>>(
      (const __nv_bfloat16*)c->gathered.local, (const __nv_bfloat16*)x, (const __nv_bfloat16*)cuco::input(ctx, "b")->ptr,
      (__nv_bfloat16*)cuco::output(ctx, "y")->ptr, (const unsigned long long*)c->flags.local, e, c->K, c->N,
      c->rows_per_rank, c->chunk_rows, r, W, cuco::trace_of(ctx));
  CUCO_TRY_CUDA(ctx, cudaGetLastError());
  CUCO_TRY_CUDA(ctx, cudaEventRecord(c->copies_done, c->copy_stream));
  CUCO_TRY_CUDA(ctx, cudaStreamWaitEvent(stream, c->copies_done, 0));
  return 0;
}

static int candidate_teardown(Candidate* c) {
  cuco_ctx* ctx = c->ctx;
  CUCO_TRY_CUDA(ctx, cudaDeviceSynchronize());
  CUCO_TRY(cuco::peer_free(ctx, &c->flags));
  CUCO_TRY(cuco::peer_free(ctx, &c->gathered));
  CUCO_TRY_CUDA(ctx, cudaEventDestroy(c->forked));
  CUCO_TRY_CUDA(ctx, cudaEventDestroy(c->copies_done));
  CUCO_TRY_CUDA(ctx, cudaStreamDestroy(c->copy_stream));
  CUCO_TRY_NCCL(ctx, ncclCommDestroy(c->comm));
  delete c;
  return 0;
}
// EVOLVE-BLOCK-END

CUCO_EXPORT int cuco_init(cuco_ctx* ctx, void** state) {
  Candidate* c = nullptr;
  int rc = candidate_init(ctx, &c);
  *state = c;
  return rc;
}

CUCO_EXPORT int cuco_launch(void* state, cudaStream_t stream) {
  return candidate_launch(static_cast<Candidate*>(state), stream);
}

CUCO_EXPORT int cuco_teardown(void* state) {
  return state ? candidate_teardown(static_cast<Candidate*>(state)) : 0;
}
