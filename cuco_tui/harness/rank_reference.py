"""The workload's reference in a rank: the buffers its io_spec describes, allocated with CuPy on the
rank's device (core/reference.py holds the reference's protocol, its loader and the Env it is
built with)."""

from __future__ import annotations

from typing import Any

from cuco_tui.core.reference import IoSpec


def buffers(cupy: Any, spec: IoSpec) -> tuple[dict, dict, dict, dict[str, str]]:
    """Inputs, outputs, the reference's expected outputs (uninitialized) and each buffer's dtype."""
    cp = cupy
    kinds = {"bf16": cp.uint16, "f32": cp.float32, "f16": cp.uint16, "i32": cp.int32, "i64": cp.int64, "u8": cp.uint8}
    inputs = {b.name: cp.empty(b.shape, dtype=kinds[b.dtype]) for b in spec.inputs}
    outputs = {b.name: cp.empty(b.shape, dtype=kinds[b.dtype]) for b in spec.outputs}
    expected = {b.name: cp.empty(b.shape, dtype=kinds[b.dtype]) for b in spec.outputs}
    return inputs, outputs, expected, spec.dtypes
