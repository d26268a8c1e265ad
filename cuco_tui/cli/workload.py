"""`cuco workload new NAME`, `cuco workload import FILE.py` and `cuco workload check PATH`: start a
workload of your own from a skeleton that passes L0 and L1 or from your PyTorch program, and see
what a workload folder lacks, item by item."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text

from cuco_tui.cli.common import SHARE_GPU_HELP, positive_seconds, stdout_console
from cuco_tui.core.errors import UsageError
from cuco_tui.core.workload import WorkloadError
from cuco_tui.workload.program.gloo_run import RUN_TIMEOUT_S

_STYLE = {"ok": "green", "warning": "yellow", "error": "bold red"}


def cmd_workload_new(args: argparse.Namespace) -> int:
    from cuco_tui.workload.scaffold import new_workload

    parent = _folder_to_write_in(args.dir)
    try:
        made = new_workload(args.name, parent, args.title or "")
    except WorkloadError as exc:
        raise UsageError(str(exc)) from exc
    except OSError as exc:
        raise UsageError(f"cannot write the workload into {parent}: {exc.strerror or exc}") from exc
    out = stdout_console()
    out.print(f"wrote {made.root}:")
    for f in made.files:
        out.print(f"  {f.relative_to(made.root)}")
    out.print(f"next: edit them (docs/workloads.md), then `cuco workload check {made.root}`, "
              f"`cuco eval {made.root / 'seed.cu'} --workload {made.root}`, "
              f"`cuco search --workload {made.root} --agent offline`")
    return 0


def _folder_to_write_in(text: str) -> Path:
    """--dir: a folder, or one that can be made; a file on its way is refused by name (mkdir would
    say only "Not a directory")."""
    path = Path(text)
    for at in (path, *path.parents):
        if at.exists() or at.is_symlink():
            if not at.is_dir():
                where = "is a file" if at == path else f"lies under {at}, which is a file"
                raise UsageError(f"--dir {text} {where}, not a folder: give the folder to create the workload in "
                                 f"(made if missing)")
            break
    return path


def cmd_workload_import(args: argparse.Namespace) -> int:
    from cuco_tui.workload.program.importer import import_program

    parent = _folder_to_write_in(args.dir)
    out = stdout_console()

    header = [f"importing {args.file} at {args.world} ranks: the program runs in {args.world} CPU processes of its "
              f"own, each step at most {args.timeout:g} s (--timeout)"]

    def say(line: str) -> None:
        # The header comes with the first step the importer announces: a file it refuses before
        # running anything (missing, a folder, a bad name) gets its one line alone.
        for first in header:
            out.print(first, markup=False, highlight=False)
        header.clear()
        out.print(line, markup=False, highlight=False)

    try:
        made = import_program(Path(args.file), args.world, args.name, parent, timeout=args.timeout, say=say)
    except WorkloadError as exc:
        raise UsageError(str(exc)) from exc
    except OSError as exc:
        raise UsageError(f"cannot write the workload into {parent}: {exc.strerror or exc}") from exc
    for line in made.lines:
        say(line)
    say(f"wrote {made.root}: {', '.join(made.files)}")
    say(f"next: `cuco workload check {made.root}`, `cuco eval {made.root / 'seed.cu'} --workload {made.root}`, "
        f"`cuco search --workload {made.root} --agent offline`")
    return 0


def cmd_workload_check(args: argparse.Namespace) -> int:
    from cuco_tui.cli.workload_check import check_workload

    path = Path(args.path)
    if not (path / "manifest.toml").is_file():
        raise UsageError(f"{path} holds no manifest.toml: give the folder of a workload (`cuco workload new` makes one)")
    on_gpus = _reference_on_gpus(path, args)
    findings = check_workload(path, compile_seed=not args.no_compile, on_gpus=on_gpus)
    if args.json:
        print(json.dumps([asdict(f) for f in findings], indent=1))
    else:
        t = Table(show_header=False, box=None, pad_edge=False)
        for f in findings:
            t.add_row(Text(f.level, style=_STYLE[f.level]), f.item, f.detail)
        stdout_console().print(t)
        errors = sum(f.level == "error" for f in findings)
        warnings = sum(f.level == "warning" for f in findings)
        stdout_console().print(f"{errors} error(s), {warnings} warning(s)")
    return 1 if any(f.level == "error" for f in findings) else 0


def _reference_on_gpus(path: Path, args: argparse.Namespace) -> Any:
    """--gpu and its group (--gpus, --world, --share-gpu) as the cascade's EvalOptions, checked as
    `cuco eval` checks them; None without --gpu, where a group flag alone is refused."""
    from cuco_tui.cli.common import check_group, gpu_list, share_gpu_asked
    from cuco_tui.evaluate.cascade import EvalOptions
    from cuco_tui.workload.manifest import load_workload

    if not args.gpu:
        given = [flag for flag, on in (("--gpus", args.gpus), ("--world", args.world is not None),
                                       ("--share-gpu", args.share_gpu)) if on]
        if given:
            raise UsageError(f"{given[0]} names the GPU group of --gpu (the reference on GPUs): add --gpu")
        return None
    try:
        workload = load_workload(path, search=path.parent)
    except WorkloadError:
        return EvalOptions(bench=False)  # the findings say what is wrong with the manifest; nothing runs
    check_group(workload, args)
    shared = share_gpu_asked(args)
    return EvalOptions(gpus=gpu_list(args.gpus, offers_share_gpu=True), world=args.world, share_gpu=shared,
                       bench=False)


def add_workload_parsers(sub: argparse._SubParsersAction) -> None:
    w = sub.add_parser("workload", help="start a workload of your own (new, or import from a PyTorch program) or "
                                        "check a workload folder (check)")
    wsub = w.add_subparsers(dest="workload_command", required=True)
    n = wsub.add_parser("new", help="write a new workload folder that passes L0 and L1 as written")
    n.add_argument("name", help="the workload's name (lowercase letters, digits, _)")
    n.add_argument("--dir", default="workloads", help="the folder to create it in (default: workloads)")
    n.add_argument("--title", help="a one-line title (default: from the name)")
    n.set_defaults(fn=cmd_workload_new)
    i = wsub.add_parser("import", help="write a workload folder from a PyTorch program (SHAPES, make_inputs, "
                                       "solution; docs/workloads.md) and say which pattern it found")
    i.add_argument("file", help="the program's .py file")
    i.add_argument("--world", type=int, required=True, help="the number of ranks it runs on")
    i.add_argument("--name", help="the workload's name (default: from the file's name)")
    i.add_argument("--dir", default="workloads", help="the folder to create it in (default: workloads)")
    i.add_argument("--timeout", type=positive_seconds, default=RUN_TIMEOUT_S, metavar="SECONDS",
                   help="the limit of each step that runs the program (loading and sizing it, its float64 run, "
                        f"its run in its own dtype), in seconds (default {RUN_TIMEOUT_S:g})")
    i.set_defaults(fn=cmd_workload_import)
    c = wsub.add_parser("check", help="say what a workload folder lacks or gets wrong, item by item")
    c.add_argument("path", help="the workload's folder")
    c.add_argument("--no-compile", action="store_true", help="skip compiling the seed (L1)")
    c.add_argument("--json", action="store_true", help="the findings as JSON")
    c.add_argument("--gpu", action="store_true", help="also run the reference on this machine's GPUs at the verify "
                                                      "shapes and compare it with expected() in float64")
    c.add_argument("--gpus", help="with --gpu: GPU indices, e.g. 0,1 (default: the first GPUs the workload can use)")
    c.add_argument("--world", type=int, help="with --gpu: the number of ranks when --gpus is not given")
    c.add_argument("--share-gpu", action="store_true", help="with --gpu: " + SHARE_GPU_HELP)
    c.set_defaults(fn=cmd_workload_check)
