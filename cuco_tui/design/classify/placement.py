"""The placement dimension: one kernel that both communicates and computes (fused), compute on a
stream other than the communication's (overlap across streams), or neither."""

from __future__ import annotations

from typing import Iterable

from cuco_tui.design.classify.evidence import Evidence, Finding, KernelLaunch
from cuco_tui.design.space import DesignPoint


def read(launches: Iterable[KernelLaunch], compute_streams: set[str], comm_streams: set[str]) -> str:
    """"kernel", "streams" or "none" (see Evidence.overlap)."""
    if any(k.communicates and k.computes for k in launches):
        return "kernel"
    if compute_streams and comm_streams and compute_streams != comm_streams:
        return "streams"
    return "none"


def check(d: DesignPoint, ev: Evidence) -> list[Finding]:
    fused_kernel = next((k for k in ev.launches if k.communicates and k.computes), None)
    if d.placement == "fused" and fused_kernel is None:
        return [("declares placement=fused but no kernel both communicates and computes; the compute runs in "
                 "separate kernels or cuBLAS calls", None)]
    if d.placement in ("before", "after") and fused_kernel is not None:
        return [(f"declares placement={d.placement} but kernel {fused_kernel.kernel} (line {fused_kernel.line}) "
                 f"both communicates and computes (placement=fused)", None)]
    if (d.placement == "interleaved" and ev.overlap == "none" and ev.compute_streams and ev.comm_streams
            and not d.device_initiated):
        return [(f"declares placement=interleaved but compute and communication are issued on the same stream "
                 f"({', '.join(ev.comm_streams)}), so they cannot overlap", None)]
    return []
