"""This machine as a session records it (core.machine.MachineInfo): the GPUs and driver NVML
reports, the CUDA version the driver supports, nvcc's release and the NCCL headers candidates
are compiled against. Blocking (NVML, `nvcc --version`): call it where a session is created."""

from __future__ import annotations

import os
import re

from cuco_tui.core.machine import MachineInfo
from cuco_tui.harness.gpus import inventory
from cuco_tui.toolchain.toolchain import discover, nccl_version


def _cuda_driver_version() -> str:
    """"13.0" from NVML's integer (13000), "" when no driver answers or GPUs are hidden."""
    if os.environ.get("CUCO_NO_GPU") == "1":
        return ""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no driver, no package: nothing to say
        return ""
    try:
        value = int(pynvml.nvmlSystemGetCudaDriverVersion_v2())
        return f"{value // 1000}.{(value % 1000) // 10}"
    except Exception:
        return ""
    finally:
        pynvml.nvmlShutdown()


def nvcc_release(version_text: str) -> str:
    """"13.0.48" from `nvcc --version`'s "Cuda compilation tools, release 13.0, V13.0.48"; the
    "release" figure when there is no V-number; "" when neither is there."""
    m = re.search(r"V(\d+\.\d+\.\d+)", version_text)
    if m:
        return m.group(1)
    m = re.search(r"release (\d+\.\d+)", version_text)
    return m.group(1) if m else ""


def probe_machine() -> MachineInfo:
    inv = inventory()
    toolchain = discover()
    return MachineInfo(
        gpus=tuple(g.name for g in inv.gpus),
        driver=inv.driver,
        cuda_driver=_cuda_driver_version() if inv.count else "",
        cuda_toolkit=nvcc_release(toolchain.nvcc_version),
        nccl=nccl_version(toolchain.nccl.include),
        problem=inv.problem,
    )
