"""What moe_dispatch_combine's tests share: the workload, its seed, the reference module (loaded
once from the workload's folder), inputs as the harness fills them, a relative error, and the
offline agent's strategy book."""

import importlib.util

import numpy as np
import pytest

from cuco_tui.toolchain.toolchain import discover
from cuco_tui.workload.manifest import load_workload

W = load_workload("moe_dispatch_combine")
SEED = W.seed.read_text()
can_compile = pytest.mark.skipif(not discover().can_compile, reason="needs nvcc, NCCL and cuBLAS headers")
KINDS = {"bf16": np.uint16, "i32": np.int32, "f32": np.float32}


def _ref():
    spec = importlib.util.spec_from_file_location("moe_ref", W.reference)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


REF = _ref()


def _inputs(dims, world, seed=3):
    out = []
    for rank in range(world):
        spec = REF.io_spec(dims, world, rank)
        bufs = {n: np.empty(s, dtype=KINDS[d]) for n, s, d in spec["inputs"]}
        REF.fill_inputs(np, bufs, dims, world, rank, seed)
        out.append(bufs)
    return out


def _rel(got, want):
    return np.linalg.norm(got - want) / np.linalg.norm(want)


def _book():
    from cuco_tui.agents.offline import StrategyBook

    return StrategyBook.load(W.root, W.seed)
