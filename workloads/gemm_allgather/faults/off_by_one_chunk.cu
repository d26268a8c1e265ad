// gemm_allgather candidate. Every rank r of W computes Y_r[M, N/W] = AllGather(X)[M, K] @ B_r[K, N/W]
// (bf16 in and out, fp32 accumulation, row-major). Harness buffers: inputs "x" (this rank's
// rows X_r [M/W, K]) and "b" (B_r [K, N/W]), output "y" [M, N/W]. Dimensions "M", "K", "N".
// Everything outside the EVOLVE blocks is frozen: the C ABI below is what the harness calls.
#include "cuco_runtime.cuh"

// EVOLVE-BLOCK-START
// cuco-design: backend=copy_engine placement=interleaved sync=per_chunk issuer=host chunk=4 streams=2 comm_sms=0
// FAULT (off-by-one chunk): the last chunk sent to each peer is one row short.
#include <cublas_v2.h>

constexpr int kChunks = 4;
constexpr int kSignalsPerChunk = 1;  // one flag post after each copy

struct Flags {
  unsigned long long ready[cuco::kMaxPeers];    // ready[p] = launch number: rank p may write into me
  unsigned long long arrived[cuco::kMaxPeers];  // arrived[p]: signals received from rank p, ever
};

enum FlagKind { kReady = 0, kArrived = 1 };

__global__ void post_ready(Flags* peer_flags, int rank, unsigned long long epoch) {
  cuda::atomic_ref<unsigned long long, cuda::thread_scope_system> ref(peer_flags->ready[rank]);
  ref.store(epoch, cuda::memory_order_release);
}

__global__ void wait_flag(const Flags* mine, int kind, int peer, unsigned long long target, cuco::Trace trace) {
  const unsigned long long* f = kind == kReady ? &mine->ready[peer] : &mine->arrived[peer];
  cuco::wait_geq<unsigned long long>(trace, CUCO_SITE, peer, (uint64_t)kind, f, target);
}

__global__ void post_arrived(Flags* peer_flags, int rank) {
  cuda::atomic_ref<unsigned long long, cuda::thread_scope_system> ref(peer_flags->arrived[rank]);
  ref.fetch_add(1ull, cuda::memory_order_release);
}

struct Candidate {
  cuco_ctx* ctx;
  ncclComm_t comm;
  cublasHandle_t blas_main;
  cudaStream_t copy_stream;
  cudaEvent_t forked, copies_done;
  cuco::PeerBuffers gathered;  // [M, K] bf16 per rank; peers write their shards here
  cuco::PeerBuffers flags;     // one Flags per rank
  unsigned long long epoch;
  int64_t M, K, N, chunk_rows;
};

static int candidate_init(cuco_ctx* ctx, Candidate** out) {
  Candidate* c = new Candidate{};
  *out = c;
  c->ctx = ctx;
  c->M = cuco::dim(ctx, "M");
  c->K = cuco::dim(ctx, "K");
  c->N = cuco::dim(ctx, "N");
  const int64_t rows = c->M / ctx->world;
  if (rows % kChunks != 0)
    return cuco::fail(ctx, "%lld rows per rank do not split into %d chunks", (long long)rows, kChunks);
  c->chunk_rows = rows / kChunks;
  if ((c->chunk_rows * c->K * 2) % 16 != 0) return cuco::fail(ctx, "a chunk is not a whole number of 16-byte vectors");
  CUCO_TRY(cuco::comm_init(ctx, &c->comm));
  CUCO_TRY_CUDA(ctx, cudaStreamCreateWithFlags(&c->copy_stream, cudaStreamNonBlocking));
  CUCO_TRY_CUDA(ctx, cudaEventCreateWithFlags(&c->forked, cudaEventDisableTiming));
  CUCO_TRY_CUDA(ctx, cudaEventCreateWithFlags(&c->copies_done, cudaEventDisableTiming));
  CUCO_TRY_CUBLAS(ctx, cublasCreate(&c->blas_main));
  CUCO_TRY(cuco::peer_alloc(ctx, c->comm, (size_t)c->M * c->K * 2, c->copy_stream, &c->gathered));
  CUCO_TRY(cuco::peer_alloc(ctx, c->comm, sizeof(Flags), c->copy_stream, &c->flags));
  // Zeroed before any rank can post: the harness runs a collective between init and launch.
  CUCO_TRY_CUDA(ctx, cudaMemsetAsync(c->flags.local, 0, sizeof(Flags), c->copy_stream));
  CUCO_TRY_CUDA(ctx, cudaStreamSynchronize(c->copy_stream));
  return 0;
}

// Y rows [row0, row0 + rows) = A[rows, K] @ B_r; column-major: m = N/W, n = rows, k = K.
static int gemm_rows(Candidate* c, cublasHandle_t h, const void* a, int64_t row0, int64_t rows) {
  cuco_ctx* ctx = c->ctx;
  const int n_local = (int)(c->N / ctx->world);
  const float alpha = 1.0f, beta = 0.0f;
  char* y = (char*)cuco::output(ctx, "y")->ptr + (size_t)row0 * n_local * 2;
  CUCO_TRY_CUBLAS(ctx, cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n_local, (int)rows, (int)c->K, &alpha,
                                    cuco::input(ctx, "b")->ptr, CUDA_R_16BF, n_local, a, CUDA_R_16BF, (int)c->K,
                                    &beta, y, CUDA_R_16BF, n_local, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return 0;
}

static int candidate_launch(Candidate* c, cudaStream_t stream) {
  cuco_ctx* ctx = c->ctx;
  const int W = ctx->world, r = ctx->rank;
  const int64_t rows = c->M / W;
  const size_t shard_bytes = (size_t)rows * c->K * 2;
  const size_t chunk_bytes = (size_t)c->chunk_rows * c->K * 2;
  const char* x = (const char*)cuco::input(ctx, "x")->ptr;
  const cuco::Trace trace = cuco::trace_of(ctx);
  const unsigned long long e = ++c->epoch;
  // Every GEMM of the previous launch is finished at this point of `stream`: our buffer is free.
  for (int p = 0; p < W; ++p)
    if (p != r) post_ready<<<1, 1, 0, stream>>>((Flags*)c->flags.peers[p], r, e);
  CUCO_TRY_CUDA(ctx, cudaEventRecord(c->forked, stream));
  CUCO_TRY_CUDA(ctx, cudaStreamWaitEvent(c->copy_stream, c->forked, 0));
  for (int i = 1; i < W; ++i) {
    const int p = (r + i) % W;  // ring order: every rank starts with a different peer
    wait_flag<<<1, 1, 0, c->copy_stream>>>((const Flags*)c->flags.local, kReady, p, e, trace);
    for (int k = 0; k < kChunks; ++k) {
      char* dst = (char*)c->gathered.peers[p] + r * shard_bytes + k * chunk_bytes;
      const size_t bytes = k == kChunks - 1 ? chunk_bytes - c->K * 2 : chunk_bytes;
      CUCO_TRY_CUDA(ctx, cudaMemcpyAsync(dst, x + k * chunk_bytes, bytes, cudaMemcpyDeviceToDevice, c->copy_stream));
      post_arrived<<<1, 1, 0, c->copy_stream>>>((Flags*)c->flags.peers[p], r);
    }
  }
  CUCO_TRY_CUDA(ctx, cudaEventRecord(c->copies_done, c->copy_stream));
  CUCO_TRY_CUBLAS(ctx, cublasSetStream(c->blas_main, stream));
  CUCO_TRY(gemm_rows(c, c->blas_main, x, r * rows, rows));
  for (int i = 1; i < W; ++i) {
    const int p = (r - i + W) % W;  // the peer that pushes to us first
    for (int k = 0; k < kChunks; ++k) {
      const unsigned long long target = ((e - 1) * kChunks + k + 1) * (unsigned long long)kSignalsPerChunk;
      wait_flag<<<1, 1, 0, stream>>>((const Flags*)c->flags.local, kArrived, p, target, trace);
      const int64_t row0 = p * rows + k * c->chunk_rows;
      CUCO_TRY(gemm_rows(c, c->blas_main, (const char*)c->gathered.local + row0 * c->K * 2, row0, c->chunk_rows));
    }
  }
  CUCO_TRY_CUDA(ctx, cudaGetLastError());
  CUCO_TRY_CUDA(ctx, cudaStreamWaitEvent(stream, c->copies_done, 0));
  return 0;
}

static int candidate_teardown(Candidate* c) {
  cuco_ctx* ctx = c->ctx;
  CUCO_TRY_CUDA(ctx, cudaDeviceSynchronize());
  CUCO_TRY(cuco::peer_free(ctx, &c->flags));
  CUCO_TRY(cuco::peer_free(ctx, &c->gathered));
  CUCO_TRY_CUBLAS(ctx, cublasDestroy(c->blas_main));
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
