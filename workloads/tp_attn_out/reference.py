"""Reference for tp_attn_out: the strongest plain host-driven version. One cuBLAS GEMM
(cublasGemmEx, bf16 in and out, fp32 accumulation) of this rank's partial a_r @ w_r, one NCCL
all-reduce (sum) of the partial in place, then one fused kernel (a block per row) that adds the
residual, writes h, and writes y = RMSNorm(h) * gamma, all on the same stream: what vLLM and
Megatron do without overlap. `expected` is the float64 CPU answer the tests check it against.

Buffers (every rank): inputs "a" [T, D/W], "w" [D/W, H], "residual" [T, H], "gamma" [H];
outputs "h" [T, H], "y" [T, H]."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from cuco_tui.harness.bf16 import from_bf16_bits, to_bf16_bits

CUDA_R_16BF = 14
CUBLAS_COMPUTE_32F = 68
CUBLAS_GEMM_DEFAULT = -1
CUBLAS_OP_N = 0
EPS = 1e-6
SHARED_STREAM = 1000003  # the residual and gamma are the same on every rank: drawn from one stream

# One block per row: h = residual + partial (rounded to bf16), then y = h * rsqrt(mean(h^2) + eps) * gamma.
_NORM = r"""
#include <cuda_bf16.h>
extern "C" __global__ void add_rmsnorm(const __nv_bfloat16* __restrict__ partial,
                                       const __nv_bfloat16* __restrict__ residual,
                                       const __nv_bfloat16* __restrict__ gamma,
                                       __nv_bfloat16* __restrict__ h, __nv_bfloat16* __restrict__ y,
                                       int cols, float eps) {
  extern __shared__ float row[];
  __shared__ float partial_sums[32];
  const long base = (long)blockIdx.x * cols;
  float sq = 0.f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    float v = __bfloat162float(__float2bfloat16(__bfloat162float(residual[base + c]) +
                                                __bfloat162float(partial[base + c])));
    row[c] = v;
    h[base + c] = __float2bfloat16(v);
    sq += v * v;
  }
  for (int o = 16; o > 0; o >>= 1) sq += __shfl_xor_sync(0xffffffff, sq, o);
  if ((threadIdx.x & 31) == 0) partial_sums[threadIdx.x >> 5] = sq;
  __syncthreads();
  if (threadIdx.x < 32) {
    float s = threadIdx.x < (blockDim.x >> 5) ? partial_sums[threadIdx.x] : 0.f;
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffff, s, o);
    if (threadIdx.x == 0) partial_sums[0] = rsqrtf(s / cols + eps);
  }
  __syncthreads();
  const float scale = partial_sums[0];
  for (int c = threadIdx.x; c < cols; c += blockDim.x)
    y[base + c] = __float2bfloat16(row[c] * scale * __bfloat162float(gamma[c]));
}
"""


def io_spec(dims: dict[str, int], world: int, rank: int = 0) -> dict[str, list[tuple[str, tuple[int, ...], str]]]:
    T, D, H = dims["T"], dims["D"], dims["H"]
    return {
        "inputs": [("a", (T, D // world), "bf16"), ("w", (D // world, H), "bf16"),
                   ("residual", (T, H), "bf16"), ("gamma", (H,), "bf16")],
        "outputs": [("h", (T, H), "bf16"), ("y", (T, H), "bf16")],
    }


def fill_inputs(xp: Any, inputs: dict[str, Any], dims: dict[str, int], world: int, rank: int, seed: int) -> None:
    """a: standard normal; w scaled by 1/sqrt(D), so the all-reduced sum is O(1) like the residual;
    residual and gamma drawn from a stream every rank shares (they are replicated)."""
    own = xp.random.RandomState(seed * 7919 + rank)
    inputs["a"][...] = to_bf16_bits(xp, own.standard_normal(inputs["a"].shape).astype(xp.float32))
    w = own.standard_normal(inputs["w"].shape) / np.sqrt(dims["D"])
    inputs["w"][...] = to_bf16_bits(xp, w.astype(xp.float32))
    shared = xp.random.RandomState(seed * 7919 + SHARED_STREAM)
    inputs["residual"][...] = to_bf16_bits(xp, shared.standard_normal(inputs["residual"].shape).astype(xp.float32))
    gamma = 1.0 + 0.25 * shared.standard_normal(inputs["gamma"].shape)
    inputs["gamma"][...] = to_bf16_bits(xp, gamma.astype(xp.float32))


def expected(all_inputs: list[dict[str, np.ndarray]], dims: dict[str, int], world: int) -> list[dict[str, np.ndarray]]:
    """float64 on the CPU: h = residual + sum_r a_r @ w_r; y = h / rms(h) * gamma (per row)."""
    f = lambda v: from_bf16_bits(np, v).astype(np.float64)  # noqa: E731
    total = sum(f(inp["a"]) @ f(inp["w"]) for inp in all_inputs)
    h = f(all_inputs[0]["residual"]) + total
    y = h / np.sqrt(np.mean(h * h, axis=1, keepdims=True) + EPS) * f(all_inputs[0]["gamma"])
    return [{"h": h, "y": y} for _ in all_inputs]


def norm_threads(cols: int) -> int:
    """Threads of the norm kernel: enough to cover a row in a few passes, a multiple of 32."""
    return max(32, min(1024, ((cols // 8 + 31) // 32) * 32))


def flops(dims: dict[str, int], world: int) -> int:
    """Floating-point operations of one rank: its partial [T, H] = a_r [T, D/W] @ w_r (the norm's few
    operations per element are left out)."""
    return 2 * dims["T"] * (dims["D"] // world) * dims["H"]


def comm_bytes(dims: dict[str, int], world: int) -> int:
    """Bytes each rank receives in a ring all-reduce of the [T, H] bf16 partial."""
    return 2 * (world - 1) * (dims["T"] * dims["H"] * 2) // world


class Reference:
    """GEMM, all-reduce and the fused residual + RMSNorm, in order on the harness stream."""

    def __init__(self, env: Any) -> None:
        import cupy
        from cupy.cuda import cublas

        self.env = env
        self.cupy = cupy
        self.cublas = cublas
        T, H = env.dims["T"], env.dims["H"]
        if H * 4 > 48 * 1024:
            raise ValueError(f"the reference's norm kernel keeps a row in 48 KiB of shared memory: H <= 12288, not {H}")
        self.partial = cupy.empty((T, H), dtype=cupy.uint16)
        self.handle = cupy.cuda.device.get_cublas_handle()
        self.alpha = np.ones(1, dtype=np.float32)
        self.beta = np.zeros(1, dtype=np.float32)
        self.norm = cupy.RawKernel(_NORM, "add_rmsnorm", options=("-std=c++17",))

    def gemm(self, inputs: dict[str, Any]) -> None:
        T, H = self.env.dims["T"], self.env.dims["H"]
        d_local = self.env.dims["D"] // self.env.world
        # Row-major P = A @ W is column-major P^T = W^T A^T: m = H, n = T, k = D/W.
        with self.env.stream:  # CuPy binds the handle to the current stream on every call
            self.cublas.gemmEx(
                self.handle, CUBLAS_OP_N, CUBLAS_OP_N, H, T, d_local,
                self.alpha.ctypes.data, inputs["w"].data.ptr, CUDA_R_16BF, H,
                inputs["a"].data.ptr, CUDA_R_16BF, d_local,
                self.beta.ctypes.data, self.partial.data.ptr, CUDA_R_16BF, H,
                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT,
            )

    def allreduce(self) -> None:
        from cupy.cuda import nccl

        p = self.partial
        self.env.comm.allReduce(p.data.ptr, p.data.ptr, p.size, nccl.NCCL_BFLOAT16, nccl.NCCL_SUM, self.env.stream.ptr)

    def add_norm(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        T, H = self.env.dims["T"], self.env.dims["H"]
        with self.env.stream:
            self.norm((T,), (norm_threads(H),),
                      (self.partial, inputs["residual"], inputs["gamma"], outputs["h"], outputs["y"],
                       np.int32(H), np.float32(EPS)), shared_mem=H * 4)

    def run(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        self.gemm(inputs)
        self.allreduce()
        self.add_norm(inputs, outputs)

    def parts(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> dict[str, Callable[[], None]]:
        return {"gemm": lambda: self.gemm(inputs), "allreduce": self.allreduce,
                "add_norm": lambda: self.add_norm(inputs, outputs)}

    def comm_bytes(self) -> int:
        """Bytes each rank receives in a ring all-reduce of the [T, H] partial."""
        return comm_bytes(self.env.dims, self.env.world)
