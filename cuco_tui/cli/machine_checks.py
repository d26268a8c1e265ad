"""The probes behind `cuco doctor`: what this machine has for compiling and running candidates,
each found or missing thing one `Check`, with what to do about what it lacks.

Every probe is guarded: a missing driver, library or package becomes a not-ok `Check` with a
sentence saying how to fix it, never a traceback. Nothing here prints a secret."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import re
from dataclasses import dataclass
from typing import Literal

from cuco_tui.toolchain import attention
from cuco_tui.toolchain.grouped_gemm_lib import REFERENCE_CONFIG
from cuco_tui.toolchain.nvcc import BuildCache, gemm_library_flags
from cuco_tui.toolchain.tile_gemm_lib import library_path
from cuco_tui.toolchain.toolchain import Library, Toolchain, cutlass_report, discover, nccl_version
from cuco_tui.harness.env import NO_MULTICAST
from cuco_tui.harness.gpus import GpuInventory, inventory

NeededFor = Literal["compile", "run", ""]

RUNTIME_HEADERS = ("cuco_runtime.cuh", "cuco_abi.h")
PYTHON_PACKAGES = (
    # (import name, distribution name, what it is used for)
    ("textual", "textual", "the terminal interface"),
    ("anthropic", "anthropic", "the Claude agent"),
    ("git", "GitPython", "the lineage of candidates"),
    ("jinja2", "Jinja2", "agent prompts"),
)


@dataclass(frozen=True)
class Check:
    """One line of the doctor's report. `needed_for` says what a failure stops: compiling
    candidates, running them, or nothing essential ("")."""

    name: str
    ok: bool
    detail: str
    fix: str = ""
    needed_for: NeededFor = ""


def run_checks(env: dict[str, str] | None = None) -> list[Check]:
    """Probe the toolchain, the GPUs and the Python side. `env` defaults to os.environ."""
    env = dict(os.environ if env is None else env)
    toolchain = discover(env)
    inv = _inventory()
    checks = [
        _nvcc_check(toolchain, env),
        _nccl_check(toolchain.nccl),
        _nccl_device_check(toolchain.nccl),
        _cublas_check(toolchain.cublas),
        Check("CUTLASS", *cutlass_report(toolchain)),
        _runtime_header_check(toolchain),
        *attention_checks(toolchain, env),
        grouped_gemm_check(toolchain, env),
        *_cupy_checks(),
        _driver_check(inv),
        *_gpu_checks(inv),
        _topology_check(inv),
        _multicast_check(env),
        *(_package_check(*p) for p in PYTHON_PACKAGES),
        _api_key_check(env),
        *slurm_checks(env),
    ]
    return checks


# --- toolchain -------------------------------------------------------------------------------


def _nvcc_check(toolchain: Toolchain, env: dict[str, str]) -> Check:
    fix = "install the CUDA toolkit 13, or set CUCO_NVCC to the path of its nvcc binary"
    if toolchain.nvcc is None:
        named = env.get("CUCO_NVCC")
        if named:
            detail = f"CUCO_NVCC names {named}, which does not exist"
            fix = "point CUCO_NVCC at an existing nvcc binary (or unset it to search CUDA_HOME and PATH)"
        elif env.get("CUDA_HOME"):
            detail = f"not in CUDA_HOME ({env['CUDA_HOME']}/bin), on PATH or in /usr/local/cuda/bin"
        else:
            detail = "not on PATH or in /usr/local/cuda/bin"
        return Check("nvcc", False, detail, fix, "compile")
    if not toolchain.nvcc_version:
        return Check("nvcc", False, f"{toolchain.nvcc} did not answer `nvcc --version`",
                     "check that this nvcc runs (permissions, a broken CUDA install)", "compile")
    return Check("nvcc", True, f"{toolchain.nvcc} ({_short_nvcc_version(toolchain.nvcc_version)})",
                 needed_for="compile")


def _short_nvcc_version(text: str) -> str:
    m = re.search(r"release ([\d.]+), V([\d.]+)", text)
    return f"CUDA {m.group(1)}, nvcc {m.group(2)}" if m else text


def _library_fix(lib: Library, package: str, env_var: str) -> str:
    return f"`pip install {package}`, or set {env_var} to a folder holding include/ and lib/{lib.soname}"


def _nccl_check(lib: Library) -> Check:
    fix = _library_fix(lib, "nvidia-nccl-cu13==2.28.9", "CUCO_NCCL_HOME")
    if lib.include is None:
        return Check("NCCL", False, "nccl.h was not found", fix, "compile")
    version = nccl_version(lib.include) or "version unknown"
    if not lib.found:
        return Check("NCCL", False, f"headers {version} in {lib.include}, but {lib.soname} was not found", fix,
                     "compile")
    return Check("NCCL", True, f"{version}: headers {lib.include}, library {lib.lib / lib.soname}",
                 needed_for="compile")


def _nccl_device_check(lib: Library) -> Check:
    name = "NCCL device API (LSA)"
    if lib.include is None:
        return Check(name, False, "no NCCL headers, so no nccl_device.h", "install NCCL first (see above)")
    if (lib.include / "nccl_device.h").exists():
        return Check(name, True, f"nccl_device.h in {lib.include}")
    return Check(name, False, f"{lib.include} has no nccl_device.h: candidates using LSA windows will not compile",
                 "use NCCL 2.28 or newer (`pip install nvidia-nccl-cu13==2.28.9`)")


def _cublas_check(lib: Library) -> Check:
    fix = _library_fix(lib, "nvidia-cublas", "CUCO_CUBLAS_HOME")
    if lib.include is None:
        return Check("cuBLAS", False, "cublas_v2.h was not found", fix, "compile")
    if not lib.found:
        return Check("cuBLAS", False, f"headers in {lib.include}, but {lib.soname} was not found", fix, "compile")
    return Check("cuBLAS", True, f"headers {lib.include}, library {lib.lib / lib.soname}", needed_for="compile")


def _runtime_header_check(toolchain: Toolchain) -> Check:
    missing = [h for h in RUNTIME_HEADERS if not (toolchain.runtime_include / h).exists()]
    if missing:
        return Check("runtime header", False, f"{', '.join(missing)} missing from {toolchain.runtime_include}",
                     "reinstall cuco-tui (`pip install -e .` from the repository): the package ships these headers",
                     "compile")
    return Check("runtime header", True, f"{', '.join(RUNTIME_HEADERS)} in {toolchain.runtime_include}",
                 needed_for="compile")


# --- the harness attention library (cuco_attn.h) --------------------------------------------

ATTENTION_USERS = ("cp_attention's reference (which falls back to PyTorch FlashAttention without it) "
                   "and candidates that include cuco_attn.h")


def attention_checks(toolchain: Toolchain, env: dict[str, str], cache: BuildCache | None = None) -> list[Check]:
    """cuDNN and the cudnn-frontend headers, and whether the attention library built from them is
    in the build cache. Nothing is built here: the cascade builds it once per machine on first use."""
    try:
        cudnn = attention.find_cudnn(env)
    except Exception as exc:  # an unreadable folder: report it, never a traceback
        return [Check("cuDNN (attention)", False, f"the search failed: {_one_line(exc)}", attention.INSTALL_HINT)]
    found = [
        f"cuDNN {cudnn.version or 'version unknown'}: headers {cudnn.include}, library {cudnn.lib}"
        if cudnn.include is not None and cudnn.lib is not None else "cuDNN not found",
        f"frontend {cudnn.frontend_version or 'version unknown'} in {cudnn.frontend}"
        if cudnn.frontend is not None else "cudnn-frontend headers not found",
    ]
    if cudnn.problem:
        return [
            Check("cuDNN (attention)", False, "; ".join(found), f"{cudnn.problem} (used by {ATTENTION_USERS})"),
            Check("attention library", False, "cannot be built without cuDNN, the frontend and NVRTC (see above)"),
        ]
    checks = [Check("cuDNN (attention)", True, "; ".join(found) + f"; NVRTC {cudnn.nvrtc}")]
    if toolchain.nvcc is None:
        return checks + [Check("attention library", False, "cannot be built: no nvcc (see above)")]
    if cache is None:
        cache = BuildCache(env.get("CUCO_CACHE_DIR") or None)
    try:  # the name ensure_library() gives the library it builds
        path = attention.library_path(cudnn, toolchain, cache)
    except OSError as exc:  # the library's source is missing from the package
        return checks + [Check("attention library", False, f"its source cannot be read: {_one_line(exc)}",
                               "reinstall cuco-tui (`pip install -e .` from the repository)")]
    if path.is_file():
        return checks + [Check("attention library", True, f"built: {path}")]
    return checks + [Check("attention library", True,
                           f"not built yet: it is built once per machine (about a minute) into {cache.root} "
                           f"when a workload or candidate first needs it")]


# --- the prebuilt grouped GEMM the MoE reference calls (cuco_grouped_gemm_lib.h) ------------------


def grouped_gemm_check(toolchain: Toolchain, env: dict[str, str], cache: BuildCache | None = None) -> Check:
    """Whether the grouped GEMM configuration a workload's reference calls (moe_dispatch_combine's,
    `libraries = ["grouped_gemm"]`) can be built and is in the build cache. Nothing is built here."""
    name = f"grouped GEMM library ({REFERENCE_CONFIG.block_m}x{REFERENCE_CONFIG.block_n} tiles)"
    users = "moe_dispatch_combine's reference, which runs cuBLAS without it, 1.02-1.33x slower"
    if toolchain.nvcc is None:
        return Check(name, False, "cannot be built: no nvcc (see above)", f"used by {users}")
    try:
        base = gemm_library_flags(toolchain)
    except ValueError as exc:  # no CUTLASS headers, or an architecture they cannot build
        return Check(name, False, f"cannot be built: {_one_line(exc)}", f"pip install nvidia-cutlass (used by {users})")
    if cache is None:
        cache = BuildCache(env.get("CUCO_CACHE_DIR") or None)
    try:  # the name ensure_gemm_library() gives the library it builds
        path = library_path(REFERENCE_CONFIG, toolchain, cache, base)
    except OSError as exc:
        return Check(name, False, f"its source cannot be read: {_one_line(exc)}",
                     "reinstall cuco-tui (`pip install -e .` from the repository)")
    if path.is_file():
        return Check(name, True, f"built: {path}")
    return Check(name, True, f"not built yet: it is built once per machine (about a minute) into {cache.root} "
                             f"when a workload's reference first needs it")


# --- Python side of the GPU -------------------------------------------------------------------


def _cupy_checks() -> list[Check]:
    try:
        cupy = importlib.import_module("cupy")
    except Exception as exc:  # ImportError, or a CUDA library that fails to load
        return [
            Check("CuPy", False, f"cannot be imported: {_one_line(exc)}",
                  "`pip install cupy-cuda13x` (the references and the harness use it)", "run"),
        ]
    version = getattr(cupy, "__version__", "version unknown")
    checks = [Check("CuPy", True, f"{version}", needed_for="run")]
    try:
        n = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # CUDARuntimeError without a driver or a device
        checks.append(Check("CuPy sees a GPU", False, f"no: {_one_line(exc)}",
                            "run on a machine with an NVIDIA GPU and driver; compiling still works here", "run"))
        return checks
    if n == 0:
        checks.append(Check("CuPy sees a GPU", False, "no: the CUDA runtime reports 0 devices",
                            "check CUDA_VISIBLE_DEVICES and the driver", "run"))
    else:
        checks.append(Check("CuPy sees a GPU", True, f"yes, {n} device{'s' if n != 1 else ''}", needed_for="run"))
    return checks


# --- NVML: driver, GPUs, NVLink ---------------------------------------------------------------


def _inventory() -> GpuInventory:
    try:
        return inventory()
    except Exception as exc:  # an NVML error inventory() did not expect
        return GpuInventory((), problem=f"NVML failed: {_one_line(exc)}")


def _driver_check(inv: GpuInventory) -> Check:
    if inv.count == 0:
        return Check("GPUs (NVML)", False, f"no GPU: {inv.problem or 'none found'}",
                     "run on a machine with an NVIDIA GPU and driver to verify and time candidates; "
                     "here they are compiled only", "run")
    return Check("GPUs (NVML)", True, f"driver {inv.driver or 'unknown'}, {inv.count} GPU{'s' if inv.count != 1 else ''}",
                 needed_for="run")


def _gpu_checks(inv: GpuInventory) -> list[Check]:
    return [Check(f"GPU {g.index}", True, f"{g.name}, {g.memory_mib / 1024:.0f} GiB") for g in inv.gpus]


def nvlink_matrix(inv: GpuInventory) -> str:
    """Active NVLink links between every pair of GPUs, as a text matrix ("-" on the diagonal)."""
    idx = [g.index for g in inv.gpus]
    heads = [f"GPU{i}" for i in idx]
    width = max(len(h) for h in heads)
    lines = [" " * width + " " + " ".join(h.rjust(width) for h in heads)]
    for g, head in zip(inv.gpus, heads):
        cells = ["-" if j == g.index else str(g.nvlink_peers.get(j, 0)) for j in idx]
        lines.append(head.ljust(width) + " " + " ".join(c.rjust(width) for c in cells))
    return "\n".join(lines)


def _topology_check(inv: GpuInventory) -> Check:
    name = "NVLink topology"
    if inv.count == 0:
        return Check(name, False, "not known: no GPU visible")
    if inv.count == 1:
        return Check(name, True, "one GPU: nothing to link")
    unlinked = [(a.index, b.index) for a in inv.gpus for b in inv.gpus
                if a.index < b.index and not a.nvlink_peers.get(b.index)]
    matrix = "links between GPUs:\n" + nvlink_matrix(inv)
    if unlinked:
        pairs = ", ".join(f"{a}-{b}" for a, b in unlinked)
        return Check(name, False, matrix, f"GPU pairs {pairs} have no NVLink: their traffic goes over PCIe, "
                                          f"so choose --gpus among linked GPUs for timings that mean something")
    return Check(name, True, matrix)


def _multicast_check(env: dict[str, str]) -> Check:
    wanted = " ".join(f"{k}={v}" for k, v in NO_MULTICAST.items())
    set_here = [f"{k}={env[k]}" for k in NO_MULTICAST if k in env]
    shell = f"your shell has {', '.join(set_here)}" if set_here else "they are unset in your shell"
    return Check("NVLink multicast off", True,
                 f"cuco sets {wanted} for every process it starts, whatever the shell says ({shell})")


# --- Python packages and the agent ------------------------------------------------------------


def _package_check(module: str, dist: str, used_for: str) -> Check:
    try:
        importlib.import_module(module)
    except Exception as exc:
        return Check(f"python: {module}", False, f"cannot be imported: {_one_line(exc)}",
                     f"`pip install {dist}` (needed for {used_for})")
    try:
        version = importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        version = "version unknown"
    return Check(f"python: {module}", True, f"{version} ({used_for})")


def _api_key_check(env: dict[str, str]) -> Check:
    if env.get("ANTHROPIC_API_KEY", "").strip():
        return Check("ANTHROPIC_API_KEY", True, "set: the Claude agent can be used")
    return Check("ANTHROPIC_API_KEY", False, "not set: the offline agent is used instead of Claude",
                 "export ANTHROPIC_API_KEY to let Claude propose candidates")


# --- a Slurm cluster (for --executor slurm) -------------------------------------------------

SLURM_ONLY = "only needed to run a search's evaluations as Slurm jobs (--executor slurm)"


def slurm_checks(env: dict[str, str]) -> list[Check]:
    """The Slurm settings file, and the cluster as sinfo reports it: one line per partition
    (nodes up, GPUs per node, time limit). Never essential: local searches need none of it."""
    from cuco_tui.executors.slurm_client import SlurmClient
    from cuco_tui.executors.slurm_settings import SlurmSettings, SlurmSettingsError, config_path, load_settings
    from cuco_tui.executors.slurm_types import SlurmError, SlurmNotInstalled

    path, _ = config_path(None, env)
    try:
        settings = load_settings(None, env)
        found = path is not None and path.is_file()
        checks = [Check("Slurm settings", True, f"{path}: {settings.summary()}" if found else
                        f"no {path} (optional): --executor slurm uses the cluster's default partition unless "
                        "--partition names one")]
    except SlurmSettingsError as exc:
        settings = SlurmSettings()
        checks = [Check("Slurm settings", False, str(exc), f"fix {path} (its keys are listed in the README)")]
    client = SlurmClient(env={**{k: env[k] for k in ("SLURM_CONF",) if k in env}, **settings.env()}, timeout_s=15)
    try:
        info = client.cluster()
    except SlurmNotInstalled:
        return checks + [Check("Slurm", False, "sinfo is not on PATH: this machine is no node of a Slurm cluster",
                               f"run the search on a login node of your cluster ({SLURM_ONLY})")]
    except SlurmError as exc:
        return checks + [Check("Slurm", False, str(exc), SLURM_ONLY)]
    checks.append(Check("Slurm", True, f"{len(info.partitions)} partition(s): {info.names()}"))
    for p in info.partitions:
        detail = (f"{p.nodes_up} of {len(p.nodes)} node(s) up, {p.gpus_per_node} GPU(s) per node, "
                  f"time limit {p.time_limit}" + ("" if p.available else ", partition down"))
        fix = ""
        if not p.gpus_per_node:
            fix = "no GPUs Slurm knows of (gres/gpu) here: evaluations need a partition with GPUs"
        elif not p.available or not p.nodes_up:
            fix = "no node can take jobs now: ask the cluster's admins, or use another partition"
        ok = p.available and p.nodes_up > 0 and p.gpus_per_node > 0
        checks.append(Check(f"partition {p.name}" + (" (default)" if p.default else ""), ok, detail, fix))
    if settings.partition and info.partition(settings.partition) is None:
        checks.append(Check("Slurm settings' partition", False, f"{settings.partition} is not a partition of this "
                            f"cluster ({info.names()})", f"name one of them in {path}"))
    return checks


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
