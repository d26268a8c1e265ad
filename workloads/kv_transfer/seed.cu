// kv_transfer candidate. Rank 0 (prefill) computes, for every layer l < L, KV_l[S, 2D] =
// X[S, H] @ Wkv_l[H, 2D] (K and V side by side; bf16 in and out, fp32 accumulation, row-major);
// rank 1 (decode) must hold all of KV[L, S, 2D] when the launch's work on its stream ends.
// Harness buffers: rank 0 inputs "x" [S, H] and "w" [L, H, 2D]; rank 1 output "kv" [L, S, 2D].
// Dimensions "L", "S", "H", "D". Everything outside the EVOLVE blocks is frozen.
#include "cuco_runtime.cuh"

// EVOLVE-BLOCK-START
// cuco-design: backend=nccl_host placement=before sync=per_peer issuer=host chunk=full streams=1 comm_sms=0
// Host-driven and sequential: one strided-batched cuBLAS GEMM computes every layer on rank 0,
// then one NCCL send moves the whole cache to rank 1.
#include <cublas_v2.h>

constexpr int kPrefill = 0, kDecode = 1;

struct Candidate {
  cuco_ctx* ctx;
  ncclComm_t comm;
  cublasHandle_t blas;
  void* kv;  // rank 0: [L, S, 2D] bf16, the cache before it moves
  int64_t L, S, H, D;
};

static int candidate_init(cuco_ctx* ctx, Candidate** out) {
  Candidate* c = new Candidate{};
  *out = c;
  c->ctx = ctx;
  c->L = cuco::dim(ctx, "L");
  c->S = cuco::dim(ctx, "S");
  c->H = cuco::dim(ctx, "H");
  c->D = cuco::dim(ctx, "D");
  if (ctx->world != 2) return cuco::fail(ctx, "kv_transfer runs on exactly 2 ranks, not %d", ctx->world);
  CUCO_TRY(cuco::comm_init(ctx, &c->comm));
  if (ctx->rank == kPrefill) {
    CUCO_TRY_CUBLAS(ctx, cublasCreate(&c->blas));
    CUCO_TRY_CUDA(ctx, cudaMalloc(&c->kv, (size_t)c->L * c->S * 2 * c->D * 2));
  }
  return 0;
}

static int candidate_launch(Candidate* c, cudaStream_t stream) {
  cuco_ctx* ctx = c->ctx;
  const size_t count = (size_t)c->L * c->S * 2 * c->D;
  if (ctx->rank == kPrefill) {
    const float alpha = 1.0f, beta = 0.0f;
    const int m = (int)(2 * c->D), n = (int)c->S, k = (int)c->H;
    CUCO_TRY_CUBLAS(ctx, cublasSetStream(c->blas, stream));
    // Row-major KV_l = X @ W_l is column-major KV_l^T = W_l^T X^T: m = 2D, n = S, k = H.
    CUCO_TRY_CUBLAS(ctx, cublasGemmStridedBatchedEx(
        c->blas, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &alpha,
        cuco::input(ctx, "w")->ptr, CUDA_R_16BF, m, (long long)k * m,
        cuco::input(ctx, "x")->ptr, CUDA_R_16BF, k, 0,
        &beta, c->kv, CUDA_R_16BF, m, (long long)n * m, (int)c->L, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    CUCO_TRY_NCCL(ctx, ncclSend(c->kv, count, ncclBfloat16, kDecode, c->comm, stream));
  } else {
    CUCO_TRY_NCCL(ctx, ncclRecv(cuco::output(ctx, "kv")->ptr, count, ncclBfloat16, kPrefill, c->comm, stream));
  }
  return 0;
}

static int candidate_teardown(Candidate* c) {
  cuco_ctx* ctx = c->ctx;
  if (ctx->rank == kPrefill) {
    CUCO_TRY_CUDA(ctx, cudaFree(c->kv));
    CUCO_TRY_CUBLAS(ctx, cublasDestroy(c->blas));
  }
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
