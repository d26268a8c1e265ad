"""What the classifier records: sites in the code, kernel launches, and the evidence for each
design dimension, with the best guess per dimension and a summary for people and agents."""

from __future__ import annotations

from dataclasses import dataclass, field

from cuco_tui.design.space import DIMENSIONS, DesignPoint


@dataclass(frozen=True)
class Site:
    """One thing seen in the code. `role`: "data" (moves the bytes), "setup" (allocates or
    registers), "signal" (posts a flag to a peer), "wait" (waits for a peer or a piece),
    "barrier" (a team-wide barrier or collective), "compute", "stream"."""

    what: str  # the call or name, e.g. "ncclGetLsaPointer", "cudaMemcpyAsync into peer memory"
    line: int  # 1-based line in the candidate
    role: str
    backend: str = ""  # the backend it belongs to, "" for compute, streams and generic waits
    where: str = "host"  # "host", or the name of the kernel or device function it sits in


@dataclass(frozen=True)
class KernelLaunch:
    """A launch `kernel<<<grid, block, smem, stream>>>(...)` (or cudaLaunch*Kernel) in host code, or
    the fused GEMM runtime's launcher (`gemm.launch(stream, e)`, kernel fused_gemm_kernel)."""

    kernel: str
    line: int
    grid: str  # as written
    block: str
    stream: str  # normalized: the last name of the expression ("stream", "copy_stream"), "default"
    grid_blocks: int | None = None  # the grid's block count when it is a literal or constant
    backend: str = ""  # what the kernel communicates with, "" for a kernel that does not
    moves_data: bool = False  # it stores or loads bulk data through peer memory
    waits: bool = False  # it waits on a flag, signal or barrier
    computes: bool = False  # it does arithmetic of its own (MMA, FMA, accumulations)
    pieces: int | None = None  # the runtime's kernels: pieces per shard it moves or waits on one at a time

    @property
    def communicates(self) -> bool:
        return bool(self.backend) or self.waits


@dataclass(frozen=True)
class Evidence:
    """What the EVOLVE blocks of a candidate show, dimension by dimension."""

    sites: tuple[Site, ...]
    launches: tuple[KernelLaunch, ...]
    backends: tuple[str, ...]  # every backend named anywhere, in BACKENDS order
    data_backends: tuple[str, ...]  # those that move the data
    streams: int  # 1 + the streams the candidate creates
    streams_exact: bool  # False when a stream is created in a loop of unknown count
    compute_streams: tuple[str, ...]
    comm_streams: tuple[str, ...]
    overlap: str  # "kernel" (one kernel communicates and computes) | "streams" | "none"
    chunking: str  # "full" | "shard" | "pieces" | "" (no host-issued transfer seen)
    chunk_count: int | None  # pieces per shard when chunking == "pieces" and the count is known
    flag_waits: int  # per-peer or per-piece waits
    chunk_waits: int  # those of them inside a loop over pieces
    barriers: int  # team barriers and host collectives
    issuer: str  # "host" | "device" | "mixed" | ""
    coop: str  # the finest device cooperation group seen: "thread" | "warp" | "cta" | "multi_cta" | ""
    comm_sms_hint: str  # a COMM_SMS value from the grid of data-moving kernels, "" if unknown
    declared: DesignPoint | None  # None when the line is missing or invalid
    declared_pairs: dict[str, str] | None = field(default=None, compare=False)
    design_error: str = ""  # why the declaration could not be read ("" when it could)

    @property
    def fused(self) -> bool:
        return self.overlap == "kernel"

    def first(self, *, backend: str | None = None, role: str | None = None) -> Site | None:
        for s in self.sites:
            if (backend is None or s.backend == backend) and (role is None or s.role == role):
                return s
        return None

    def inferred(self) -> dict[str, str]:
        """The best guess for each dimension from the code alone ("" where it says nothing)."""
        data = self.data_backends
        backend = data[0] if len(data) == 1 else ""
        if self.overlap == "kernel":
            placement = "fused"
        elif self.overlap == "streams":
            placement = "interleaved"
        else:
            placement = "before" if self.data_backends else ""
        if self.chunk_waits:
            sync = "per_chunk"
        elif self.flag_waits:
            sync = "per_peer"
        elif self.barriers:
            sync = "global"
        else:
            sync = ""
        issuer = {"host": "host", "device": self.coop or "cta"}.get(self.issuer, "")
        if self.chunking == "pieces":
            chunk = str(self.chunk_count) if str(self.chunk_count) in DIMENSIONS["chunk"] else ""
        else:
            chunk = self.chunking
        streams = str(min(self.streams, 4)) if self.streams_exact else ""
        comm_sms = "0" if self.issuer == "host" else self.comm_sms_hint
        return {"backend": backend, "placement": placement, "sync": sync, "issuer": issuer,
                "chunk": chunk, "streams": streams, "comm_sms": comm_sms}

    def summary(self) -> str:
        """A few lines for people and agents: what the code shows."""
        lines = []
        moved = ", ".join(self.data_backends) or "nothing seen"
        named = ", ".join(b for b in self.backends if b not in self.data_backends)
        lines.append(f"data moved by: {moved}" + (f" (also set up or signalled: {named})" if named else ""))
        lines.append(f"streams: {self.streams}{'' if self.streams_exact else ' or more'}; "
                     f"overlap: {_OVERLAP_WORDS[self.overlap]}")
        if self.chunking:
            pieces = f"{self.chunk_count} pieces per shard" if self.chunk_count else "pieces of unknown count"
            lines.append("chunking: " + {"full": "one transfer of everything", "shard": "one transfer per peer",
                                         "pieces": pieces}[self.chunking])
        lines.append(f"sync: {self.flag_waits} flag wait(s) ({self.chunk_waits} per piece), "
                     f"{self.barriers} barrier(s) or collective(s)")
        if self.issuer:
            lines.append(f"issued by: {self.issuer}" + (f" ({self.coop})" if self.coop else ""))
        for k in self.launches:
            if k.moves_data:
                grid = f"{k.grid_blocks} blocks" if k.grid_blocks is not None else f"grid `{k.grid}`"
                lines.append(f"comm kernel {k.kernel} (line {k.line}): {grid}, stream {k.stream}")
        return "\n".join(lines)


_OVERLAP_WORDS = {
    "kernel": "one kernel communicates and computes",
    "streams": "compute and communication on different streams",
    "none": "none (compute and communication on the same stream)",
}


# What a rule says where a declaration and the code disagree: the message, and the site it cites
# (None: the design line).
Finding = tuple[str, Site | None]


def cite(site: Site | None) -> str:
    """`ncclGetLsaPointer at line 29`."""
    if site is None:
        return ""
    return f"{site.what} at line {site.line}"
