"""Where the candidate launched the kernel whose blocks hang in a wait, from the candidate's
source alone: the `locate` that harness/deadlock.py is handed for its report.

Each wait's trace slot records the function whose code waits (`function`, __builtin_FUNCTION()
at the wait's call, without the candidate passing anything) beside its site. From it, the C
source model finds the kernels that run that function and the candidate's launches of them: one
line when the kernel is launched from one place, every line when from several. Dumps made before
slots named the function, and waits in a lambda, go by the function that holds the site's line.
A wait in the harness runtime's own code (the fused GEMM's `wait_rows`) has no line in the
candidate: the launch is the call of the runtime's launcher, which the classifier knows by name.

Why not the host: the schedule perturber does intercept the candidate's launches, and could
note each one's return address for the .so's line table, but it is in the process only when the
plan has perturbed rounds, would add work to every launch, needs host debug info, and still
could not tell which launch's blocks hang: the device cannot name its kernel (no register holds
it; `%gridid` is per launch, and the host learns it only from CUPTI records, which a hung kernel
never produces). The function a wait is in is what the device can say at no cost to a wait that
ends in time (the name is written with the rest of the slot, after the grace polls), and the
source says the rest."""

from __future__ import annotations

from typing import Callable

from cuco_tui.design.classify.tile_gemm import FUSED_KERNEL, TileGemm
from cuco_tui.harness.abi import WAIT_FUNCTION_LEN
from cuco_tui.harness.deadlock import LaunchSite, Locate
from cuco_tui.source.model import CandidateSource, CodeView
from cuco_tui.source.reach import (function_at_line, functions_named, kernels_running, launch_spanning, launches_of,
                                   running)


def _fused_gemm_launches(view: CodeView) -> list[int]:
    """Offsets of the fused GEMM's launches: `<g>.launch(stream, e)` on a FusedGemm, or a launch
    of its kernel written out."""
    tg = TileGemm(view)
    calls = tg.member_calls("launch", tg.gemms) if tg.used else []
    return [c.at for c in calls] + [launch.at for launch in view.launches if launch.kernel == FUSED_KERNEL]


# The runtime's device functions that wait for a candidate, by the name the slot records: what
# to call them, and where a candidate launches the kernel that runs them.
RUNTIME_WAITERS: dict[str, tuple[str, Callable[[CodeView], list[int]]]] = {
    "wait_rows": ("the fused GEMM's wait_rows", _fused_gemm_launches),
}


def launch_locator(source: str, file: str = "") -> Locate:
    """The `locate` of harness/deadlock.py for one candidate's text (parsed once, on first use)."""
    model = CandidateSource(source, file)
    return lambda site, function: find_launch(model, site, function)


def find_launch(source: CandidateSource, site: int, function: str = "") -> LaunchSite | None:
    """Where the candidate launched the kernel of a wait recorded at `site` in `function` (""
    when the dump has none); None when the source does not say (no kernel that runs the
    function is launched in it)."""
    view = source.whole
    holder = function_at_line(view, site)
    waiting = functions_named(view, function, WAIT_FUNCTION_LEN) if function else []
    if function and not waiting and function in RUNTIME_WAITERS:
        words, launches = RUNTIME_WAITERS[function]
        return _site(view, launches(view), words)
    if not waiting and holder is not None and holder.kind != "host":
        waiting = [holder]  # no name recorded, or a lambda's ("operator()"): the site's function
    if not waiting:  # a site the host passed at a launch, in a dump without the function's name
        passed = launch_spanning(view.launches, view, site)
        return LaunchSite((view.line(passed.at),), passed.kernel) if passed else None
    at_site = [f for f in waiting if holder is not None and f.at == holder.at]
    if not at_site and holder is not None and any(f.at == holder.at for f in running(view, waiting)):
        at_site = [holder]  # a site handed down to the waiting function by a caller: the caller's kernels
    waiting = at_site or waiting  # overloads of one name: the one the site is in
    launches = launches_of(view, kernels_running(view, waiting))
    passed = launch_spanning(launches, view, site)  # a site the host passed at one of the launches
    return _site(view, [passed.at] if passed else [launch.at for launch in launches], waiting[0].name,
                 site if at_site else 0)


def _site(view: CodeView, offsets: list[int], function: str, line: int = 0) -> LaunchSite | None:
    lines = tuple(sorted({view.line(k) for k in offsets}))
    return LaunchSite(lines, function, line) if lines else None
