"""What cp_attention's tests share: the workload, its seed, the reference module (loaded once from
the workload's folder), inputs as the harness fills them, the harness's pass criterion, the
offline agent's strategy book, and the template variants compiled here and verified on GPUs."""

import importlib.util

import numpy as np
import pytest

from cuco_tui.toolchain.toolchain import discover
from cuco_tui.harness.bf16 import from_bf16_bits
from cuco_tui.workload.manifest import load_workload

W = load_workload("cp_attention")
SEED = W.seed.read_text()
can_compile = pytest.mark.skipif(not discover().can_compile, reason="needs nvcc, NCCL and cuBLAS headers")


def _ref():
    spec = importlib.util.spec_from_file_location("cp_attention_ref", W.reference)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


REF = _ref()


def _dims(S, H, HKV, D, causal):
    return {"S": S, "H": H, "HKV": HKV, "D": D, "CAUSAL": causal}


def _inputs(dims, world, seed=3):
    out = []
    for rank in range(world):
        spec = REF.io_spec(dims, world, rank)
        bufs = {n: np.empty(s, dtype=np.uint16) for n, s, _ in spec["inputs"]}
        REF.fill_inputs(np, bufs, dims, world, rank, seed)
        out.append(bufs)
    return out


def _f64(bits):
    return from_bf16_bits(np, bits).astype(np.float64)


def _passes(got, want, rtol, floor=0.0):
    """The harness's criterion: |y - ref| <= rtol * (|ref| + rms(ref)), every element; with a
    floor (harness.verify.compare), rms is at least floor * max|ref| and the relative L2 error
    must be within rtol too."""
    rms = np.sqrt(np.mean(want ** 2))
    if floor:
        rms = max(rms, floor * np.abs(want).max())
        if np.linalg.norm(got - want) > rtol * np.linalg.norm(want):
            return False
    return bool((np.abs(got - want) <= rtol * (np.abs(want) + rms)).all())


def _book():
    from cuco_tui.agents.offline import StrategyBook

    return StrategyBook.load(W.root, W.seed)


def _sequential():
    """The three-pass host attention (cuBLAS GEMMs around a softmax kernel): the seed before the
    harness attention library, now the host_sequential template."""
    book = _book()
    return book.render(book.get("host_sequential"), {})


def _check(got, want, what):
    assert np.isfinite(got).all(), f"{what}: {np.count_nonzero(~np.isfinite(got))} non-finite elements"
    assert _passes(got, want, W.rtol), f"{what}: max rel {np.max(np.abs(got - want) / (np.abs(want) + 1e-3)):.3g}"
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-2, what


VARIANTS = [
    ("attn_overlap", {"comm_priority": "high"}),
    ("attn_balance", {"first": "remote", "comm_priority": "high"}),
    ("attn_balance", {"first": "local", "comm_priority": "same"}),
    ("balance_overlap", {"order": "remote_first", "exchange_first": "queries", "kv_pieces": "per_source",
                         "comm_priority": "high"}),
    ("balance_overlap", {"order": "local_first", "exchange_first": "kv", "kv_pieces": "grouped",
                         "comm_priority": "same"}),
    ("host_flash", {}),
    ("ring", {"attention": "cudnn", "comm_priority": "high"}),
    ("ring", {"attention": "blockwise", "comm_priority": "same"}),
    ("ipc_pull", {"mover": "ipc", "chunks": 1, "mover_blocks": 16, "comm_priority": "high", "attention": "blockwise"}),
    ("ipc_pull", {"mover": "ipc", "chunks": 4, "mover_blocks": 32, "comm_priority": "same", "attention": "cudnn"}),
    ("ipc_pull", {"mover": "copy_engine", "chunks": 2, "mover_blocks": 16, "comm_priority": "high",
                  "attention": "blockwise"}),
    ("ipc_pull", {"mover": "copy_engine", "chunks": 1, "mover_blocks": 16, "comm_priority": "same",
                  "attention": "cudnn"}),
]
