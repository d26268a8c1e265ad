// cuco_grouped_gemm_lib.cu: one kernel configuration of a CUTLASS 3.x ptr-array grouped GEMM for
// Hopper as a shared library with the C ABI of cuco_grouped_gemm_lib.h.
//
// Built by cuco's toolchain (toolchain/grouped_gemm_lib.py) once per machine and configuration,
// with the CUTLASS flags, -DCUCO_GG_BLOCK_M/N, -DCUCO_GG_CLUSTER_M/N and -DCUCO_GG_ENTRY (the
// configuration's entry point, e.g. cuco_grouped_gemm_128x128_1x1), symbols hidden but that one,
// and the CUDA runtime shared: the candidate and the library share one runtime, whose current
// device, streams and interposers (L2's schedule perturbation) are the candidate's.
//
// The kernel is CUTLASS's own (GemmUniversal over GroupProblemShape with the cooperative ptr-array
// mainloop and epilogue and PersistentTileSchedulerSm90Group): bf16 A [m, k] and B [k, n]
// row-major, fp32 accumulation, D = acc in bf16 (no C). Each CTA rewrites its TMA descriptors in
// the workspace when its tile's group changes, reading the group's pointers and strides from the
// device arrays, and the scheduler reads the groups' sizes there too: nothing but the arrays'
// addresses and the group count is fixed on the host. So the kernel parameters of one set of
// arrays never change, and are built once (to_underlying_arguments: a few placeholder TMA
// descriptors, host work) and kept; launching them again is one kernel launch.
#define CUCO_GROUPED_GEMM_LIB_BUILD 1
// Before CUTLASS: its sm100 traits turn -Wmissing-field-initializers into an error for the rest
// of a translation unit.
#include "cuco_grouped_gemm_lib.h"

#ifndef NDEBUG
#error "cuco_grouped_gemm_lib.cu needs -DNDEBUG: CUTLASS's asserts make ptxas serialize the wgmma pipeline"
#endif

#include <cstring>
#include <new>
#include <vector>

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/group_array_problem_shape.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>

#if !defined(CUCO_GG_BLOCK_M) || !defined(CUCO_GG_BLOCK_N) || !defined(CUCO_GG_CLUSTER_M) || \
    !defined(CUCO_GG_CLUSTER_N) || !defined(CUCO_GG_ENTRY)
#error "build with -DCUCO_GG_BLOCK_M=.. -DCUCO_GG_BLOCK_N=.. -DCUCO_GG_CLUSTER_M=.. -DCUCO_GG_CLUSTER_N=.. -DCUCO_GG_ENTRY=.."
#endif

namespace {

namespace gg = cuco::grouped_gemm;

using Element = cutlass::bfloat16_t;
using TileShape = cute::Shape<cute::Int<CUCO_GG_BLOCK_M>, cute::Int<CUCO_GG_BLOCK_N>, cute::_64>;
using ClusterShape = cute::Shape<cute::Int<CUCO_GG_CLUSTER_M>, cute::Int<CUCO_GG_CLUSTER_N>, cute::_1>;
using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;  // m, n, k per group
using Shape3 = ProblemShape::UnderlyingProblemShape;

// D = acc (alpha 1, no C: a source-less epilogue), stored by TMA through shared memory.
using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
    cutlass::epilogue::collective::EpilogueTileAuto, float, float,
    void, cutlass::layout::RowMajor*, 8,
    Element, cutlass::layout::RowMajor*, 8,
    cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative>::CollectiveOp;

// A [m, k] row-major (K-major), B [k, n] row-major (N-major), as many stages as shared memory
// holds beside the epilogue.
using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
    Element, cutlass::layout::RowMajor*, 8,
    Element, cutlass::layout::RowMajor*, 8,
    float, TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
    cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative>::CollectiveOp;

using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
using StrideA = typename Kernel::InternalStrideA;
using StrideB = typename Kernel::InternalStrideB;
using StrideD = typename Kernel::InternalStrideD;

// The header's arrays are CUTLASS's: m, n, k as three ints; each stride one int64 (the others
// are compile-time 1 and 0). Checked here at compile time, and the value's place at create.
static_assert(sizeof(Shape3) == 3 * sizeof(int32_t), "a problem shape is three int32");
static_assert(sizeof(StrideA) == sizeof(int64_t) && sizeof(StrideB) == sizeof(int64_t) &&
              sizeof(StrideD) == sizeof(int64_t), "a group's stride is one int64");

bool layouts_match() {
  Shape3 shape{11, 22, 33};
  int32_t s[3];
  std::memcpy(s, &shape, sizeof s);
  StrideA sa{};
  StrideB sb{};
  StrideD sd{};
  cute::get<0>(sa) = 101;
  cute::get<1>(sb) = 202;
  cute::get<0>(sd) = 303;
  int64_t a, b, d;
  std::memcpy(&a, &sa, 8);
  std::memcpy(&b, &sb, 8);
  std::memcpy(&d, &sd, 8);
  return s[0] == 11 && s[1] == 22 && s[2] == 33 && a == 101 && b == 202 && d == 303;
}

// The kernel parameters of one set of arrays (no host shapes), kept for the next launch.
struct Prepared {
  cuco_grouped_gemm_problems key;
  typename Kernel::Params params;
};

struct GroupedGemm {
  int max_groups = 0;
  cutlass::KernelHardwareInfo hw;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  std::vector<Prepared> prepared;
};

typename Gemm::Arguments arguments(const GroupedGemm& g, const cuco_grouped_gemm_problems& p) {
  typename Gemm::Arguments args{};
  args.mode = cutlass::gemm::GemmUniversalMode::kGrouped;
  args.problem_shape = ProblemShape{p.groups, reinterpret_cast<Shape3*>(p.shapes),
                                    reinterpret_cast<const Shape3*>(p.host_shapes)};
  args.mainloop.ptr_A = reinterpret_cast<const Element**>(p.a);
  args.mainloop.dA = reinterpret_cast<StrideA*>(p.strides);
  args.mainloop.ptr_B = reinterpret_cast<const Element**>(p.b);
  args.mainloop.dB = reinterpret_cast<StrideB*>(p.strides + p.groups);
  args.epilogue.ptr_C = nullptr;
  args.epilogue.ptr_D = reinterpret_cast<Element**>(p.d);
  args.epilogue.dD = reinterpret_cast<StrideD*>(p.strides + 2 * p.groups);
  args.hw_info = g.hw;
  return args;
}

bool same_arrays(const cuco_grouped_gemm_problems& x, const cuco_grouped_gemm_problems& y) {
  return x.groups == y.groups && x.shapes == y.shapes && x.strides == y.strides && x.a == y.a && x.b == y.b &&
         x.d == y.d;
}

int create(const cuco_grouped_gemm_setup* setup, void** out, cuco_grouped_gemm_info* info, char* error,
           size_t error_len) {
  *out = nullptr;
  if (setup == nullptr || setup->abi != CUCO_GROUPED_GEMM_LIB_ABI)
    return gg::write_error(error, error_len, "the grouped GEMM library speaks ABI %d, the caller %d",
                           CUCO_GROUPED_GEMM_LIB_ABI, setup ? setup->abi : -1);
  if (setup->max_groups <= 0)
    return gg::write_error(error, error_len, "grouped GEMM: max_groups must be positive, not %d", setup->max_groups);
  if (!layouts_match())
    return gg::write_error(error, error_len, "grouped GEMM: these CUTLASS headers lay out problem shapes or strides "
                                             "unlike cuco_grouped_gemm_lib.h");
  int device = 0, sms = 0;
  cudaError_t rc = cudaGetDevice(&device);
  if (rc == cudaSuccess) rc = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (rc != cudaSuccess) return gg::write_error(error, error_len, "grouped GEMM: %s", cudaGetErrorString(rc));
  if (setup->sms < 0 || setup->sms > sms)
    return gg::write_error(error, error_len, "grouped GEMM: %d SMs asked for, the device has %d", setup->sms, sms);
  const int smem = (int)Kernel::SharedStorageSize;
  rc = cudaFuncSetAttribute(cutlass::device_kernel<Kernel>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (rc != cudaSuccess)
    return gg::write_error(error, error_len, "grouped GEMM: %d bytes of shared memory: %s", smem, cudaGetErrorString(rc));

  GroupedGemm* g = new (std::nothrow) GroupedGemm();
  if (g == nullptr) return gg::write_error(error, error_len, "grouped GEMM: out of host memory");
  g->max_groups = setup->max_groups;
  g->hw.device_id = device;
  g->hw.sm_count = setup->sms > 0 ? setup->sms : sms;
  // The workspace (a TMA descriptor pair per SM, the scheduler's) for the most groups; any
  // non-null addresses do for the sizing.
  cuco_grouped_gemm_problems sizing = {};
  sizing.groups = setup->max_groups;
  int32_t dummy[3] = {128, 128, 64};
  sizing.shapes = dummy;
  sizing.strides = reinterpret_cast<int64_t*>(dummy);
  sizing.a = reinterpret_cast<const void**>(dummy);
  sizing.b = reinterpret_cast<const void**>(dummy);
  sizing.d = reinterpret_cast<void**>(dummy);
  g->workspace_bytes = Gemm::get_workspace_size(arguments(*g, sizing));
  if (g->workspace_bytes > 0) {
    rc = cudaMalloc(&g->workspace, g->workspace_bytes);
    if (rc != cudaSuccess) {
      delete g;
      return gg::write_error(error, error_len, "grouped GEMM: a workspace of %zu bytes: %s", g->workspace_bytes,
                             cudaGetErrorString(rc));
    }
  }
  if (info != nullptr) *info = cuco_grouped_gemm_info{g->hw.sm_count, smem, (int64_t)g->workspace_bytes};
  *out = g;
  return 0;
}

int launch(void* gemm, const cuco_grouped_gemm_problems* problems, cudaStream_t stream) {
  if (gemm == nullptr || problems == nullptr) return (int)cudaErrorInvalidValue;
  GroupedGemm* g = static_cast<GroupedGemm*>(gemm);
  const cuco_grouped_gemm_problems& p = *problems;
  if (p.groups == 0) return (int)cudaSuccess;
  if (p.groups < 0 || p.groups > g->max_groups || p.shapes == nullptr || p.strides == nullptr || p.a == nullptr ||
      p.b == nullptr || p.d == nullptr)
    return (int)cudaErrorInvalidValue;
  typename Kernel::Params fresh;
  typename Kernel::Params* params = nullptr;
  if (p.host_shapes == nullptr)  // the same arrays as before: the same parameters
    for (Prepared& kept : g->prepared)
      if (same_arrays(kept.key, p)) params = &kept.params;
  if (params == nullptr) {
    typename Gemm::Arguments args = arguments(*g, p);
    if (Gemm::can_implement(args) != cutlass::Status::kSuccess) return (int)cudaErrorInvalidValue;
    if (Kernel::initialize_workspace(args, g->workspace, stream) != cutlass::Status::kSuccess)
      return (int)cudaErrorUnknown;
    fresh = Kernel::to_underlying_arguments(args, g->workspace);
    params = &fresh;
    if (p.host_shapes == nullptr) {
      g->prepared.push_back(Prepared{p, fresh});
      params = &g->prepared.back().params;
    }
  }
  if (Gemm::run(*params, stream) != cutlass::Status::kSuccess) {
    const cudaError_t rc = cudaGetLastError();
    return (int)(rc != cudaSuccess ? rc : cudaErrorLaunchFailure);
  }
  return (int)cudaSuccess;
}

void release(void* gemm) {
  if (gemm == nullptr) return;
  GroupedGemm* g = static_cast<GroupedGemm*>(gemm);
  if (g->workspace != nullptr) cudaFree(g->workspace);
  delete g;
}

const cuco_grouped_gemm_api kApi = {CUCO_GROUPED_GEMM_LIB_ABI, CUCO_GG_BLOCK_M, CUCO_GG_BLOCK_N, CUCO_GG_CLUSTER_M,
                                    CUCO_GG_CLUSTER_N, create, launch, release};

}  // namespace

extern "C" __attribute__((visibility("default"))) const cuco_grouped_gemm_api* CUCO_GG_ENTRY(void) { return &kApi; }
