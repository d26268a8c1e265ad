// tp_attn_out candidate. Rank r of W holds a_r [T, D/W] (its heads' attention output) and w_r [D/W, H]
// (those rows of the output projection); residual [T, H] and gamma [H] are the same on every rank.
// Every rank produces h = residual + AllReduce(a_r @ w_r) [T, H] and y = RMSNorm(h) * gamma [T, H]
// (bf16 in and out, fp32 accumulation, eps 1e-6, row-major). Harness buffers: inputs "a", "w",
// "residual", "gamma"; outputs "h", "y". Dimensions "T", "D", "H" (totals).
// Everything outside the EVOLVE blocks is frozen: the C ABI below is what the harness calls.
#include "cuco_runtime.cuh"

// EVOLVE-BLOCK-START
// cuco-design: backend=nccl_host placement=after sync=global issuer=host chunk=full streams=3 comm_sms=0
// Host-driven, chunked over tokens (TokenWeave's idea with NCCL): the rows are cut into kChunks
// blocks; each block's GEMM runs on a compute stream, then its all-reduce and its residual + RMSNorm
// on a communication stream, so block k's all-reduce overlaps block k+1's GEMM. With kChunks = 1 it
// is the reference: GEMM, all-reduce, norm, one after the other.
// Knobs (the offline agent tries the values after `cuco-knob:`):
constexpr int kChunks = 1;        // cuco-knob: 1 2 4 8
constexpr int kNcclMaxCtas = 0;   // cuco-knob: 0 8 16 32
constexpr int kNormThreads = 256; // cuco-knob: 128 256 512 1024
#include <cublas_v2.h>
#include <cuda_bf16.h>

// One block per row: h = bf16(residual + partial), y = bf16(h * rsqrt(mean(h^2) + eps) * gamma).
// 16-byte loads: H is a multiple of 64.
__global__ void add_rmsnorm(const __nv_bfloat16* __restrict__ partial, const __nv_bfloat16* __restrict__ residual,
                            const __nv_bfloat16* __restrict__ gamma, __nv_bfloat16* __restrict__ h,
                            __nv_bfloat16* __restrict__ y, int cols, float eps) {
  extern __shared__ float row[];
  __shared__ float warp_sums[32];
  const long base = (long)blockIdx.x * cols;
  float sq = 0.f;
  for (int c = threadIdx.x * 8; c < cols; c += blockDim.x * 8) {
    uint4 p = *reinterpret_cast<const uint4*>(partial + base + c);
    uint4 r = *reinterpret_cast<const uint4*>(residual + base + c);
    const __nv_bfloat16* pv = reinterpret_cast<const __nv_bfloat16*>(&p);
    const __nv_bfloat16* rv = reinterpret_cast<const __nv_bfloat16*>(&r);
    uint4 out;
    __nv_bfloat16* ov = reinterpret_cast<__nv_bfloat16*>(&out);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      ov[j] = __float2bfloat16(__bfloat162float(rv[j]) + __bfloat162float(pv[j]));
      float v = __bfloat162float(ov[j]);
      row[c + j] = v;
      sq += v * v;
    }
    *reinterpret_cast<uint4*>(h + base + c) = out;
  }
  for (int o = 16; o > 0; o >>= 1) sq += __shfl_xor_sync(0xffffffff, sq, o);
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = sq;
  __syncthreads();
  if (threadIdx.x < 32) {
    float s = threadIdx.x < (blockDim.x >> 5) ? warp_sums[threadIdx.x] : 0.f;
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffff, s, o);
    if (threadIdx.x == 0) warp_sums[0] = rsqrtf(s / cols + eps);
  }
  __syncthreads();
  const float scale = warp_sums[0];
  for (int c = threadIdx.x * 8; c < cols; c += blockDim.x * 8) {
    uint4 g = *reinterpret_cast<const uint4*>(gamma + c);
    const __nv_bfloat16* gv = reinterpret_cast<const __nv_bfloat16*>(&g);
    uint4 out;
    __nv_bfloat16* ov = reinterpret_cast<__nv_bfloat16*>(&out);
#pragma unroll
    for (int j = 0; j < 8; ++j) ov[j] = __float2bfloat16(row[c + j] * scale * __bfloat162float(gv[j]));
    *reinterpret_cast<uint4*>(y + base + c) = out;
  }
}

struct Candidate {
  cuco_ctx* ctx;
  ncclComm_t comm;
  cublasHandle_t blas;      // bound to the compute stream
  cudaStream_t compute, comm_stream;
  cudaEvent_t start, gemm_done[kChunks], comm_done;
  __nv_bfloat16* partial;   // [T, H]: a_r @ w_r, all-reduced in place
  int64_t T, D, H;
};

// The communicator of cuco::comm_init, with NCCL's SMs capped when kNcclMaxCtas > 0.
static int init_comm(cuco_ctx* ctx, ncclComm_t* comm) {
  if constexpr (kNcclMaxCtas == 0) {
    return cuco::comm_init(ctx, comm);
  } else {
    CUCO_TRY_CUDA(ctx, cudaSetDevice(ctx->device));
    ncclUniqueId id;
    memcpy(id.internal, ctx->nccl_id, CUCO_NCCL_ID_BYTES);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.maxCTAs = kNcclMaxCtas;
    config.minCTAs = kNcclMaxCtas < 4 ? kNcclMaxCtas : 4;
    CUCO_TRY_NCCL(ctx, ncclCommInitRankConfig(comm, ctx->world, id, ctx->rank, &config));
    return 0;
  }
}

static int candidate_init(cuco_ctx* ctx, Candidate** out) {
  Candidate* c = new Candidate{};
  *out = c;
  c->ctx = ctx;
  c->T = cuco::dim(ctx, "T");
  c->D = cuco::dim(ctx, "D");
  c->H = cuco::dim(ctx, "H");
  if (c->H * 4 > 48 * 1024) return cuco::fail(ctx, "the norm kernel keeps a row in 48 KiB of shared memory: H <= 12288");
  CUCO_TRY(init_comm(ctx, &c->comm));
  CUCO_TRY_CUDA(ctx, cudaStreamCreateWithFlags(&c->compute, cudaStreamNonBlocking));
  CUCO_TRY_CUDA(ctx, cudaStreamCreateWithFlags(&c->comm_stream, cudaStreamNonBlocking));
  CUCO_TRY_CUDA(ctx, cudaEventCreateWithFlags(&c->start, cudaEventDisableTiming));
  CUCO_TRY_CUDA(ctx, cudaEventCreateWithFlags(&c->comm_done, cudaEventDisableTiming));
  for (int k = 0; k < kChunks; ++k) CUCO_TRY_CUDA(ctx, cudaEventCreateWithFlags(&c->gemm_done[k], cudaEventDisableTiming));
  CUCO_TRY_CUBLAS(ctx, cublasCreate(&c->blas));
  CUCO_TRY_CUBLAS(ctx, cublasSetStream(c->blas, c->compute));
  CUCO_TRY_CUDA(ctx, cudaMalloc(&c->partial, (size_t)c->T * c->H * sizeof(__nv_bfloat16)));
  return 0;
}

static int candidate_launch(Candidate* c, cudaStream_t stream) {
  cuco_ctx* ctx = c->ctx;
  const int W = ctx->world;
  const int d_local = (int)(c->D / W), H = (int)c->H;
  const auto* a = static_cast<const __nv_bfloat16*>(cuco::input(ctx, "a")->ptr);
  const auto* w = static_cast<const __nv_bfloat16*>(cuco::input(ctx, "w")->ptr);
  const auto* residual = static_cast<const __nv_bfloat16*>(cuco::input(ctx, "residual")->ptr);
  const auto* gamma = static_cast<const __nv_bfloat16*>(cuco::input(ctx, "gamma")->ptr);
  auto* h = static_cast<__nv_bfloat16*>(cuco::output(ctx, "h")->ptr);
  auto* y = static_cast<__nv_bfloat16*>(cuco::output(ctx, "y")->ptr);
  // Both side streams start where the harness stream is (inputs filled, outputs free).
  CUCO_TRY_CUDA(ctx, cudaEventRecord(c->start, stream));
  CUCO_TRY_CUDA(ctx, cudaStreamWaitEvent(c->compute, c->start, 0));
  CUCO_TRY_CUDA(ctx, cudaStreamWaitEvent(c->comm_stream, c->start, 0));
  const float alpha = 1.0f, beta = 0.0f;
  for (int k = 0; k < kChunks; ++k) {
    const int64_t first = c->T * k / kChunks, rows = c->T * (k + 1) / kChunks - first;
    if (rows == 0) continue;
    // Row-major P = A @ W is column-major P^T = W^T A^T: m = H, n = rows, k = D/W.
    CUCO_TRY_CUBLAS(ctx, cublasGemmEx(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, H, (int)rows, d_local, &alpha, w, CUDA_R_16BF,
                                      H, a + first * d_local, CUDA_R_16BF, d_local, &beta, c->partial + first * H,
                                      CUDA_R_16BF, H, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    CUCO_TRY_CUDA(ctx, cudaEventRecord(c->gemm_done[k], c->compute));
    CUCO_TRY_CUDA(ctx, cudaStreamWaitEvent(c->comm_stream, c->gemm_done[k], 0));
    CUCO_TRY_NCCL(ctx, ncclAllReduce(c->partial + first * H, c->partial + first * H, (size_t)(rows * H), ncclBfloat16,
                                     ncclSum, c->comm, c->comm_stream));
    add_rmsnorm<<<(unsigned)rows, kNormThreads, H * sizeof(float), c->comm_stream>>>(
        c->partial + first * H, residual + first * H, gamma, h + first * H, y + first * H, H, 1e-6f);
    CUCO_TRY_CUDA(ctx, cudaGetLastError());
  }
  // Join: the harness stream goes on only when every block is normalized (the GEMMs precede it).
  CUCO_TRY_CUDA(ctx, cudaEventRecord(c->comm_done, c->comm_stream));
  CUCO_TRY_CUDA(ctx, cudaStreamWaitEvent(stream, c->comm_done, 0));
  return 0;
}

static int candidate_teardown(Candidate* c) {
  cuco_ctx* ctx = c->ctx;
  CUCO_TRY_CUDA(ctx, cudaFree(c->partial));
  CUCO_TRY_CUBLAS(ctx, cublasDestroy(c->blas));
  for (int k = 0; k < kChunks; ++k) CUCO_TRY_CUDA(ctx, cudaEventDestroy(c->gemm_done[k]));
  CUCO_TRY_CUDA(ctx, cudaEventDestroy(c->comm_done));
  CUCO_TRY_CUDA(ctx, cudaEventDestroy(c->start));
  CUCO_TRY_CUDA(ctx, cudaStreamDestroy(c->comm_stream));
  CUCO_TRY_CUDA(ctx, cudaStreamDestroy(c->compute));
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
