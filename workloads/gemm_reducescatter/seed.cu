// gemm_reducescatter candidate. Every rank r of W holds A_r[M, K/W] and B_r[K/W, N] and computes
// Y_r[M/W, N] = rows [r*M/W, (r+1)*M/W) of sum_s A_s @ B_s (bf16 in and out, fp32 accumulation,
// row-major). Harness buffers: inputs "a" (A_r) and "b" (B_r), output "y" (Y_r). Dimensions "M",
// "K", "N" (totals: this rank's A has K/W columns, its Y has M/W rows).
// Everything outside the EVOLVE blocks is frozen: the C ABI below is what the harness calls.
#include "cuco_runtime.cuh"

// EVOLVE-BLOCK-START
// cuco-design: backend=nccl_host placement=after sync=global issuer=host chunk=full streams=1 comm_sms=0
// Host-driven and sequential: one cuBLAS GEMM of this rank's whole partial A_r @ B_r [M, N]
// (rounded to bf16), then one NCCL reduce-scatter (sum) of it into Y_r, on the same stream.
#include <cublas_v2.h>

struct Candidate {
  cuco_ctx* ctx;
  ncclComm_t comm;
  cublasHandle_t blas;
  void* partial;  // [M, N] bf16: A_r @ B_r, the rows of every rank's block
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
  CUCO_TRY_CUDA(ctx, cudaMalloc(&c->partial, (size_t)c->M * c->N * 2));
  return 0;
}

static int candidate_launch(Candidate* c, cudaStream_t stream) {
  cuco_ctx* ctx = c->ctx;
  const int W = ctx->world;
  const int k_local = (int)(c->K / W);
  const float alpha = 1.0f, beta = 0.0f;
  // Row-major P = A @ B is column-major P^T = B^T A^T: m = N, n = M, k = K/W.
  CUCO_TRY_CUBLAS(ctx, cublasSetStream(c->blas, stream));
  CUCO_TRY_CUBLAS(ctx, cublasGemmEx(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)c->N, (int)c->M, k_local, &alpha,
                                    cuco::input(ctx, "b")->ptr, CUDA_R_16BF, (int)c->N, cuco::input(ctx, "a")->ptr,
                                    CUDA_R_16BF, k_local, &beta, c->partial, CUDA_R_16BF, (int)c->N,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  // Rank p receives the sum of every rank's rows [p*M/W, (p+1)*M/W) of its partial.
  const size_t rows = (size_t)(c->M / W);
  CUCO_TRY_NCCL(ctx, ncclReduceScatter(c->partial, cuco::output(ctx, "y")->ptr, rows * c->N, ncclBfloat16, ncclSum,
                                       c->comm, stream));
  return 0;
}

static int candidate_teardown(Candidate* c) {
  cuco_ctx* ctx = c->ctx;
  CUCO_TRY_CUDA(ctx, cudaFree(c->partial));
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
