// gemm_allgather candidate. Every rank r of W computes Y_r[M, N/W] = AllGather(X)[M, K] @ B_r[K, N/W]
// (bf16 in and out, fp32 accumulation, row-major). Harness buffers: inputs "x" (this rank's
// rows X_r [M/W, K]) and "b" (B_r [K, N/W]), output "y" [M, N/W]. Dimensions "M", "K", "N".
// Everything outside the EVOLVE blocks is frozen: the C ABI below is what the harness calls.
#include "cuco_runtime.cuh"

// EVOLVE-BLOCK-START
// cuco-design: backend=copy_engine placement=interleaved sync=per_peer issuer=host chunk=shard streams=3 comm_sms=0
// Copy engines pull the shards: each rank stages its rows in a buffer of its own that the peers
// map (CUDA-IPC) and says so (staged); every peer copies them into its own gather buffer and says
// when it has (pulled), so that the stage may be refilled in the next launch. The staging copy
// and its signals run on a copy stream, the GEMM of the rank's own rows on a second stream from
// the start, and each peer's rows are multiplied as soon as they are pulled.
#include <cublas_v2.h>

struct Flags {
  unsigned long long staged[cuco::kMaxPeers];  // staged[p]: rank p's stage holds its rows of launch `epoch`
  unsigned long long pulled[cuco::kMaxPeers];  // pulled[p]: rank p has copied my stage of launch `epoch`
};

enum FlagKind { kStaged = 0, kPulled = 1 };

// Tell rank `peer` (through its Flags, mapped here by CUDA-IPC) that this rank reached `epoch`.
__global__ void post_flag(Flags* peer_flags, int kind, int rank, unsigned long long epoch) {
  unsigned long long* f = kind == kStaged ? &peer_flags->staged[rank] : &peer_flags->pulled[rank];
  cuda::atomic_ref<unsigned long long, cuda::thread_scope_system> ref(*f);
  ref.store(epoch, cuda::memory_order_release);
}

// `site`: where the host launched this wait, and the flag's name, for the deadlock report.
__global__ void wait_flag(const Flags* mine, int kind, int peer, unsigned long long epoch, cuco::Trace trace,
                          cuco::WaitSite site) {
  const unsigned long long* f = kind == kStaged ? &mine->staged[peer] : &mine->pulled[peer];
  cuco::wait_geq<unsigned long long>(trace, site, peer, (uint64_t)kind, f, epoch);
}

struct Candidate {
  cuco_ctx* ctx;
  ncclComm_t comm;
  cublasHandle_t blas_main, blas_side;
  cudaStream_t side, copy;
  cudaEvent_t forked, staged, joined;
  cuco::PeerBuffers stage;  // [M/W, K] bf16 per rank: this rank's rows, which the peers pull
  cuco::PeerBuffers flags;  // one Flags per rank
  void* gathered;           // [M, K] bf16: every rank's rows, pulled here
  unsigned long long epoch;
  int64_t M, K, N;
};

static int candidate_init(cuco_ctx* ctx, Candidate** out) {
  Candidate* c = new Candidate{};
  *out = c;
  c->ctx = ctx;
  c->M = cuco::dim(ctx, "M");
  c->K = cuco::dim(ctx, "K");
  c->N = cuco::dim(ctx, "N");
  CUCO_TRY(cuco::comm_init(ctx, &c->comm));
  CUCO_TRY_CUDA(ctx, cudaStreamCreateWithFlags(&c->side, cudaStreamNonBlocking));
  CUCO_TRY_CUDA(ctx, cudaStreamCreateWithFlags(&c->copy, cudaStreamNonBlocking));
  CUCO_TRY_CUDA(ctx, cudaEventCreateWithFlags(&c->forked, cudaEventDisableTiming));
  CUCO_TRY_CUDA(ctx, cudaEventCreateWithFlags(&c->staged, cudaEventDisableTiming));
  CUCO_TRY_CUDA(ctx, cudaEventCreateWithFlags(&c->joined, cudaEventDisableTiming));
  CUCO_TRY_CUBLAS(ctx, cublasCreate(&c->blas_main));
  CUCO_TRY_CUBLAS(ctx, cublasCreate(&c->blas_side));
  CUCO_TRY_CUBLAS(ctx, cublasSetStream(c->blas_side, c->side));
  CUCO_TRY(cuco::peer_alloc(ctx, c->comm, (size_t)(c->M / ctx->world) * c->K * 2, c->side, &c->stage));
  CUCO_TRY(cuco::peer_alloc(ctx, c->comm, sizeof(Flags), c->side, &c->flags));
  CUCO_TRY_CUDA(ctx, cudaMalloc(&c->gathered, (size_t)c->M * c->K * 2));
  // Zeroed before any rank can post: the harness runs a collective between init and launch.
  CUCO_TRY_CUDA(ctx, cudaMemsetAsync(c->flags.local, 0, sizeof(Flags), c->side));
  CUCO_TRY_CUDA(ctx, cudaStreamSynchronize(c->side));
  return 0;
}

// Y rows [row0, row0 + rows) = A[rows, K] @ B_r, in column-major terms m = N/W, n = rows.
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
  const void* x = cuco::input(ctx, "x")->ptr;
  const cuco::Trace trace = cuco::trace_of(ctx);
  const unsigned long long e = ++c->epoch;
  CUCO_TRY_CUDA(ctx, cudaEventRecord(c->forked, stream));
  CUCO_TRY_CUDA(ctx, cudaStreamWaitEvent(c->side, c->forked, 0));
  CUCO_TRY_CUDA(ctx, cudaStreamWaitEvent(c->copy, c->forked, 0));
  CUCO_TRY(gemm_rows(c, c->blas_side, x, r * rows, rows));  // own rows: no communication needed
  // The stage is refilled once every peer has pulled the last launch's rows, and announced once
  // the copy has landed: the staged flags follow the copy on its stream.
  for (int p = 0; p < W; ++p)
    if (p != r)
      wait_flag<<<1, 1, 0, c->copy>>>((const Flags*)c->flags.local, kPulled, p, e - 1, trace, CUCO_WAIT_SITE("pulled"));
  CUCO_TRY_CUDA(ctx, cudaMemcpyAsync(c->stage.local, x, shard_bytes, cudaMemcpyDeviceToDevice, c->copy));
  for (int p = 0; p < W; ++p)
    if (p != r) post_flag<<<1, 1, 0, c->copy>>>((Flags*)c->flags.peers[p], kStaged, r, e);
  CUCO_TRY_CUDA(ctx, cudaEventRecord(c->staged, c->copy));
  CUCO_TRY_CUBLAS(ctx, cublasSetStream(c->blas_main, stream));
  for (int i = 1; i < W; ++i) {
    const int p = (r + i) % W;
    char* dst = (char*)c->gathered + p * shard_bytes;
    wait_flag<<<1, 1, 0, stream>>>((const Flags*)c->flags.local, kStaged, p, e, trace, CUCO_WAIT_SITE("staged"));
    CUCO_TRY_CUDA(ctx, cudaMemcpyAsync(dst, c->stage.peers[p], shard_bytes, cudaMemcpyDeviceToDevice, stream));
    post_flag<<<1, 1, 0, stream>>>((Flags*)c->flags.peers[p], kPulled, r, e);
    CUCO_TRY(gemm_rows(c, c->blas_main, dst, p * rows, rows));
  }
  CUCO_TRY_CUDA(ctx, cudaGetLastError());
  CUCO_TRY_CUDA(ctx, cudaEventRecord(c->joined, c->side));
  CUCO_TRY_CUDA(ctx, cudaStreamWaitEvent(stream, c->joined, 0));
  CUCO_TRY_CUDA(ctx, cudaStreamWaitEvent(stream, c->staged, 0));
  return 0;
}

static int candidate_teardown(Candidate* c) {
  cuco_ctx* ctx = c->ctx;
  CUCO_TRY_CUDA(ctx, cudaDeviceSynchronize());
  CUCO_TRY(cuco::peer_free(ctx, &c->flags));
  CUCO_TRY(cuco::peer_free(ctx, &c->stage));
  CUCO_TRY_CUDA(ctx, cudaFree(c->gathered));
  CUCO_TRY_CUBLAS(ctx, cublasDestroy(c->blas_main));
  CUCO_TRY_CUBLAS(ctx, cublasDestroy(c->blas_side));
  CUCO_TRY_CUDA(ctx, cudaEventDestroy(c->forked));
  CUCO_TRY_CUDA(ctx, cudaEventDestroy(c->staged));
  CUCO_TRY_CUDA(ctx, cudaEventDestroy(c->joined));
  CUCO_TRY_CUDA(ctx, cudaStreamDestroy(c->side));
  CUCO_TRY_CUDA(ctx, cudaStreamDestroy(c->copy));
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
