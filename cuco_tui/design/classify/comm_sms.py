"""The comm_sms dimension: how many SMs the kernels that move data occupy, read from their grid
when it is a literal or a constant."""

from __future__ import annotations

from typing import Iterable

from cuco_tui.design.classify.evidence import Evidence, Finding, KernelLaunch, Site
from cuco_tui.design.space import COMM_SMS, DesignPoint


def comm_sms_for_blocks(blocks: int) -> str:
    """The comm_sms value of a kernel of `blocks` CTAs: the smallest step that holds them."""
    steps = [int(v) for v in COMM_SMS if v.isdigit() and int(v) > 0]
    fitting = [v for v in steps if v >= blocks]
    return str(min(fitting)) if fitting else "all"


def read(launches: Iterable[KernelLaunch]) -> str:
    """The COMM_SMS value for the largest grid of the data-moving kernels; "" unless every one
    of those grids is known."""
    grids = [k.grid_blocks for k in launches if k.moves_data]
    known = [g for g in grids if g is not None]
    return comm_sms_for_blocks(max(known)) if known and len(known) == len(grids) else ""


def check(d: DesignPoint, ev: Evidence) -> list[Finding]:
    if d.placement == "fused" or ev.issuer not in ("device", "mixed"):
        return []
    kernel = next((k for k in ev.launches if k.moves_data), None)
    if kernel is None:
        return []
    if d.comm_sms == "0":
        return [(f"declares comm_sms=0 but kernel {kernel.kernel} (line {kernel.line}) moves data on the SMs", None)]
    if ev.comm_sms_hint and d.comm_sms not in ("all", "0"):
        ladder = [v for v in COMM_SMS if v != "0"]
        if abs(ladder.index(d.comm_sms) - ladder.index(ev.comm_sms_hint)) > 1:
            return [(f"declares comm_sms={d.comm_sms} but the kernels that move data launch "
                     f"{max(k.grid_blocks or 0 for k in ev.launches if k.moves_data)} blocks "
                     f"(comm_sms={ev.comm_sms_hint})", Site(kernel.kernel, kernel.line, "data"))]
    return []
