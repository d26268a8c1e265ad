"""Reference for gemm_reducescatter: the strongest plain host-driven version. One cuBLAS GEMM
(cublasGemmEx, bf16 in and out, fp32 accumulation) of this rank's whole partial A_r @ B_r [M, N],
then one NCCL reduce-scatter (sum, bf16) of it into this rank's rows, on the same stream: what
Megatron's row-parallel linear layer does with sequence parallelism and no overlap. It defines the
right answer and the baseline time. `expected` is the float64 CPU answer the tests check it against.

Buffers (every rank r): inputs "a" = A_r [M, K/W], "b" = B_r [K/W, N]; output "y" = Y_r [M/W, N],
rows [r*M/W, (r+1)*M/W) of sum_r A_r @ B_r.

The harness calls, on each rank:
  io_spec(dims, world, rank)                 -> this rank's buffer names, shapes and dtypes
  fill_inputs(xp, inputs, dims, world, rank, seed)
  Reference(env).run(inputs, outputs)        enqueue one iteration on env.stream
  Reference(env).parts(inputs, outputs)      the GEMM and the reduce-scatter alone, for the ceilings
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from cuco_tui.harness.bf16 import from_bf16_bits, to_bf16_bits

CUDA_R_16BF = 14
CUBLAS_COMPUTE_32F = 68
CUBLAS_GEMM_DEFAULT = -1
CUBLAS_OP_N = 0


def io_spec(dims: dict[str, int], world: int, rank: int = 0) -> dict[str, list[tuple[str, tuple[int, ...], str]]]:
    M, K, N = dims["M"], dims["K"], dims["N"]
    return {
        "inputs": [("a", (M, K // world), "bf16"), ("b", (K // world, N), "bf16")],
        "outputs": [("y", (M // world, N), "bf16")],
    }


def fill_inputs(xp: Any, inputs: dict[str, Any], dims: dict[str, int], world: int, rank: int, seed: int) -> None:
    """Fresh random values, each rank from its own stream: A_r standard normal, B_r scaled by
    1/sqrt(K) (the whole contraction), so each partial is O(1/sqrt(W)) and their sum O(1)."""
    rs = xp.random.RandomState(seed * 7919 + rank)
    a, b = inputs["a"], inputs["b"]
    a[...] = to_bf16_bits(xp, rs.standard_normal(a.shape).astype(xp.float32))
    b[...] = to_bf16_bits(xp, (rs.standard_normal(b.shape) / np.sqrt(dims["K"])).astype(xp.float32))


def expected(all_inputs: list[dict[str, np.ndarray]], dims: dict[str, int], world: int) -> list[dict[str, np.ndarray]]:
    """float64 on the CPU: Y_r = rows [r*M/W, (r+1)*M/W) of sum_s A_s @ B_s, for every rank r."""
    f = lambda v: from_bf16_bits(np, v).astype(np.float64)  # noqa: E731
    total = sum(f(inp["a"]) @ f(inp["b"]) for inp in all_inputs)
    rows = dims["M"] // world
    return [{"y": total[r * rows:(r + 1) * rows]} for r in range(world)]


def flops(dims: dict[str, int], world: int) -> int:
    """Floating-point operations of one rank: its partial [M, N] = A_r [M, K/W] @ B_r, 2 per
    multiply-add (the reduction's W-1 additions per output element are left out)."""
    return 2 * dims["M"] * (dims["K"] // world) * dims["N"]


def comm_bytes(dims: dict[str, int], world: int) -> int:
    """Bytes each rank receives in one reduce-scatter: every other rank's bf16 partial of this
    rank's [M/W, N] rows."""
    return (world - 1) * (dims["M"] // world) * dims["N"] * 2


class Reference:
    """Host-driven GEMM + reduce-scatter on the harness's NCCL communicator and CuPy's cuBLAS handle."""

    def __init__(self, env: Any) -> None:
        import cupy
        from cupy.cuda import cublas

        self.env = env
        self.cupy = cupy
        self.cublas = cublas
        M, N = env.dims["M"], env.dims["N"]
        self.partial = cupy.empty((M, N), dtype=cupy.uint16)  # A_r @ B_r in bf16, all M rows
        self.handle = cupy.cuda.device.get_cublas_handle()
        self.alpha = np.ones(1, dtype=np.float32)
        self.beta = np.zeros(1, dtype=np.float32)

    def gemm(self, inputs: dict[str, Any]) -> None:
        M, N = self.env.dims["M"], self.env.dims["N"]
        k_local = self.env.dims["K"] // self.env.world
        # Row-major P = A @ B is column-major P^T = B^T A^T: m = N, n = M, k = K/W. CuPy binds the
        # handle to the *current* stream on every call, so the stream must be current here.
        with self.env.stream:
            self.cublas.gemmEx(
                self.handle, CUBLAS_OP_N, CUBLAS_OP_N, N, M, k_local,
                self.alpha.ctypes.data, inputs["b"].data.ptr, CUDA_R_16BF, N,
                inputs["a"].data.ptr, CUDA_R_16BF, k_local,
                self.beta.ctypes.data, self.partial.data.ptr, CUDA_R_16BF, N,
                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT,
            )

    def reducescatter(self, outputs: dict[str, Any]) -> None:
        from cupy.cuda import nccl

        y = outputs["y"]
        self.env.comm.reduceScatter(self.partial.data.ptr, y.data.ptr, y.size, nccl.NCCL_BFLOAT16, nccl.NCCL_SUM,
                                    self.env.stream.ptr)

    def run(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        self.gemm(inputs)
        self.reducescatter(outputs)

    def parts(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> dict[str, Callable[[], None]]:
        """Each half alone: their times are the ceilings a perfect overlap is measured against."""
        return {"gemm": lambda: self.gemm(inputs), "reducescatter": lambda: self.reducescatter(outputs)}

    def comm_bytes(self) -> int:
        """Bytes each rank receives over the links in one reduce-scatter."""
        return comm_bytes(self.env.dims, self.env.world)
