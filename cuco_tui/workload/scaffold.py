"""`cuco workload new`: a new workload folder that passes L0 and L1 as written, with a commented
manifest, a working reference, a seed with the ABI, EVOLVE blocks and a knob, a task text and the
workload's own notes for agents. The example computation (an all-reduce) is there to be replaced."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import jinja2

from cuco_tui.core.workload import WorkloadError

SKELETON = Path(__file__).resolve().parent / "skeleton"
_NAME = re.compile(r"^[a-z][a-z0-9_]{1,47}$")
# skeleton file -> the file it becomes (".j2" files are rendered with the name and title)
FILES = {
    "manifest.toml.j2": "manifest.toml",
    "reference.py": "reference.py",
    "seed.cu.j2": "seed.cu",
    "task.md.j2": "task.md",
    "design/common.md.j2": "design/common.md",
}


def valid_name(name: str) -> bool:
    """A workload name: 2-48 lowercase letters, digits and _, starting with a letter."""
    return bool(_NAME.match(name))


@dataclass(frozen=True)
class Scaffold:
    root: Path
    files: tuple[Path, ...]


def new_workload(name: str, parent: Path, title: str = "") -> Scaffold:
    """Write the folder `parent/name`; refuse a bad name or a folder that exists (nothing is
    overwritten)."""
    if not _NAME.match(name):
        raise WorkloadError(f"{name!r} is not a workload name: use 2-48 lowercase letters, digits and _, "
                            f"starting with a letter (it becomes a folder and a Python module name)")
    root = Path(parent) / name
    if root.exists():
        raise WorkloadError(f"{root} exists already; choose another name or folder (nothing was written)")
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(SKELETON)), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True)
    values = {"name": name, "title": title or name.replace("_", " ").capitalize()}
    written = []
    root.mkdir(parents=True)
    for src, dst in FILES.items():
        target = root / dst
        target.parent.mkdir(parents=True, exist_ok=True)
        text = env.get_template(src).render(**values) if src.endswith(".j2") else (SKELETON / src).read_text()
        target.write_text(text)
        written.append(target)
    return Scaffold(root, tuple(written))
