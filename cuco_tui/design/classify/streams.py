"""The streams dimension: how many streams the candidate uses (the harness's plus those it
creates), and which of them carry compute and which communication."""

from __future__ import annotations

import re
from typing import Iterable

from cuco_tui.design.classify.evidence import Evidence, Finding, KernelLaunch
from cuco_tui.design.classify.patterns import BLAS_COMPUTE, BLAS_SET_STREAM, STREAM_CREATE
from cuco_tui.design.classify.reading import Reading
from cuco_tui.design.classify.tile_gemm import COPIES
from cuco_tui.design.space import DesignPoint
from cuco_tui.source.expressions import last_name

HOST_ISSUED = ("nccl_host", "copy_engine")  # backends whose transfers are host API calls
_CALL = re.compile(r"[A-Za-z_]\w*\s*\(")


def stream_name(expr: str) -> str:
    """A stream argument, normalized: "default" for 0, nullptr or nothing, else its last name."""
    expr = expr.strip()
    return "default" if expr in ("", "0", "nullptr", "NULL", "cudaStreamLegacy") else last_name(expr)


def count(r: Reading) -> tuple[int, bool]:
    """(1 + the streams created, whether that count is exact): a stream created in a loop counts
    once per iteration, and not exactly when the loop's trip count is unknown."""
    streams, exact = 1, True
    for m in STREAM_CREATE.finditer(r.text):
        r.add("cudaStreamCreate", m.start(), "stream")
        n = 1
        for lp in r.loops_around(m.start()):
            if lp.count is None:
                exact = False
            else:
                n *= lp.count
        streams += n
    return streams, exact


def compute_streams(r: Reading, launches: Iterable[KernelLaunch]) -> set[str]:
    """The streams cuBLAS/cuBLASLt calls and kernels that do not communicate run on."""
    handle_streams: dict[str, set[str]] = {}
    for m in BLAS_SET_STREAM.finditer(r.text):
        args = r.args(m.end() - 1)
        if len(args) == 2:
            handle_streams.setdefault(last_name(args[0]), set()).add(stream_name(args[1]))
    out: set[str] = set()
    for m in BLAS_COMPUTE.finditer(r.text):
        if r.where(m.start()) != "host":
            continue
        name = m.group(0).rstrip("( \t\n")
        r.add(name, m.start(), "compute")
        args = r.args(m.end() - 1)
        if name == "cublasLtMatmul" and args:
            out.add(stream_name(args[-1]))
        elif args and last_name(args[0]) in handle_streams:
            out |= handle_streams[last_name(args[0])]
        else:  # a handle passed in as a parameter: any stream a handle was bound to
            for bound in handle_streams.values():
                out |= bound
    out |= {launch.stream for launch in launches if not launch.communicates}
    return out


def comm_streams(r: Reading, launches: Iterable[KernelLaunch]) -> set[str]:
    """The streams the transfers are issued on: host API calls' stream arguments and the
    streams of kernels that move data."""
    out = {launch.stream for launch in launches if launch.communicates and launch.moves_data}
    for offset, site in r.found:
        if site.role != "data" or site.where != "host" or site.backend not in HOST_ISSUED:
            continue
        m = _CALL.match(r.text, offset)
        if m is None:
            continue
        out.add(stream_name(_stream_arg(site.what.split()[0], r.args(m.end() - 1))))
    return out


def _stream_arg(name: str, args: list[str]) -> str:
    """The stream argument of a host transfer call ("" for the default stream): the last one of
    NCCL calls, of `cudaMemcpy*Async` with one, and of the fused GEMM runtime's copies."""
    if args and (name.startswith("nccl") or (name.endswith("Async") and len(args) >= 5)):
        return args[-1]
    copy = COPIES.get(name.split("::")[-1])
    if copy is not None and len(args) == copy[3]:
        return args[copy[2]]
    return ""


def check(d: DesignPoint, ev: Evidence) -> list[Finding]:
    if ev.streams_exact and int(d.streams) != min(ev.streams, 4):
        return [(f"declares streams={d.streams} but the code uses {ev.streams} (the harness's stream plus "
                 f"{ev.streams - 1} created with cudaStreamCreate*)", ev.first(role="stream"))]
    if not ev.streams_exact and int(d.streams) < ev.streams:
        return [(f"declares streams={d.streams} but creates at least {ev.streams - 1} stream(s) of its own",
                 ev.first(role="stream"))]
    return []
