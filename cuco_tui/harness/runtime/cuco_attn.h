// cuco_attn: the harness's fused attention for candidates, cuDNN's SDPA (FlashAttention-class
// fused kernels) behind a small C API. The harness builds the library once per machine and loads
// it into the rank processes before the candidate, so a candidate that includes this header
// compiles anywhere (nvcc sees only these declarations) and links at load time.
//
// Layout: token-major rows, as the workloads hand them out. q [rows_q, heads_q, head_dim],
// k and v [rows_kv, heads_kv, head_dim], o [rows_q, heads_q, head_dim], bf16; consecutive tokens
// are *_row_stride elements apart (0 means dense: heads * head_dim). Query head h reads KV head
// h / (heads_q / heads_kv). Stats, when asked for, are the natural-log log-sum-exp of each row's
// scaled scores, fp32 [heads_q, rows_q] (row-major, head-major): what merging two partial
// results over disjoint key sets needs (o = (o1 e^{l1} + o2 e^{l2}) / (e^{l1} + e^{l2})).
//
// Masks: CUCO_ATTN_CAUSAL_TOP_LEFT lets query i see keys 0..i; CUCO_ATTN_CAUSAL_BOTTOM_RIGHT lets
// it see keys 0..i + rows_kv - rows_q (the queries are the last rows_q of the rows_kv positions:
// a chunk of queries over the prefix of keys up to and including its own).
//
// A plan holds one shape and its own workspace; run it as often as needed, on any stream, but its
// runs must be stream-ordered (two runs of one plan in flight at once share the workspace: make
// a plan per concurrent stream). Plans are not thread-safe: one per host thread. Every call but
// destroy returns 0 on success; otherwise cuco_attn_last_error() says why (thread-local, valid
// until this thread's next failing call).
#pragma once

#include <cuda_runtime.h>
#include <stddef.h>

#if defined(__GNUC__)
#define CUCO_ATTN_API __attribute__((visibility("default")))
#else
#define CUCO_ATTN_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

enum { CUCO_ATTN_NO_MASK = 0, CUCO_ATTN_CAUSAL_TOP_LEFT = 1, CUCO_ATTN_CAUSAL_BOTTOM_RIGHT = 2 };

typedef struct cuco_attn_desc {
  int heads_q, heads_kv, head_dim;  // head_dim a multiple of 8, at most 256
  int rows_q, rows_kv;
  long long q_row_stride, kv_row_stride, o_row_stride;  // elements; 0 = dense
  int mask;                                             // CUCO_ATTN_*
  float scale;                                          // 0 = 1 / sqrt(head_dim)
  int stats;                                            // 1: run() writes the [heads_q, rows_q] LSE
} cuco_attn_desc;

typedef struct cuco_attn cuco_attn;

CUCO_ATTN_API int cuco_attn_create(cuco_attn** plan, const cuco_attn_desc* desc);
CUCO_ATTN_API int cuco_attn_run(cuco_attn* plan, const void* q, const void* k, const void* v, void* o, float* stats,
                  cudaStream_t stream);
CUCO_ATTN_API void cuco_attn_destroy(cuco_attn* plan);
CUCO_ATTN_API const char* cuco_attn_last_error(void);
// The cuDNN version the library runs on (e.g. 92800), for logs.
CUCO_ATTN_API long cuco_attn_cudnn_version(void);

#ifdef __cplusplus
}
#endif

// In a candidate (after cuco_runtime.cuh): fail the harness call with the library's message.
#define CUCO_TRY_ATTN(ctx, expr)                                                                   \
  do {                                                                                             \
    if ((expr) != 0) return ::cuco::fail((ctx), "line %d: %s failed: %s", __LINE__, #expr, cuco_attn_last_error()); \
  } while (0)
