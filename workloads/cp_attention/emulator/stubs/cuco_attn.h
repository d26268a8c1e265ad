// Emulator stand-in for the harness attention library (cuco_tui/harness/runtime/cuco_attn.h): the
// same C API, computed on the CPU in float with the output rounded to bf16 once, enqueued on the
// emulated stream like a kernel (so a candidate's events and waits order it as on a GPU). The
// library itself is checked against float64 on a GPU (benchmarks/attention_lib.py); this lets the
// CPU tests check what candidates do around it: which rows, which keys, which masks, merges.
#pragma once
#include "../emu_runtime.h"

#include <atomic>
#include <string>
#include <vector>

enum { CUCO_ATTN_NO_MASK = 0, CUCO_ATTN_CAUSAL_TOP_LEFT = 1, CUCO_ATTN_CAUSAL_BOTTOM_RIGHT = 2 };

typedef struct cuco_attn_desc {
  int heads_q, heads_kv, head_dim;
  int rows_q, rows_kv;
  long long q_row_stride, kv_row_stride, o_row_stride;
  int mask;
  float scale;
  int stats;
} cuco_attn_desc;

struct cuco_attn {
  cuco_attn_desc d;
  int device;
};

inline thread_local std::string emu_attn_error;

// The (query row, key) pairs each device's calls attend to, every head counted: a rank's share of
// the attention work, which the driver writes out so that a test can check a load balance.
#define CUCO_EMU_ATTN_PAIRS 1
inline std::atomic<long long> emu_attn_pairs[64];

inline long long emu_attn_pairs_of(const cuco_attn_desc& d) {
  long long pairs = 0;
  const long long shift = d.mask == CUCO_ATTN_CAUSAL_BOTTOM_RIGHT ? d.rows_kv - d.rows_q : 0;
  for (long long i = 0; i < d.rows_q; ++i)
    pairs += d.mask == CUCO_ATTN_NO_MASK ? d.rows_kv : std::min<long long>(i + shift, d.rows_kv - 1) + 1;
  return pairs * d.heads_q;
}

inline int cuco_attn_create(cuco_attn** plan, const cuco_attn_desc* desc) {
  if (!plan || !desc) {
    emu_attn_error = "cuco_attn_create: null argument";
    return 1;
  }
  *plan = nullptr;
  const cuco_attn_desc& d = *desc;
  const long long dense_q = 1LL * d.heads_q * d.head_dim, dense_kv = 1LL * d.heads_kv * d.head_dim;
  if (d.heads_q <= 0 || d.heads_kv <= 0 || d.heads_q % d.heads_kv || d.head_dim <= 0 || d.head_dim % 8 ||
      d.head_dim > 256 || d.rows_q <= 0 || d.rows_kv <= 0 || d.mask < 0 || d.mask > 2 ||
      (d.mask == CUCO_ATTN_CAUSAL_BOTTOM_RIGHT && d.rows_q > d.rows_kv) ||
      (d.q_row_stride && d.q_row_stride < dense_q) || (d.o_row_stride && d.o_row_stride < dense_q) ||
      (d.kv_row_stride && d.kv_row_stride < dense_kv)) {
    emu_attn_error = "cuco_attn_create: bad descriptor";
    return 1;
  }
  cuco_attn* p = new cuco_attn{d, emu_device};
  if (!p->d.q_row_stride) p->d.q_row_stride = (long long)d.heads_q * d.head_dim;
  if (!p->d.o_row_stride) p->d.o_row_stride = (long long)d.heads_q * d.head_dim;
  if (!p->d.kv_row_stride) p->d.kv_row_stride = (long long)d.heads_kv * d.head_dim;
  if (p->d.scale == 0.f) p->d.scale = 1.f / sqrtf((float)d.head_dim);
  *plan = p;
  return 0;
}

inline void emu_attention(const cuco_attn_desc& d, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                          uint16_t* o, float* stats) {
  const int G = d.heads_q / d.heads_kv, D = d.head_dim;
  const long long shift = d.mask == CUCO_ATTN_CAUSAL_BOTTOM_RIGHT ? d.rows_kv - d.rows_q : 0;
  std::vector<float> s(d.rows_kv), acc(D);
  for (int i = 0; i < d.rows_q; ++i) {
    const long long last = d.mask == CUCO_ATTN_NO_MASK ? d.rows_kv - 1 : std::min<long long>(i + shift, d.rows_kv - 1);
    for (int h = 0; h < d.heads_q; ++h) {
      const uint16_t* qi = q + i * d.q_row_stride + (long long)h * D;
      float m = -INFINITY;
      for (long long j = 0; j <= last; ++j) {
        const uint16_t* kj = k + j * d.kv_row_stride + (long long)(h / G) * D;
        float dot = 0.f;
        for (int x = 0; x < D; ++x) dot += emu_bf2f(qi[x]) * emu_bf2f(kj[x]);
        s[j] = dot * d.scale;
        m = std::max(m, s[j]);
      }
      float l = 0.f;
      std::fill(acc.begin(), acc.end(), 0.f);
      for (long long j = 0; j <= last; ++j) {
        const float p = expf(s[j] - m);
        l += p;
        const uint16_t* vj = v + j * d.kv_row_stride + (long long)(h / G) * D;
        for (int x = 0; x < D; ++x) acc[x] += p * emu_bf2f(vj[x]);
      }
      uint16_t* oi = o + i * d.o_row_stride + (long long)h * D;
      for (int x = 0; x < D; ++x) oi[x] = emu_f2bf(acc[x] / l);
      if (stats) stats[(long long)h * d.rows_q + i] = m + logf(l);
    }
  }
}

inline int cuco_attn_run(cuco_attn* plan, const void* q, const void* k, const void* v, void* o, float* stats,
                         cudaStream_t stream) {
  if (!plan || !q || !k || !v || !o || (plan->d.stats && !stats)) {
    emu_attn_error = "cuco_attn_run: null argument";
    return 1;
  }
  if (plan->device != emu_device) {
    emu_attn_error = "cuco_attn_run: the current device is not the one the plan was made on";
    return 1;
  }
  const cuco_attn_desc d = plan->d;
  float* st = d.stats ? stats : nullptr;
  emu_attn_pairs[plan->device % 64] += emu_attn_pairs_of(d);
  emu_check_stream(stream)->enqueue("cuco_attn_run", [=] {
    emu_attention(d, (const uint16_t*)q, (const uint16_t*)k, (const uint16_t*)v, (uint16_t*)o, st);
  });
  return 0;
}

inline void cuco_attn_destroy(cuco_attn* plan) { delete plan; }
inline const char* cuco_attn_last_error(void) { return emu_attn_error.c_str(); }
inline long cuco_attn_cudnn_version(void) { return 0; }

// In a candidate (after cuco_runtime.cuh): fail the harness call with the library's message.
#define CUCO_TRY_ATTN(ctx, expr)                                                                   \
  do {                                                                                             \
    if ((expr) != 0) return ::cuco::fail((ctx), "line %d: %s failed: %s", __LINE__, #expr, cuco_attn_last_error()); \
  } while (0)
