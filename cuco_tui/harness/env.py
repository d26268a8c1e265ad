"""The environment every child process of cuco-tui gets."""

from __future__ import annotations

import os

# NVLink multicast stays off in every process we start: a program using it can take a
# shared host's GPUs out of service.
NO_MULTICAST = {
    "NCCL_NVLS_ENABLE": "0",
    "NVSHMEM_DISABLE_NVLS": "1",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
}


def child_env(extra: dict[str, str] | None = None, base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env.update(NO_MULTICAST)
    env["PYTHONUNBUFFERED"] = "1"
    if extra:
        env.update(extra)
    # After `extra`, so that no caller can turn multicast back on by accident.
    env.update(NO_MULTICAST)
    return env
