// emu_cublas.h: the CPU model of the cuBLAS calls candidates make (see emu_runtime.h, which
// includes this after its streams): GEMMs in float on the handle's stream, bf16 or fp32 operands.
#pragma once

#include <atomic>
#include <vector>

// ---------------------------------------------------------------- cuBLAS

typedef enum { CUBLAS_STATUS_SUCCESS = 0, CUBLAS_STATUS_INVALID_VALUE = 7 } cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUDA_R_32F = 0, CUDA_R_16BF = 14 } cudaDataType;
typedef cudaDataType cudaDataType_t;
typedef enum { CUBLAS_COMPUTE_32F = 68 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;
struct EmuBlas {
  cudaStream_t stream = nullptr;
};
typedef EmuBlas* cublasHandle_t;
inline cublasStatus_t cublasCreate(cublasHandle_t* h) {
  *h = new EmuBlas();
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasDestroy(cublasHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s) {
  h->stream = s;
  return CUBLAS_STATUS_SUCCESS;
}
inline const char* cublasGetStatusString(cublasStatus_t s) { return s == CUBLAS_STATUS_SUCCESS ? "success" : "error"; }

// Calls that reached cuBLAS, over the process (a driver may report them: which way a candidate
// ran its GEMMs is part of what a test checks).
inline std::atomic<long long> emu_gemm_ex_calls{0};
inline std::atomic<long long> emu_grouped_gemm_calls{0};

inline float emu_load(const void* p, cudaDataType t, size_t i) {
  if (t == CUDA_R_32F) return ((const float*)p)[i];
  return emu_bf2f(((const uint16_t*)p)[i]);
}
inline void emu_store(void* p, cudaDataType t, size_t i, float v) {
  if (t == CUDA_R_32F)
    ((float*)p)[i] = v;
  else
    ((uint16_t*)p)[i] = emu_f2bf(v);
}

// Column-major, as cuBLAS: op(A) m x k, op(B) k x n, C m x n; alpha and beta read at the call.
inline cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                                 int n, int k, const void* alpha, const void* A, cudaDataType at,
                                                 int lda, long long sa, const void* B, cudaDataType bt, int ldb,
                                                 long long sb, const void* beta, void* C, cudaDataType ct, int ldc,
                                                 long long sc, int batch, cublasComputeType_t, cublasGemmAlgo_t) {
  if (lda < (ta == CUBLAS_OP_N ? m : k) || ldb < (tb == CUBLAS_OP_N ? k : n) || ldc < m)
    return CUBLAS_STATUS_INVALID_VALUE;
  const float al = *(const float*)alpha, be = *(const float*)beta;
  emu_perturb_before(h->stream, CUCO_OP_GEMM);
  emu_check_stream(h->stream)->enqueue("cublasGemmStridedBatchedEx", [=] {
    for (int b = 0; b < batch; ++b)
      for (int col = 0; col < n; ++col)
        for (int row = 0; row < m; ++row) {
          float acc = 0.f;
          for (int i = 0; i < k; ++i) {
            const size_t ai = (size_t)(b * sa) + (ta == CUBLAS_OP_N ? (size_t)row + (size_t)i * lda
                                                                    : (size_t)i + (size_t)row * lda);
            const size_t bi = (size_t)(b * sb) + (tb == CUBLAS_OP_N ? (size_t)i + (size_t)col * ldb
                                                                    : (size_t)col + (size_t)i * ldb);
            acc += emu_load(A, at, ai) * emu_load(B, bt, bi);
          }
          const size_t ci = (size_t)(b * sc) + (size_t)row + (size_t)col * ldc;
          emu_store(C, ct, ci, al * acc + (be == 0.f ? 0.f : be * emu_load(C, ct, ci)));
        }
  });
  return CUBLAS_STATUS_SUCCESS;
}

inline cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                   const void* alpha, const void* A, cudaDataType at, int lda, const void* B,
                                   cudaDataType bt, int ldb, const void* beta, void* C, cudaDataType ct, int ldc,
                                   cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  ++emu_gemm_ex_calls;
  return cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, C, ct, ldc, 0, 1,
                                    compute, algo);
}

// cublasGemmGroupedBatchedEx: the size, operation and scale arrays are host memory, read at the
// call; the pointer arrays are device memory, read when the stream runs the GEMMs (so a candidate
// must have written them before, in stream order, as on a GPU). Problem j of group i is gemmEx with
// group i's sizes on Aarray[j], Barray[j], Carray[j].
inline cublasStatus_t cublasGemmGroupedBatchedEx(cublasHandle_t h, const cublasOperation_t ta[],
                                                 const cublasOperation_t tb[], const int m[], const int n[],
                                                 const int k[], const void* alpha, const void* const A[],
                                                 cudaDataType at, const int lda[], const void* const B[],
                                                 cudaDataType bt, const int ldb[], const void* beta,
                                                 void* const C[], cudaDataType ct, const int ldc[], int groups,
                                                 const int group_size[], cublasComputeType_t) {
  struct Group {
    cublasOperation_t ta, tb;
    int m, n, k, lda, ldb, ldc, size;
    float alpha, beta;
  };
  std::vector<Group> gs;
  for (int i = 0; i < groups; ++i) {
    const Group g{ta[i], tb[i], m[i], n[i], k[i], lda[i], ldb[i], ldc[i], group_size[i], ((const float*)alpha)[i],
                  ((const float*)beta)[i]};
    if (g.m < 0 || g.n < 0 || g.k < 0 || g.size < 0 || g.lda < (g.ta == CUBLAS_OP_N ? g.m : g.k) ||
        g.ldb < (g.tb == CUBLAS_OP_N ? g.k : g.n) || g.ldc < g.m)
      return CUBLAS_STATUS_INVALID_VALUE;
    gs.push_back(g);
  }
  ++emu_grouped_gemm_calls;
  emu_perturb_before(h->stream, CUCO_OP_GEMM);
  emu_check_stream(h->stream)->enqueue("cublasGemmGroupedBatchedEx", [=] {
    int idx = 0;
    for (const Group& g : gs)
      for (int j = 0; j < g.size; ++j, ++idx)
        for (int col = 0; col < g.n; ++col)
          for (int row = 0; row < g.m; ++row) {
            float acc = 0.f;
            for (int i = 0; i < g.k; ++i) {
              const size_t ai = g.ta == CUBLAS_OP_N ? (size_t)row + (size_t)i * g.lda : (size_t)i + (size_t)row * g.lda;
              const size_t bi = g.tb == CUBLAS_OP_N ? (size_t)i + (size_t)col * g.ldb : (size_t)col + (size_t)i * g.ldb;
              acc += emu_load(A[idx], at, ai) * emu_load(B[idx], bt, bi);
            }
            const size_t ci = (size_t)row + (size_t)col * g.ldc;
            emu_store(C[idx], ct, ci, g.alpha * acc + (g.beta == 0.f ? 0.f : g.beta * emu_load(C[idx], ct, ci)));
          }
  });
  return CUBLAS_STATUS_SUCCESS;
}

