// cuda_cpu.h: just enough CUDA C++ to run this workload's kernels on a CPU, for the tests of a
// machine without a GPU (tests/workloads/cp_attention/). Not part of any candidate. x86-64 only.
//
// A launch runs its CTAs one after another. The threads of a CTA are fibers of one OS thread
// (a dozen instructions of assembly switch between them), so __syncthreads is a barrier of the
// CTA's fibers and the warp-wide operations (shuffles, mma.sync, ldmatrix) gather the 32 lanes'
// operands through a per-warp exchange between two barriers, handing each lane what the PTX ISA
// says that lane holds. Shared memory is `static thread_local` storage: one CTA at a time owns it
// on each OS thread. cp.async copies synchronously (a legal order of an asynchronous copy).
// emu_runtime.h adds the host side (streams, events, NCCL, cuBLAS) for whole candidates.
#pragma once

#include <functional>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __shared__ static thread_local
#define __constant__ static
#define __threadfence_system() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#define __threadfence() __atomic_thread_fence(__ATOMIC_SEQ_CST)

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
// Per OS thread (each emulated stream runs its kernels on its own thread); threadIdx is the
// running fiber's, set on every switch. Constant-initialized (dim3's constexpr constructor): read
// straight from thread storage, not through a per-access initialization check.
inline thread_local dim3 threadIdx, blockIdx;
inline thread_local dim3 blockDim, gridDim;

struct float2 {
  float x, y;
};
struct uint4 {
  unsigned x, y, z, w;
};
inline float2 make_float2(float a, float b) { return {a, b}; }

// ---------------------------------------------------------------- bf16

struct __nv_bfloat16 {
  uint16_t bits;
};
struct __nv_bfloat162 {
  __nv_bfloat16 x, y;
};
inline uint16_t emu_f2bf(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
inline float emu_bf2f(uint32_t bits16) {
  const uint32_t u = (bits16 & 0xffffu) << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return {emu_f2bf(f)}; }
inline float __bfloat162float(__nv_bfloat16 b) { return emu_bf2f(b.bits); }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {{emu_f2bf(a)}, {emu_f2bf(b)}}; }
inline float2 __bfloat1622float2(__nv_bfloat162 b) { return {emu_bf2f(b.x.bits), emu_bf2f(b.y.bits)}; }
inline float __int_as_float(int i) {
  float f;
  memcpy(&f, &i, 4);
  return f;
}
inline unsigned int __float_as_uint(float f) {
  unsigned int u;
  memcpy(&u, &f, 4);
  return u;
}

// atomicAdd on shared or global memory: the fibers of a CTA share one OS thread, but kernels on
// other streams (other OS threads) may add to the same global word.
inline int atomicAdd(int* p, int v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}

inline void emu_check_aligned(const void* p, uintptr_t to, const char* what) {
  if ((uintptr_t)p % to != 0) {
    fprintf(stderr, "%s: address %p is not %u-byte aligned\n", what, p, (unsigned)to);
    abort();
  }
}

// ---------------------------------------------------------------- fibers

#if !defined(__x86_64__)
#error "cuda_cpu.h switches fibers with x86-64 assembly"
#endif

// emu_switch(&save, load): push the callee-saved registers, store the stack pointer in *save,
// load `load` as the stack pointer, pop that fiber's registers and return into it.
extern "C" void emu_switch(void** save, void* load);
asm(R"(
  .text
  .globl emu_switch
  .type emu_switch, @function
emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size emu_switch, .-emu_switch
)");

struct EmuFiber {
  void* sp = nullptr;
  std::unique_ptr<unsigned char[]> stack;
  bool done = false;
  dim3 tid;
  // Parked at a barrier until *parked_on moves on from parked_at (EmuBarrier): the scheduler
  // passes over it until then instead of resuming it only to see the same generation.
  const unsigned* parked_on = nullptr;
  unsigned parked_at = 0;
};

struct EmuScheduler {
  std::vector<EmuFiber> fibers;
  void* main_sp = nullptr;
  int current = -1;
  std::function<void()> body;
};
inline thread_local EmuScheduler emu_sched;
// emu_sched while a CTA runs: a plain pointer in thread storage is read directly, where each use
// of emu_sched (a vector and a function: constructed on first use) goes through a check first.
inline thread_local EmuScheduler* emu_running = nullptr;
constexpr size_t kEmuStack = 256 * 1024;

// Back to the scheduler, which resumes the next fiber (round robin).
inline void emu_yield() { emu_switch(&emu_running->fibers[emu_running->current].sp, emu_running->main_sp); }

[[noreturn]] inline void emu_trampoline() {
  emu_running->body();
  emu_running->fibers[emu_running->current].done = true;
  emu_yield();
  abort();  // a finished fiber is never resumed
}

// Give fiber f a fresh stack whose first switch "returns" into emu_trampoline.
inline void emu_start(EmuFiber& f) {
  uintptr_t top = (uintptr_t)(f.stack.get() + kEmuStack);
  top &= ~(uintptr_t)15;
  top -= 16;  // the return address sits at a 16-byte boundary: entered like a call
  void** sp = (void**)top;
  *sp = (void*)&emu_trampoline;
  sp -= 6;  // r15 r14 r13 r12 rbx rbp, popped by emu_switch
  for (int i = 0; i < 6; ++i) sp[i] = nullptr;
  f.sp = sp;
  f.done = false;
}

// Run `threads` fibers of `body` to completion, threadIdx set for each. A fiber parked at a
// barrier whose generation has not moved is passed over: resumed, it would only yield again, so
// the fibers that run, and their order, are the same.
inline void emu_run_cta(dim3 block, const std::function<void()>& body) {
  EmuScheduler& s = emu_sched;
  emu_running = &s;
  const unsigned threads = block.x * block.y * block.z;
  if (s.fibers.size() != threads) {
    s.fibers.clear();
    s.fibers.resize(threads);
    for (auto& f : s.fibers) f.stack.reset(new unsigned char[kEmuStack]);
  }
  s.body = body;
  for (unsigned i = 0; i < threads; ++i) {
    emu_start(s.fibers[i]);
    s.fibers[i].tid = dim3(i % block.x, (i / block.x) % block.y, i / (block.x * block.y));
    s.fibers[i].parked_on = nullptr;
  }
  for (unsigned live = threads; live > 0;) {
    live = 0;
    for (unsigned i = 0; i < threads; ++i) {
      EmuFiber& f = s.fibers[i];
      if (f.done) continue;
      if (f.parked_on != nullptr && *f.parked_on == f.parked_at) {
        ++live;
        continue;
      }
      s.current = (int)i;
      threadIdx = f.tid;
      emu_switch(&s.main_sp, f.sp);
      if (!f.done) ++live;
    }
  }
  s.current = -1;
}

// ---------------------------------------------------------------- CTAs, warps, barriers

struct EmuBarrier {
  int n;
  int arrived = 0;
  unsigned generation = 0;
  explicit EmuBarrier(int count) : n(count) {}
  void arrive_and_wait() {
    const unsigned g = generation;
    if (++arrived == n) {
      arrived = 0;
      ++generation;
      return;
    }
    EmuFiber& me = emu_running->fibers[emu_running->current];
    me.parked_on = &generation;
    me.parked_at = g;
    while (generation == g) emu_yield();
    me.parked_on = nullptr;
  }
};

struct EmuWarp {
  EmuBarrier bar{32};
  uint64_t raw[32][8];
  const void* ptr[32];
};
struct EmuCta {
  EmuBarrier bar;
  std::vector<std::unique_ptr<EmuWarp>> warps;
  explicit EmuCta(unsigned threads) : bar((int)threads) {
    for (unsigned w = 0; w < (threads + 31) / 32; ++w) warps.push_back(std::make_unique<EmuWarp>());
  }
};
inline thread_local EmuCta* emu_cta = nullptr;

inline void __syncthreads() { emu_cta->bar.arrive_and_wait(); }
inline unsigned emu_lane() { return threadIdx.x & 31u; }
inline EmuWarp& emu_warp() { return *emu_cta->warps[threadIdx.x >> 5]; }

template <class T>
T __shfl_xor_sync(unsigned, T v, int mask) {
  static_assert(sizeof(T) <= 8, "one 8-byte slot per lane");
  EmuWarp& w = emu_warp();
  const unsigned lane = emu_lane();
  memcpy(&w.raw[lane][0], &v, sizeof(T));
  w.bar.arrive_and_wait();
  T r;
  memcpy(&r, &w.raw[lane ^ (unsigned)mask][0], sizeof(T));
  w.bar.arrive_and_wait();
  return r;
}

// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, c += a * b. Fragments (PTX ISA, lane L,
// g = L / 4, t = L % 4): A 16x16 row-major in 4 registers of 2 bf16: {(g, 2t..2t+1), (g+8, 2t..),
// (g, 2t+8..), (g+8, 2t+8..)}; B 16x8 in 2 registers: {(k 2t..2t+1, n g), (k 2t+8.., n g)};
// C 16x8 fp32: {(g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1)}. The low half of a register holds the
// element of the lower column (A) or row (B).
inline void emu_mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  EmuWarp& w = emu_warp();
  const unsigned lane = emu_lane();
  for (int i = 0; i < 4; ++i) w.raw[lane][i] = a[i];
  w.raw[lane][4] = b0;
  w.raw[lane][5] = b1;
  w.bar.arrive_and_wait();
  auto A = [&](int row, int col) {
    const uint32_t v = (uint32_t)w.raw[(row & 7) * 4 + ((col & 7) >> 1)][(row >> 3) + 2 * (col >> 3)];
    return emu_bf2f((col & 1) ? v >> 16 : v);
  };
  auto B = [&](int k, int n) {
    const uint32_t v = (uint32_t)w.raw[n * 4 + ((k & 7) >> 1)][4 + (k >> 3)];
    return emu_bf2f((k & 1) ? v >> 16 : v);
  };
  const int g = (int)lane >> 2, t = (int)lane & 3;
  float a_rows[2][16], b_cols[2][16];  // this lane's rows g, g+8 of A and columns 2t, 2t+1 of B
  for (int k = 0; k < 16; ++k) {
    a_rows[0][k] = A(g, k);
    a_rows[1][k] = A(g + 8, k);
    b_cols[0][k] = B(k, 2 * t);
    b_cols[1][k] = B(k, 2 * t + 1);
  }
  float out[4];
  for (int i = 0; i < 4; ++i) {
    const float* ar = a_rows[i >> 1];
    const float* bc = b_cols[i & 1];
    float acc = c[i];
    for (int k = 0; k < 16; ++k) acc += ar[k] * bc[k];
    out[i] = acc;
  }
  w.bar.arrive_and_wait();
  for (int i = 0; i < 4; ++i) c[i] = out[i];
}

// ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16: lanes 8i..8i+7 give the row addresses of matrix i
// (8 bf16 each); with .trans, lane L receives in register i the elements (2t, g) and (2t+1, g) of
// matrix i (row, column), low half first.
inline void emu_ldmatrix_x4_trans(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3, const void* row) {
  EmuWarp& w = emu_warp();
  const unsigned lane = emu_lane();
  emu_check_aligned(row, 16, "ldmatrix row");
  w.ptr[lane] = row;
  w.bar.arrive_and_wait();
  const int g = (int)lane >> 2, t = (int)lane & 3;
  uint32_t r[4];
  for (int i = 0; i < 4; ++i) {
    const uint16_t* lo = (const uint16_t*)w.ptr[8 * i + 2 * t];
    const uint16_t* hi = (const uint16_t*)w.ptr[8 * i + 2 * t + 1];
    r[i] = (uint32_t)lo[g] | ((uint32_t)hi[g] << 16);
  }
  w.bar.arrive_and_wait();
  r0 = r[0];
  r1 = r[1];
  r2 = r[2];
  r3 = r[3];
}

inline void emu_cp_async16(void* smem, const void* gmem) {
  emu_check_aligned(smem, 16, "cp.async shared");
  emu_check_aligned(gmem, 16, "cp.async global");
  memcpy(smem, gmem, 16);
}

// kernel<<<grid, block>>>(args...): the CTAs in order, each a set of fibers.
template <class Kernel, class... Args>
void emu_launch(dim3 grid, dim3 block, Kernel kernel, Args... args) {
  gridDim = grid;
  blockDim = block;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        EmuCta cta(block.x * block.y * block.z);
        emu_cta = &cta;
        blockIdx = dim3(x, y, z);
        emu_run_cta(block, [&] { kernel(args...); });
        emu_cta = nullptr;
      }
}

// ---------------------------------------------------------------- files

template <class T>
std::vector<T> emu_read(const char* dir, const char* name, size_t count) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE* f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "cannot open %s\n", path);
    exit(2);
  }
  std::vector<T> v(count);
  if (fread(v.data(), sizeof(T), count, f) != count) {
    fprintf(stderr, "%s: short read\n", path);
    exit(2);
  }
  fclose(f);
  return v;
}

template <class T>
void emu_write(const char* dir, const char* name, const std::vector<T>& v) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE* f = fopen(path, "wb");
  if (!f || fwrite(v.data(), sizeof(T), v.size(), f) != v.size()) {
    fprintf(stderr, "cannot write %s\n", path);
    exit(2);
  }
  fclose(f);
}
