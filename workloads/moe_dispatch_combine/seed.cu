// moe_dispatch_combine candidate. W ranks, expert parallelism: rank r owns experts
// [r*E/W, (r+1)*E/W). Each rank holds T tokens x [T, H] and their routing: topk_idx [T, 8]
// (distinct global expert ids, int32) and topk_w [T, 8] (float32). Every (token, choice) row goes
// to its expert's rank; expert e computes y = (silu(x @ W1_e) * (x @ W3_e)) @ W2_e (bf16 in and out,
// fp32 accumulation; w13 holds W1 | W3 side by side); the results come back and
// out[t] = sum_k topk_w[t, k] * y_k (fp32 sum, bf16 result).
// Harness buffers: inputs "x" [T, H] bf16, "topk_idx" [T, 8] i32, "topk_w" [T, 8] f32,
// "w13" [E/W, H, 2I] bf16, "w2" [E/W, I, H] bf16 (this rank's experts); output "out" [T, H] bf16.
// Dimensions "T" (per rank), "H", "E" (total), "I", "HOT" (routing skew; nothing to do with it).
// Everything outside the EVOLVE blocks is frozen: the C ABI below is what the harness calls.
#include "cuco_runtime.cuh"

// EVOLVE-BLOCK-START
// cuco-design: backend=nccl_host placement=before sync=per_peer issuer=host chunk=shard streams=1 comm_sms=0
// Host-driven and sequential (the reference in C): sort the (token, choice) rows by expert into a
// send buffer, exchange the per-expert counts with NCCL send/recv, read them on the host, move the
// rows with one grouped NCCL send/recv, regroup them by local expert, run one cuBLAS grouped GEMM
// per projection over every local expert (gate and up together, then down; one GEMM per expert
// instead when they average many rows) around a silu * up kernel, put the results back in arrival
// order, send them back with a second grouped NCCL send/recv, and sum each token's 8 results with
// its router weights.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <vector>

constexpr int kTopK = 8;
constexpr int kMaxExperts = 1024;
constexpr int kRouteThreads = 1024;
constexpr int kCopyThreads = 128;

// Counts the rows per expert and gives every (token, choice) its slot in the send buffer, where
// rows are sorted by expert (so rank p's rows form one segment). One block: E <= kMaxExperts.
__global__ void __launch_bounds__(kRouteThreads)
route_rows(const int* topk_idx, int pairs, int experts, int* counts, int* pos) {
  __shared__ int count[kMaxExperts];
  __shared__ int cursor[kMaxExperts];
  for (int e = threadIdx.x; e < experts; e += blockDim.x) count[e] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < pairs; i += blockDim.x) {
    const int e = topk_idx[i];
    if (e >= 0 && e < experts) atomicAdd(&count[e], 1);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int run = 0;
    for (int e = 0; e < experts; ++e) {
      cursor[e] = run;
      run += count[e];
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < experts; e += blockDim.x) counts[e] = count[e];
  for (int i = threadIdx.x; i < pairs; i += blockDim.x) {
    const int e = topk_idx[i];
    pos[i] = (e >= 0 && e < experts) ? atomicAdd(&cursor[e], 1) : -1;
  }
}

// send[pos[i]] = x[i / 8]: one block per (token, choice) row, 16-byte vectors.
__global__ void __launch_bounds__(kCopyThreads)
permute_rows(const uint4* x, const int* pos, uint4* send_rows, int vecs) {
  const int slot = pos[blockIdx.x];
  if (slot < 0) return;
  const uint4* src = x + (size_t)(blockIdx.x / kTopK) * vecs;
  uint4* dst = send_rows + (size_t)slot * vecs;
  for (int v = threadIdx.x; v < vecs; v += blockDim.x) dst[v] = src[v];
}

// The (source p, local expert e) segments in arrival order (by source, then expert): where each
// starts in the arrival layout and in the expert layout (by expert, then source). One thread:
// W * El <= 1024. recv_counts[p * El + e]: rows from rank p for local expert e.
__global__ void segment_offsets(const int* recv_counts, int world, int local, long long* arrival, long long* expert) {
  if (threadIdx.x != 0) return;
  long long run = 0;
  for (int e = 0; e < local; ++e)
    for (int p = 0; p < world; ++p) {
      expert[p * local + e] = run;
      run += recv_counts[p * local + e];
    }
  run = 0;
  for (int s = 0; s < world * local; ++s) {
    arrival[s] = run;
    run += recv_counts[s];
  }
  arrival[world * local] = run;
}

// One block per row of the arrival layout: finds the row's segment (the last one starting at or
// before it: an empty segment shares its start with the next) and copies the row between the
// layouts. Any skew is fine: the work is per row, not per segment.
__global__ void __launch_bounds__(kCopyThreads)
regroup_rows(uint4* dst, const uint4* src, const long long* arrival, const long long* expert, int segments,
             long long row0, int vecs, int to_expert) {
  const long long row = row0 + blockIdx.x;
  int lo = 0, hi = segments - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (arrival[mid] <= row) lo = mid;
    else hi = mid - 1;
  }
  const long long other = expert[lo] + (row - arrival[lo]);
  const uint4* s = src + (size_t)(to_expert ? row : other) * vecs;
  uint4* d = dst + (size_t)(to_expert ? other : row) * vecs;
  for (int v = threadIdx.x; v < vecs; v += blockDim.x) d[v] = s[v];
}

// h[r, :] = silu(gate) * up, with h13 rows [gate (I) | up (I)]; bf16 pairs.
__global__ void silu_mul(const __nv_bfloat162* h13, __nv_bfloat162* h, long long rows, int half) {
  const long long n = rows * half;
  for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += (long long)gridDim.x * blockDim.x) {
    const long long r = j / half, i = j % half;
    const float2 g = __bfloat1622float2(h13[r * 2 * half + i]);
    const float2 u = __bfloat1622float2(h13[r * 2 * half + half + i]);
    const float a = g.x / (1.0f + expf(-g.x)) * u.x;
    const float b = g.y / (1.0f + expf(-g.y)) * u.y;
    h[j] = __floats2bfloat162_rn(a, b);
  }
}

// out[t, :] = sum_k w[t, k] * results[pos[t*8 + k], :], fp32, choice 0 first. One block per token.
__global__ void __launch_bounds__(kCopyThreads)
weighted_combine(const uint4* results, const int* pos, const float* topk_w, uint4* out, int vecs) {
  __shared__ int slot[kTopK];
  __shared__ float weight[kTopK];
  const int t = blockIdx.x;
  if (threadIdx.x < kTopK) {
    slot[threadIdx.x] = pos[t * kTopK + threadIdx.x];
    weight[threadIdx.x] = topk_w[t * kTopK + threadIdx.x];
  }
  __syncthreads();
  for (int v = threadIdx.x; v < vecs; v += blockDim.x) {
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    for (int k = 0; k < kTopK; ++k) {
      if (slot[k] < 0) continue;
      const uint4 q = results[(size_t)slot[k] * vecs + v];
      const __nv_bfloat162* b = reinterpret_cast<const __nv_bfloat162*>(&q);
      for (int j = 0; j < 4; ++j) {
        const float2 f = __bfloat1622float2(b[j]);
        acc[2 * j] += weight[k] * f.x;
        acc[2 * j + 1] += weight[k] * f.y;
      }
    }
    uint4 o;
    __nv_bfloat162* ob = reinterpret_cast<__nv_bfloat162*>(&o);
    for (int j = 0; j < 4; ++j) ob[j] = __floats2bfloat162_rn(acc[2 * j], acc[2 * j + 1]);
    out[(size_t)t * vecs + v] = o;
  }
}

// ---- Grouped GEMMs. One cublasGemmGroupedBatchedEx runs one projection for a set of experts, one
// problem per expert with rows (a group of one: their row counts differ): in row-major terms
// out[n, m] = rows[n, k] @ W[k, m], which cuBLAS sees column-major as out^T = W^T rows^T. cuBLAS
// reads the sizes from the host at the call and the three pointer arrays from device memory when
// the GEMM runs, so the host plans every call of an iteration once it holds the counts, and one
// copy on the stream that runs them puts all their pointers on the device before the first.
// The host rewrites its pinned arrays only after the iteration's host sync, which every stream of
// the previous iteration (joined back to the harness's stream) has passed: no copy still reads them.
// A call whose problems average at least kPerProblemRows rows runs as one cublasGemmEx per problem
// instead, with the same pointers from the host arrays: measured on one H100 with cuBLAS 13.1
// (docs/performance.md, 2026-11-24, sixth session; the reference's expert phase at W=2), one GEMM
// per expert took 0.44-0.51x the grouped call's time at 226-2944 rows an expert (255 to 1021 on
// average), but 1.05x at 17-619 (65 on average): cuBLAS's grouped kernels are far below its
// per-GEMM ones on Hopper once a problem has hundreds of rows. The reference's auto mode makes the
// same choice (reference.py, PER_EXPERT_MIN_ROWS).
constexpr int kPerProblemRows = 128;

struct GemmCall {
  int m, k;          // output columns and depth, the same for every problem of the call
  int first, count;  // its problems: [first, first + count) of the iteration's arrays
};

struct GroupedGemms {
  const void** host = nullptr;  // pinned [3][capacity]: weights, rows in, rows out of each problem
  const void** dev = nullptr;   // their device copy, what cuBLAS reads
  int capacity = 0;
  std::vector<int> rows;        // each problem's row count, this iteration
  std::vector<GemmCall> calls;  // this iteration's calls
  std::vector<int> m, k, ones;  // one call's size arrays (cuBLAS reads them at the call)
  std::vector<cublasOperation_t> ops;
  std::vector<float> alpha, beta;
};

static int grouped_init(cuco_ctx* ctx, GroupedGemms* g, int capacity) {
  g->capacity = capacity;
  CUCO_TRY_CUDA(ctx, cudaMallocHost(&g->host, 3 * (size_t)capacity * sizeof(void*)));
  CUCO_TRY_CUDA(ctx, cudaMalloc(&g->dev, 3 * (size_t)capacity * sizeof(void*)));
  return 0;
}

static int grouped_free(cuco_ctx* ctx, GroupedGemms* g) {
  CUCO_TRY_CUDA(ctx, cudaFreeHost(g->host));
  CUCO_TRY_CUDA(ctx, cudaFree(g->dev));
  return 0;
}

// A new iteration's plan (after its host sync).
static void grouped_reset(GroupedGemms* g) {
  g->rows.clear();
  g->calls.clear();
}

// Opens the next call: out[n, m] = rows[n, k] @ W[k, m] for every problem added to it. Its index.
static int grouped_call(GroupedGemms* g, int m, int k) {
  g->calls.push_back(GemmCall{m, k, (int)g->rows.size(), 0});
  return (int)g->calls.size() - 1;
}

// One problem (an expert's n > 0 rows) of the last call opened.
static int grouped_add(cuco_ctx* ctx, GroupedGemms* g, const void* weights, const void* in, void* out, int n) {
  const int i = (int)g->rows.size();
  if (i >= g->capacity) return cuco::fail(ctx, "more than %d grouped GEMM problems in one iteration", g->capacity);
  g->host[i] = weights;
  g->host[g->capacity + i] = in;
  g->host[2 * g->capacity + i] = out;
  g->rows.push_back(n);
  g->calls.back().count += 1;
  return 0;
}

// Whether call `call` runs one cublasGemmEx per problem (its problems average at least
// kPerProblemRows rows) rather than one grouped GEMM.
static bool grouped_per_problem(const GroupedGemms* g, const GemmCall& call) {
  long long rows = 0;
  for (int j = call.first; j < call.first + call.count; ++j) rows += g->rows[j];
  return call.count > 0 && rows >= (long long)kPerProblemRows * call.count;
}

// The iteration's pointers to the device, on the stream that runs its calls, before them
// (nothing when no call of the iteration reads them there).
static int grouped_upload(cuco_ctx* ctx, GroupedGemms* g, cudaStream_t s) {
  bool grouped = false;
  for (const GemmCall& call : g->calls) grouped = grouped || (call.count > 0 && !grouped_per_problem(g, call));
  if (!grouped) return 0;
  CUCO_TRY_CUDA(ctx, cudaMemcpyAsync(g->dev, g->host, 3 * (size_t)g->capacity * sizeof(void*),
                                     cudaMemcpyHostToDevice, s));
  return 0;
}

// Runs call `c` on the stream `blas` is bound to (nothing when it has no problems): one GEMM per
// problem or one grouped GEMM (grouped_per_problem).
static int grouped_run(cuco_ctx* ctx, cublasHandle_t blas, GroupedGemms* g, int c) {
  const GemmCall call = g->calls[c];
  if (call.count == 0) return 0;
  if (grouped_per_problem(g, call)) {
    const float one = 1.0f, zero = 0.0f;  // host pointer mode: read at the call
    for (int j = call.first; j < call.first + call.count; ++j)
      CUCO_TRY_CUBLAS(ctx, cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, call.m, g->rows[j], call.k, &one, g->host[j],
                                        CUDA_R_16BF, call.m, g->host[g->capacity + j], CUDA_R_16BF, call.k, &zero,
                                        (void*)g->host[2 * g->capacity + j], CUDA_R_16BF, call.m, CUBLAS_COMPUTE_32F,
                                        CUBLAS_GEMM_DEFAULT));
    return 0;
  }
  g->m.assign(call.count, call.m);
  g->k.assign(call.count, call.k);
  g->ones.assign(call.count, 1);
  g->ops.assign(call.count, CUBLAS_OP_N);
  g->alpha.assign(call.count, 1.0f);
  g->beta.assign(call.count, 0.0f);
  const void* const* a = g->dev + call.first;
  const void* const* b = g->dev + g->capacity + call.first;
  void* const* out = (void* const*)(g->dev + 2 * g->capacity + call.first);
  // lda = m, ldb = k, ldc = m: dense rows
  CUCO_TRY_CUBLAS(ctx, cublasGemmGroupedBatchedEx(blas, g->ops.data(), g->ops.data(), g->m.data(),
                                                  g->rows.data() + call.first, g->k.data(), g->alpha.data(), a,
                                                  CUDA_R_16BF, g->m.data(), b, CUDA_R_16BF, g->k.data(),
                                                  g->beta.data(), out, CUDA_R_16BF, g->m.data(), call.count,
                                                  g->ones.data(), CUBLAS_COMPUTE_32F));
  return 0;
}

struct Candidate {
  cuco_ctx* ctx;
  ncclComm_t comm;
  cublasHandle_t blas;
  int64_t T, H, E, I;
  int W, El;
  int64_t rows_max;      // the most rows this rank can receive: W * T * min(8, El)
  int* pos;              // [T*8] send slot of each (token, choice)
  int* counts;           // [E] rows this rank sends per global expert
  int* recv_counts;      // [W, El] rows this rank receives per (source, local expert)
  long long* seg_arrival;  // [W*El + 1] where each (source, expert) segment starts in the arrival layout
  long long* seg_expert;   // [W*El] and in the expert layout
  int* host_counts;      // pinned: counts then recv_counts
  void* send_rows;       // [T*8, H] send layout; the returned results land in comb
  void* comb;            // [T*8, H]
  void* recv;            // [rows_max, H] arrival layout (rows in, then results out)
  void* xe;              // [rows_max, H] expert layout
  void* h13;             // [rows_max, 2I]
  void* h;               // [rows_max, I]
  void* y;               // [rows_max, H]
  GroupedGemms gemms;    // the expert phase's two grouped GEMMs
  std::vector<int64_t> send_n, send_off, recv_n, recv_off, expert_n, expert_off;
};

static int candidate_init(cuco_ctx* ctx, Candidate** out) {
  Candidate* c = new Candidate{};
  *out = c;
  c->ctx = ctx;
  c->T = cuco::dim(ctx, "T");
  c->H = cuco::dim(ctx, "H");
  c->E = cuco::dim(ctx, "E");
  c->I = cuco::dim(ctx, "I");
  c->W = ctx->world;
  if (c->E % c->W != 0) return cuco::fail(ctx, "%lld experts do not split over %d ranks", (long long)c->E, c->W);
  if (c->E > kMaxExperts) return cuco::fail(ctx, "at most %d experts, not %lld", kMaxExperts, (long long)c->E);
  if (c->H % 8 != 0 || c->I % 2 != 0) return cuco::fail(ctx, "H must be a multiple of 8 and I even");
  c->El = (int)(c->E / c->W);
  c->rows_max = (int64_t)c->W * c->T * (c->El < kTopK ? c->El : kTopK);
  const size_t pairs = (size_t)c->T * kTopK;
  CUCO_TRY(cuco::comm_init(ctx, &c->comm));
  CUCO_TRY_CUBLAS(ctx, cublasCreate(&c->blas));
  CUCO_TRY_CUDA(ctx, cudaMalloc(&c->pos, pairs * sizeof(int)));
  CUCO_TRY_CUDA(ctx, cudaMalloc(&c->counts, c->E * sizeof(int)));
  CUCO_TRY_CUDA(ctx, cudaMalloc(&c->recv_counts, c->E * sizeof(int)));
  CUCO_TRY_CUDA(ctx, cudaMalloc(&c->seg_arrival, (c->E + 1) * sizeof(long long)));
  CUCO_TRY_CUDA(ctx, cudaMalloc(&c->seg_expert, c->E * sizeof(long long)));
  CUCO_TRY_CUDA(ctx, cudaMallocHost(&c->host_counts, 2 * c->E * sizeof(int)));
  CUCO_TRY_CUDA(ctx, cudaMalloc(&c->send_rows, pairs * c->H * 2));
  CUCO_TRY_CUDA(ctx, cudaMalloc(&c->comb, pairs * c->H * 2));
  CUCO_TRY_CUDA(ctx, cudaMalloc(&c->recv, c->rows_max * c->H * 2));
  CUCO_TRY_CUDA(ctx, cudaMalloc(&c->xe, c->rows_max * c->H * 2));
  CUCO_TRY_CUDA(ctx, cudaMalloc(&c->h13, c->rows_max * 2 * c->I * 2));
  CUCO_TRY_CUDA(ctx, cudaMalloc(&c->h, c->rows_max * c->I * 2));
  CUCO_TRY_CUDA(ctx, cudaMalloc(&c->y, c->rows_max * c->H * 2));
  CUCO_TRY(grouped_init(ctx, &c->gemms, 2 * c->El));
  return 0;
}

static int candidate_launch(Candidate* c, cudaStream_t stream) {
  cuco_ctx* ctx = c->ctx;
  const int W = c->W, El = c->El;
  const int pairs = (int)(c->T * kTopK);
  const int vecs = (int)(c->H * 2 / 16);
  const size_t row = (size_t)c->H * 2;
  char* send_rows = (char*)c->send_rows;
  char* comb = (char*)c->comb;
  char* recv = (char*)c->recv;

  // 1. Route: counts per expert, send slots, rows into the send layout.
  route_rows<<<1, kRouteThreads, 0, stream>>>((const int*)cuco::input(ctx, "topk_idx")->ptr, pairs, (int)c->E,
                                              c->counts, c->pos);
  permute_rows<<<pairs, kCopyThreads, 0, stream>>>((const uint4*)cuco::input(ctx, "x")->ptr, c->pos,
                                                   (uint4*)send_rows, vecs);
  CUCO_TRY_CUDA(ctx, cudaGetLastError());

  // 2. Counts: every rank learns how many rows it receives per (source, local expert).
  CUCO_TRY_NCCL(ctx, ncclGroupStart());
  for (int p = 0; p < W; ++p) {
    CUCO_TRY_NCCL(ctx, ncclSend(c->counts + p * El, El, ncclInt32, p, c->comm, stream));
    CUCO_TRY_NCCL(ctx, ncclRecv(c->recv_counts + p * El, El, ncclInt32, p, c->comm, stream));
  }
  CUCO_TRY_NCCL(ctx, ncclGroupEnd());
  CUCO_TRY_CUDA(ctx, cudaMemcpyAsync(c->host_counts, c->counts, c->E * sizeof(int), cudaMemcpyDeviceToHost, stream));
  CUCO_TRY_CUDA(ctx, cudaMemcpyAsync(c->host_counts + c->E, c->recv_counts, c->E * sizeof(int),
                                     cudaMemcpyDeviceToHost, stream));
  CUCO_TRY_CUDA(ctx, cudaStreamSynchronize(stream));  // NCCL and cuBLAS need the sizes on the host
  const int* sent = c->host_counts;
  const int* got = c->host_counts + c->E;
  c->send_n.assign(W, 0);
  c->recv_n.assign(W, 0);
  c->expert_n.assign(El, 0);
  for (int p = 0; p < W; ++p)
    for (int e = 0; e < El; ++e) {
      c->send_n[p] += sent[p * El + e];
      c->recv_n[p] += got[p * El + e];
      c->expert_n[e] += got[p * El + e];
    }
  c->send_off.assign(W + 1, 0);
  c->recv_off.assign(W + 1, 0);
  c->expert_off.assign(El + 1, 0);
  for (int p = 0; p < W; ++p) {
    c->send_off[p + 1] = c->send_off[p] + c->send_n[p];
    c->recv_off[p + 1] = c->recv_off[p] + c->recv_n[p];
  }
  for (int e = 0; e < El; ++e) c->expert_off[e + 1] = c->expert_off[e] + c->expert_n[e];
  const int64_t rows = c->recv_off[W];

  // 3. Dispatch: segment p of the send buffer to rank p; rank p's rows into arrival segment p.
  CUCO_TRY_NCCL(ctx, ncclGroupStart());
  for (int p = 0; p < W; ++p) {
    if (c->send_n[p])
      CUCO_TRY_NCCL(ctx, ncclSend(send_rows + c->send_off[p] * row, c->send_n[p] * c->H, ncclBfloat16, p, c->comm,
                                  stream));
    if (c->recv_n[p])
      CUCO_TRY_NCCL(ctx, ncclRecv(recv + c->recv_off[p] * row, c->recv_n[p] * c->H, ncclBfloat16, p, c->comm, stream));
  }
  CUCO_TRY_NCCL(ctx, ncclGroupEnd());

  // 4. Experts: regroup by expert, one grouped GEMM per projection around silu * up, back to
  // arrival order.
  if (rows > 0) {
    segment_offsets<<<1, 32, 0, stream>>>(c->recv_counts, W, El, c->seg_arrival, c->seg_expert);
    regroup_rows<<<(unsigned)rows, kCopyThreads, 0, stream>>>((uint4*)c->xe, (const uint4*)recv, c->seg_arrival,
                                                               c->seg_expert, W * El, 0, vecs, 1);
    CUCO_TRY_CUBLAS(ctx, cublasSetStream(c->blas, stream));
    const char* w13 = (const char*)cuco::input(ctx, "w13")->ptr;
    const char* w2 = (const char*)cuco::input(ctx, "w2")->ptr;
    const int H = (int)c->H, I = (int)c->I;
    GroupedGemms* g = &c->gemms;
    grouped_reset(g);
    const int gate_up = grouped_call(g, 2 * I, H);
    for (int e = 0; e < El; ++e)
      if (c->expert_n[e])
        CUCO_TRY(grouped_add(ctx, g, w13 + (size_t)e * H * 2 * I * 2, (const char*)c->xe + c->expert_off[e] * row,
                             (char*)c->h13 + c->expert_off[e] * 2 * I * 2, (int)c->expert_n[e]));
    const int down = grouped_call(g, H, I);
    for (int e = 0; e < El; ++e)
      if (c->expert_n[e])
        CUCO_TRY(grouped_add(ctx, g, w2 + (size_t)e * I * H * 2, (const char*)c->h + c->expert_off[e] * I * 2,
                             (char*)c->y + c->expert_off[e] * row, (int)c->expert_n[e]));
    CUCO_TRY(grouped_upload(ctx, g, stream));
    CUCO_TRY(grouped_run(ctx, c->blas, g, gate_up));
    const int blocks = (int)((rows * I / 2 + 255) / 256 < 4096 ? (rows * I / 2 + 255) / 256 : 4096);
    silu_mul<<<blocks, 256, 0, stream>>>((const __nv_bfloat162*)c->h13, (__nv_bfloat162*)c->h, rows, I / 2);
    CUCO_TRY(grouped_run(ctx, c->blas, g, down));
    regroup_rows<<<(unsigned)rows, kCopyThreads, 0, stream>>>((uint4*)recv, (const uint4*)c->y, c->seg_arrival,
                                                               c->seg_expert, W * El, 0, vecs, 0);
    CUCO_TRY_CUDA(ctx, cudaGetLastError());
  }

  // 5. Combine: results back to their tokens' ranks, then the weighted sum per token.
  CUCO_TRY_NCCL(ctx, ncclGroupStart());
  for (int p = 0; p < W; ++p) {
    if (c->recv_n[p])
      CUCO_TRY_NCCL(ctx, ncclSend(recv + c->recv_off[p] * row, c->recv_n[p] * c->H, ncclBfloat16, p, c->comm, stream));
    if (c->send_n[p])
      CUCO_TRY_NCCL(ctx, ncclRecv(comb + c->send_off[p] * row, c->send_n[p] * c->H, ncclBfloat16, p, c->comm, stream));
  }
  CUCO_TRY_NCCL(ctx, ncclGroupEnd());
  weighted_combine<<<(int)c->T, kCopyThreads, 0, stream>>>((const uint4*)comb, c->pos,
                                                           (const float*)cuco::input(ctx, "topk_w")->ptr,
                                                           (uint4*)cuco::output(ctx, "out")->ptr, vecs);
  CUCO_TRY_CUDA(ctx, cudaGetLastError());
  return 0;
}

static int candidate_teardown(Candidate* c) {
  cuco_ctx* ctx = c->ctx;
  CUCO_TRY_CUDA(ctx, cudaDeviceSynchronize());
  void* buffers[] = {c->pos, c->counts, c->recv_counts, c->seg_arrival, c->seg_expert, c->send_rows, c->comb,
                     c->recv, c->xe, c->h13, c->h, c->y};
  for (void* b : buffers) CUCO_TRY_CUDA(ctx, cudaFree(b));
  CUCO_TRY_CUDA(ctx, cudaFreeHost(c->host_counts));
  CUCO_TRY(grouped_free(ctx, &c->gemms));
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
