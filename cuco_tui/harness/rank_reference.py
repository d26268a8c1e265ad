"""The workload's reference as a rank sees it: its module, loaded from the workload's folder,
the Env it is built with, and the buffers its io_spec describes."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class Env:
    """What a workload reference sees."""

    cupy: Any
    comm: Any
    stream: Any
    world: int
    rank: int
    dims: dict[str, int]


def load_reference(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"cuco_reference_{path.parent.name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def buffers(cupy: Any, ref_module: Any, dims: dict[str, int], world: int,
            rank: int) -> tuple[dict, dict, dict, dict[str, str]]:
    """Inputs, outputs, the reference's expected outputs (uninitialized) and each buffer's dtype."""
    spec = ref_module.io_spec(dims, world, rank)
    cp = cupy
    kinds = {"bf16": cp.uint16, "f32": cp.float32, "f16": cp.uint16, "i32": cp.int32, "i64": cp.int64, "u8": cp.uint8}
    inputs = {n: cp.empty(s, dtype=kinds[d]) for n, s, d in spec["inputs"]}
    outputs = {n: cp.empty(s, dtype=kinds[d]) for n, s, d in spec["outputs"]}
    expected = {n: cp.empty(s, dtype=kinds[d]) for n, s, d in spec["outputs"]}
    dtypes = {n: d for n, _, d in spec["inputs"] + spec["outputs"]}
    return inputs, outputs, expected, dtypes
