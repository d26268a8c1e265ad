"""The fused GEMM of cuco_tile_gemm.cuh prebuilt: one shared library per kernel configuration, built
once per machine and cached, linked into every candidate that includes cuco_tile_gemm_lib.h.

CUTLASS's templates take 45 s of CPU per configuration in nvcc (minutes on a busy 2-core
machine), although only the tile and the cluster change the kernel: every other knob of a fused
candidate (chunks, mover, tile order, fanout) is a value its launcher reads at run time. So the
kernel and its launcher are compiled here, once per configuration, into
`libcuco_tile_gemm-<BMxBN>-<CMxCN>-<key>.so` in the build cache, keyed by the runtime headers and
the library's source, the CUTLASS headers (folder and version), the nvcc version, the flags and
the configuration; a candidate includes the thin header (no CUTLASS) and is linked against the
libraries of the configurations it names, with an rpath to the cache so the rank worker's loader
finds them. The candidate's own build key holds the libraries' file names, hence their keys.

One build per configuration at a time, machine-wide: a file lock per configuration, as the
attention library has; different configurations build side by side. A failed build comes back as
one line; a compiler error is recorded (the same sources fail again), a timeout or a killed
compiler is not (a less busy machine may do better).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from cuco_tui.source.includes import included
from cuco_tui.source.lexer import SourceText
from cuco_tui.toolchain.process import install_library, killed, record_failure, run_tool, unlink_quietly
from cuco_tui.toolchain.toolchain import Toolchain

if TYPE_CHECKING:
    from cuco_tui.toolchain.nvcc import BuildCache

SOURCE = Path(__file__).resolve().parent.parent / "harness" / "tile_gemm_lib" / "cuco_tile_gemm_lib.cu"
HEADER = "cuco_tile_gemm_lib.h"
_ERROR_LINE = re.compile(r"\berror\b", re.I)


@dataclass(frozen=True, order=True)
class TiledConfig:
    """One prebuilt library's kernel configuration: a CTA tile block_m x block_n (x 64 along K) and a
    cluster cluster_m x cluster_n. A subclass says which library (the fused GEMM's KernelConfig
    here, the grouped GEMM's in grouped_gemm_lib.py); the build, its cache key, its lock and its
    messages below take all they need from it."""

    LABEL: ClassVar[str]  # in messages: "the <LABEL> library of <name>"
    STEM: ClassVar[str]  # file names lib<STEM>-<tag>-<key>.so, <STEM>-<tag>.lock; entry <STEM>_<BMxBN>_<CMxCN>
    SOURCE: ClassVar[Path]
    SALT: ClassVar[bytes]  # of the key: a library's format version
    MACRO: ClassVar[str]  # the library source's -D prefix (CUCO_TG: -DCUCO_TG_BLOCK_M=...)
    WRITTEN: ClassVar[str]  # how a candidate names the type (tg::KernelConfig)

    block_m: int
    block_n: int
    cluster_m: int
    cluster_n: int

    @property
    def name(self) -> str:
        return f"{self.block_m}x{self.block_n} tiles, {self.cluster_m}x{self.cluster_n} clusters"

    @property
    def tag(self) -> str:
        return f"{self.block_m}x{self.block_n}-{self.cluster_m}x{self.cluster_n}"

    @property
    def entry(self) -> str:
        """The library's one exported function, as its header declares it."""
        return f"{self.STEM}_{self.block_m}x{self.block_n}_{self.cluster_m}x{self.cluster_n}"

    def defines(self) -> list[str]:
        m = self.MACRO
        return [f"-D{m}_BLOCK_M={self.block_m}", f"-D{m}_BLOCK_N={self.block_n}",
                f"-D{m}_CLUSTER_M={self.cluster_m}", f"-D{m}_CLUSTER_N={self.cluster_n}", f"-D{m}_ENTRY={self.entry}"]


def named_configs(source: str, kind: type[TiledConfig], known: tuple[TiledConfig, ...]
                  ) -> tuple[tuple[TiledConfig, ...], list[str]]:
    """(the configurations of `kind` to link, the ones written that have no library, as written). Those
    written as `<Type>{BM, BN, CM, CN}` (or with parentheses) with literal numbers, outside comments;
    every known configuration when the source writes none so (it computes one: any may be asked for
    at run time)."""
    word = kind.WRITTEN.split("::")[-1]
    pattern = re.compile(rf"\b{word}\b[^;{{}}()]*?[{{(]\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*[}})]")
    named, unknown = [], []
    for m in pattern.finditer(SourceText(source).code):
        config = kind(*(int(g) for g in m.groups()))
        if config in known:
            named.append(config)
        else:
            unknown.append(f"{kind.WRITTEN}{{{', '.join(m.groups())}}}")
    if not named and not unknown:
        return known, []
    return tuple(sorted(set(named))), list(dict.fromkeys(unknown))


@dataclass(frozen=True, order=True)
class KernelConfig(TiledConfig):
    """The fused GEMM's (tile_gemm::KernelConfig)."""

    LABEL: ClassVar[str] = "fused GEMM"
    STEM: ClassVar[str] = "cuco_tile_gemm"
    SOURCE: ClassVar[Path] = SOURCE
    SALT: ClassVar[bytes] = b"cuco-tile-gemm-lib-v1\0"
    MACRO: ClassVar[str] = "CUCO_TG"
    WRITTEN: ClassVar[str] = "tg::KernelConfig"


# The configurations a library exists for (cuco_tile_gemm_lib.h declares their entry points).
CONFIGS = tuple(KernelConfig(bm, bn, cm, cn) for bm, bn in ((128, 256), (256, 128)) for cm, cn in ((2, 1), (1, 2)))


def uses_library(source: str) -> bool:
    """Whether a candidate includes the prebuilt fused GEMM's header."""
    return HEADER in included(source)


def configs_named(source: str) -> tuple[tuple[KernelConfig, ...], list[str]]:
    """named_configs of the fused GEMM (`tg::KernelConfig{BM, BN, CM, CN}`)."""
    return named_configs(source, KernelConfig, CONFIGS)


@dataclass(frozen=True)
class GemmLibrary:
    """The built library of one configuration, or why there is none (one line)."""

    config: TiledConfig
    path: Path | None
    problem: str = ""
    log: str = ""  # nvcc's output of a failed build (its tail)
    seconds: float = 0.0  # of the build that made it
    cached: bool = False
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.path is not None


def build_flags(config: TiledConfig, base: list[str]) -> list[str]:
    """The library's nvcc flags, its soname aside: a CUTLASS candidate's (`base`: architecture,
    includes, the shared CUDA runtime) with every symbol hidden but the entry point (none of the
    runtime's inline functions clashes with a candidate's own copies) and the configuration's
    defines."""
    return [*base, "-Xcompiler", "-fvisibility=hidden,-fvisibility-inlines-hidden", *config.defines()]


def library_path(config: TiledConfig, toolchain: Toolchain, cache: BuildCache, base: list[str]) -> Path:
    """Where the library of `config` built by this toolchain lives in `cache` (built or not)."""
    h = hashlib.sha256(config.SALT)
    for path in [config.SOURCE, *toolchain.runtime_headers()]:
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    h.update(f"{toolchain.cutlass_fingerprint()}|{toolchain.nvcc_version}|{' '.join(build_flags(config, base))}".encode())
    return cache.root / f"lib{config.STEM}-{config.tag}-{h.hexdigest()[:24]}.so"


def _first_error(log: str) -> str:
    """The line of nvcc's output a person reads first: its first error, else its last line."""
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    line = next((ln for ln in lines if _ERROR_LINE.search(ln)), lines[-1] if lines else "no output")
    return line if len(line) <= 400 else line[:397] + "..."


def ensure_library(config: TiledConfig, toolchain: Toolchain, cache: BuildCache, base: list[str],
                   timeout: float) -> GemmLibrary:
    """The library of `config`, built now if the cache lacks it. Never raises: a failed build comes
    back in `problem`. Concurrent callers of one configuration (evaluations, a build pool, other
    processes) wait on its file lock, and one of them builds."""
    if toolchain.nvcc is None:
        return GemmLibrary(config, None, f"nvcc was not found: the {config.LABEL} library is compiled with it")
    path = library_path(config, toolchain, cache, base)
    record = path.with_suffix(".json")
    try:
        cache.root.mkdir(parents=True, exist_ok=True)
        with open(cache.root / f"{config.STEM}-{config.tag}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            recorded = _recorded(record)
            if path.is_file():
                seconds = recorded.get("seconds")
                return GemmLibrary(config, path, seconds=float(seconds) if isinstance(seconds, (int, float)) else 0.0,
                                   cached=True)
            if recorded.get("failed"):  # the same sources, CUTLASS and compiler failed before: not again
                return GemmLibrary(config, None, str(recorded["failed"]), str(recorded.get("log", "")), cached=True)
            return _build(config, toolchain, cache, base, timeout, path, record)
    except OSError as exc:
        return GemmLibrary(config, None, f"cannot build the {config.LABEL} library of {config.name} in {cache.root}: "
                                         f"{exc.strerror or exc}")


def _build(config: TiledConfig, toolchain: Toolchain, cache: BuildCache, base: list[str], timeout: float,
           path: Path, record: Path) -> GemmLibrary:
    tmp = cache.temp_library(f"{config.STEM}-{config.tag}")
    flags = build_flags(config, base) + ["-Xlinker", f"-soname={path.name}"]  # what a candidate records as needed
    command = [str(toolchain.nvcc), *flags, str(config.SOURCE), "-o", str(tmp)]
    started = time.monotonic()
    try:
        rc, log = run_tool(command, config.SOURCE.parent, timeout)
    except OSError as exc:
        unlink_quietly(tmp)
        return GemmLibrary(config, None, f"cannot run nvcc ({toolchain.nvcc}) for the {config.LABEL} library of "
                                         f"{config.name}: {exc.strerror or exc}")
    seconds = time.monotonic() - started
    recorded = command[:-1] + [str(path)]
    if rc == 0 and tmp.is_file() and tmp.stat().st_size > 0:
        install_library(tmp, path, record, {"seconds": seconds, "command": recorded, "config": config.tag})
        return GemmLibrary(config, path, seconds=seconds)
    unlink_quietly(tmp)
    tail = "\n".join(log.strip().splitlines()[-40:])
    if rc is None:
        return GemmLibrary(config, None, f"building the {config.LABEL} library of {config.name} did not finish within "
                                         f"{timeout:.0f} s and was stopped", tail, seconds, timed_out=True)
    if killed(rc, log):
        problem = f"building the {config.LABEL} library of {config.name} was killed after {seconds:.0f} s"
    else:
        problem = (f"building the {config.LABEL} library of {config.name} failed after {seconds:.0f} s "
                   f"(nvcc exit {rc}): {_first_error(log)}")
    record_failure(record, rc, log, {"failed": problem, "log": tail, "command": recorded})
    return GemmLibrary(config, None, problem, tail, seconds)


def ensure_libraries(configs: tuple[TiledConfig, ...], toolchain: Toolchain, cache: BuildCache, base: list[str],
                     timeout: float) -> list[GemmLibrary]:
    """ensure_library for each configuration, side by side (each is one long nvcc, mostly on one core)."""
    if len(configs) <= 1:
        return [ensure_library(c, toolchain, cache, base, timeout) for c in configs]
    with ThreadPoolExecutor(len(configs), thread_name_prefix="cuco-gemm-lib") as pool:
        return list(pool.map(lambda c: ensure_library(c, toolchain, cache, base, timeout), configs))


def link_flags(libraries: list[GemmLibrary]) -> list[str]:
    """A candidate's flags to link `libraries` (all built) and find them at run time. Linked even
    where the linker drops unneeded libraries by default (--as-needed): the header's references
    to the entry points are weak, and weak references alone would not keep a library. The folder
    resolved: a Slurm job finds the cache by its resolved path, and must find the same key."""
    folders = list(dict.fromkeys(lib.path.parent.resolve() for lib in libraries if lib.path is not None))
    flags = ["-Xlinker", "--no-as-needed", *[f"-L{d}" for d in folders]]
    flags += [f"-l:{lib.path.name}" for lib in libraries if lib.path is not None]
    for d in folders:
        flags += ["-Xlinker", f"-rpath={d}"]
    return flags


def _recorded(record: Path) -> dict:
    try:
        data = json.loads(record.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}
