"""Where nvcc, NCCL, cuBLAS and the CUTLASS headers live on this machine.

Looked up in this order, each a place a user can control: an explicit environment
variable (CUCO_NVCC, CUCO_NCCL_HOME, CUCO_CUBLAS_HOME, CUCO_CUTLASS_HOME), CUDA_HOME, the
Python packages installed beside this one (nvidia-nccl-cu13, nvidia-cublas, nvidia-cutlass),
then /usr/local/cuda. Nothing is hard-coded to one machine.

CUTLASS is header-only and needed only by candidates that include it (or the runtime's
cuco_tile_gemm.cuh): a machine without it still compiles every other candidate.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from cuco_tui.harness.env import child_env

RUNTIME_INCLUDE = Path(__file__).resolve().parent.parent / "harness" / "runtime"


@dataclass(frozen=True)
class Library:
    """A C library: its include folder, lib folder and the exact file to link."""

    name: str
    include: Path | None
    lib: Path | None
    soname: str

    @property
    def found(self) -> bool:
        return self.include is not None and self.lib is not None and (self.lib / self.soname).exists()


@dataclass(frozen=True)
class Toolchain:
    nvcc: Path | None
    nvcc_version: str
    nccl: Library
    cublas: Library
    runtime_include: Path = RUNTIME_INCLUDE
    problems: tuple[str, ...] = field(default=())
    cutlass: Path | None = None  # the include folder holding cutlass/ and cute/
    cutlass_version: str = ""  # "4.2.0", from cutlass/version.h
    cutlass_problem: str = ""  # why `cutlass` is None, with the fix
    # The folder holding the shared CUDA runtime (libcudart.so.13) candidates link, for their
    # rpath; None when not found (the loader's own search then has to find it).
    cudart: Path | None = None

    @property
    def can_compile(self) -> bool:
        return self.nvcc is not None and self.nccl.found and self.cublas.found

    def fingerprint(self) -> str:
        """Changes whenever a different compiler, header set or runtime header would be used."""
        h = hashlib.sha256()
        h.update(self.nvcc_version.encode())
        for lib in (self.nccl, self.cublas):
            h.update(f"{lib.include}|{lib.lib}|{lib.soname}".encode())
            header = _main_header(lib)
            if header is not None:
                h.update(header.read_bytes())
        for header in self.runtime_headers():
            h.update(header.read_bytes())
        h.update(f"cudart|{self.cudart}".encode())
        return h.hexdigest()[:16]

    def runtime_headers(self) -> list[Path]:
        """The headers candidates include from the runtime folder (.h and .cuh; "*.h*" would miss
        the .cuh ones, whose edits then went unnoticed by the build cache)."""
        return sorted({*self.runtime_include.glob("*.h"), *self.runtime_include.glob("*.cuh")})

    def cutlass_fingerprint(self) -> str:
        """Changes with the CUTLASS headers a CUTLASS candidate would see (their folder and version)."""
        return f"cutlass:{self.cutlass}|{self.cutlass_version}" if self.cutlass else ""


def _main_header(lib: Library) -> Path | None:
    if lib.include is None:
        return None
    name = {"nccl": "nccl.h", "cublas": "cublas_api.h"}[lib.name]
    path = lib.include / name
    return path if path.exists() else None


def package_dir(dotted: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(dotted)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _find_nvcc(env: dict[str, str]) -> Path | None:
    if env.get("CUCO_NVCC"):
        return Path(env["CUCO_NVCC"])
    if env.get("CUDA_HOME") and (Path(env["CUDA_HOME"]) / "bin" / "nvcc").exists():
        return Path(env["CUDA_HOME"]) / "bin" / "nvcc"
    found = shutil.which("nvcc", path=env.get("PATH"))
    if found:
        return Path(found)
    fallback = Path("/usr/local/cuda/bin/nvcc")
    return fallback if fallback.exists() else None


CUDART_SONAME = "libcudart.so.13"


def _find_cudart(nvcc: Path | None, env: dict[str, str], nvidia: Path | None) -> Path | None:
    """The folder of the shared CUDA runtime: CUCO_CUDART_HOME, CUDA_HOME, the toolkit of `nvcc`
    (the real binary, where `nvcc` is a wrapper script), the nvidia-cuda-runtime package, /usr/local/cuda."""
    roots: list[Path] = []
    if env.get("CUCO_CUDART_HOME"):
        roots.append(Path(env["CUCO_CUDART_HOME"]))
    if env.get("CUDA_HOME"):
        roots.append(Path(env["CUDA_HOME"]))
    if nvcc is not None:
        roots.append(nvcc.resolve().parent.parent)
        try:  # a wrapper such as `exec /usr/local/cuda-13.0/bin/nvcc "$@"`
            text = nvcc.read_text(errors="replace")[:4096] if nvcc.stat().st_size < 4096 else ""
        except OSError:
            text = ""
        m = re.search(r"(/\S+)/bin/nvcc\b", text)
        if m:
            roots.append(Path(m.group(1)))
    if nvidia is not None:
        roots += [nvidia / "cu13", nvidia / "cuda_runtime"]
    roots.append(Path("/usr/local/cuda"))
    for root in roots:
        for lib in (root / "lib", root / "lib64", root / "targets" / "x86_64-linux" / "lib"):
            if (lib / CUDART_SONAME).exists():
                return lib
    return None


def _nvcc_version(nvcc: Path | None) -> str:
    if nvcc is None:
        return ""
    try:
        out = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=30,
                             env=child_env()).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = [line for line in out.splitlines() if "release" in line or line.startswith("Build")]
    return " ".join(lines).strip()


def _library(name: str, soname: str, env_var: str, package_roots: list[Path | None], env: dict[str, str]) -> Library:
    candidates: list[Path] = []
    if env.get(env_var):
        candidates.append(Path(env[env_var]))
    candidates += [p for p in package_roots if p is not None]
    if env.get("CUDA_HOME"):
        candidates.append(Path(env["CUDA_HOME"]))
    candidates.append(Path("/usr/local/cuda"))
    header = "nccl.h" if name == "nccl" else "cublas_v2.h"
    for root in candidates:
        include = root / "include"
        if not (include / header).exists():
            continue
        for lib in (root / "lib", root / "lib64", root / "targets" / "x86_64-linux" / "lib"):
            if (lib / soname).exists():
                return Library(name, include, lib, soname)
        return Library(name, include, None, soname)
    return Library(name, None, None, soname)


CUTLASS_HINT = "`pip install nvidia-cutlass` (header-only) or set CUCO_CUTLASS_HOME to a CUTLASS checkout"


def _cutlass_include(root: Path) -> Path | None:
    """The folder under `root` that holds cutlass/cutlass.h: a checkout (root/include), the pip
    package's layout (root/source/include) or an include folder itself."""
    for include in (root / "include", root / "source" / "include", root):
        if (include / "cutlass" / "cutlass.h").is_file() and (include / "cute" / "tensor.hpp").is_file():
            return include
    return None


def cutlass_version(include: Path | None) -> str:
    """`4.2.0`, from the CUTLASS_MAJOR/MINOR/PATCH defines of cutlass/version.h; "" if unknown."""
    if include is None:
        return ""
    try:
        text = (include / "cutlass" / "version.h").read_text(errors="replace")
    except OSError:
        return ""
    parts = [re.search(rf"^\s*#define\s+CUTLASS_{key}\s+(\d+)", text, re.MULTILINE) for key in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(m.group(1) for m in parts) if all(parts) else ""


def find_cutlass(env: dict[str, str]) -> tuple[Path | None, str]:
    """(the CUTLASS include folder, "") or (None, why not and how to fix it). CUCO_CUTLASS_HOME
    wins when set; then the nvidia-cutlass package (its headers sit in
    cutlass_library/source/include)."""
    if env.get("CUCO_CUTLASS_HOME"):
        root = Path(env["CUCO_CUTLASS_HOME"]).expanduser()
        include = _cutlass_include(root)
        if include is None:
            return None, f"CUCO_CUTLASS_HOME={root} holds no include/cutlass/cutlass.h and cute/tensor.hpp"
        return include, ""
    pkg = package_dir("cutlass_library")
    if pkg is not None:
        include = _cutlass_include(pkg / "source")
        if include is not None:
            return include, ""
        return None, f"the nvidia-cutlass package at {pkg} has no source/include/cutlass/cutlass.h"
    return None, f"the CUTLASS headers were not found: {CUTLASS_HINT}"


def cutlass_report(toolchain: Toolchain) -> tuple[bool, str, str]:
    """(found, what was found, how to fix it) for `cuco doctor`."""
    if toolchain.cutlass is None:
        return False, toolchain.cutlass_problem + " (needed only by candidates that include CUTLASS or " \
            "cuco_tile_gemm.cuh, such as gemm_allgather's fused_tile)", CUTLASS_HINT
    return True, f"{toolchain.cutlass_version or 'version unknown'}: headers {toolchain.cutlass}", ""


def discover(env: dict[str, str] | None = None) -> Toolchain:
    env = dict(os.environ if env is None else env)
    nvcc = _find_nvcc(env)
    if nvcc is not None and not nvcc.exists():
        nvcc = None
    nvidia = package_dir("nvidia")
    nccl_pkg = nvidia / "nccl" if nvidia else None
    cu13_pkg = nvidia / "cu13" if nvidia else None
    cublas_pkg = nvidia / "cublas" if nvidia else None
    nccl = _library("nccl", "libnccl.so.2", "CUCO_NCCL_HOME", [nccl_pkg], env)
    cublas = _library("cublas", "libcublas.so.13", "CUCO_CUBLAS_HOME", [cu13_pkg, cublas_pkg], env)
    problems = []
    if nvcc is None:
        problems.append("nvcc was not found: install the CUDA toolkit 13 or set CUCO_NVCC to the nvcc binary")
    for lib, pkg, var in ((nccl, "nvidia-nccl-cu13==2.28.9", "CUCO_NCCL_HOME"), (cublas, "nvidia-cublas", "CUCO_CUBLAS_HOME")):
        if not lib.found:
            problems.append(
                f"{lib.name} headers or {lib.soname} were not found: `pip install {pkg}` or set {var} "
                f"to a folder holding include/ and lib/"
            )
    cutlass, cutlass_problem = find_cutlass(env)
    return Toolchain(nvcc, _nvcc_version(nvcc), nccl, cublas, RUNTIME_INCLUDE, tuple(problems), cutlass,
                     cutlass_version(cutlass), cutlass_problem, _find_cudart(nvcc, env, nvidia))


def nccl_version(include: Path | None) -> str:
    """`2.28.9`, read from the `#define NCCL_MAJOR/MINOR/PATCH` lines of nccl.h; "" if unknown."""
    if include is None:
        return ""
    try:
        text = (include / "nccl.h").read_text(errors="replace")
    except OSError:
        return ""
    parts = []
    for key in ("MAJOR", "MINOR", "PATCH"):
        m = re.search(rf"^\s*#define\s+NCCL_{key}\s+(\d+)", text, re.MULTILINE)
        if not m:
            return ""
        parts.append(m.group(1))
    return ".".join(parts)
