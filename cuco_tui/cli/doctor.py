"""`cuco doctor`: what this machine has and lacks for compiling and running candidates, and
the Slurm cluster it can submit evaluations to (sinfo: partitions, nodes up, GPUs per node) (the
probes are in `machine_checks`), as a table and one sentence."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from rich import box
from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from cuco_tui.cli.common import stdout_console

if TYPE_CHECKING:
    from cuco_tui.cli.machine_checks import Check


def cmd_doctor(args: argparse.Namespace) -> int:
    from cuco_tui.cli.machine_checks import run_checks  # the probes load the toolchain: only when asked

    checks = run_checks()
    console = stdout_console()
    console.print(render_checks(checks))
    console.print(summary(checks))
    return 0


def render_checks(checks: list[Check]) -> RenderableType:
    """A table: ✓/✗, what was checked, what was found, and what to do about a ✗."""
    table = Table(box=box.SIMPLE_HEAD, show_lines=False, expand=False)
    table.add_column("", width=1, no_wrap=True)
    table.add_column("check", style="bold", no_wrap=True)
    table.add_column("found", overflow="fold")
    table.add_column("fix", overflow="fold")
    for c in checks:
        if c.ok:
            mark = Text("✓", style="green")
        else:
            mark = Text("✗", style="red" if c.needed_for else "yellow")
        table.add_row(mark, c.name, c.detail, Text(c.fix, style="italic") if c.fix else "")
    return table


def summary(checks: list[Check]) -> str:
    """One sentence: can this machine compile candidates, and run them?"""
    compile_fail = [c for c in checks if c.needed_for == "compile" and not c.ok]
    if compile_fail:
        return "cannot compile: " + "; ".join(f"{c.name}: {c.detail}" for c in compile_fail)
    run_fail = [c for c in checks if c.needed_for == "run" and not c.ok]
    if run_fail:
        no_gpu = any(c.name in ("GPUs (NVML)", "CuPy sees a GPU") for c in run_fail)
        why = "no GPU" if no_gpu else "; ".join(f"{c.name}: {c.detail}" for c in run_fail)
        return f"can compile candidates, but cannot run them: {why}"
    return "everything needed to compile and run candidates is here"


def add_doctor_parser(sub: argparse._SubParsersAction) -> None:
    d = sub.add_parser("doctor", help="say what this machine has and lacks for compiling and running candidates "
                                           "(and the Slurm cluster it can submit to)")
    d.set_defaults(fn=cmd_doctor)
