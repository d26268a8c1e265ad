"""The issuer dimension: host API transfers against kernels that move data, and for device
transfers the finest cooperation group that issues them (thread, warp, CTA, several CTAs)."""

from __future__ import annotations

from typing import Iterable

from cuco_tui.design.classify.evidence import Evidence, Finding, KernelLaunch, cite
from cuco_tui.design.classify.patterns import COOP_ORDER, COOPS
from cuco_tui.design.classify.reading import Reading
from cuco_tui.design.classify.streams import HOST_ISSUED
from cuco_tui.design.space import DEVICE_BACKENDS, DesignPoint


def read(r: Reading, launches: list[KernelLaunch], data_backends: Iterable[str]) -> tuple[str, str]:
    """(issuer: "host" | "device" | "mixed" | "", cooperation group of the device movers)."""
    data_backends = tuple(data_backends)
    host_moves = any(b in HOST_ISSUED for b in data_backends)
    device_moves = any(k.moves_data for k in launches) or any(b in DEVICE_BACKENDS for b in data_backends)
    issuer = "mixed" if host_moves and device_moves else "host" if host_moves else "device" if device_moves else ""
    return issuer, _coop(r, launches) if device_moves else ""


def _coop(r: Reading, launches: list[KernelLaunch]) -> str:
    movers = {f.name for f in r.functions if r.facts[f.name].api_moves_data}
    movers |= {k.kernel for k in launches if k.moves_data}
    coop = ""
    for name in movers:
        body = r.body(r.by_name.get(name))
        for level, pattern in COOPS:
            if body and pattern.search(body) and (not coop or COOP_ORDER.index(level) < COOP_ORDER.index(coop)):
                coop = level
    if coop:
        return coop
    grids = [k.grid_blocks for k in launches if k.moves_data]
    return "multi_cta" if any(g is None or g > 1 for g in grids) else "cta" if grids else ""


def check(d: DesignPoint, ev: Evidence) -> list[Finding]:
    if d.issuer == "host" and ev.issuer == "device":
        kernel = next((k for k in ev.launches if k.moves_data), None)
        where = f"kernel {kernel.kernel} (line {kernel.line})" if kernel else "device code"
        return [(f"declares issuer=host but the data is moved by {where}", None)]
    if d.issuer != "host" and ev.issuer == "host":
        return [(f"declares issuer={d.issuer} but every transfer is a host call "
                 f"({cite(next((s for s in ev.sites if s.role == 'data'), None))})", None)]
    return []
