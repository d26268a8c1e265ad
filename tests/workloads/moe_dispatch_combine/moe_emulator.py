"""The moe_dispatch_combine reference's kernels (REF._KERNELS, unchanged) built as C++ for the CPU
and loaded with ctypes: what the kernel tests and the Reference class on fake GPUs run on
(conftest.py's `emu` fixture builds it once a session)."""

import pytest

from moe_common import REF

# Just enough CUDA to run the reference's kernels (REF._KERNELS, unchanged) as C++ on a CPU: a
# block's threads are OS threads and blocks run one after another, __syncthreads is a barrier of
# the block, __shfl_up_sync an exchange between two barriers of the warp, and __shared__
# variables are static (one block at a time owns them). Kernels that never synchronize run their
# threads one after another.
_EMU_PRELUDE = r"""
#include <barrier>
#include <cstring>
#include <math.h>
#include <memory>
#include <thread>
#include <vector>

struct dim3 { unsigned x = 1, y = 1, z = 1; };
struct uint4 { unsigned x, y, z, w; };
static uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d) { return {a, b, c, d}; }
static thread_local dim3 threadIdx, blockIdx;
static dim3 blockDim, gridDim;
static std::barrier<>* emu_block;
static std::vector<std::unique_ptr<std::barrier<>>> emu_warps;
static int emu_lanes[32][32];

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __syncthreads() emu_block->arrive_and_wait()

static int min(int a, int b) { return a < b ? a : b; }
static int atomicAdd(int* p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
static unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static int __shfl_up_sync(unsigned, int v, int d) {  // every lane of the warp takes part
  const unsigned w = threadIdx.x / 32, lane = threadIdx.x % 32;
  emu_lanes[w][lane] = v;
  emu_warps[w]->arrive_and_wait();
  const int got = (int)lane >= d ? emu_lanes[w][lane - d] : v;
  emu_warps[w]->arrive_and_wait();
  return got;
}

template <class F>
static void emu_launch(unsigned grid, unsigned block, bool threaded, F body) {
  gridDim.x = grid;
  blockDim.x = block;
  for (unsigned b = 0; b < grid; ++b) {
    if (!threaded) {
      for (unsigned t = 0; t < block; ++t) {
        blockIdx.x = b;
        threadIdx.x = t;
        body();
      }
      continue;
    }
    std::barrier<> whole(block);
    emu_block = &whole;
    emu_warps.clear();
    for (unsigned w = 0; w < (block + 31) / 32; ++w) emu_warps.emplace_back(new std::barrier<>(32));
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < block; ++t)
      threads.emplace_back([=] { blockIdx.x = b; threadIdx.x = t; body(); });
    for (auto& th : threads) th.join();
  }
}
"""

# One entry point per kernel: emu_NAME(grid, block, the kernel's arguments).
_EMU_EXPORTS = r"""
#define EMU_EXPORT(name, threaded, params, args) \
  extern "C" void emu_##name(unsigned grid, unsigned block, EMU_UNPAREN params) { \
    emu_launch(grid, block, threaded, [=] { name args; }); \
  }
#define EMU_UNPAREN(...) __VA_ARGS__
EMU_EXPORT(route_count, true, (const int* idx, int pairs, int chunk, int experts, int* hist),
           (idx, pairs, chunk, experts, hist))
EMU_EXPORT(route_scan, true, (int* hist, int blocks, int experts, int* counts), (hist, blocks, experts, counts))
EMU_EXPORT(route_place, true, (const int* idx, int pairs, int chunk, int experts, const int* first, int* pos),
           (idx, pairs, chunk, experts, first, pos))
EMU_EXPORT(permute_rows, false, (const uint4* x, const int* pos, uint4* send, int vecs), (x, pos, send, vecs))
EMU_EXPORT(segment_offsets, false, (const int* rc, int world, int local, long long* arrival, long long* expert),
           (rc, world, local, arrival, expert))
EMU_EXPORT(regroup_rows, false, (uint4* dst, const uint4* src, const long long* arrival, const long long* expert,
                                 int segments, int vecs, int to_expert),
           (dst, src, arrival, expert, segments, vecs, to_expert))
EMU_EXPORT(silu_mul, false, (const unsigned* h13, unsigned* h, long long rows, int half), (h13, h, rows, half))
EMU_EXPORT(weighted_combine, false, (const uint4* comb, const int* pos, const float* w, uint4* out, int vecs),
           (comb, pos, w, out, vecs))
EMU_EXPORT(grouped_pointers, true, (const int* rc, int world, int local, long long w13, long long w2, long long xe,
                                    long long h13, long long h, long long y, long long H, long long I,
                                    long long* ptrs),
           (rc, world, local, w13, w2, xe, h13, h, y, H, I, ptrs))
EMU_EXPORT(cutlass_problems, true, (const int* rc, int world, int local, long long w13, long long w2, long long xe,
                                    long long h13, long long h, long long y, long long H, long long I, int* shapes,
                                    long long* strides, long long* ptrs),
           (rc, world, local, w13, w2, xe, h13, h, y, H, I, shapes, strides, ptrs))
"""


def build_kernels(tmp_path_factory):
    """REF._KERNELS built for the CPU (g++, C++20), loaded with ctypes."""
    import ctypes
    import shutil
    import subprocess

    if shutil.which("g++") is None:
        pytest.skip("needs g++")
    d = tmp_path_factory.mktemp("moe_emu")
    (d / "kernels.cpp").write_text(_EMU_PRELUDE + REF._KERNELS + _EMU_EXPORTS)
    r = subprocess.run(["g++", "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-o", str(d / "kernels.so"),
                        str(d / "kernels.cpp")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    lib = ctypes.CDLL(str(d / "kernels.so"))
    for f in ("emu_route_count", "emu_route_scan", "emu_route_place", "emu_permute_rows", "emu_segment_offsets",
              "emu_regroup_rows", "emu_silu_mul", "emu_weighted_combine", "emu_grouped_pointers",
              "emu_cutlass_problems"):
        getattr(lib, f).restype = None
    return lib
