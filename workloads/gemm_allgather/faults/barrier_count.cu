// gemm_allgather candidate. Every rank r of W computes Y_r[M, N/W] = AllGather(X)[M, K] @ B_r[K, N/W]
// (bf16 in and out, fp32 accumulation, row-major). Harness buffers: inputs "x" (this rank's
// rows X_r [M/W, K]) and "b" (B_r [K, N/W]), output "y" [M, N/W]. Dimensions "M", "K", "N".
// Everything outside the EVOLVE blocks is frozen: the C ABI below is what the harness calls.
#include "cuco_runtime.cuh"

// EVOLVE-BLOCK-START
// cuco-design: backend=nccl_lsa placement=before sync=global issuer=cta chunk=full streams=1 comm_sms=all
// FAULT (barrier count mismatch): the device communicator gets half as many LSA barriers as the
// copy kernel has blocks; blocks past the count would sync on barriers that do not exist.
#include <cublas_v2.h>

namespace cg = cooperative_groups;

constexpr int kCopyBlocks = 64;
constexpr int kCopyThreads = 512;

// Entry barrier: a peer's GEMM of the previous iteration, which reads the window we are about
// to write, is finished once that peer's copy kernel of this iteration has started.
// Exit barrier: every peer's stores into our window are visible before our GEMM reads it.
__global__ void __launch_bounds__(kCopyThreads)
lsa_allgather(ncclWindow_t window, ncclDevComm dc, const uint4* shard, size_t shard_vecs, cuco::Trace trace) {
  auto block = cg::this_thread_block();
  ncclLsaBarrierSession<cg::thread_block> bar(block, dc, ncclTeamTagLsa{}, blockIdx.x);
  cuco::lsa_barrier_sync(trace, CUCO_SITE, bar, block, blockIdx.x, cuda::memory_order_acquire);
  const size_t my_offset = (size_t)dc.lsaRank * shard_vecs * sizeof(uint4);
  uint4* dst[cuco::kMaxPeers];
  for (int p = 0; p < dc.lsaSize; ++p) dst[p] = (uint4*)ncclGetLsaPointer(window, my_offset, p);
  const size_t stride = (size_t)gridDim.x * blockDim.x;
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < shard_vecs; i += stride) {
    const uint4 v = shard[i];
    for (int p = 0; p < dc.lsaSize; ++p) dst[p][i] = v;
  }
  cuco::lsa_barrier_sync(trace, CUCO_SITE, bar, block, blockIdx.x, cuda::memory_order_seq_cst);
}

struct Candidate {
  cuco_ctx* ctx;
  ncclComm_t comm;
  ncclDevComm dev_comm;
  cuco::SymmetricBuffer gathered;  // [M, K] bf16 in a symmetric window
  cublasHandle_t blas;
  int64_t M, K, N;
};

static int candidate_init(cuco_ctx* ctx, Candidate** out) {
  Candidate* c = new Candidate{};
  *out = c;
  c->ctx = ctx;
  c->M = cuco::dim(ctx, "M");
  c->K = cuco::dim(ctx, "K");
  c->N = cuco::dim(ctx, "N");
  if (((c->M / ctx->world) * c->K * 2) % sizeof(uint4) != 0)
    return cuco::fail(ctx, "shard of %lld x %lld bf16 is not a whole number of 16-byte vectors",
                      (long long)(c->M / ctx->world), (long long)c->K);
  if (ctx->world > cuco::kMaxPeers) return cuco::fail(ctx, "at most %d ranks", cuco::kMaxPeers);
  CUCO_TRY(cuco::comm_init(ctx, &c->comm));
  CUCO_TRY(cuco::symmetric_alloc(ctx, c->comm, (size_t)c->M * c->K * 2, &c->gathered));
  CUCO_TRY(cuco::lsa_devcomm_create(ctx, c->comm, kCopyBlocks / 2, &c->dev_comm));
  CUCO_TRY_CUBLAS(ctx, cublasCreate(&c->blas));
  return 0;
}

static int candidate_launch(Candidate* c, cudaStream_t stream) {
  cuco_ctx* ctx = c->ctx;
  const int W = ctx->world;
  const size_t shard_vecs = (size_t)(c->M / W) * c->K * 2 / sizeof(uint4);
  lsa_allgather<<<kCopyBlocks, kCopyThreads, 0, stream>>>(
      c->gathered.window, c->dev_comm, (const uint4*)cuco::input(ctx, "x")->ptr, shard_vecs, cuco::trace_of(ctx));
  CUCO_TRY_CUDA(ctx, cudaGetLastError());
  const int n_local = (int)(c->N / W);
  const float alpha = 1.0f, beta = 0.0f;
  CUCO_TRY_CUBLAS(ctx, cublasSetStream(c->blas, stream));
  CUCO_TRY_CUBLAS(ctx, cublasGemmEx(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, n_local, (int)c->M, (int)c->K, &alpha,
                                    cuco::input(ctx, "b")->ptr, CUDA_R_16BF, n_local, c->gathered.ptr, CUDA_R_16BF,
                                    (int)c->K, &beta, cuco::output(ctx, "y")->ptr, CUDA_R_16BF, n_local,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return 0;
}

static int candidate_teardown(Candidate* c) {
  cuco_ctx* ctx = c->ctx;
  CUCO_TRY_CUBLAS(ctx, cublasDestroy(c->blas));
  CUCO_TRY(cuco::lsa_devcomm_destroy(ctx, c->comm, &c->dev_comm));
  CUCO_TRY(cuco::symmetric_free(ctx, c->comm, &c->gathered));
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
