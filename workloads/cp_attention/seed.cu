// cp_attention candidate. Context parallelism: the sequence of S tokens is split over W ranks in
// contiguous chunks of S/W; rank r holds positions [r*S/W, (r+1)*S/W). Every rank computes, for its
// queries, o = softmax(q K^T / sqrt(D) + mask) V over the keys and values of the WHOLE sequence
// (bf16 in and out, fp32 accumulation). Query head h reads KV head h / (H/HKV) (HKV < H: grouped-query
// attention). CAUSAL = 1: the query at global position r*S/W + i sees keys 0 .. r*S/W + i only.
// Harness buffers: inputs "q" [S/W, H, D], "k" [S/W, HKV, D], "v" [S/W, HKV, D] (this rank's chunk,
// bf16, row-major); output "o" [S/W, H, D] bf16. Dimensions "S" (total), "H", "HKV", "D", "CAUSAL" (0/1).
// Everything outside the EVOLVE blocks is frozen: the C ABI below is what the harness calls.
#include "cuco_runtime.cuh"

// EVOLVE-BLOCK-START
// cuco-design: backend=nccl_host placement=before sync=global issuer=host chunk=full streams=1 comm_sms=0
// Host-driven and sequential (the reference in C): NCCL all-gathers of K and V into the whole
// sequence's K_all, V_all [S, HKV, D], then attention one block of query rows at a time (the block's
// fp32 scores and bf16 probabilities within kScoreBudget): per group member j < H/HKV a cuBLAS
// strided-batched GEMM over the KV heads for the scores (scale 1/sqrt(D) as alpha), one softmax kernel
// (causal mask by global position, one CTA per row), and per j a strided-batched GEMM for P V.
// Causal blocks multiply only the keys their last row can see.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cmath>

constexpr size_t kScoreBudget = 3ull << 30;  // bytes of scores (fp32) + probabilities (bf16) per block
constexpr int kSoftmaxThreads = 256;

// (m, l) of two parts of a row: the max, and the sum of exp(x - max).
__device__ inline void merge_stats(float& m, float& l, float m2, float l2) {
  const float mx = fmaxf(m, m2);
  if (mx == -INFINITY) return;  // both parts empty
  l = (m == -INFINITY ? 0.f : l * expf(m - mx)) + (m2 == -INFINITY ? 0.f : l2 * expf(m2 - mx));
  m = mx;
}

// One CTA per (row i of the block, head h); that row's kn scores at scores + (h * rows_alloc + i) * ld.
// Keys sit at global positions 0 .. kn-1; the query at q_pos0 + i. Probabilities (0 where masked) go
// to the same place in probs, as bf16.
__global__ void __launch_bounds__(kSoftmaxThreads)
softmax_rows(const float* scores, __nv_bfloat16* probs, long long ld, int rows_alloc, int kn, long long q_pos0,
             int causal) {
  const long long row = (long long)blockIdx.y * rows_alloc + blockIdx.x;
  const float* s = scores + row * ld;
  __nv_bfloat16* p = probs + row * ld;
  const long long visible = causal ? q_pos0 + blockIdx.x + 1 : kn;
  const int n = (int)(visible < kn ? visible : kn);
  float m = -INFINITY, l = 0.f;
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    const float x = s[j];
    if (x > m) {
      l = l * expf(m - x) + 1.f;
      m = x;
    } else {
      l += expf(x - m);
    }
  }
  for (int off = 16; off > 0; off >>= 1)
    merge_stats(m, l, __shfl_xor_sync(0xffffffffu, m, off), __shfl_xor_sync(0xffffffffu, l, off));
  __shared__ float wm[32], wl[32];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  if (lane == 0) {
    wm[warp] = m;
    wl[warp] = l;
  }
  __syncthreads();
  if (warp == 0) {
    m = lane < warps ? wm[lane] : -INFINITY;
    l = lane < warps ? wl[lane] : 0.f;
    for (int off = 16; off > 0; off >>= 1)
      merge_stats(m, l, __shfl_xor_sync(0xffffffffu, m, off), __shfl_xor_sync(0xffffffffu, l, off));
    if (lane == 0) {
      wm[0] = m;
      wl[0] = l;
    }
  }
  __syncthreads();
  m = wm[0];
  const float inv = 1.f / wl[0];
  for (int j = threadIdx.x; j < kn; j += blockDim.x) p[j] = __float2bfloat16_rn(j < n ? expf(s[j] - m) * inv : 0.f);
}

struct Candidate {
  cuco_ctx* ctx;
  ncclComm_t comm;
  cublasHandle_t blas;
  void* k_all;   // [S, HKV, D] bf16: every rank's K chunk in sequence order
  void* v_all;   // [S, HKV, D] bf16
  float* scores;           // [H, rows, S] fp32: one block's scores
  __nv_bfloat16* probs;    // [H, rows, S] bf16: its probabilities
  int64_t S, H, HKV, D, causal, sl, group, rows;
};

static int candidate_init(cuco_ctx* ctx, Candidate** out) {
  Candidate* c = new Candidate{};
  *out = c;
  c->ctx = ctx;
  c->S = cuco::dim(ctx, "S");
  c->H = cuco::dim(ctx, "H");
  c->HKV = cuco::dim(ctx, "HKV");
  c->D = cuco::dim(ctx, "D");
  c->causal = cuco::dim(ctx, "CAUSAL");
  if (c->S % ctx->world != 0) return cuco::fail(ctx, "S=%lld does not split over %d ranks", (long long)c->S, ctx->world);
  if (c->HKV <= 0 || c->H % c->HKV != 0)
    return cuco::fail(ctx, "H=%lld is not a multiple of HKV=%lld", (long long)c->H, (long long)c->HKV);
  c->sl = c->S / ctx->world;
  c->group = c->H / c->HKV;
  int64_t rows = (int64_t)(kScoreBudget / ((size_t)c->H * c->S * 6));
  rows -= rows % 16;
  c->rows = rows < c->sl ? rows : c->sl;
  if (c->rows < 16) c->rows = 16;
  CUCO_TRY(cuco::comm_init(ctx, &c->comm));
  CUCO_TRY_CUBLAS(ctx, cublasCreate(&c->blas));
  const size_t kv_bytes = (size_t)c->S * c->HKV * c->D * 2;
  const size_t block = (size_t)c->H * c->rows * c->S;
  CUCO_TRY_CUDA(ctx, cudaMalloc(&c->k_all, kv_bytes));
  CUCO_TRY_CUDA(ctx, cudaMalloc(&c->v_all, kv_bytes));
  CUCO_TRY_CUDA(ctx, cudaMalloc(&c->scores, block * sizeof(float)));
  CUCO_TRY_CUDA(ctx, cudaMalloc(&c->probs, block * sizeof(__nv_bfloat16)));
  return 0;
}

// Attention of query rows [q0, q0 + rows) against the gathered K and V.
static int attention_block(Candidate* c, cudaStream_t stream, int64_t q0, int64_t rows) {
  cuco_ctx* ctx = c->ctx;
  const int64_t H = c->H, HKV = c->HKV, D = c->D, S = c->S, G = c->group;
  const int64_t q_pos0 = ctx->rank * c->sl + q0;
  const int64_t kn = c->causal ? (q_pos0 + rows < S ? q_pos0 + rows : S) : S;  // keys the block can see
  const long long head = (long long)c->rows * S;  // elements between two heads' score matrices
  const float scale = 1.0f / sqrtf((float)D), one = 1.0f, zero = 0.0f;
  const __nv_bfloat16* q = (const __nv_bfloat16*)cuco::input(ctx, "q")->ptr;
  __nv_bfloat16* o = (__nv_bfloat16*)cuco::output(ctx, "o")->ptr;
  for (int64_t j = 0; j < G; ++j) {
    // Row-major scores_h [rows, kn] = q_h K_g^T is column-major [kn, rows] = K_g q_h^T: A = K_g stored as
    // column-major [D, kn] (ld HKV*D), transposed; B = q_h^T [D, rows] (ld H*D); heads g*G + j, batched over g.
    CUCO_TRY_CUBLAS(ctx, cublasGemmStridedBatchedEx(
        c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)kn, (int)rows, (int)D, &scale,
        c->k_all, CUDA_R_16BF, (int)(HKV * D), (long long)D,
        q + (q0 * H + j) * D, CUDA_R_16BF, (int)(H * D), (long long)(G * D), &zero,
        c->scores + j * head, CUDA_R_32F, (int)S, G * head, (int)HKV, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  softmax_rows<<<dim3((unsigned)rows, (unsigned)H), kSoftmaxThreads, 0, stream>>>(
      c->scores, c->probs, (long long)S, (int)c->rows, (int)kn, (long long)q_pos0, (int)c->causal);
  CUCO_TRY_CUDA(ctx, cudaGetLastError());
  for (int64_t j = 0; j < G; ++j) {
    // Row-major o_h [rows, D] = P_h [rows, kn] V_g [kn, D] is column-major o_h^T = V_g^T (ld HKV*D) P_h^T (ld S).
    CUCO_TRY_CUBLAS(ctx, cublasGemmStridedBatchedEx(
        c->blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)D, (int)rows, (int)kn, &one,
        c->v_all, CUDA_R_16BF, (int)(HKV * D), (long long)D,
        c->probs + j * head, CUDA_R_16BF, (int)S, G * head, &zero,
        o + (q0 * H + j) * D, CUDA_R_16BF, (int)(H * D), (long long)(G * D), (int)HKV,
        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }
  return 0;
}

static int candidate_launch(Candidate* c, cudaStream_t stream) {
  cuco_ctx* ctx = c->ctx;
  const size_t chunk = (size_t)c->sl * c->HKV * c->D;
  CUCO_TRY_NCCL(ctx, ncclAllGather(cuco::input(ctx, "k")->ptr, c->k_all, chunk, ncclBfloat16, c->comm, stream));
  CUCO_TRY_NCCL(ctx, ncclAllGather(cuco::input(ctx, "v")->ptr, c->v_all, chunk, ncclBfloat16, c->comm, stream));
  CUCO_TRY_CUBLAS(ctx, cublasSetStream(c->blas, stream));
  for (int64_t q0 = 0; q0 < c->sl; q0 += c->rows)
    CUCO_TRY(attention_block(c, stream, q0, c->sl - q0 < c->rows ? c->sl - q0 : c->rows));
  return 0;
}

static int candidate_teardown(Candidate* c) {
  cuco_ctx* ctx = c->ctx;
  CUCO_TRY_CUDA(ctx, cudaFree(c->k_all));
  CUCO_TRY_CUDA(ctx, cudaFree(c->v_all));
  CUCO_TRY_CUDA(ctx, cudaFree(c->scores));
  CUCO_TRY_CUDA(ctx, cudaFree(c->probs));
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
