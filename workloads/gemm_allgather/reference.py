"""Reference for gemm_allgather: the strongest plain host-driven version. One NCCL all-gather
(cupy.cuda.nccl) of the row shards into the full X, then one cuBLAS GEMM (cublasGemmEx,
bf16 in and out, fp32 accumulation) on the same stream. It defines the right answer and
the baseline time. `expected` is the float64 CPU version the tests check it against.

The harness calls, on each rank:
  io_spec(dims, world, rank)                 -> this rank's buffer names, shapes and dtypes
  fill_inputs(xp, inputs, dims, world, rank, seed)
  Reference(env).run(inputs, outputs)        enqueue one iteration on env.stream
  Reference(env).parts(inputs, outputs)      the pieces alone, for the ceilings
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
        "inputs": [("x", (M // world, K), "bf16"), ("b", (K, N // world), "bf16")],
        "outputs": [("y", (M, N // world), "bf16")],
    }


def fill_inputs(xp: Any, inputs: dict[str, Any], dims: dict[str, int], world: int, rank: int, seed: int) -> None:
    """Fresh random values: standard normal rows of X, B scaled by 1/sqrt(K) so |Y| is O(1)."""
    rs = xp.random.RandomState(seed * 7919 + rank)
    x = inputs["x"]
    b = inputs["b"]
    x[...] = to_bf16_bits(xp, rs.standard_normal(x.shape).astype(xp.float32))
    b[...] = to_bf16_bits(xp, (rs.standard_normal(b.shape) / np.sqrt(dims["K"])).astype(xp.float32))


def expected(all_inputs: list[dict[str, np.ndarray]], dims: dict[str, int], world: int) -> list[dict[str, np.ndarray]]:
    """float64 on the CPU: Y_r = concat_r(X_r) @ B_r for every rank r."""
    xs = [from_bf16_bits(np, inp["x"]).astype(np.float64) for inp in all_inputs]
    full = np.concatenate(xs, axis=0)
    return [{"y": full @ from_bf16_bits(np, inp["b"]).astype(np.float64)} for inp in all_inputs]


def flops(dims: dict[str, int], world: int) -> int:
    """Floating-point operations of one rank: Y_r [M, N/W] = X [M, K] @ B_r, 2 per multiply-add."""
    return 2 * dims["M"] * dims["K"] * (dims["N"] // world)


def comm_bytes(dims: dict[str, int], world: int) -> int:
    """Bytes each rank receives over the links in one all-gather: every other rank's [M/W, K] bf16 rows."""
    return (world - 1) * (dims["M"] // world) * dims["K"] * 2


class Reference:
    """Host-driven AG + GEMM on the harness's NCCL communicator and CuPy's cuBLAS handle."""

    def __init__(self, env: Any) -> None:
        import cupy
        from cupy.cuda import cublas

        self.env = env
        self.cupy = cupy
        self.cublas = cublas
        M, K = env.dims["M"], env.dims["K"]
        self.gathered = cupy.empty((M, K), dtype=cupy.uint16)
        self.handle = cupy.cuda.device.get_cublas_handle()
        self.alpha = np.ones(1, dtype=np.float32)
        self.beta = np.zeros(1, dtype=np.float32)

    def allgather(self, inputs: dict[str, Any]) -> None:
        from cupy.cuda import nccl

        x = inputs["x"]
        self.env.comm.allGather(x.data.ptr, self.gathered.data.ptr, x.size, nccl.NCCL_BFLOAT16, self.env.stream.ptr)

    def gemm(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        M, K, N = self.env.dims["M"], self.env.dims["K"], self.env.dims["N"]
        n_local = N // self.env.world
        # CuPy's cuBLAS wrappers bind the handle to the *current* stream on every call, so the
        # stream must be current here; setting it on the handle alone is silently undone.
        with self.env.stream:
            self._gemm_ex(inputs, outputs, M, K, n_local)

    def _gemm_ex(self, inputs: dict[str, Any], outputs: dict[str, Any], M: int, K: int, n_local: int) -> None:
        # Row-major Y = A @ B is column-major Y^T = B^T A^T: m = N/W, n = M, k = K.
        self.cublas.gemmEx(
            self.handle, CUBLAS_OP_N, CUBLAS_OP_N, n_local, M, K,
            self.alpha.ctypes.data, inputs["b"].data.ptr, CUDA_R_16BF, n_local,
            self.gathered.data.ptr, CUDA_R_16BF, K,
            self.beta.ctypes.data, outputs["y"].data.ptr, CUDA_R_16BF, n_local,
            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT,
        )

    def run(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        self.allgather(inputs)
        self.gemm(inputs, outputs)

    def parts(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> dict[str, Callable[[], None]]:
        """Each half alone: their times are the ceilings a perfect overlap is measured against."""
        return {
            "gemm": lambda: self.gemm(inputs, outputs),
            "allgather": lambda: self.allgather(inputs),
        }

    def comm_bytes(self) -> int:
        """Bytes each rank receives over the links in one all-gather."""
        return comm_bytes(self.env.dims, self.env.world)
