"""Compiling a candidate .cu into a shared library the harness loads, with a build cache.

A build is keyed by the sha256 of the source bytes, the nvcc flags and the toolchain's
fingerprint; the cache keeps `<key>.so` and `<key>.json` (the BuildResult without the library
path). Failed builds are cached too, so a candidate that does not compile gives its diagnostics
back at once the second time. Every file lands by os.replace from a temporary name in the cache
folder, so concurrent builders (several evaluations at once) never see half a file.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from cuco_tui.source.includes import included
from cuco_tui.toolchain import grouped_gemm_lib, tile_gemm_lib
from cuco_tui.toolchain.diagnostics import LEVEL, parse_nvcc_output
from cuco_tui.toolchain.process import killed, run_tool, unlink_quietly
from cuco_tui.toolchain.toolchain import Toolchain
from cuco_tui.core.result import Diagnostic

DEFAULT_ARCH = "90a"
FORMAT = 1  # bump when the cache record's layout or meaning changes

# A candidate that includes CUTLASS/CuTe (directly or through the runtime's cuco_tile_gemm.cuh)
# gets the CUTLASS include folder and the flags its headers need: -DNDEBUG (with asserts on,
# ptxas serializes the wgmma pipeline: about 2x slower) and --expt-relaxed-constexpr (CuTe calls
# constexpr host functions from device code). One such kernel configuration takes about 45 s of
# CPU in nvcc 13.0 (a 2-core machine under load: 3 min), hence its own, longer limit.
# Headers that bring CUTLASS in: its own, CuTe's, and the runtime's fused GEMM built on them.
_CUTLASS_HEADERS = ("cutlass/", "cute/", "cuco_tile_gemm.cuh")
CUTLASS_FLAGS = ("-DNDEBUG", "--expt-relaxed-constexpr")
CUTLASS_TIMEOUT = 900.0


# What cuco_runtime.cuh includes only for a candidate that names it (the first three pull in
# libcu++, about 2.5 s of nvcc per compile each; the driver API is cheap, but the CPU emulator has
# no <cuda.h>): the define that asks for it, and the names that need it. A name in a comment or a
# string counts too: it costs a few seconds, where a name missed fails the build.
RUNTIME_OPTIONS = (
    ("CUCO_WITH_LIBCUDACXX", re.compile(r"\bcuda::|\bnamespace\s+\w+\s*=\s*(?:::)?cuda\b|"
                                        r"\busing\s+namespace\s+(?:::)?cuda\b")),
    ("CUCO_WITH_COOPERATIVE_GROUPS", re.compile(
        r"\bcooperative_groups\b|\bcg::|\b(?:this_grid|this_thread_block|this_cluster|tiled_partition|grid_group|"
        r"thread_block_tile|cluster_group|coalesced_threads)\b")),
    ("CUCO_WITH_NCCL_DEVICE", re.compile(
        r"\bnccl(?:Dev|Lsa|Gin|Team|Coop|Barrier|Multimem|Symmetric|SymPtr|LLA2A|GetLsa|GetPeer|GetLocal|GetMultimem|"
        r"GetResource|Window_vidmem)\w*|\bnccl::|\blsa_(?:devcomm|barrier)\w*")),
    ("CUCO_WITH_DRIVER_API", re.compile(
        r"\bcu(?:Stream|Mem|Event|Ctx|Device|Launch|Func|Module|Graph|Get|Init|Pointer)\w*\s*\(|"
        r"\bCU(?:stream|deviceptr|event|context|result|function|module|device)\b|\bCUDA_SUCCESS\b|"
        r"\bCU_STREAM_\w+")),
)


def runtime_defines(source: str) -> list[str]:
    """The -D flags that make cuco_runtime.cuh include the heavy headers `source` needs."""
    return [f"-D{name}" for name, names in RUNTIME_OPTIONS if names.search(source)]


@dataclass(frozen=True)
class BuildResult:
    ok: bool
    library: Path | None  # the .so in the cache; None when the build failed
    diagnostics: list[Diagnostic]
    log: str  # nvcc's combined stdout and stderr
    seconds: float  # wall time of the compile (of the original compile, for a cache hit)
    cached: bool
    command: list[str]
    key: str

    def to_record(self) -> dict:
        d = asdict(self)
        d.pop("library")
        d.pop("cached")
        return d


def cuda_arch(env: dict[str, str] | None = None) -> str:
    """The target architecture, e.g. "90a": CUCO_CUDA_ARCH ("90a", "sm_100a", "compute_90a", "9.0a")
    or the default. Raises ValueError on something nvcc would not understand."""
    env = os.environ if env is None else env
    raw = (env.get("CUCO_CUDA_ARCH") or DEFAULT_ARCH).strip()
    arch = re.sub(r"^(?:sm_|compute_)", "", raw.lower()).replace(".", "")
    if not re.fullmatch(r"\d{2,3}[af]?", arch):
        raise ValueError(f"CUCO_CUDA_ARCH={raw!r} is not a CUDA architecture; use e.g. 90a or 100a")
    return arch


def nvcc_flags(toolchain: Toolchain) -> list[str]:
    """nvcc's flags for a candidate, everything but the source and `-o OUT`: a position-independent
    shared library for one architecture, with the runtime header, NCCL and cuBLAS.

    The CUDA runtime is linked shared (nvcc links it statically by default): a statically linked
    runtime's functions are hidden inside the candidate, and L2's schedule perturbation
    (harness/perturb_lib) must stand between the candidate and the runtime it calls."""
    arch = cuda_arch()
    flags = ["-shared", "-Xcompiler", "-fPIC", "-std=c++17", "-O3", f"-gencode=arch=compute_{arch},code=sm_{arch}",
             "-cudart", "shared"]
    includes = [toolchain.runtime_include, toolchain.nccl.include, toolchain.cublas.include]
    libs = [toolchain.nccl.lib, toolchain.cublas.lib, toolchain.cudart]
    for inc in dict.fromkeys(p for p in includes if p is not None):
        flags.append(f"-I{inc}")
    lib_dirs = list(dict.fromkeys(p for p in libs if p is not None))
    flags += [f"-L{d}" for d in lib_dirs]
    flags += [f"-l:{toolchain.nccl.soname}", f"-l:{toolchain.cublas.soname}"]
    for d in lib_dirs:
        flags += ["-Xlinker", f"-rpath={d}"]
    return flags


# cuBLASLt: a candidate that includes cublasLt.h or calls a cublasLt function links libcublasLt
# from cuBLAS's own folder (its soname is cuBLAS's with "Lt": the same release; libcublas itself
# depends on it, so wherever cuBLAS is installed whole it is there). A shared library may leave
# symbols undefined at link time, so without the flag such a candidate would build and rest on
# libcublas happening to load it.
_CUBLAS_LT_CALL = re.compile(r"\bcublasLt\w*\s*\(")


def uses_cublas_lt(source: str) -> bool:
    """Whether a candidate includes cublasLt.h or calls cuBLASLt."""
    return "cublasLt.h" in included(source) or _CUBLAS_LT_CALL.search(source) is not None


def cublas_lt_soname(toolchain: Toolchain) -> str:
    """libcublasLt.so.13 for cuBLAS's libcublas.so.13."""
    return toolchain.cublas.soname.replace("libcublas", "libcublasLt", 1)


def cublas_lt_flags(toolchain: Toolchain, source: str) -> list[str]:
    """The flag that links cuBLASLt for a candidate that uses it (its folder, cuBLAS's, is already
    on nvcc_flags' -L and rpath); [] for the others."""
    return [f"-l:{cublas_lt_soname(toolchain)}"] if uses_cublas_lt(source) else []


def cublas_lt_problem(toolchain: Toolchain) -> str:
    """Why a cuBLASLt candidate cannot be linked here, in one line; "" when it can."""
    lt = cublas_lt_soname(toolchain)
    lib = toolchain.cublas.lib
    if lib is not None and (lib / lt).exists():
        return ""
    return (f"cannot compile: the candidate calls cuBLASLt, but {lt} is not beside {toolchain.cublas.soname} in "
            f"{lib} (reinstall nvidia-cublas or set CUCO_CUBLAS_HOME; run `cuco doctor`)")


def uses_cutlass(source: str) -> bool:
    """Whether a candidate includes CUTLASS or CuTe headers, or the runtime's CUTLASS GEMM."""
    return any(h.startswith(_CUTLASS_HEADERS) for h in included(source))


def cutlass_flags(toolchain: Toolchain) -> list[str]:
    """The flags a CUTLASS candidate adds to nvcc_flags (the toolchain must have found CUTLASS)."""
    if toolchain.cutlass is None:
        raise ValueError(toolchain.cutlass_problem or "the CUTLASS headers were not found")
    return [f"-I{toolchain.cutlass}", *CUTLASS_FLAGS]


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        unlink_quietly(Path(tmp))
        raise


class BuildCache:
    """A folder of built libraries and build records; safe to share between processes."""

    def __init__(self, root: Path | str | None = None):
        if root is None:
            root = os.environ.get("CUCO_CACHE_DIR") or Path.home() / ".cache" / "cuco-tui" / "build"
        self.root = Path(root).expanduser()

    def __repr__(self) -> str:
        return f"BuildCache({str(self.root)!r})"

    @staticmethod
    def key(source: bytes, flags: list[str] | tuple[str, ...], fingerprint: str) -> str:
        h = hashlib.sha256()
        h.update(f"cuco-build-v{FORMAT}\0".encode())
        h.update(len(source).to_bytes(8, "little"))
        h.update(source)
        for flag in flags:
            h.update(flag.encode() + b"\0")
        h.update(b"\0" + fingerprint.encode())
        return h.hexdigest()

    def library_path(self, key: str) -> Path:
        return self.root / f"{key}.so"

    def record_path(self, key: str) -> Path:
        return self.root / f"{key}.json"

    def temp_library(self, key: str) -> Path:
        """A fresh name in the cache folder for nvcc's output (same filesystem: os.replace is atomic)."""
        self.root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=f".{key[:16]}.", suffix=".so.tmp")
        os.close(fd)
        return Path(tmp)

    def load(self, key: str) -> BuildResult | None:
        """The cached build for `key` (cached=True), or None on a miss or an unreadable record."""
        try:
            record = json.loads(self.record_path(key).read_text())
            if record.get("format") != FORMAT or record.get("key") != key:
                return None
            library = self.library_path(key)
            if record["ok"] and not library.is_file():
                return None
            return BuildResult(
                ok=bool(record["ok"]),
                library=library if record["ok"] else None,
                diagnostics=[Diagnostic(**d) for d in record["diagnostics"]],
                log=record["log"],
                seconds=float(record["seconds"]),
                cached=True,
                command=list(record["command"]),
                key=key,
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def store(self, result: BuildResult, built: Path | None, source: Path | None = None) -> BuildResult:
        """Files `built` (nvcc's output, moved) and the record; returns `result` pointing at the cache."""
        self.root.mkdir(parents=True, exist_ok=True)
        library = None
        if result.ok and built is not None:
            library = self.library_path(result.key)
            os.chmod(built, 0o755)
            os.replace(built, library)  # the library first: a record always finds its .so
        record = result.to_record()
        record.update(format=FORMAT, source=str(source) if source else "", created=time.time())
        _atomic_write(self.record_path(result.key), json.dumps(record, indent=1).encode())
        return BuildResult(result.ok, library, result.diagnostics, result.log, result.seconds, False,
                           result.command, result.key)


def _failure(source: Path, message: str, code: str, command: list[str] | None = None, key: str = "",
             log: str = "", seconds: float = 0.0) -> BuildResult:
    diag = Diagnostic(level=LEVEL, severity="error", message=message, file=source.name, code=code)
    return BuildResult(False, None, [diag], log, seconds, False, command or [], key)


def _relabel(result: BuildResult, source: Path, old: str) -> BuildResult:
    """A cached result recorded for the same bytes at another path, named after `source`."""
    if not old or old == str(source):
        return result
    old_path = Path(old)

    def fix(text: str) -> str:
        return text.replace(old, str(source))

    diags = [
        Diagnostic(**{**asdict(d), "file": source.name if d.file == old_path.name else d.file,
                      "message": fix(d.message)})
        for d in result.diagnostics
    ]
    return BuildResult(result.ok, result.library, diags, fix(result.log), result.seconds, result.cached,
                       result.command, result.key)


def gemm_library_flags(toolchain: Toolchain) -> list[str]:
    """What the fused and grouped GEMM libraries are compiled with, before their own additions: a CUTLASS
    candidate's flags. Raises ValueError where there is no CUTLASS or the architecture is bad."""
    return nvcc_flags(toolchain) + cutlass_flags(toolchain)


def ensure_gemm_library(config: tile_gemm_lib.TiledConfig, toolchain: Toolchain,
                        cache: BuildCache | None = None) -> tile_gemm_lib.GemmLibrary:
    """The library of `config` (a fused GEMM's KernelConfig or a grouped GEMM's GroupedConfig),
    built now if `cache` (default: BuildCache()) lacks it: what a candidate that names `config`
    would link (benchmarks/runs/prebuild.py builds them ahead)."""
    try:
        base = gemm_library_flags(toolchain)
    except ValueError as e:
        return tile_gemm_lib.GemmLibrary(config, None, f"cannot build the {config.LABEL} library of {config.name}: {e}")
    return tile_gemm_lib.ensure_library(config, toolchain, cache if cache is not None else BuildCache(), base,
                                        CUTLASS_TIMEOUT)


def gemm_libraries_named(text: str) -> tuple[tuple[tile_gemm_lib.TiledConfig, ...], str]:
    """(the prebuilt GEMM libraries `text` links: the fused GEMM's configurations where it includes
    cuco_tile_gemm_lib.h, the grouped GEMM's where it includes cuco_grouped_gemm_lib.h; the first
    configuration it names that has no library, as a sentence, or "")."""
    configs: list[tile_gemm_lib.TiledConfig] = []
    if tile_gemm_lib.uses_library(text):
        named, unknown = tile_gemm_lib.configs_named(text)
        if unknown:
            return (), (f"{unknown[0]} has no fused GEMM library ({tile_gemm_lib.HEADER}): tiles 128x256 or 256x128, "
                        f"clusters 2x1 or 1x2")
        configs += named
    if grouped_gemm_lib.uses_library(text):
        named, unknown = grouped_gemm_lib.configs_named(text)
        if unknown:
            return (), f"{unknown[0]} has no grouped GEMM library ({grouped_gemm_lib.HEADER}): {grouped_gemm_lib.KNOWN}"
        configs += named
    return tuple(configs), ""


def _link_gemm_libraries(source: Path, text: str, toolchain: Toolchain,
                         cache: BuildCache) -> tuple[list[str], float] | BuildResult:
    """(the flags that link the prebuilt fused and grouped GEMM libraries `text` names, seconds
    spent building them now), or the failure to report: a configuration without a library, no
    CUTLASS to build one from, or a library that did not build (one line each)."""
    configs, unknown = gemm_libraries_named(text)
    if unknown:
        return _failure(source, unknown, "toolchain")
    if toolchain.cutlass is None:
        header = tile_gemm_lib.HEADER if tile_gemm_lib.uses_library(text) else grouped_gemm_lib.HEADER
        return _failure(source, f"cannot compile: the candidate includes {header}, whose library is built "
                                f"from CUTLASS, but {toolchain.cutlass_problem} (run `cuco doctor`)", "toolchain")
    try:
        base = gemm_library_flags(toolchain)
    except ValueError as e:
        return _failure(source, str(e), "toolchain")
    libraries = tile_gemm_lib.ensure_libraries(configs, toolchain, cache, base, CUTLASS_TIMEOUT)
    failed = next((lib for lib in libraries if not lib.ok), None)
    if failed is not None:
        return _failure(source, failed.problem, "timeout" if failed.timed_out else "toolchain", log=failed.log,
                        seconds=failed.seconds)
    return tile_gemm_lib.link_flags(libraries), sum(lib.seconds for lib in libraries if not lib.cached)


def compile_candidate(source: Path, toolchain: Toolchain, cache: BuildCache | None = None,
                      extra_flags: tuple[str, ...] = (), timeout: float = 300.0) -> BuildResult:
    """Builds `source` into a shared library in `cache` (default: BuildCache()), or returns the
    cached build. Never raises for a bad candidate or toolchain: problems come back as error
    Diagnostics (codes: nvcc, ptxas, link, host-compiler, toolchain, timeout, killed, source). A
    candidate that includes CUTLASS gets cutlass_flags() and at least CUTLASS_TIMEOUT seconds; one
    that includes cuco_tile_gemm_lib.h or cuco_grouped_gemm_lib.h is linked against the fused or
    grouped GEMM libraries it names, built first where the cache lacks them (tile_gemm_lib.py,
    grouped_gemm_lib.py)."""
    source = Path(source).absolute()
    if not toolchain.can_compile:
        problems = "; ".join(toolchain.problems) or "the CUDA toolchain is incomplete"
        return _failure(source, f"cannot compile: {problems} (run `cuco doctor`)", "toolchain")
    try:
        data = source.read_bytes()
    except OSError as e:
        return _failure(source, f"cannot read the candidate: {e.strerror or e}", "source")
    fingerprint = toolchain.fingerprint()
    text = data.decode("utf-8", errors="replace")
    try:
        flags = nvcc_flags(toolchain) + runtime_defines(text)
        if uses_cublas_lt(text):
            if problem := cublas_lt_problem(toolchain):
                return _failure(source, problem, "toolchain")
            flags += cublas_lt_flags(toolchain, text)
        if uses_cutlass(text):
            if toolchain.cutlass is None:
                return _failure(source, f"cannot compile: the candidate includes CUTLASS, but {toolchain.cutlass_problem} "
                                        f"(run `cuco doctor`)", "toolchain")
            flags += cutlass_flags(toolchain)
            fingerprint += toolchain.cutlass_fingerprint()
            timeout = max(timeout, CUTLASS_TIMEOUT)
        flags += list(extra_flags)
    except ValueError as e:
        return _failure(source, str(e), "toolchain")
    cache = cache if cache is not None else BuildCache()
    libraries_seconds = 0.0
    if tile_gemm_lib.uses_library(text) or grouped_gemm_lib.uses_library(text):
        linked = _link_gemm_libraries(source, text, toolchain, cache)
        if isinstance(linked, BuildResult):
            return linked
        link, libraries_seconds = linked
        flags += link  # the libraries' file names, hence their keys, are part of the candidate's key
    key = cache.key(data, flags, fingerprint)

    hit = cache.load(key)
    if hit is not None:
        try:
            old = json.loads(cache.record_path(key).read_text()).get("source", "")
        except (OSError, ValueError):
            old = ""
        return _relabel(hit, source, old)

    try:
        tmp = cache.temp_library(key)
    except OSError as e:
        return _failure(source, f"cannot write to the build cache {cache.root}: {e.strerror or e}", "toolchain")
    command = [str(toolchain.nvcc), *flags, str(source), "-o", str(tmp)]
    recorded = command[:-1] + [str(cache.library_path(key))]  # what a person would run to rebuild it
    started = time.monotonic()
    try:
        rc, log = run_tool(command, source.parent, timeout)
    except OSError as e:
        unlink_quietly(tmp)
        return _failure(source, f"cannot run nvcc ({toolchain.nvcc}): {e.strerror or e}", "toolchain", recorded, key)
    seconds = time.monotonic() - started + libraries_seconds

    if rc is None:
        unlink_quietly(tmp)
        return _failure(source, f"nvcc did not finish within {timeout:.0f} s and was stopped", "timeout", recorded,
                        key, log, seconds)  # not cached: a slow machine may do better next time

    if killed(rc, log):  # no verdict on the source: not cached, the same source may well compile next time
        unlink_quietly(tmp)
        how = f"nvcc was killed (signal {-rc})" if rc < 0 else "a compiler nvcc started was killed"
        return _failure(source, f"{how} before it finished", "killed", recorded, key, log, seconds)

    ok = rc == 0 and tmp.is_file() and tmp.stat().st_size > 0
    diagnostics = parse_nvcc_output(log, source, source.name, failed=not ok)
    if rc == 0 and not ok:
        diagnostics.append(Diagnostic(level=LEVEL, severity="error", file=source.name, code="nvcc",
                                      message="nvcc reported success but wrote no library"))
    result = BuildResult(ok, None, diagnostics, log, seconds, False, recorded, key)
    try:
        return cache.store(result, tmp if ok else None, source)
    except OSError as e:
        diag = Diagnostic(level=LEVEL, severity="error", file=source.name, code="toolchain",
                          message=f"cannot write to the build cache {cache.root}: {e.strerror or e}")
        return BuildResult(False, None, diagnostics + [diag], log, seconds, False, recorded, key)
    finally:
        unlink_quietly(tmp)
