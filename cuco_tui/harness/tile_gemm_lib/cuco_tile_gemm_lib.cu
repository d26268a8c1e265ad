// cuco_tile_gemm_lib.cu: one kernel configuration of cuco_tile_gemm.cuh's fused GEMM as a shared
// library with the C ABI of cuco_tile_gemm_lib.h.
//
// Built by cuco's toolchain (toolchain/tile_gemm_lib.py) once per machine and configuration,
// with the CUTLASS flags, -DCUCO_TG_BLOCK_M/N, -DCUCO_TG_CLUSTER_M/N and -DCUCO_TG_ENTRY (the
// configuration's entry point, e.g. cuco_tile_gemm_128x256_2x1), symbols hidden but that one,
// and the CUDA runtime shared: the candidate and the library must share one runtime, whose
// current device, streams and interposers (L2's schedule perturbation) are the candidate's.
//
// Everything of the host/device boundary happens here, as it does in a candidate that includes
// cuco_tile_gemm.cuh: FusedGemm::init builds the TMA descriptors of G, x, B and Y on the host
// (to_underlying_arguments) and the schedule's row order in device memory; the kernel parameters
// (descriptors, schedule, the arrival flags' device pointer, the rank's trace slots and the
// wait site) travel by value into every launch.
#define CUCO_TILE_GEMM_LIB_BUILD 1
// Before cuco_tile_gemm.cuh: CUTLASS's sm100 traits turn -Wmissing-field-initializers into an
// error for the rest of a translation unit.
#include "cuco_tile_gemm_lib.h"
#include "cuco_tile_gemm.cuh"

#include <new>

#if !defined(CUCO_TG_BLOCK_M) || !defined(CUCO_TG_BLOCK_N) || !defined(CUCO_TG_CLUSTER_M) || \
    !defined(CUCO_TG_CLUSTER_N) || !defined(CUCO_TG_ENTRY)
#error "build with -DCUCO_TG_BLOCK_M=.. -DCUCO_TG_BLOCK_N=.. -DCUCO_TG_CLUSTER_M=.. -DCUCO_TG_CLUSTER_N=.. -DCUCO_TG_ENTRY=.."
#endif

namespace {

namespace tg = cuco::tile_gemm;
using Cfg = tg::Config<CUCO_TG_BLOCK_M, CUCO_TG_BLOCK_N, CUCO_TG_CLUSTER_M, CUCO_TG_CLUSTER_N>;
using Gemm = tg::FusedGemm<Cfg>;

int create(const cuco_tile_gemm_setup* setup, void** out, cuco_tile_gemm_info* info, char* error, size_t error_len) {
  *out = nullptr;
  if (setup == nullptr || setup->abi != CUCO_TILE_GEMM_LIB_ABI)
    return tg::write_error(error, error_len, "the fused GEMM library speaks ABI %d, the caller %d",
                           CUCO_TILE_GEMM_LIB_ABI, setup ? setup->abi : -1);
  Gemm* gemm = new (std::nothrow) Gemm();
  if (gemm == nullptr) return tg::write_error(error, error_len, "fused GEMM: out of host memory");
  if (int rc = gemm->init(tg::setup_from_c(*setup), error, error_len)) {
    gemm->release();
    delete gemm;
    return rc;
  }
  if (info != nullptr) *info = cuco_tile_gemm_info{gemm->clusters(), gemm->ctas(), gemm->smem_bytes(), gemm->band()};
  *out = gemm;
  return 0;
}

int launch(void* gemm, cudaStream_t stream, unsigned long long epoch) {
  if (gemm == nullptr) return (int)cudaErrorInvalidValue;
  return (int)static_cast<Gemm*>(gemm)->launch(stream, epoch);
}

void release(void* gemm) {
  if (gemm == nullptr) return;
  static_cast<Gemm*>(gemm)->release();
  delete static_cast<Gemm*>(gemm);
}

const cuco_tile_gemm_api kApi = {CUCO_TILE_GEMM_LIB_ABI, Cfg::kBlockM, Cfg::kBlockN, Cfg::kClusterM, Cfg::kClusterN,
                                 create, launch, release};

}  // namespace

extern "C" __attribute__((visibility("default"))) const cuco_tile_gemm_api* CUCO_TG_ENTRY(void) { return &kApi; }
