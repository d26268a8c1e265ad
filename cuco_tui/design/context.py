"""The backend-conditioned context an agent gets with a design point: facts about this
machine's GPUs (read at run time, every probe guarded so a machine without a GPU gets a clear
"no GPU" record), the rules every candidate follows, and notes on the API and the strategies
of the point's backend.

The generic notes are Markdown files under `assets/design/` (one per backend, with an `## API`
and a `## Strategy` section, plus `common.md`): APIs, mechanisms and hardware figures that hold
for any workload. What belongs to one workload (its baseline, its measured figures, what worked
on it) lives in that workload's `design/` folder and reaches only its own prompts. Measured
figures are written down from docs/performance.md; nothing here reads that record at run time.
"""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from cuco_tui.toolchain.toolchain import Toolchain, discover, nccl_version
from cuco_tui.design.space import BACKENDS, DEVICE_BACKENDS, Capabilities, DesignError, DesignPoint, violations
from cuco_tui.harness.gpus import GpuInventory, inventory as read_inventory

__all__ = [
    "NOTES_DIR",
    "NvLink",
    "HardwareFacts",
    "hardware_facts",
    "capabilities_from",
    "common_notes",
    "api_notes",
    "strategy_notes",
    "design_context",
    "workload_notes",
]

NOTES_DIR = Path(__file__).resolve().parents[2] / "assets" / "design"

_GIN_ONE_HOST = ("GIN (GPU-initiated networking) moves data between hosts through an RDMA NIC; every GPU of "
                 "this group is in this one host and reaches its peers over NVLink (the LSA team), so NCCL "
                 "reports no GIN here")
_GIN_NO_GPU = ("this machine has no GPU; GIN (GPU-initiated networking) moves data between hosts through an "
               "RDMA NIC and is never available to a group on one host")
_NVSHMEM_NOT_BUILT = ("the harness builds candidates without relocatable device code, links only NCCL and "
                      "cuBLAS, and cuco_runtime.cuh has no NVSHMEM bootstrap")


# ---------------------------------------------------------------------------- hardware


@dataclass(frozen=True)
class NvLink:
    """Active NVLink links between two GPUs (by NVML index), as the lower-numbered one counts them."""

    a: int
    b: int
    links: int


@dataclass(frozen=True)
class HardwareFacts:
    """What an agent should know about the machine its candidates run on."""

    gpu_model: str = ""  # e.g. "NVIDIA H200"; "A, B" when the GPUs differ; "" without GPUs
    gpu_count: int = 0
    sm_count: int | None = None  # per GPU, from CuPy; None where it cannot be read
    memory_mib: int | None = None  # per GPU (the smallest)
    nvlinks: tuple[NvLink, ...] = ()  # one entry per pair of GPUs, 0 links included
    driver: str = ""
    nccl_version: str = ""  # of the headers candidates compile against, e.g. "2.28.9"
    nvcc_version: str = ""
    gin: bool = False
    gin_reason: str = ""
    nvshmem: bool = False
    nvshmem_reason: str = ""
    problem: str = ""  # why no GPU can be used here ("" when at least one can)

    @property
    def has_gpu(self) -> bool:
        return self.gpu_count > 0

    def links(self, a: int, b: int) -> int:
        lo, hi = min(a, b), max(a, b)
        return next((p.links for p in self.nvlinks if (p.a, p.b) == (lo, hi)), 0)

    def all_linked(self, gpus: Iterable[int]) -> bool:
        """Whether every pair of these GPUs has NVLink between them."""
        chosen = sorted(set(gpus))
        return all(self.links(a, b) > 0 for i, a in enumerate(chosen) for b in chosen[i + 1:])

    def render(self) -> str:
        """The hardware section of the design context (Markdown)."""
        out = ["## Hardware"]
        if not self.has_gpu:
            out.append(f"- No GPU: {self.problem or 'none was found'}. Candidates can be checked and compiled "
                       f"here, not run; timings come from a GPU host.")
        else:
            sms = f", {self.sm_count} SMs" if self.sm_count else ", SM count unknown"
            mem = f", {self.memory_mib / 1024:.0f} GiB" if self.memory_mib else ""
            out.append(f"- GPUs: {self.gpu_count} x {self.gpu_model}{sms}{mem} each; "
                       f"driver {self.driver or 'unknown'}")
            if self.gpu_count > 1:
                linked = [f"{p.a}-{p.b}: {p.links}" for p in self.nvlinks if p.links]
                unlinked = [f"{p.a}-{p.b}" for p in self.nvlinks if not p.links]
                if linked:
                    out.append("- NVLink links between GPUs: " + ", ".join(linked))
                if unlinked:
                    out.append("- No NVLink between " + ", ".join(unlinked) + ": that traffic goes over PCIe")
        out.append(f"- NCCL {self.nccl_version or 'version unknown'} (the headers candidates compile against)"
                   + (f"; {self.nvcc_version}" if self.nvcc_version else ""))
        out.append(f"- GIN: {'available' if self.gin else 'not available'}"
                   + (f": {self.gin_reason}" if self.gin_reason else ""))
        out.append(f"- NVSHMEM: {'available' if self.nvshmem else 'not available'}"
                   + (f": {self.nvshmem_reason}" if self.nvshmem_reason else ""))
        out.append("- NVLink multicast (NVLS) is off in every process the harness starts")
        return "\n".join(out)


def hardware_facts(inventory: GpuInventory | None = None, toolchain: Toolchain | None = None) -> HardwareFacts:
    """Read this machine: GPUs and NVLink through NVML, SM count through CuPy, the NCCL version
    from the toolchain's headers. Never raises: what cannot be read stays empty or None, and a
    machine without a usable GPU gets `problem` saying why. `inventory` (a GpuInventory) and
    `toolchain` (a Toolchain) replace the probes, for tests and for callers that have them."""
    inv = inventory if inventory is not None else _inventory()
    tc = toolchain if toolchain is not None else _toolchain()
    nccl = _nccl_version(tc)
    nvcc = _short_nvcc(tc.nvcc_version) if tc is not None else ""
    nvshmem, nvshmem_reason = False, _nvshmem_reason()
    gpus = inv.gpus
    if not gpus:
        return HardwareFacts(nccl_version=nccl, nvcc_version=nvcc, gin=False, gin_reason=_GIN_NO_GPU,
                             nvshmem=nvshmem, nvshmem_reason=nvshmem_reason, driver=inv.driver,
                             problem=inv.problem or "no GPU was found")
    names = sorted({g.name for g in gpus})
    model = names[0] if len(names) == 1 else ", ".join(names)
    pairs = []
    for i, a in enumerate(gpus):
        for b in gpus[i + 1:]:
            links = a.nvlink_peers.get(b.index) or b.nvlink_peers.get(a.index) or 0
            pairs.append(NvLink(min(a.index, b.index), max(a.index, b.index), int(links)))
    sm = next((g.sm_count for g in gpus if g.sm_count), None)
    if sm is None and len(names) == 1:
        sm = _sm_count()
    return HardwareFacts(
        gpu_model=model,
        gpu_count=len(gpus),
        sm_count=sm,
        memory_mib=min(g.memory_mib for g in gpus),
        nvlinks=tuple(pairs),
        driver=inv.driver,
        nccl_version=nccl,
        nvcc_version=nvcc,
        gin=False,
        gin_reason=_GIN_ONE_HOST,
        nvshmem=nvshmem,
        nvshmem_reason=nvshmem_reason,
    )


def _inventory() -> GpuInventory:
    try:
        return read_inventory()
    except Exception as exc:  # an NVML failure inventory() did not expect
        return GpuInventory((), problem=f"NVML failed: {_one_line(exc)}")


def _toolchain() -> Toolchain | None:
    try:
        return discover()
    except Exception:  # a toolchain probe that failed in a way discover() did not expect
        return None


def _nccl_version(tc: Toolchain | None) -> str:
    include = tc.nccl.include if tc is not None else None
    if include is None:
        return ""
    return nccl_version(include)


def _short_nvcc(text: str) -> str:
    m = re.search(r"release ([\d.]+), V([\d.]+)", text)
    return f"CUDA {m.group(1)} (nvcc {m.group(2)})" if m else text


def _sm_count() -> int | None:
    """Streaming multiprocessors of GPU 0 of the CUDA runtime (the caller asks only when every
    GPU is of one model); None when it cannot tell. A device attribute: no context is made."""
    if os.environ.get("CUCO_NO_GPU") == "1":
        return None
    try:
        import cupy

        runtime = cupy.cuda.runtime
        if int(runtime.getDeviceCount()) < 1:
            return None
        return int(runtime.deviceGetAttribute(runtime.cudaDevAttrMultiProcessorCount, 0))
    except Exception:  # no CuPy, no driver, no device
        return None


def _nvshmem_reason() -> str:
    try:
        spec = importlib.util.find_spec("nvidia.nvshmem")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        return f"its package is installed, but {_NVSHMEM_NOT_BUILT}"
    return f"not installed, and {_NVSHMEM_NOT_BUILT}"


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def capabilities_from(facts: HardwareFacts, world: int, gpus: Iterable[int] | None = None) -> Capabilities:
    """What a group of `world` ranks on these GPUs (default: the first `world`) can use. LSA
    needs every pair of the group linked by NVLink. Without a GPU nothing can be observed and
    nothing runs here, so LSA is left allowed: candidates can still be compiled."""
    if not facts.has_gpu:
        return Capabilities(gin=False, nvshmem=facts.nvshmem, lsa=True, world=world)
    chosen = sorted(set(gpus)) if gpus is not None else list(range(min(world, facts.gpu_count)))
    lsa = len(chosen) >= world and facts.all_linked(chosen)
    return Capabilities(gin=facts.gin, nvshmem=facts.nvshmem, lsa=lsa, world=world)


# ---------------------------------------------------------------------------- notes


def _notes_file(name: str) -> str:
    path = NOTES_DIR / f"{name}.md"
    try:
        return path.read_text()
    except OSError as exc:
        raise FileNotFoundError(f"the design notes {path} cannot be read ({exc.strerror or exc}); they ship with "
                                f"the project under assets/design/") from exc


def _check_backend(backend: str) -> None:
    if backend not in BACKENDS:
        raise DesignError(f"unknown backend `{backend}`: use one of {', '.join(BACKENDS)}")


def _section(text: str, heading: str, path: str) -> str:
    """The body under `## {heading}` up to the next `## ` heading."""
    body: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("## "):
            if body is not None:
                break
            if line[3:].strip().lower() == heading.lower():
                body = []
            continue
        if body is not None:
            body.append(line)
    if body is None:
        raise ValueError(f"{path} has no `## {heading}` section")
    return "\n".join(body).strip()


def common_notes() -> str:
    """The rules every candidate follows, whatever its backend."""
    text = _notes_file("common")
    lines = text.strip().splitlines()
    return "\n".join(lines[1:] if lines and lines[0].startswith("# ") else lines).strip()


def api_notes(backend: str) -> str:
    """What a candidate of this backend calls: cuco_runtime.cuh helpers and the library API."""
    _check_backend(backend)
    return _section(_notes_file(backend), "API", f"assets/design/{backend}.md")


def strategy_notes(backend: str) -> str:
    """How this backend has been and can be used, with what was measured on the GPU host."""
    _check_backend(backend)
    return _section(_notes_file(backend), "Strategy", f"assets/design/{backend}.md")


def workload_notes(notes_dir: Path | None, name: str, heading: str) -> str:
    """The `## {heading}` section of a workload's own notes (`<workload>/design/{name}.md`), or ""
    when the workload ships none: facts about one workload's baseline, measurements and
    strategies live beside it, so they reach no other workload's prompts."""
    if notes_dir is None:
        return ""
    path = Path(notes_dir) / f"{name}.md"
    if not path.is_file():
        return ""
    try:
        text = path.read_text()
    except OSError as exc:
        raise FileNotFoundError(f"the workload notes {path} cannot be read ({exc.strerror or exc})") from exc
    try:
        return _section(text, heading, str(path))
    except ValueError:
        return ""


def _title(backend: str) -> str:
    first = _notes_file(backend).strip().splitlines()[0]
    return first[2:].strip() if first.startswith("# ") else backend


# ---------------------------------------------------------------------------- the context


def _nearest(point: DesignPoint, backend: str) -> DesignPoint:
    """`point` moved to another backend with the fewest changes the space's rules ask for."""
    q = point.with_(backend=backend)
    if backend in DEVICE_BACKENDS:
        if q.issuer == "host":
            q = q.with_(issuer="cta")
        if q.comm_sms == "0":  # SM-driven: the kernels that move data take SMs
            q = q.with_(comm_sms="all")
    else:
        q = q.with_(issuer="host", comm_sms="0")
        if q.placement == "fused" and backend == "nccl_host":
            q = q.with_(placement="interleaved")
        if q.placement == "interleaved" and q.streams == "1":
            q = q.with_(streams="2")
    if q.placement in ("interleaved", "fused") and q.chunk == "full":
        q = q.with_(chunk="shard")
    if q.sync == "per_chunk" and q.chunks_per_shard < 2:
        q = q.with_(sync="per_peer")
    return q


def design_context(point: DesignPoint, facts: HardwareFacts, world: int | None = None,
                   gpus: Iterable[int] | None = None, notes_dir: Path | None = None) -> str:
    """Markdown for an agent: the point, the hardware, the rules, the API and strategy notes of
    the point's backend, and which other backends are valid on this machine. `notes_dir` is the
    workload's own `design/` folder: its baseline (`common.md`, `## Baseline`) and what was
    learnt with this backend on it (`<backend>.md`, `## Strategy`) follow the generic notes."""
    if world is None:
        world = facts.gpu_count if facts.gpu_count >= 2 else 2
    caps = capabilities_from(facts, world, gpus)
    b = point.backend
    parts = ["## Design point", f"`{point.line()}`"]
    problems = violations(point, caps)
    if problems:
        parts.append("Not valid here: " + "; ".join(problems) + ".")
    parts += ["", facts.render(), "", "## Rules for every backend", common_notes(), ""]
    baseline = workload_notes(notes_dir, "common", "Baseline")
    if baseline:
        parts += ["## The workload's baseline", baseline, ""]
    parts += [f"## API: {_title(b)}", api_notes(b), "", f"## Strategy: {_title(b)}", strategy_notes(b), ""]
    own = workload_notes(notes_dir, b, "Strategy")
    if own:
        parts += [f"## {_title(b)} on this workload", own, ""]
    valid, invalid = [], []
    for other in BACKENDS:
        if other == b:
            continue
        q = _nearest(point, other)
        why = violations(q, caps)
        if why:
            reason = {"nccl_gin": facts.gin_reason, "nvshmem": facts.nvshmem_reason}.get(other) or why[0]
            invalid.append(f"- {other}: not here ({reason})")
        else:
            valid.append(f"- {other}, e.g. `{q.line().removeprefix('// cuco-design: ')}`")
    parts.append(f"## Other backends for {world} ranks here")
    parts += valid or ["- none"]
    parts += invalid
    return "\n".join(parts).rstrip() + "\n"
