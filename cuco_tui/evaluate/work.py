"""A workload's work per bench shape (core.bounds.Work: one rank's FLOPs and received bytes),
from its reference's `flops(dims, world)` and `comm_bytes(dims, world)`. The reference module is
imported here, in this process: its top level imports NumPy and the harness's bf16 helpers only
(CuPy and the rest are imported inside Reference), as docs/workloads.md asks of every reference."""

from __future__ import annotations

from cuco_tui.core.bounds import Work
from cuco_tui.core.reference import load_reference
from cuco_tui.core.workload import Workload


def work_counts(workload: Workload, world: int) -> dict[str, Work]:
    """Shape name -> Work for every bench shape; {} when the reference counts nothing (it has
    neither function) or cannot be imported here (then no TFLOP/s or GB/s are shown)."""
    try:
        reference = load_reference(workload.reference)
    except Exception:  # the user's module: a broken one costs the figures, not the search
        return {}
    counts = {shape.name: (reference.flops(dict(shape.dims), world), reference.comm_bytes(dict(shape.dims), world))
              for shape in workload.bench_shapes}
    if all(flops is None and comm is None for flops, comm in counts.values()):
        return {}
    return {name: Work(flops or 0, comm or 0) for name, (flops, comm) in counts.items()}
