"""The session's bounds (core/bounds.py): measured once per session, on a GPU group lent alone,
when the search starts, and stored in the lineage; a resumed search reads them back. Measuring
runs the workload's reference, each of its parts alone and a peer copy (evaluate/baseline.py),
about a minute, after the reference alone against its float64 answer, whose line the bounds keep.
Without a GPU nothing is measured; the work per shape (FLOPs, bytes) comes from the workload's
reference either way."""

from __future__ import annotations

import time
from typing import Callable

from cuco_tui.core.bounds import Bounds
from cuco_tui.core.workload import Workload

BoundsFn = Callable[[Workload, tuple[int, ...], int], Bounds]  # (workload, GPUs, world) -> Bounds


def measure_bounds(workload: Workload, gpus: tuple[int, ...], world: int) -> Bounds:
    """The baseline run on `gpus`, as Bounds with this machine and the workload's work, and the
    reference on those GPUs against its float64 answer (evaluate/reference_check.py: seconds, at
    the verify shapes). Raises BaselineError with a sentence when the baseline run fails."""
    from dataclasses import replace

    from cuco_tui.evaluate.baseline import bounds_of, measure_baseline
    from cuco_tui.evaluate.cascade import EvalOptions
    from cuco_tui.evaluate.machine import probe_machine
    from cuco_tui.evaluate.reference_check import check_reference
    from cuco_tui.evaluate.work import work_counts

    options = EvalOptions(gpus=list(gpus), world=world)
    try:
        checked = check_reference(workload, replace(options, bench=False))
        line, ok = checked.summary(), checked.ok
    except Exception as exc:  # noqa: BLE001 - the check is a help; the baseline below says what is broken
        line, ok = f"not checked: {type(exc).__name__}: {exc}", True
    baseline = measure_baseline(workload, options)
    bounds = bounds_of(baseline, work_counts(workload, world), probe_machine(), time.time())
    return replace(bounds, reference_check=line, reference_ok=ok)
