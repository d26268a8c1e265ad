"""Reference for kv_transfer: the strongest plain host-driven version. Rank 0 (prefill)
computes every layer's K and V with one strided-batched cuBLAS GEMM (batch over layers),
then one NCCL send of the whole cache; rank 1 (decode) receives it. Compute all, then move
all: the sequential baseline the candidates try to overlap. `expected` is the float64 CPU
version the tests check it against.

Buffers: rank 0 inputs "x" [S, H] (hidden states) and "w" [L, H, 2D] (K and V projections
side by side); rank 1 output "kv" [L, S, 2D]."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from cuco_tui.harness.bf16 import from_bf16_bits, to_bf16_bits

CUDA_R_16BF = 14
CUBLAS_COMPUTE_32F = 68
CUBLAS_GEMM_DEFAULT = -1
CUBLAS_OP_N = 0
PREFILL, DECODE = 0, 1


def io_spec(dims: dict[str, int], world: int, rank: int = 0) -> dict[str, list[tuple[str, tuple[int, ...], str]]]:
    L, S, H, D = dims["L"], dims["S"], dims["H"], dims["D"]
    if rank == PREFILL:
        return {"inputs": [("x", (S, H), "bf16"), ("w", (L, H, 2 * D), "bf16")], "outputs": []}
    return {"inputs": [], "outputs": [("kv", (L, S, 2 * D), "bf16")]}


def fill_inputs(xp: Any, inputs: dict[str, Any], dims: dict[str, int], world: int, rank: int, seed: int) -> None:
    if rank != PREFILL:
        return
    rs = xp.random.RandomState(seed * 7919 + 17)
    inputs["x"][...] = to_bf16_bits(xp, rs.standard_normal(inputs["x"].shape).astype(xp.float32))
    w = rs.standard_normal(inputs["w"].shape) / np.sqrt(dims["H"])
    inputs["w"][...] = to_bf16_bits(xp, w.astype(xp.float32))


def expected(all_inputs: list[dict[str, np.ndarray]], dims: dict[str, int], world: int) -> list[dict[str, np.ndarray]]:
    """float64 on the CPU: KV_l = X @ W_l for every layer, held by rank 1."""
    x = from_bf16_bits(np, all_inputs[PREFILL]["x"]).astype(np.float64)
    w = from_bf16_bits(np, all_inputs[PREFILL]["w"]).astype(np.float64)
    kv = np.einsum("sh,lhd->lsd", x, w)
    return [{} if r != DECODE else {"kv": kv} for r in range(world)]


def flops(dims: dict[str, int], world: int) -> int:
    """Floating-point operations of the busiest rank, the prefill rank: per layer [S, H] @ [H, 2D]."""
    return 2 * dims["L"] * dims["S"] * dims["H"] * 2 * dims["D"]


def comm_bytes(dims: dict[str, int], world: int) -> int:
    """Bytes the decode rank receives: the whole cache, [L, S, 2D] bf16."""
    return dims["L"] * dims["S"] * 2 * dims["D"] * 2


class Reference:
    def __init__(self, env: Any) -> None:
        import cupy
        from cupy.cuda import cublas

        self.env = env
        self.cupy = cupy
        self.cublas = cublas
        L, S, D = env.dims["L"], env.dims["S"], env.dims["D"]
        self.kv = cupy.empty((L, S, 2 * D), dtype=cupy.uint16) if env.rank == PREFILL else None
        self.handle = cupy.cuda.device.get_cublas_handle()
        self.alpha = np.ones(1, dtype=np.float32)
        self.beta = np.zeros(1, dtype=np.float32)

    def compute(self, inputs: dict[str, Any]) -> None:
        if self.env.rank != PREFILL:
            return
        L, S, H, D = (self.env.dims[k] for k in ("L", "S", "H", "D"))
        # Row-major KV_l = X @ W_l is column-major KV_l^T = W_l^T X^T: m = 2D, n = S, k = H.
        # CuPy binds the handle to the current stream on every call.
        with self.env.stream:
            self.cublas.gemmStridedBatchedEx(
                self.handle, CUBLAS_OP_N, CUBLAS_OP_N, 2 * D, S, H,
                self.alpha.ctypes.data, inputs["w"].data.ptr, CUDA_R_16BF, 2 * D, H * 2 * D,
                inputs["x"].data.ptr, CUDA_R_16BF, H, 0,
                self.beta.ctypes.data, self.kv.data.ptr, CUDA_R_16BF, 2 * D, S * 2 * D,
                L, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT,
            )

    def transfer(self, outputs: dict[str, Any]) -> None:
        from cupy.cuda import nccl

        L, S, D = self.env.dims["L"], self.env.dims["S"], self.env.dims["D"]
        count = L * S * 2 * D
        if self.env.rank == PREFILL:
            self.env.comm.send(self.kv.data.ptr, count, nccl.NCCL_BFLOAT16, DECODE, self.env.stream.ptr)
        elif self.env.rank == DECODE:
            self.env.comm.recv(outputs["kv"].data.ptr, count, nccl.NCCL_BFLOAT16, PREFILL, self.env.stream.ptr)

    def run(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        self.compute(inputs)
        self.transfer(outputs)

    def parts(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> dict[str, Callable[[], None]]:
        return {"compute": lambda: self.compute(inputs), "transfer": lambda: self.transfer(outputs)}

    def comm_bytes(self) -> int:
        return comm_bytes(self.env.dims, self.env.world)
