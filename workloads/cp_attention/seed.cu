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
// sequence's K_all, V_all [S, HKV, D], then one fused attention call of the harness library
// (cuco_attn.h: cuDNN's SDPA) over every key this rank's queries can see: all S keys, or, causal,
// the (r+1)*S/W up to the end of its own chunk with a bottom-right aligned mask (its queries are the
// last S/W of those keys). Nothing overlaps, and causal ranks carry unequal work: rank W-1 attends
// to all S keys while rank 0 attends to S/W of them.
#include "cuco_attn.h"

struct Candidate {
  cuco_ctx* ctx;
  ncclComm_t comm;
  cuco_attn* attn;  // this rank's queries over the keys they can see
  void* k_all;      // [S, HKV, D] bf16: every rank's K chunk in sequence order
  void* v_all;      // [S, HKV, D] bf16
  int64_t S, H, HKV, D, causal, sl;
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
  CUCO_TRY(cuco::comm_init(ctx, &c->comm));
  const size_t kv_bytes = (size_t)c->S * c->HKV * c->D * 2;
  CUCO_TRY_CUDA(ctx, cudaMalloc(&c->k_all, kv_bytes));
  CUCO_TRY_CUDA(ctx, cudaMalloc(&c->v_all, kv_bytes));
  cuco_attn_desc d{};
  d.heads_q = (int)c->H;
  d.heads_kv = (int)c->HKV;
  d.head_dim = (int)c->D;
  d.rows_q = (int)c->sl;
  d.rows_kv = (int)(c->causal ? (ctx->rank + 1) * c->sl : c->S);
  d.mask = c->causal ? CUCO_ATTN_CAUSAL_BOTTOM_RIGHT : CUCO_ATTN_NO_MASK;
  CUCO_TRY_ATTN(ctx, cuco_attn_create(&c->attn, &d));
  return 0;
}

static int candidate_launch(Candidate* c, cudaStream_t stream) {
  cuco_ctx* ctx = c->ctx;
  const size_t chunk = (size_t)c->sl * c->HKV * c->D;
  CUCO_TRY_NCCL(ctx, ncclAllGather(cuco::input(ctx, "k")->ptr, c->k_all, chunk, ncclBfloat16, c->comm, stream));
  CUCO_TRY_NCCL(ctx, ncclAllGather(cuco::input(ctx, "v")->ptr, c->v_all, chunk, ncclBfloat16, c->comm, stream));
  CUCO_TRY_ATTN(ctx, cuco_attn_run(c->attn, cuco::input(ctx, "q")->ptr, c->k_all, c->v_all,
                                   cuco::output(ctx, "o")->ptr, nullptr, stream));
  return 0;
}

static int candidate_teardown(Candidate* c) {
  cuco_ctx* ctx = c->ctx;
  CUCO_TRY_CUDA(ctx, cudaDeviceSynchronize());
  cuco_attn_destroy(c->attn);
  CUCO_TRY_CUDA(ctx, cudaFree(c->k_all));
  CUCO_TRY_CUDA(ctx, cudaFree(c->v_all));
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
