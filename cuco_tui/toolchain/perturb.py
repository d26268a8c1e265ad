"""The schedule perturber of L2 verification (harness/perturb_lib): built once per machine, cached.

A small C++ interposer between a candidate and the CUDA runtime, NCCL and cuBLAS (see
cuco_perturb.cpp), compiled by nvcc as host code only, with no CUDA runtime linked in: it passes
every call on to the libraries the candidate itself loaded. A couple of seconds to build, keyed by
its sources, the compiler and the flags, like the attention library (toolchain/attention.py).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

from cuco_tui.toolchain.nvcc import BuildCache
from cuco_tui.toolchain.process import install_library, killed, record_failure, run_tool, unlink_quietly
from cuco_tui.toolchain.toolchain import Toolchain

SOURCE_DIR = Path(__file__).resolve().parent.parent / "harness" / "perturb_lib"
SOURCE = SOURCE_DIR / "cuco_perturb.cpp"
POLICY = SOURCE_DIR / "cuco_perturb.h"


@dataclass(frozen=True)
class PerturbLibrary:
    """The built library, or why there is none."""

    path: Path | None
    problem: str = ""
    seconds: float = 0.0  # of the build that made it
    cached: bool = False

    @property
    def ok(self) -> bool:
        return self.path is not None


def build_flags(toolchain: Toolchain) -> list[str]:
    includes = [SOURCE_DIR, toolchain.nccl.include, toolchain.cublas.include]
    # Hidden by default: only the C API and the interposed functions are exported.
    return ["-x", "c++", "-cudart", "none", "-shared", "-Xcompiler", "-fPIC,-fvisibility=hidden", "-std=c++17",
            "-O2", *[f"-I{p}" for p in dict.fromkeys(includes) if p is not None], "-ldl"]


def library_path(toolchain: Toolchain, cache: BuildCache) -> Path:
    h = hashlib.sha256(b"cuco-perturb-v1\0")
    for path in (SOURCE, POLICY):
        h.update(path.read_bytes())
    h.update(f"{toolchain.nvcc_version}|{' '.join(build_flags(toolchain))}".encode())
    return cache.root / f"libcuco_perturb-{h.hexdigest()[:24]}.so"


def ensure_perturb_library(toolchain: Toolchain, cache: BuildCache | None = None,
                           timeout: float = 300.0) -> PerturbLibrary:
    """The perturber for this machine, built now if the cache lacks it. Never raises: a missing
    compiler or a failed build comes back in `problem`. Concurrent callers wait on a file lock."""
    if toolchain.nvcc is None:
        return PerturbLibrary(None, "nvcc was not found: the schedule perturber is compiled with it")
    cache = cache if cache is not None else BuildCache()
    path = library_path(toolchain, cache)
    record = path.with_suffix(".json")
    try:
        cache.root.mkdir(parents=True, exist_ok=True)
        with open(cache.root / "cuco_perturb.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if path.is_file():
                return PerturbLibrary(path, seconds=_recorded(record, "seconds", 0.0), cached=True)
            failed = _recorded(record, "failed", "")
            if failed:  # the same sources and compiler failed before: not again for every evaluation
                return PerturbLibrary(None, failed, cached=True)
            tmp = cache.temp_library(path.stem)
            command = [str(toolchain.nvcc), *build_flags(toolchain), str(SOURCE), "-o", str(tmp)]
            started = time.monotonic()
            rc, log = run_tool(command, SOURCE_DIR, timeout)
            seconds = time.monotonic() - started
            if rc != 0 or not tmp.is_file() or tmp.stat().st_size == 0:
                unlink_quietly(tmp)
                why = "timed out" if rc is None else "was killed" if killed(rc, log) else f"failed (exit {rc})"
                tail = "\n".join(log.strip().splitlines()[-12:])
                problem = f"building the schedule perturber {why} after {seconds:.0f} s:\n{tail}"
                record_failure(record, rc, log, {"failed": problem, "command": command[:-1] + [str(path)]})
                return PerturbLibrary(None, problem)
            install_library(tmp, path, record, {"seconds": seconds, "command": command[:-1] + [str(path)]})
            return PerturbLibrary(path, seconds=seconds)
    except OSError as exc:
        return PerturbLibrary(None, f"cannot build the schedule perturber in {cache.root}: {exc.strerror or exc}")


def _recorded(record: Path, key: str, default):
    try:
        value = json.loads(record.read_text()).get(key, default)
        return type(default)(value)
    except (OSError, ValueError, AttributeError, TypeError):
        return default
