"""The machine a session was recorded on: its GPUs, driver, CUDA and NCCL, as the session's
root commit stores them (session.json "machine"), so a bundle says what its figures were
measured on. Plain data; evaluate/machine.py probes this machine for it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class MachineInfo:
    gpus: tuple[str, ...] = ()  # each GPU's name, in index order; () without a GPU
    driver: str = ""  # the NVIDIA driver's version, "" when none answered
    cuda_driver: str = ""  # the CUDA version the driver supports, e.g. "13.0"
    cuda_toolkit: str = ""  # nvcc's release, e.g. "13.0.48"
    nccl: str = ""  # the NCCL the candidates are built against, e.g. "2.28.9"
    problem: str = ""  # why no GPU was listed, in plain words
    extra: dict[str, Any] = field(default_factory=dict)  # what a newer probe adds

    def gpu_summary(self) -> str:
        """"2 x NVIDIA H200", "NVIDIA H100, NVIDIA A100" or "no GPU"."""
        if not self.gpus:
            return "no GPU"
        names = list(dict.fromkeys(self.gpus))
        if len(names) == 1:
            return f"{len(self.gpus)} x {names[0]}" if len(self.gpus) > 1 else names[0]
        return ", ".join(self.gpus)

    def describe(self) -> str:
        """One line: GPUs, driver, CUDA, NCCL (the parts known)."""
        parts = [self.gpu_summary()]
        if self.driver:
            parts.append(f"driver {self.driver}")
        cuda = self.cuda_toolkit or self.cuda_driver
        if cuda:
            parts.append(f"CUDA {cuda}")
        if self.nccl:
            parts.append(f"NCCL {self.nccl}")
        return " · ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["gpus"] = list(self.gpus)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "MachineInfo":
        """From to_dict()'s output; keys this version does not know go to `extra`."""
        known = {"gpus", "driver", "cuda_driver", "cuda_toolkit", "nccl", "problem"}
        values = {k: v for k, v in d.items() if k in known}
        extra = {**dict(d.get("extra") or {}), **{k: v for k, v in d.items() if k not in known | {"extra"}}}
        return cls(**{**values, "gpus": tuple(str(g) for g in values.get("gpus", ()))}, extra=extra)
