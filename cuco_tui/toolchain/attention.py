"""The harness's attention library (cuco_attn.h): found, built once per machine, cached.

Candidates that include cuco_attn.h compile without it (nvcc sees only declarations) and get its
symbols at load time: the rank worker loads cuDNN and this library with RTLD_GLOBAL before the
candidate. The library wraps cuDNN's SDPA through the cudnn-frontend headers, whose templates take
about a minute to compile: once per machine, not once per candidate.

cuDNN is looked up like NCCL and cuBLAS (toolchain.py): CUCO_CUDNN_HOME (a folder with include/ and
lib/), the nvidia-cudnn-cu13 package beside this one, CUDA_HOME, /usr/local/cuda; the frontend
headers in CUCO_CUDNN_FRONTEND_INCLUDE or the include/ folder the nvidia-cudnn-frontend package
installs. Both come with `pip install 'cuco-tui[attention]'`.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

from cuco_tui.source.includes import included
from cuco_tui.toolchain.nvcc import BuildCache
from cuco_tui.toolchain.process import install_library, killed, record_failure, run_tool, unlink_quietly
from cuco_tui.toolchain.toolchain import RUNTIME_INCLUDE, Toolchain, package_dir

SOURCE = Path(__file__).resolve().parent.parent / "harness" / "attention_lib" / "cuco_attn.cpp"
HEADER = RUNTIME_INCLUDE / "cuco_attn.h"
CUDNN_SONAME = "libcudnn.so.9"
NVRTC_SONAME = "libnvrtc.so.13"
INSTALL_HINT = "pip install 'cuco-tui[attention]' (nvidia-cudnn-cu13 and nvidia-cudnn-frontend)"


MIN_CUDNN = (9, 7)
MIN_FRONTEND = (1, 13)


def _older(version: str, floor: tuple[int, ...]) -> bool:
    """Whether a dotted version is below `floor`; an unreadable one is not judged."""
    try:
        parts = tuple(int(x) for x in version.split(".")[:len(floor)])
    except ValueError:
        return False
    return bool(parts) and parts < floor


def uses_attention(source: str) -> bool:
    """Whether a candidate includes the harness's attention library."""
    return "cuco_attn.h" in included(source)


@dataclass(frozen=True)
class Cudnn:
    include: Path | None  # cudnn.h, cudnn_version.h
    lib: Path | None  # libcudnn.so.9 and its engine libraries
    frontend: Path | None  # cudnn_frontend.h
    extra_includes: tuple[Path, ...]  # nvrtc.h and friends the frontend includes
    nvrtc: Path | None  # libnvrtc.so.13: the frontend's runtime-compiled engines link it
    version: str  # "9.28.1", read from cudnn_version.h
    frontend_version: str

    @property
    def problem(self) -> str:
        if self.include is None or self.lib is None:
            return f"cuDNN 9 (cudnn.h and {CUDNN_SONAME}) was not found: {INSTALL_HINT}, or set CUCO_CUDNN_HOME"
        if self.frontend is None:
            return (f"the cudnn-frontend headers (cudnn_frontend.h) were not found: {INSTALL_HINT}, "
                    f"or set CUCO_CUDNN_FRONTEND_INCLUDE")
        if _older(self.version, MIN_CUDNN):
            return (f"cuDNN {self.version} is older than {'.'.join(map(str, MIN_CUDNN))}, the first with SDPA's "
                    f"bottom-right causal mask: {INSTALL_HINT}")
        if _older(self.frontend_version, MIN_FRONTEND):
            return (f"cudnn-frontend {self.frontend_version} is older than {'.'.join(map(str, MIN_FRONTEND))} "
                    f"(SDPA's set_generate_stats): {INSTALL_HINT}")
        if self.nvrtc is None:
            return f"NVRTC ({NVRTC_SONAME}, part of the CUDA toolkit and of nvidia-cuda-nvrtc) was not found"
        return ""


@dataclass(frozen=True)
class AttentionLibrary:
    """The built library and the cuDNN it needs loaded first; `problem` says why there is none."""

    path: Path | None
    cudnn: Path | None  # the libcudnn.so.9 to load (RTLD_GLOBAL) before `path`
    nvrtc: Path | None = None  # likewise libnvrtc.so.13
    problem: str = ""
    seconds: float = 0.0  # of the build that made it
    cached: bool = False

    @property
    def ok(self) -> bool:
        return self.path is not None and self.cudnn is not None

    def preload(self) -> list[str]:
        """What a rank worker loads, in order, before the candidate."""
        return [str(p) for p in (self.nvrtc, self.cudnn, self.path) if p is not None] if self.ok else []


def _version(header: Path, prefix: str) -> str:
    try:
        text = header.read_text(errors="replace")
    except OSError:
        return ""
    # cudnn_version.h spells CUDNN_MAJOR .. CUDNN_PATCHLEVEL; the frontend CUDNN_FRONTEND_MAJOR_VERSION ..
    parts = [re.search(rf"#define\s+{prefix}_{p}\w*\s+(\d+)", text) for p in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) for m in parts if m)


def _include_roots() -> list[Path]:
    """Where pip puts a wheel's include/ data: the environment's include folder, and site-packages."""
    roots = []
    for key in ("include", "platinclude", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            roots += [Path(path), Path(path) / "include"]
    roots += [Path(p) / "include" for p in sys.path if p]
    return list(dict.fromkeys(roots))


def find_cudnn(env: dict[str, str] | None = None) -> Cudnn:
    env = dict(os.environ if env is None else env)
    nvidia = package_dir("nvidia")
    roots: list[Path] = []
    if env.get("CUCO_CUDNN_HOME"):
        roots.append(Path(env["CUCO_CUDNN_HOME"]))
    if nvidia:
        roots.append(nvidia / "cudnn")
    if env.get("CUDA_HOME"):
        roots.append(Path(env["CUDA_HOME"]))
    roots.append(Path("/usr/local/cuda"))
    include = lib = None
    for root in roots:
        if (root / "include" / "cudnn.h").exists():
            for d in (root / "lib", root / "lib64", root / "targets" / "x86_64-linux" / "lib"):
                if (d / CUDNN_SONAME).exists():
                    include, lib = root / "include", d
                    break
        if include:
            break
    frontend = None
    fe_roots = ([Path(env["CUCO_CUDNN_FRONTEND_INCLUDE"])] if env.get("CUCO_CUDNN_FRONTEND_INCLUDE") else [])
    for root in fe_roots + _include_roots():
        if (root / "cudnn_frontend.h").exists():
            frontend = root
            break
    extra, nvrtc = [], None
    cuda_roots = ([nvidia / "cu13", nvidia / "cuda_nvrtc"] if nvidia else []) + \
        ([Path(env["CUDA_HOME"])] if env.get("CUDA_HOME") else []) + [Path("/usr/local/cuda")]
    for root in cuda_roots:
        if (root / "include" / "nvrtc.h").exists():
            extra.append(root / "include")
        for d in (root / "lib", root / "lib64", root / "targets" / "x86_64-linux" / "lib"):
            if nvrtc is None and (d / NVRTC_SONAME).exists():
                nvrtc = d / NVRTC_SONAME
    version = _version(include / "cudnn_version.h", "CUDNN") if include else ""
    fe_version = _version(frontend / "cudnn_frontend_version.h", "CUDNN_FRONTEND") if frontend else ""
    return Cudnn(include, lib, frontend, tuple(dict.fromkeys(extra)), nvrtc, version, fe_version)


def _key(cudnn: Cudnn, toolchain: Toolchain, flags: list[str]) -> str:
    h = hashlib.sha256(b"cuco-attn-v1\0")
    for path in (SOURCE, HEADER):
        h.update(path.read_bytes())
    h.update(f"{cudnn.version}|{cudnn.frontend_version}|{toolchain.nvcc_version}|{' '.join(flags)}".encode())
    return h.hexdigest()[:24]


def build_flags(cudnn: Cudnn, toolchain: Toolchain) -> list[str]:
    includes = [RUNTIME_INCLUDE, cudnn.frontend, cudnn.include, *cudnn.extra_includes]
    # Hidden by default: the library is loaded RTLD_GLOBAL, and its frontend and JSON template
    # instances must not bind to (or for) another copy of the frontend in the process (libtorch's).
    return ["-x", "c++", "-shared", "-Xcompiler", "-fPIC,-fvisibility=hidden,-fvisibility-inlines-hidden",
            "-std=c++17", "-O2",
            *[f"-I{p}" for p in dict.fromkeys(includes) if p is not None],
            f"-L{cudnn.lib}", f"-l:{CUDNN_SONAME}", "-Xlinker", f"-rpath={cudnn.lib}",
            f"-L{cudnn.nvrtc.parent}", f"-l:{NVRTC_SONAME}", "-Xlinker", f"-rpath={cudnn.nvrtc.parent}"]


def library_path(cudnn: Cudnn, toolchain: Toolchain, cache: BuildCache) -> Path:
    """Where the library built from this cuDNN and toolchain lives in `cache` (built or not)."""
    return cache.root / f"libcuco_attn-{_key(cudnn, toolchain, build_flags(cudnn, toolchain))}.so"


def ensure_library(toolchain: Toolchain, cache: BuildCache | None = None, env: dict[str, str] | None = None,
                   timeout: float = 900.0) -> AttentionLibrary:
    """The attention library for this machine, built now if the cache lacks it. Never raises for a
    missing cuDNN or a failed build: the problem comes back in `problem`. Concurrent callers (two
    evaluations starting at once) wait on a file lock, and one of them builds."""
    cudnn = find_cudnn(env)
    if cudnn.problem:
        return AttentionLibrary(None, None, problem=cudnn.problem)
    if toolchain.nvcc is None:
        return AttentionLibrary(None, None, problem="nvcc was not found: the attention library is compiled with it")
    flags = build_flags(cudnn, toolchain)
    cache = cache if cache is not None else BuildCache()
    path = library_path(cudnn, toolchain, cache)
    record = path.with_suffix(".json")
    key = path.stem.removeprefix("libcuco_attn-")
    try:
        cache.root.mkdir(parents=True, exist_ok=True)
        with open(cache.root / "cuco_attn.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if path.is_file():
                return AttentionLibrary(path, cudnn.lib / CUDNN_SONAME, cudnn.nvrtc, seconds=_recorded_seconds(record),
                                        cached=True)
            failed = _recorded_failure(record)
            if failed:  # the same sources, cuDNN and compiler failed before: not a minute again per evaluation
                return AttentionLibrary(None, None, problem=failed, cached=True)
            tmp = cache.temp_library(f"attn-{key}")
            command = [str(toolchain.nvcc), *flags, str(SOURCE), "-o", str(tmp)]
            started = time.monotonic()
            rc, log = run_tool(command, SOURCE.parent, timeout)
            seconds = time.monotonic() - started
            if rc != 0 or not tmp.is_file() or tmp.stat().st_size == 0:
                unlink_quietly(tmp)
                why = "timed out" if rc is None else "was killed" if killed(rc, log) else f"failed (exit {rc})"
                tail = "\n".join(log.strip().splitlines()[-12:])
                problem = (f"building the attention library {why} after {seconds:.0f} s against cuDNN "
                           f"{cudnn.version}, frontend {cudnn.frontend_version}:\n{tail}")
                record_failure(record, rc, log, {"failed": problem, "command": command[:-1] + [str(path)]})
                return AttentionLibrary(None, None, problem=problem)
            install_library(tmp, path, record, {"seconds": seconds, "command": command[:-1] + [str(path)],
                                                "cudnn": cudnn.version, "frontend": cudnn.frontend_version})
            return AttentionLibrary(path, cudnn.lib / CUDNN_SONAME, cudnn.nvrtc, seconds=seconds)
    except OSError as exc:
        return AttentionLibrary(None, None, problem=f"cannot build the attention library in {cache.root}: {exc.strerror or exc}")


def _recorded_failure(record: Path) -> str:
    try:
        return str(json.loads(record.read_text()).get("failed") or "")
    except (OSError, ValueError, AttributeError):
        return ""


def _recorded_seconds(record: Path) -> float:
    try:
        return float(json.loads(record.read_text())["seconds"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0.0
