// Emulator stub of cuBLASLt's header (see rs_emu.h): a CPU model of the cuBLASLt calls
// gemm_reducescatter's ce_fold makes, on top of the CPU model of CUDA and cuBLAS
// (workloads/cp_attention/emulator/emu_runtime.h, emu_cublas.h). Not part of any candidate.
//
//  - Handles, matmul descriptors (compute and scale type; TRANSA/TRANSB), matrix layouts (type,
//    rows, columns, leading dimension; column-major, no batches) and preferences (workspace size,
//    operand alignments: accepted, checked against the pointers at each matmul) are host objects.
//  - cublasLtMatmulAlgoGetHeuristic returns one algorithm for shapes that agree (A m x k, B k x n,
//    C and D m x n after the transposes; C and D of the same layout), else none.
//  - cublasLtMatmul: D = alpha * op(A) op(B) + beta * C, in float, each element rounded once to D's
//    type, on `stream` (its last argument, as on a GPU), held by a schedule perturbation of class
//    GEMM before it is enqueued (the rank worker's interposer holds it the same way). C is read
//    when the stream runs the matmul, so a C that is not there yet in stream order is wrong here as
//    on a GPU. C may be D.
#pragma once

#include <cuda_runtime.h>  // the emulator's stub: emu_runtime.h, emu_cublas.h

#include <cstdint>

struct EmuLtHandle {
  int unused = 0;
};
struct EmuLtDesc {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  cublasOperation_t ta = CUBLAS_OP_N, tb = CUBLAS_OP_N;
};
struct EmuLtLayout {
  cudaDataType type;
  uint64_t rows, cols;
  int64_t ld;
};
struct EmuLtPreference {
  uint64_t workspace = 0;
  uint32_t align[4] = {256, 256, 256, 256};  // A, B, C, D
};
typedef EmuLtHandle* cublasLtHandle_t;
typedef EmuLtDesc* cublasLtMatmulDesc_t;
typedef EmuLtLayout* cublasLtMatrixLayout_t;
typedef EmuLtPreference* cublasLtMatmulPreference_t;
typedef struct {
  uint64_t data[8];
} cublasLtMatmulAlgo_t;
typedef struct {
  cublasLtMatmulAlgo_t algo;
  size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
} cublasLtMatmulHeuristicResult_t;
typedef enum { CUBLASLT_MATMUL_DESC_TRANSA = 3, CUBLASLT_MATMUL_DESC_TRANSB = 4 } cublasLtMatmulDescAttributes_t;
typedef enum {
  CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,
} cublasLtMatmulPreferenceAttributes_t;

// Matmuls that reached cuBLASLt, over the process.
inline std::atomic<long long> emu_lt_matmul_calls{0};

inline cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) {
  *h = new EmuLtHandle();
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t compute,
                                               cudaDataType_t scale) {
  if (compute != CUBLAS_COMPUTE_32F || scale != CUDA_R_32F) return CUBLAS_STATUS_INVALID_VALUE;
  *d = new EmuLtDesc{compute, scale};
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr,
                                                     const void* buf, size_t bytes) {
  if (bytes != sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE;
  const cublasOperation_t op = (cublasOperation_t) * (const int32_t*)buf;
  if (attr == CUBLASLT_MATMUL_DESC_TRANSA)
    d->ta = op;
  else if (attr == CUBLASLT_MATMUL_DESC_TRANSB)
    d->tb = op;
  else
    return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete d;
  return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType type, uint64_t rows,
                                                 uint64_t cols, int64_t ld) {
  if (ld < (int64_t)rows || (type != CUDA_R_16BF && type != CUDA_R_32F)) return CUBLAS_STATUS_INVALID_VALUE;
  *l = new EmuLtLayout{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete l;
  return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* p) {
  *p = new EmuLtPreference();
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                           cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                           size_t bytes) {
  if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES && bytes == sizeof(uint64_t)) {
    p->workspace = *(const uint64_t*)buf;
    return CUBLAS_STATUS_SUCCESS;
  }
  if (attr >= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES && attr <= CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES &&
      bytes == sizeof(uint32_t)) {
    p->align[attr - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES] = *(const uint32_t*)buf;
    return CUBLAS_STATUS_SUCCESS;
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}
inline cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}

// (m, n, k) of D = op(A) op(B) + C, or false where the layouts disagree.
inline bool emu_lt_shape(const EmuLtDesc* d, const EmuLtLayout* a, const EmuLtLayout* b, const EmuLtLayout* c,
                         const EmuLtLayout* dd, uint64_t* m, uint64_t* n, uint64_t* k) {
  const uint64_t am = d->ta == CUBLAS_OP_N ? a->rows : a->cols, ak = d->ta == CUBLAS_OP_N ? a->cols : a->rows;
  const uint64_t bk = d->tb == CUBLAS_OP_N ? b->rows : b->cols, bn = d->tb == CUBLAS_OP_N ? b->cols : b->rows;
  *m = am, *n = bn, *k = ak;
  return ak == bk && c->rows == am && c->cols == bn && dd->rows == am && dd->cols == bn && c->type == dd->type &&
         c->ld == dd->ld;
}

// The algorithm records the alignments it was chosen for: A, B, C, D (a matmul on pointers less
// aligned than that is refused, as a real algorithm may be).
inline cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t, cublasLtMatmulDesc_t desc,
                                                     cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                                     cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                                     cublasLtMatmulPreference_t pref, int requested,
                                                     cublasLtMatmulHeuristicResult_t results[], int* returned) {
  uint64_t m, n, k;
  *returned = 0;
  if (requested < 1) return CUBLAS_STATUS_INVALID_VALUE;
  if (!emu_lt_shape(desc, a, b, c, d, &m, &n, &k)) return CUBLAS_STATUS_SUCCESS;  // no algorithm
  results[0] = {};
  for (int i = 0; i < 4; ++i) results[0].algo.data[i] = pref->align[i];
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                                     cublasLtMatrixLayout_t adesc, const void* B, cublasLtMatrixLayout_t bdesc,
                                     const void* beta, const void* C, cublasLtMatrixLayout_t cdesc, void* D,
                                     cublasLtMatrixLayout_t ddesc, const cublasLtMatmulAlgo_t* algo, void*, size_t,
                                     cudaStream_t stream) {
  uint64_t m, n, k;
  if (!emu_lt_shape(desc, adesc, bdesc, cdesc, ddesc, &m, &n, &k) || algo == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  const void* ptrs[4] = {A, B, C, D};
  for (int i = 0; i < 4; ++i)
    if ((uintptr_t)ptrs[i] % (algo->data[i] ? algo->data[i] : 1) != 0) return CUBLAS_STATUS_INVALID_VALUE;
  const float al = *(const float*)alpha, be = *(const float*)beta;
  const EmuLtDesc d = *desc;
  const EmuLtLayout la = *adesc, lb = *bdesc, lc = *cdesc, ld = *ddesc;
  ++emu_lt_matmul_calls;
  emu_perturb_before(stream, CUCO_OP_GEMM);
  emu_check_stream(stream)->enqueue("cublasLtMatmul", [=] {
    for (uint64_t col = 0; col < n; ++col)
      for (uint64_t row = 0; row < m; ++row) {
        float acc = 0.f;
        for (uint64_t i = 0; i < k; ++i) {
          const size_t ai = d.ta == CUBLAS_OP_N ? row + i * la.ld : i + row * la.ld;
          const size_t bi = d.tb == CUBLAS_OP_N ? i + col * lb.ld : col + i * lb.ld;
          acc += emu_load(A, la.type, ai) * emu_load(B, lb.type, bi);
        }
        const float c = be == 0.f ? 0.f : be * emu_load(C, lc.type, row + col * lc.ld);
        emu_store(D, ld.type, row + col * ld.ld, al * acc + c);
      }
  });
  return CUBLAS_STATUS_SUCCESS;
}
