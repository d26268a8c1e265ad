"""Reference for this workload: the strongest plain host-driven version, which defines the
right answer and the baseline time. Written by `cuco workload new` as an example (an all-reduce,
sum, of one bf16 buffer over the ranks); replace the computation with yours and keep the four
names the harness calls (docs/workloads.md has the contract):

  io_spec(dims, world, rank)      -> {"inputs": [(name, shape, dtype)], "outputs": [...]} of this rank
  fill_inputs(xp, inputs, dims, world, rank, seed)   fresh random inputs (xp is numpy or cupy)
  expected(all_inputs, dims, world)                  float64 answer of every rank (CPU, for tests)
  Reference(env).run(inputs, outputs)                enqueue one iteration on env.stream
  Reference(env).parts(inputs, outputs)              each piece alone, for the ceilings
  Reference(env).comm_bytes()                        bytes each rank receives (optional)
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from cuco_tui.harness.bf16 import from_bf16_bits, to_bf16_bits


def io_spec(dims: dict[str, int], world: int, rank: int = 0) -> dict[str, list[tuple[str, tuple[int, ...], str]]]:
    T, H = dims["T"], dims["H"]
    return {"inputs": [("x", (T, H), "bf16")], "outputs": [("y", (T, H), "bf16")]}


def fill_inputs(xp: Any, inputs: dict[str, Any], dims: dict[str, int], world: int, rank: int, seed: int) -> None:
    rs = xp.random.RandomState(seed * 7919 + rank)
    inputs["x"][...] = to_bf16_bits(xp, rs.standard_normal(inputs["x"].shape).astype(xp.float32))


def expected(all_inputs: list[dict[str, np.ndarray]], dims: dict[str, int], world: int) -> list[dict[str, np.ndarray]]:
    total = sum(from_bf16_bits(np, inp["x"]).astype(np.float64) for inp in all_inputs)
    return [{"y": total} for _ in all_inputs]


class Reference:
    """One NCCL all-reduce on the harness's communicator and stream."""

    def __init__(self, env: Any) -> None:
        self.env = env

    def allreduce(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        from cupy.cuda import nccl

        x, y = inputs["x"], outputs["y"]
        self.env.comm.allReduce(x.data.ptr, y.data.ptr, x.size, nccl.NCCL_BFLOAT16, nccl.NCCL_SUM, self.env.stream.ptr)

    def run(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        self.allreduce(inputs, outputs)

    def parts(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> dict[str, Callable[[], None]]:
        return {"allreduce": lambda: self.allreduce(inputs, outputs)}

    def comm_bytes(self) -> int:
        T, H, W = self.env.dims["T"], self.env.dims["H"], self.env.world
        return 2 * (W - 1) * (T * H * 2) // W  # a ring all-reduce: reduce-scatter, then all-gather
