"""`cuco export`: one candidate of a session (its best measured, or --candidate ID) written into a
folder that builds on its own: the .cu, the runtime headers it includes (from harness/runtime/,
only those it reaches), result.json, and a README.md with the nvcc line cuco's L1 builds it with."""

from __future__ import annotations

import argparse
import json
import shlex
from dataclasses import replace
from pathlib import Path

from cuco_tui.cli.sessions import open_named, record_of, shown_as
from cuco_tui.core.errors import UsageError
from cuco_tui.source.includes import included
from cuco_tui.toolchain.nvcc import (cublas_lt_flags, cuda_arch, cutlass_flags, nvcc_flags, runtime_defines,
                                     uses_cutlass)
from cuco_tui.toolchain.toolchain import RUNTIME_INCLUDE, Library, Toolchain, discover

README = "README.md"
RESULT = "result.json"
_MARK = "(written by `cuco export`)"  # the README's first line: a README without it is the user's own

# The build line spelled for any machine: the same nvcc_flags as L1, over a toolchain of names.
# The runtime headers lie beside the candidate, hence `-I.`.
GENERIC = Toolchain(
    nvcc=Path("nvcc"), nvcc_version="",
    nccl=Library("nccl", Path("$NCCL_HOME/include"), Path("$NCCL_HOME/lib"), "libnccl.so.2"),
    cublas=Library("cublas", Path("$CUBLAS_HOME/include"), Path("$CUBLAS_HOME/lib"), "libcublas.so.13"),
    runtime_include=Path("."), cutlass=Path("$CUTLASS_HOME/include"), cudart=Path("$CUDA_HOME/lib64"),
)
WHERE = [
    "`NCCL_HOME` holds include/nccl.h and lib/libnccl.so.2 (pip's nvidia-nccl-cu13: site-packages/nvidia/nccl)",
    "`CUBLAS_HOME` holds include/cublas_v2.h and lib/libcublas.so.13, lib/libcublasLt.so.13 (pip's nvidia-cublas: "
    "site-packages/nvidia/cu13)",
    "`CUDA_HOME` is the CUDA 13 toolkit (lib64/libcudart.so.13)",
]
CUTLASS_WHERE = "`CUTLASS_HOME` is a CUTLASS checkout (pip's nvidia-cutlass: site-packages/cutlass_library/source)"
_JOINED = ("-Xcompiler", "-Xlinker", "-cudart", "-o")  # flags that take the next word: never split from it


def runtime_headers(source: str, folder: Path = RUNTIME_INCLUDE) -> list[Path]:
    """The headers of `folder` that `source` includes, and those they include in turn (an include
    in a comment does not count); in the order first reached."""
    needed: dict[str, Path] = {}
    texts = [source]
    while texts:
        for name in included(texts.pop()):
            path = folder / name
            if name and name not in needed and "/" not in name and path.is_file():
                needed[name] = path
                texts.append(path.read_text())
    return list(needed.values())


def build_line(toolchain: Toolchain, source: str, kernel: str, quote: bool) -> str:
    """The nvcc command L1 runs for `source`, built in the export folder as `<kernel stem>.so`, over
    indented lines ending in ` \\`; `quote`: the paths are a machine's own (shell-quoted), else
    names such as $NCCL_HOME."""
    flags = nvcc_flags(toolchain) + runtime_defines(source) + cublas_lt_flags(toolchain, source)
    if uses_cutlass(source):
        flags += cutlass_flags(toolchain)
    words = [str(toolchain.nvcc), *flags, kernel, "-o", f"{Path(kernel).stem}.so"]
    words = [shlex.quote(w) for w in words] if quote else words
    units: list[str] = []
    for w in words:
        if units and units[-1] in _JOINED:
            units[-1] += " " + w
        else:
            units.append(w)
    lines = [units[0]]
    for unit in units[1:]:
        if len(lines[-1]) + 1 + len(unit) > 96:
            lines.append("  " + unit)
        else:
            lines[-1] += " " + unit
    return " \\\n".join("    " + line for line in lines)


def readme(kernel: str, record, shown: str, headers: list[Path], source: str) -> str:
    """What the export folder holds and how to build it, generically and on this machine."""
    speed = f", {record.speedup:.3f}x the reference" if record.speedup is not None else ""
    cutlass = uses_cutlass(source)
    here = discover()
    lines = [
        f"# {kernel} {_MARK}", "",
        f"Candidate {record.id} of the session {shown} ({record.status}{speed}); `{RESULT}` holds its design "
        "and its evaluation as recorded.", "",
        f"`{kernel}` is the source of a shared library that cuco's harness loads: it exports the three functions "
        "of cuco_abi.h (cuco_init, cuco_launch, cuco_teardown) and has no main. "
        + (f"The runtime headers it includes are beside it: {', '.join(h.name for h in headers)}."
           if headers else "It includes no runtime header."), "",
        "## Build", "",
        f"From this folder, as cuco's L1 builds it (`{Path(kernel).stem}.so`), where", "",
        *[f"- {w}" for w in WHERE + ([CUTLASS_WHERE] if cutlass else [])],
        f"- `{cuda_arch()}` is the GPU's architecture (another GPU takes its own, e.g. 100a)", "",
        build_line(GENERIC, source, kernel, quote=False), "",
    ]
    if not here.can_compile:
        lines += [f"The machine it was exported from cannot compile it: {'; '.join(here.problems)}.", ""]
    elif cutlass and here.cutlass is None:
        lines += [f"The machine it was exported from cannot compile it: {here.cutlass_problem}.", ""]
    else:
        lines += ["On the machine it was exported from (`cuco doctor` says where each part was found):", "",
                  build_line(replace(here, runtime_include=Path(".")), source, kernel, quote=True), ""]
    if "cuco_attn.h" in {h.name for h in headers}:
        lines += ["It calls the harness's attention library (cuco_attn.h), which cuco builds once per machine "
                  "and loads before it: the library above leaves those symbols to it.", ""]
    return "\n".join(lines)


def _ours(path: Path) -> bool:
    """Whether an existing README.md or result.json was written by an earlier export."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return False
    if path.name == README:
        return _MARK in text.split("\n", 1)[0]
    try:
        data = json.loads(text)
    except ValueError:
        return False
    return isinstance(data, dict) and {"session", "candidate", "result"} <= set(data)


def _check_out(out: Path) -> None:
    """--out: a folder (made if missing), never a file, and none of the user's own files overwritten."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file, not a folder: give the folder to write the export into "
                         f"(made if missing)")
    for name in (README, RESULT):
        if (out / name).exists() and not _ours(out / name):
            raise UsageError(f"{out / name} exists and was not written by `cuco export`: export into another "
                             f"folder (--out DIR) so that it is kept")


def _write(out: Path, files: dict[str, str]) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (out / name).write_text(text)
    except OSError as exc:
        raise UsageError(f"cannot write the export into {out}: {exc.strerror or exc}") from exc


def cmd_export(args: argparse.Namespace) -> int:
    if args.best and args.out and args.best != args.out:
        raise UsageError("--best DIR and --out DIR name the folder to write into: give one of them")
    out = Path(args.out or args.best or "export")
    _check_out(out)
    with open_named(args) as repo:
        shown = shown_as(args, repo)
        cid = args.candidate
        if cid is None:
            best = repo.best_measured()
            if best is None:
                raise UsageError(f"session {shown} has no measured candidate yet, so there is no "
                                 f"best to export; name one with --candidate ID")
            cid = best[0]
        r = record_of(repo, cid, shown)
    name = Path(shown).stem if str(args.session).endswith(".bundle") else repo.path.name
    kernel = f"{name}-{r.id}.cu"
    headers = runtime_headers(r.source)
    # the path it had on the machine that evaluated it means nothing here: the exported file's name does
    result = dict(r.result or {}, candidate=kernel) if r.result else r.result
    try:
        text = readme(kernel, r, shown, headers, r.source)
    except ValueError as exc:  # CUCO_CUDA_ARCH that nvcc would not take
        raise UsageError(str(exc)) from exc
    _write(out, {
        kernel: r.source, **{h.name: h.read_text() for h in headers}, README: text,
        RESULT: json.dumps({"session": shown, "candidate": r.id, "file": kernel, "status": r.status,
                            "speedup": r.speedup, "design": r.design, "result": result}, indent=1) + "\n",
    })
    print(f"wrote {out / kernel}, {RESULT} and {README} (how to build it) into {out}"
          + (f", with {', '.join(h.name for h in headers)}" if headers else "")
          + f" ({r.id}, {r.status}" + (f", {r.speedup:.3f}x" if r.speedup is not None else "") + ")")
    return 0


def add_export_parser(sub: argparse._SubParsersAction) -> None:
    ex = sub.add_parser("export", help="write a session's best kernel (or --candidate ID) into a folder that builds "
                                       "on its own: the .cu, the runtime headers it includes, its result and the "
                                       "nvcc line in a README")
    ex.add_argument("session", help="a session folder, a name in the sessions folder (--root), or a .bundle")
    ex.add_argument("--out", metavar="DIR", help="the folder to write into (default: export/; made if missing)")
    ex.add_argument("--best", metavar="DIR", help="the same as --out DIR (the best measured candidate, as before)")
    ex.add_argument("--candidate", metavar="ID", help="export this candidate instead of the best measured one "
                                                      "(c0004, or c4, 0004, 4)")
    ex.add_argument("--root", metavar="DIR", help="where sessions live, for a session given by name "
                                                  "(default: the sessions folder, as for `cuco sessions`)")
    ex.set_defaults(fn=cmd_export)
