"""The design space for communication in a co-designed kernel (CUCo's five dimensions plus two
that matter on Hopper), the coordinates a candidate declares, and the rules that make a point
valid. Knows nothing about workloads, agents or the GPU.

placement, where communication sits relative to the compute that needs it:
- before / after: all of it first (or last), then the compute, in stream order;
- interleaved: in pieces, each piece's compute launched once the piece has landed (streams and
  events or flag-wait kernels between separate compute launches);
- fused: the compute kernel itself consumes the arrivals: one (persistent) kernel whose tiles
  wait, per tile or per chunk, on arrival signals in peer-visible memory, whether the bytes are
  moved by the kernel's own threads, by a store kernel beside it, or by copy engines whose
  stream-ordered flag writes announce each chunk. Not with NCCL host collectives, which give a
  kernel nothing to wait on.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

BACKENDS = ("nccl_host", "nccl_lsa", "nccl_gin", "cuda_ipc", "copy_engine", "nvshmem")
PLACEMENTS = ("before", "interleaved", "fused", "after")
SYNCS = ("global", "per_peer", "per_chunk")
ISSUERS = ("host", "thread", "warp", "cta", "multi_cta")
# chunk: "full" (the whole tensor in one go), "shard" (one piece per peer), or pieces per shard.
CHUNKS = ("full", "shard", "2", "4", "8", "16", "32")
STREAMS = ("1", "2", "3", "4")
COMM_SMS = ("0", "2", "4", "8", "16", "32", "64", "all")

DIMENSIONS: dict[str, tuple[str, ...]] = {
    "backend": BACKENDS,
    "placement": PLACEMENTS,
    "sync": SYNCS,
    "issuer": ISSUERS,
    "chunk": CHUNKS,
    "streams": STREAMS,
    "comm_sms": COMM_SMS,
}

DEVICE_BACKENDS = ("nccl_lsa", "nccl_gin", "cuda_ipc", "nvshmem")


@dataclass(frozen=True)
class Capabilities:
    """What this machine offers; decides which points are valid here."""

    gin: bool = False  # the communicator reports GIN (needs an RDMA NIC: never on one host)
    nvshmem: bool = False
    lsa: bool = True
    world: int = 2


@dataclass(frozen=True)
class DesignPoint:
    backend: str = "nccl_host"
    placement: str = "before"
    sync: str = "global"
    issuer: str = "host"
    chunk: str = "full"
    streams: str = "1"
    comm_sms: str = "0"
    knobs: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def coords(self) -> dict[str, str]:
        return {d: getattr(self, d) for d in DIMENSIONS}

    def cell(self) -> tuple[str, ...]:
        """The MAP-Elites cell: the coordinates that define a strategy (not its tuning)."""
        return (self.backend, self.placement, self.sync, self.issuer)

    def with_(self, **changes: Any) -> "DesignPoint":
        return replace(self, **changes)

    def line(self) -> str:
        """The declaration a candidate carries as its first EVOLVE-block line."""
        return "// cuco-design: " + " ".join(f"{k}={v}" for k, v in self.coords().items())

    @property
    def chunks_per_shard(self) -> int:
        return int(self.chunk) if self.chunk.isdigit() else 1

    @property
    def device_initiated(self) -> bool:
        return self.backend in DEVICE_BACKENDS

    def to_dict(self) -> dict[str, Any]:
        return {**self.coords(), "knobs": dict(self.knobs)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "DesignPoint":
        known = {k: str(v) for k, v in d.items() if k in DIMENSIONS}
        return cls(**known, knobs=dict(d.get("knobs", {})))


class DesignError(ValueError):
    pass


def parse_design(pairs: dict[str, str]) -> DesignPoint:
    """From the `key=value` pairs of a `// cuco-design:` line; unknown values are errors."""
    values = {}
    for key, value in pairs.items():
        if key not in DIMENSIONS:
            raise DesignError(f"unknown design dimension `{key}`; the dimensions are {', '.join(DIMENSIONS)}")
        if value not in DIMENSIONS[key]:
            raise DesignError(f"`{key}={value}` is not a value of {key}: use one of {', '.join(DIMENSIONS[key])}")
        values[key] = value
    return DesignPoint(**values)


def violations(point: DesignPoint, caps: Capabilities = Capabilities()) -> list[str]:
    """Why a point is not valid (empty: valid), in sentences a person can act on."""
    out = []
    b = point.backend
    if b == "nccl_gin" and not caps.gin:
        out.append("NCCL GIN needs a communicator that reports GIN support (an RDMA NIC); this group has none")
    if b == "nvshmem" and not caps.nvshmem:
        out.append("NVSHMEM is not available here")
    if b == "nccl_lsa" and not caps.lsa:
        out.append("the ranks are not all in one LSA team (one NVLink domain)")
    if b in ("nccl_host", "copy_engine") and point.issuer != "host":
        out.append(f"{b} is issued by the host: issuer must be host")
    if point.device_initiated and point.issuer == "host":
        out.append(f"{b} is device-initiated: the issuer is a thread, warp, CTA or several CTAs, not the host")
    if b == "copy_engine" and point.comm_sms != "0":
        out.append("copy engines use no SMs: comm_sms must be 0")
    if b == "nccl_host" and point.comm_sms not in ("0", "all"):
        out.append("NCCL host collectives choose their own SMs: comm_sms must be 0 or all")
    if point.placement == "fused" and b == "nccl_host":
        out.append("communication fused into compute needs arrival signals a kernel can wait on: a device-initiated "
                   "backend, or copy engines followed by stream-ordered flag writes")
    if point.placement == "interleaved" and point.streams == "1" and not point.device_initiated:
        out.append("interleaving host-issued communication with compute needs at least 2 streams")
    if point.sync == "per_chunk" and point.chunks_per_shard < 2:
        out.append("per-chunk synchronization needs the shard split into at least 2 chunks")
    if point.chunk == "full" and point.placement in ("interleaved", "fused"):
        out.append("overlap needs the data in pieces: chunk must be shard or a count, not full")
    return out
