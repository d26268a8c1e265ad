// gemm_allgather candidate. Every rank r of W computes Y_r[M, N/W] = AllGather(X)[M, K] @ B_r[K, N/W]
// (bf16 in and out, fp32 accumulation, row-major). Harness buffers: inputs "x" (this rank's
// rows X_r [M/W, K]) and "b" (B_r [K, N/W]), output "y" [M, N/W]. Dimensions "M", "K", "N".
// Everything outside the EVOLVE blocks is frozen: the C ABI below is what the harness calls.
#include "cuco_runtime.cuh"

// EVOLVE-BLOCK-START
// cuco-design: backend=copy_engine placement=interleaved sync=per_peer issuer=host chunk=shard streams=2 comm_sms=0
// FAULT (race, passes the ordinary checks by luck): ce_overlap with the arrival flag posted before
// the copy it announces, on the same stream. The copy lands a few microseconds after the flag, and
// a peer that sees the flag then multiplies rows that have not arrived yet; on one GPU the ranks take
// turns, and the copy has always landed by the time the peer runs. A perturbed schedule that holds
// this rank's copies back (copies_late) makes the peer multiply the rows of the launch before.
#include <cublas_v2.h>

struct Flags {
  unsigned long long ready[cuco::kMaxPeers];    // ready[p]: rank p may write into my buffer (epoch)
  unsigned long long arrived[cuco::kMaxPeers];  // arrived[p]: rank p's rows are in my buffer (epoch)
};

enum FlagKind { kReady = 0, kArrived = 1 };

// Tell rank `peer` (through its Flags, mapped here by CUDA-IPC) that this rank reached `epoch`.
__global__ void post_flag(Flags* peer_flags, int kind, int rank, unsigned long long epoch) {
  unsigned long long* f = kind == kReady ? &peer_flags->ready[rank] : &peer_flags->arrived[rank];
  cuda::atomic_ref<unsigned long long, cuda::thread_scope_system> ref(*f);
  ref.store(epoch, cuda::memory_order_release);
}

// `site`: where the host launched this wait, and the flag's name, for the deadlock report.
__global__ void wait_flag(const Flags* mine, int kind, int peer, unsigned long long epoch, cuco::Trace trace,
                          cuco::WaitSite site) {
  const unsigned long long* f = kind == kReady ? &mine->ready[peer] : &mine->arrived[peer];
  cuco::wait_geq<unsigned long long>(trace, site, peer, (uint64_t)kind, f, epoch);
}

struct Candidate {
  cuco_ctx* ctx;
  ncclComm_t comm;
  cublasHandle_t blas_main, blas_side;
  cudaStream_t side;
  cudaEvent_t forked, joined;
  cuco::PeerBuffers gathered;  // [M, K] bf16 per rank; peers write their shards here
  cuco::PeerBuffers flags;     // one Flags per rank
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
  CUCO_TRY_CUDA(ctx, cudaEventCreateWithFlags(&c->forked, cudaEventDisableTiming));
  CUCO_TRY_CUDA(ctx, cudaEventCreateWithFlags(&c->joined, cudaEventDisableTiming));
  CUCO_TRY_CUBLAS(ctx, cublasCreate(&c->blas_main));
  CUCO_TRY_CUBLAS(ctx, cublasCreate(&c->blas_side));
  CUCO_TRY_CUBLAS(ctx, cublasSetStream(c->blas_side, c->side));
  CUCO_TRY(cuco::peer_alloc(ctx, c->comm, (size_t)c->M * c->K * 2, c->side, &c->gathered));
  CUCO_TRY(cuco::peer_alloc(ctx, c->comm, sizeof(Flags), c->side, &c->flags));
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
  // Every GEMM of the previous launch is finished here (joined into `stream`): our buffer is free.
  for (int p = 0; p < W; ++p)
    if (p != r) post_flag<<<1, 1, 0, stream>>>((Flags*)c->flags.peers[p], kReady, r, e);
  CUCO_TRY_CUDA(ctx, cudaEventRecord(c->forked, stream));
  CUCO_TRY_CUDA(ctx, cudaStreamWaitEvent(c->side, c->forked, 0));
  CUCO_TRY(gemm_rows(c, c->blas_side, x, r * rows, rows));  // own rows: no communication needed
  for (int p = 0; p < W; ++p) {
    if (p == r) continue;
    wait_flag<<<1, 1, 0, stream>>>((const Flags*)c->flags.local, kReady, p, e, trace, CUCO_WAIT_SITE("ready"));
    post_flag<<<1, 1, 0, stream>>>((Flags*)c->flags.peers[p], kArrived, r, e);  // FAULT: before its copy
    CUCO_TRY_CUDA(ctx, cudaMemcpyAsync((char*)c->gathered.peers[p] + r * shard_bytes, x, shard_bytes,
                                       cudaMemcpyDeviceToDevice, stream));
  }
  CUCO_TRY_CUBLAS(ctx, cublasSetStream(c->blas_main, stream));
  for (int i = 1; i < W; ++i) {
    const int p = (r + i) % W;  // peers in ring order, so the first to arrive is multiplied first
    wait_flag<<<1, 1, 0, stream>>>((const Flags*)c->flags.local, kArrived, p, e, trace, CUCO_WAIT_SITE("arrived"));
    CUCO_TRY(gemm_rows(c, c->blas_main, (const char*)c->gathered.local + p * shard_bytes, p * rows, rows));
  }
  CUCO_TRY_CUDA(ctx, cudaGetLastError());
  CUCO_TRY_CUDA(ctx, cudaEventRecord(c->joined, c->side));
  CUCO_TRY_CUDA(ctx, cudaStreamWaitEvent(stream, c->joined, 0));
  return 0;
}

static int candidate_teardown(Candidate* c) {
  cuco_ctx* ctx = c->ctx;
  CUCO_TRY_CUDA(ctx, cudaDeviceSynchronize());
  CUCO_TRY(cuco::peer_free(ctx, &c->flags));
  CUCO_TRY(cuco::peer_free(ctx, &c->gathered));
  CUCO_TRY_CUBLAS(ctx, cublasDestroy(c->blas_main));
  CUCO_TRY_CUBLAS(ctx, cublasDestroy(c->blas_side));
  CUCO_TRY_CUDA(ctx, cudaEventDestroy(c->forked));
  CUCO_TRY_CUDA(ctx, cudaEventDestroy(c->joined));
  CUCO_TRY_CUDA(ctx, cudaStreamDestroy(c->side));
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
