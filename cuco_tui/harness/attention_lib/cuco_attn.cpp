// The harness's attention library: cuDNN SDPA through the cudnn-frontend graph API, exported as
// the C API of cuco_attn.h. Built once per machine by cuco_tui/build/attention.py; the frontend's
// templates take minutes to compile, which is why candidates do not include them themselves.
#include "cuco_attn.h"

#include <cudnn_frontend.h>

#include <cmath>
#include <exception>
#include <memory>
#include <string>
#include <unordered_map>

namespace fe = cudnn_frontend;

namespace {

thread_local std::string g_error;

int fail(const std::string& what) {
  g_error = what;
  return 1;
}

enum Uid : int64_t { kQ = 1, kK = 2, kV = 3, kO = 4, kStats = 5 };

}  // namespace

struct cuco_attn {
  cuco_attn_desc desc{};
  cudnnHandle_t handle = nullptr;
  std::shared_ptr<fe::graph::Graph> graph;
  void* workspace = nullptr;
  int64_t workspace_bytes = 0;
  int device = -1;

  ~cuco_attn() {
    graph.reset();  // its execution plans refer to the handle: gone before it
    if (workspace) cudaFree(workspace);
    if (handle) cudnnDestroy(handle);
  }
};

extern "C" CUCO_ATTN_API const char* cuco_attn_last_error(void) { return g_error.c_str(); }

extern "C" CUCO_ATTN_API long cuco_attn_cudnn_version(void) { return static_cast<long>(cudnnGetVersion()); }

static std::string check_desc(const cuco_attn_desc& d) {
  if (d.heads_q <= 0 || d.heads_kv <= 0 || d.heads_q % d.heads_kv)
    return "heads_q=" + std::to_string(d.heads_q) + " must be a positive multiple of heads_kv=" +
           std::to_string(d.heads_kv);
  if (d.head_dim <= 0 || d.head_dim % 8 || d.head_dim > 256)
    return "head_dim=" + std::to_string(d.head_dim) + " must be a multiple of 8 up to 256";
  if (d.rows_q <= 0 || d.rows_kv <= 0)
    return "rows_q=" + std::to_string(d.rows_q) + " and rows_kv=" + std::to_string(d.rows_kv) + " must be positive";
  if (d.mask < CUCO_ATTN_NO_MASK || d.mask > CUCO_ATTN_CAUSAL_BOTTOM_RIGHT)
    return "mask=" + std::to_string(d.mask) + " is not a CUCO_ATTN_* value";
  if (d.mask == CUCO_ATTN_CAUSAL_BOTTOM_RIGHT && d.rows_q > d.rows_kv)
    return "a bottom-right causal mask needs rows_q <= rows_kv (the first queries would see no key)";
  const long long dense_q = 1LL * d.heads_q * d.head_dim, dense_kv = 1LL * d.heads_kv * d.head_dim;
  if ((d.q_row_stride && d.q_row_stride < dense_q) || (d.o_row_stride && d.o_row_stride < dense_q) ||
      (d.kv_row_stride && d.kv_row_stride < dense_kv))
    return "a row stride is smaller than one row (heads * head_dim elements)";
  return {};
}

extern "C" CUCO_ATTN_API int cuco_attn_create(cuco_attn** out, const cuco_attn_desc* desc) {
  if (!out || !desc) return fail("cuco_attn_create: null argument");
  *out = nullptr;
  const std::string bad = check_desc(*desc);
  if (!bad.empty()) return fail("cuco_attn_create: " + bad);
  try {
    auto plan = std::make_unique<cuco_attn>();
    plan->desc = *desc;
    cuco_attn_desc& d = plan->desc;
    const int64_t hq = d.heads_q, hkv = d.heads_kv, D = d.head_dim, sq = d.rows_q, skv = d.rows_kv;
    if (!d.q_row_stride) d.q_row_stride = hq * D;
    if (!d.o_row_stride) d.o_row_stride = hq * D;
    if (!d.kv_row_stride) d.kv_row_stride = hkv * D;
    if (d.scale == 0.f) d.scale = 1.f / std::sqrt(static_cast<float>(D));
    if (cudaGetDevice(&plan->device) != cudaSuccess) return fail("cuco_attn_create: no current CUDA device");
    if (cudnnCreate(&plan->handle) != CUDNN_STATUS_SUCCESS) return fail("cuco_attn_create: cudnnCreate failed");

    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    // Logical dims are (batch, head, row, dim); the strides place them in token-major memory.
    auto tensor = [&](const char* name, int64_t uid, int64_t h, int64_t s, int64_t row_stride) {
      return g->tensor(fe::graph::Tensor_attributes()
                           .set_name(name)
                           .set_uid(uid)
                           .set_dim({1, h, s, D})
                           .set_stride({s * row_stride, D, row_stride, 1}));
    };
    auto Q = tensor("Q", kQ, hq, sq, d.q_row_stride);
    auto K = tensor("K", kK, hkv, skv, d.kv_row_stride);
    auto V = tensor("V", kV, hkv, skv, d.kv_row_stride);
    auto opts = fe::graph::SDPA_attributes().set_name("cuco_attn").set_generate_stats(d.stats != 0).set_attn_scale(d.scale);
    if (d.mask == CUCO_ATTN_CAUSAL_TOP_LEFT) opts.set_causal_mask(true);
    if (d.mask == CUCO_ATTN_CAUSAL_BOTTOM_RIGHT) opts.set_causal_mask_bottom_right(true);
    auto [O, Stats] = g->sdpa(Q, K, V, opts);
    O->set_output(true).set_uid(kO).set_dim({1, hq, sq, D}).set_stride({sq * d.o_row_stride, D, d.o_row_stride, 1});
    if (d.stats) {
      Stats->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT)
          .set_dim({1, hq, sq, 1}).set_stride({hq * sq, sq, 1, 1});
    }
    auto st = g->validate();
    if (st.is_good()) st = g->build_operation_graph(plan->handle);
    if (st.is_good()) st = g->create_execution_plans({fe::HeurMode_t::A});
    if (st.is_good()) st = g->check_support(plan->handle);
    if (st.is_good()) st = g->build_plans(plan->handle);
    if (!st.is_good()) return fail("cuco_attn_create: cuDNN has no SDPA plan for this shape: " + st.get_message());
    if (!g->get_workspace_size(plan->workspace_bytes).is_good())
      return fail("cuco_attn_create: cannot read the workspace size");
    if (plan->workspace_bytes > 0 && cudaMalloc(&plan->workspace, plan->workspace_bytes) != cudaSuccess)
      return fail("cuco_attn_create: cudaMalloc of " + std::to_string(plan->workspace_bytes) + " workspace bytes failed");
    plan->graph = std::move(g);
    *out = plan.release();
    return 0;
  } catch (const std::exception& e) {
    return fail(std::string("cuco_attn_create: ") + e.what());
  }
}

extern "C" CUCO_ATTN_API int cuco_attn_run(cuco_attn* plan, const void* q, const void* k, const void* v, void* o, float* stats,
                             cudaStream_t stream) {
  if (!plan || !q || !k || !v || !o) return fail("cuco_attn_run: null plan or tensor");
  if (plan->desc.stats && !stats) return fail("cuco_attn_run: the plan writes stats but stats is null");
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess || device != plan->device)
    return fail("cuco_attn_run: the current device is not the one the plan was made on");
  try {
    if (cudnnSetStream(plan->handle, stream) != CUDNN_STATUS_SUCCESS) return fail("cuco_attn_run: cudnnSetStream failed");
    std::unordered_map<int64_t, void*> pack = {
        {kQ, const_cast<void*>(q)}, {kK, const_cast<void*>(k)}, {kV, const_cast<void*>(v)}, {kO, o}};
    if (plan->desc.stats) pack[kStats] = stats;
    auto st = plan->graph->execute(plan->handle, pack, plan->workspace);
    if (!st.is_good()) return fail("cuco_attn_run: " + st.get_message());
    return 0;
  } catch (const std::exception& e) {
    return fail(std::string("cuco_attn_run: ") + e.what());
  }
}

extern "C" CUCO_ATTN_API void cuco_attn_destroy(cuco_attn* plan) { delete plan; }
