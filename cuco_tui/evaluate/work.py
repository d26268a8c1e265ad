"""A workload's work per bench shape (core.bounds.Work: one rank's FLOPs and received bytes),
from its reference's `flops(dims, world)` and `comm_bytes(dims, world)`. The reference module is
imported here, in this process: its top level imports NumPy and the harness's bf16 helpers only
(CuPy and the rest are imported inside Reference), as docs/workloads.md asks of every reference."""

from __future__ import annotations

import importlib.util
from typing import Any

from cuco_tui.core.bounds import Work
from cuco_tui.core.workload import Workload, WorkloadError


def _reference_module(workload: Workload) -> Any:
    spec = importlib.util.spec_from_file_location(f"cuco_reference_{workload.name}", workload.reference)
    if spec is None or spec.loader is None:
        raise WorkloadError(f"cannot import {workload.reference}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def work_counts(workload: Workload, world: int) -> dict[str, Work]:
    """Shape name -> Work for every bench shape; {} when the reference counts nothing (it has
    neither function) or cannot be imported here (then no TFLOP/s or GB/s are shown)."""
    try:
        module = _reference_module(workload)
    except Exception:  # the user's module: a broken one costs the figures, not the search
        return {}
    flops, comm = getattr(module, "flops", None), getattr(module, "comm_bytes", None)
    if not callable(flops) and not callable(comm):
        return {}
    out = {}
    for shape in workload.bench_shapes:
        dims = dict(shape.dims)
        out[shape.name] = Work(int(flops(dims, world)) if callable(flops) else 0,
                               int(comm(dims, world)) if callable(comm) else 0)
    return out
