// The reference's CUDA kernels: reference.py compiles this file with CuPy's RawModule (NVRTC),
// and the tests run it on the CPU. Every kernel runs on the harness's stream of one rank.
__device__ __forceinline__ float lo_bf(unsigned int v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float hi_bf(unsigned int v) { return __uint_as_float(v & 0xffff0000u); }
__device__ __forceinline__ unsigned int f2bf(float f) {   // round to nearest even, NaN kept
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;
  u += 0x7fffu + ((u >> 16) & 1u);
  return u >> 16;
}
__device__ __forceinline__ unsigned int pack(float lo, float hi) { return f2bf(lo) | (f2bf(hi) << 16); }
__device__ __forceinline__ float silu(float v) { return v / (1.0f + expf(-v)); }

// ---- Routing: a stable counting sort of the (token, choice) pairs by expert, the plan of
// dispatch_order() without its sort. Block b of route_count and route_place owns the pairs
// [b * chunk, (b + 1) * chunk); hist is [experts, blocks], expert-major.

// hist[e, b] = the pairs of block b that go to expert e.
extern "C" __global__ void route_count(const int* idx, int pairs, int chunk, int experts, int* hist) {
  __shared__ int count[1024];
  for (int e = threadIdx.x; e < experts; e += blockDim.x) count[e] = 0;
  __syncthreads();
  const int end = min(pairs, (int)(blockIdx.x + 1) * chunk);
  for (int i = (int)blockIdx.x * chunk + (int)threadIdx.x; i < end; i += blockDim.x) atomicAdd(&count[idx[i]], 1);
  __syncthreads();
  for (int e = threadIdx.x; e < experts; e += blockDim.x) hist[e * gridDim.x + blockIdx.x] = count[e];
}

// One block of 1024 threads. counts[e] = the pairs for expert e; then hist becomes its exclusive
// scan in (expert, block) order, which is block b's first send slot for expert e: slots are
// sorted by expert, and within an expert by block, so by pair.
extern "C" __global__ void __launch_bounds__(1024) route_scan(int* hist, int blocks, int experts, int* counts) {
  __shared__ int warp_total[32];
  for (int e = threadIdx.x; e < experts; e += blockDim.x) {
    int sum = 0;
    for (int b = 0; b < blocks; ++b) sum += hist[e * blocks + b];
    counts[e] = sum;
  }
  __syncthreads();  // every count is read before the scan overwrites hist
  const int n = experts * blocks, per = (n + (int)blockDim.x - 1) / (int)blockDim.x;
  const int lo = min(n, (int)threadIdx.x * per), hi = min(n, lo + per);
  int mine = 0;
  for (int i = lo; i < hi; ++i) mine += hist[i];
  // Exclusive scan of `mine` over the block: inclusive within each warp, then over the warps' totals.
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int incl = mine;
  for (int d = 1; d < 32; d <<= 1) {
    const int up = __shfl_up_sync(0xffffffffu, incl, d);
    if (lane >= d) incl += up;
  }
  if (lane == 31) warp_total[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    int total = warp_total[lane];
    for (int d = 1; d < 32; d <<= 1) {
      const int up = __shfl_up_sync(0xffffffffu, total, d);
      if (lane >= d) total += up;
    }
    warp_total[lane] = total;
  }
  __syncthreads();
  int run = incl - mine + (warp > 0 ? warp_total[warp - 1] : 0);
  for (int i = lo; i < hi; ++i) {
    const int v = hist[i];
    hist[i] = run;
    run += v;
  }
}

// Block b hands out the send slots of its pairs in pair order, from its first slot per expert
// (hist after route_scan): pos[i] is pair i's place in the stable sort by expert. One thread walks
// the block's pairs (256 at the bench shapes: microseconds); the others only load the cursors.
extern "C" __global__ void route_place(const int* __restrict__ idx, int pairs, int chunk, int experts,
                                       const int* __restrict__ first, int* __restrict__ pos) {
  __shared__ int cursor[1024];
  for (int e = threadIdx.x; e < experts; e += blockDim.x) cursor[e] = first[e * gridDim.x + blockIdx.x];
  __syncthreads();
  if (threadIdx.x != 0) return;
  const int end = min(pairs, (int)(blockIdx.x + 1) * chunk);
  for (int i = (int)blockIdx.x * chunk; i < end; ++i) pos[i] = cursor[idx[i]]++;
}

// ---- Row copies: one block per row, 16 bytes a thread and load.

// send[pos[i]] = x[i / 8]: the rows in the send layout.
extern "C" __global__ void permute_rows(const uint4* x, const int* pos, uint4* send, int vecs) {
  const uint4* src = x + (long long)(blockIdx.x / 8) * vecs;
  uint4* dst = send + (long long)pos[blockIdx.x] * vecs;
  for (int v = threadIdx.x; v < vecs; v += blockDim.x) dst[v] = src[v];
}

// The (source p, local expert e) segments, s = p * local + e: where each starts in the arrival
// layout (by source, then expert; arrival[segments] = all rows) and in the expert layout (by
// expert, then source). recv_counts[s]: rows from rank p for local expert e. One thread.
extern "C" __global__ void segment_offsets(const int* recv_counts, int world, int local, long long* arrival,
                                           long long* expert) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
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

// Block r handles arrival row r: its segment is the last one starting at or before r (an empty
// segment shares its start with the next), its expert row the segment's expert start plus the
// offset inside. to_expert: dst[expert row] = src[r] (dispatch), else dst[r] = src[expert row].
extern "C" __global__ void regroup_rows(uint4* dst, const uint4* src, const long long* arrival,
                                        const long long* expert, int segments, int vecs, int to_expert) {
  const long long row = blockIdx.x;
  int lo = 0, hi = segments - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (arrival[mid] <= row) lo = mid;
    else hi = mid - 1;
  }
  const long long other = expert[lo] + (row - arrival[lo]);
  const uint4* s = src + (to_expert ? row : other) * vecs;
  uint4* d = dst + (to_expert ? other : row) * vecs;
  for (int v = threadIdx.x; v < vecs; v += blockDim.x) d[v] = s[v];
}

// ---- Per local expert, within one block of up to 1024 threads (thread e for expert e).

// The rows local expert e receives from every source (0 for a thread past the experts).
__device__ inline long long expert_rows(const int* recv_counts, int world, int local, int e) {
  long long n = 0;
  if (e < local)
    for (int p = 0; p < world; ++p) n += recv_counts[p * local + e];
  return n;
}

// The inclusive scan of `v` over the block's threads in thread order, double-buffered in shared
// memory; every thread of the block must call it.
__device__ inline long long block_inclusive_scan(long long v) {
  __shared__ long long scan[2][1024];
  const int t = threadIdx.x;
  int cur = 0;
  scan[0][t] = v;
  __syncthreads();
  for (int d = 1; d < (int)blockDim.x; d <<= 1) {
    scan[cur ^ 1][t] = scan[cur][t] + (t >= d ? scan[cur][t - d] : 0);
    cur ^= 1;
    __syncthreads();
  }
  return scan[cur][t];
}

// ---- The grouped GEMMs' pointer arrays (cuBLAS reads them from device memory).

// Problem j of each grouped GEMM is the j-th local expert with rows, in expert order (the host
// plan, Plan.experts, drops the same empty experts from its size arrays); its rows start at the
// expert layout's row `first`, the rows of the experts before it. ptrs [6][local]: W13_e, its rows
// of xe and of h13 (the gate/up GEMM); W2_e, its rows of h and of y (the down GEMM). One block of
// 1024 threads, thread e for local expert e: a block-wide scan of (rows, has rows) packed in one
// integer, rows above bit 11 and the count of experts with rows (at most 1024) below.
extern "C" __global__ void __launch_bounds__(1024)
grouped_pointers(const int* recv_counts, int world, int local, long long w13, long long w2, long long xe,
                 long long h13, long long h, long long y, long long H, long long I, long long* ptrs) {
  const int e = threadIdx.x;
  const long long n = expert_rows(recv_counts, world, local, e);
  const long long mine = n * 2048 + (n > 0 ? 1 : 0);
  const long long before = block_inclusive_scan(mine) - mine;
  if (e >= local || n == 0) return;
  const long long first = before / 2048;
  const int j = (int)(before % 2048);
  ptrs[j] = w13 + e * H * 2 * I * 2;
  ptrs[local + j] = xe + first * H * 2;
  ptrs[2 * local + j] = h13 + first * 2 * I * 2;
  ptrs[3 * local + j] = w2 + e * I * H * 2;
  ptrs[4 * local + j] = h + first * I * 2;
  ptrs[5 * local + j] = y + first * H * 2;
}

// ---- The prebuilt CUTLASS grouped GEMM's arrays (cuco_grouped_gemm_lib.h; it reads them when it runs).

// Group e of each projection is local expert e (m = 0 for an expert without rows: the library
// skips it, and its pointers still point inside the buffers). Per projection q (0: gate/up, xe @
// W13_e into h13; 1: down, h @ W2_e into y): shapes [2][local][3] (m, n, k), strides [2][3][local]
// (k, n, n: the rows of a, b and d), ptrs [2][3][local] (a, b, d). One block of 1024 threads,
// thread e for local expert e, an exclusive scan of the rows for each expert's first row.
extern "C" __global__ void __launch_bounds__(1024)
cutlass_problems(const int* recv_counts, int world, int local, long long w13, long long w2, long long xe,
                 long long h13, long long h, long long y, long long H, long long I, int* shapes,
                 long long* strides, long long* ptrs) {
  const int e = threadIdx.x;
  const long long n = expert_rows(recv_counts, world, local, e);
  const long long first = block_inclusive_scan(n) - n;
  if (e >= local) return;
  const long long nk[2][2] = {{2 * I, H}, {H, I}};  // (n, k) of each projection
  const long long a[2] = {xe + first * H * 2, h + first * I * 2};
  const long long b[2] = {w13 + e * H * 2 * I * 2, w2 + e * I * H * 2};
  const long long d[2] = {h13 + first * 2 * I * 2, y + first * H * 2};
  for (int q = 0; q < 2; ++q) {
    int* s = shapes + (q * local + e) * 3;
    s[0] = (int)n;
    s[1] = (int)nk[q][0];
    s[2] = (int)nk[q][1];
    long long* st = strides + q * 3 * local;
    st[e] = nk[q][1];
    st[local + e] = nk[q][0];
    st[2 * local + e] = nk[q][0];
    long long* pt = ptrs + q * 3 * local;
    pt[e] = a[q];
    pt[local + e] = b[q];
    pt[2 * local + e] = d[q];
  }
}

// ---- Math.

// h[r, i] = silu(gate[r, i]) * up[r, i]; h13 rows are [gate (I) | up (I)]. Two bf16 per thread.
extern "C" __global__ void silu_mul(const unsigned int* h13, unsigned int* h, long long rows, int half) {
  const long long n = rows * half;
  for (long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += (long long)gridDim.x * blockDim.x) {
    const long long r = j / half, i = j % half;
    const unsigned int g = h13[r * 2 * half + i], u = h13[r * 2 * half + half + i];
    h[j] = pack(silu(lo_bf(g)) * lo_bf(u), silu(hi_bf(g)) * hi_bf(u));
  }
}

// out[t, :] = sum_k w[t, k] * comb[pos[t*8 + k], :], fp32, choice 0 first. One block per token,
// eight bf16 (16 bytes) per thread and load.
extern "C" __global__ void weighted_combine(const uint4* comb, const int* pos, const float* w, uint4* out, int vecs) {
  const int t = blockIdx.x;
  for (int c = threadIdx.x; c < vecs; c += blockDim.x) {
    float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    for (int k = 0; k < 8; ++k) {
      const float wk = w[t * 8 + k];
      const uint4 q = comb[(long long)pos[t * 8 + k] * vecs + c];
      const unsigned int v[4] = {q.x, q.y, q.z, q.w};
      for (int j = 0; j < 4; ++j) {
        acc[2 * j] += wk * lo_bf(v[j]);
        acc[2 * j + 1] += wk * hi_bf(v[j]);
      }
    }
    out[(long long)t * vecs + c] = make_uint4(pack(acc[0], acc[1]), pack(acc[2], acc[3]), pack(acc[4], acc[5]),
                                              pack(acc[6], acc[7]));
  }
}
