// gemm_allgather candidate. Every rank r of W computes Y_r[M, N/W] = AllGather(X)[M, K] @ B_r[K, N/W]
// (bf16 in and out, fp32 accumulation, row-major). Harness buffers: inputs "x" (this rank's
// rows X_r [M/W, K]) and "b" (B_r [K, N/W]), output "y" [M, N/W]. Dimensions "M", "K", "N".
// Everything outside the EVOLVE blocks is frozen: the C ABI below is what the harness calls.
#include "cuco_runtime.cuh"

// EVOLVE-BLOCK-START
// cuco-design: backend=nccl_host placement=before sync=global issuer=host chunk=full streams=1 comm_sms=0
// FAULT (never returns): each rank waits for a flag from its neighbour that nobody sets.
#include <cublas_v2.h>

__global__ void wait_for_neighbour(const unsigned* flag, int peer, cuco::Trace trace) {
  if (threadIdx.x == 0) cuco::wait_geq<unsigned>(trace, CUCO_SITE, peer, 7, flag, 1u);
}

struct Candidate {
  cuco_ctx* ctx;
  ncclComm_t comm;
  cublasHandle_t blas;
  void* gathered;  // [M, K] bf16: the all-gathered X
  unsigned* flag;
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
  CUCO_TRY_CUBLAS(ctx, cublasCreate(&c->blas));
  CUCO_TRY_CUDA(ctx, cudaMalloc(&c->gathered, (size_t)c->M * c->K * 2));
  CUCO_TRY_CUDA(ctx, cudaMalloc(&c->flag, sizeof(unsigned)));
  CUCO_TRY_CUDA(ctx, cudaMemset(c->flag, 0, sizeof(unsigned)));
  return 0;
}

static int candidate_launch(Candidate* c, cudaStream_t stream) {
  cuco_ctx* ctx = c->ctx;
  const int W = ctx->world;
  const size_t shard = (size_t)(c->M / W) * c->K;
  CUCO_TRY_NCCL(ctx, ncclAllGather(cuco::input(ctx, "x")->ptr, c->gathered, shard, ncclBfloat16, c->comm, stream));
  // Row-major Y = A @ B is column-major Y^T = B^T A^T: m = N/W, n = M, k = K.
  wait_for_neighbour<<<1, 32, 0, stream>>>(c->flag, (ctx->rank + 1) % W, cuco::trace_of(ctx));
  const int n_local = (int)(c->N / W);
  const float alpha = 1.0f, beta = 0.0f;
  CUCO_TRY_CUBLAS(ctx, cublasSetStream(c->blas, stream));
  CUCO_TRY_CUBLAS(ctx, cublasGemmEx(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, n_local, (int)c->M, (int)c->K, &alpha,
                                    cuco::input(ctx, "b")->ptr, CUDA_R_16BF, n_local, c->gathered, CUDA_R_16BF,
                                    (int)c->K, &beta, cuco::output(ctx, "y")->ptr, CUDA_R_16BF, n_local,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  return 0;
}

static int candidate_teardown(Candidate* c) {
  cuco_ctx* ctx = c->ctx;
  CUCO_TRY_CUDA(ctx, cudaFree(c->gathered));
  CUCO_TRY_CUDA(ctx, cudaFree(c->flag));
  CUCO_TRY_CUBLAS(ctx, cublasDestroy(c->blas));
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
