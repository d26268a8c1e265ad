"""What gemm_reducescatter's tests share: the workload, its seed, the reference module (loaded once
from the workload's folder: its own functions and Reference class, which the tests call directly),
inputs as the harness fills them, bf16 helpers, the offline agent's strategy book and the marker
for machines that cannot compile."""

import numpy as np
import pytest

from cuco_tui.agents.offline import StrategyBook
from cuco_tui.harness.bf16 import from_bf16_bits, to_bf16_bits
from cuco_tui.core.reference import reference_module
from cuco_tui.toolchain.toolchain import discover
from cuco_tui.workload.manifest import load_workload

W = load_workload("gemm_reducescatter")
REF = reference_module(W.reference)
SEED = W.seed.read_text()
BOOK = StrategyBook.load(W.root, W.seed)
can_compile = pytest.mark.skipif(not discover().can_compile, reason="needs nvcc, NCCL and cuBLAS headers")


def inputs_of(dims, world, seed=3):
    """Every rank's inputs as the harness fills them (uint16 bf16 bits)."""
    out = []
    for rank in range(world):
        spec = REF.io_spec(dims, world, rank)
        bufs = {n: np.zeros(s, dtype=np.uint16) for n, s, _ in spec["inputs"]}
        REF.fill_inputs(np, bufs, dims, world, rank, seed)
        out.append(bufs)
    return out


def bf16(v):
    """float64 values rounded to bf16 and widened back."""
    return from_bf16_bits(np, to_bf16_bits(np, np.asarray(v, dtype=np.float32))).astype(np.float64)


def bits(v):
    return to_bf16_bits(np, np.asarray(v, dtype=np.float32))


def f64(v):
    return from_bf16_bits(np, v).astype(np.float64)

