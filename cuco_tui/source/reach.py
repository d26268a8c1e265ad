"""From a function to where the candidate launches the kernels that run it: the function that
holds a line, the functions of a name, the kernels that run a function (itself when it is one,
else every kernel that calls it, directly or through other device functions), their launches,
and the launch a line is part of. The deadlock report goes this way from the function a hung
wait is in to the launch lines of its kernel."""

from __future__ import annotations

from typing import Iterable

from cuco_tui.source.functions import Function
from cuco_tui.source.launches import Launch
from cuco_tui.source.model import CodeView


def line_span(view: CodeView, no: int) -> tuple[int, int]:
    """Offsets [start, end) of 1-based line `no`; (0, 0) outside the file."""
    starts = view.line_starts
    if not 0 < no <= len(starts):
        return 0, 0
    return starts[no - 1], starts[no] if no < len(starts) else len(view.code)


def function_at_line(view: CodeView, no: int) -> Function | None:
    """The innermost function whose body holds line `no`'s first character of code that is in a
    body (`__global__ void k() { wait(...); }` on one line is k's), or None."""
    start, end = line_span(view, no)
    for k in range(start, end):
        if not view.code[k].isspace() and (f := view.enclosing(k)) is not None:
            return f
    return None


def functions_named(view: CodeView, name: str, cut_at: int = 0) -> list[Function]:
    """The device code (kernels and device functions) defined under `name`; a name of
    `cut_at - 1` characters was cut to fit `cut_at` bytes with its NUL, and is matched as a
    prefix."""
    cut = cut_at > 0 and len(name) == cut_at - 1
    return [f for f in view.functions if f.kind != "host" and (f.name == name or cut and f.name.startswith(name))]


def kernels_running(view: CodeView, functions: Iterable[Function]) -> list[Function]:
    """The kernels whose code runs one of `functions`, in file order: a kernel itself; a device
    function through every function that calls it, up to the kernels (host callers, as of a
    `__host__ __device__` helper, lead to no kernel)."""
    return [f for f in running(view, functions) if f.is_kernel]


def running(view: CodeView, functions: Iterable[Function]) -> list[Function]:
    """`functions` and every device function and kernel that calls one of them, directly or
    through others, in file order."""
    seen: dict[int, Function] = {}
    todo = list(functions)
    while todo:
        f = todo.pop()
        if f.at in seen:
            continue
        seen[f.at] = f
        if f.kind == "device":
            callers = (view.enclosing(c.at) for c in view.calls if c.name == f.name)
            todo.extend(g for g in callers if g is not None and g.kind != "host")
    return sorted(seen.values(), key=lambda f: f.at)


def launches_of(view: CodeView, kernels: Iterable[Function]) -> list[Launch]:
    """Every launch of one of `kernels` (by name; `<<<...>>>` or cudaLaunchKernel), in file order."""
    names = {k.name for k in kernels}
    return [launch for launch in view.launches if launch.kernel in names]


def launch_spanning(launches: Iterable[Launch], view: CodeView, no: int) -> Launch | None:
    """The launch whose statement (from the kernel's name to its ';') takes in line `no`: a value
    the host wrote into the launch's arguments (a CUCO_SITE passed to the kernel) names it."""
    start, end = line_span(view, no)
    for launch in launches:
        stop = view.statement_end(launch.at)
        if launch.at < end and (stop < 0 or stop > start):
            return launch
    return None
