"""bfloat16 as raw uint16 bits, so that NumPy and CuPy (which has no bfloat16 dtype) share
one code path: `xp` is either module."""

from __future__ import annotations

from typing import Any


def to_bf16_bits(xp: Any, values: Any) -> Any:
    """Round float32 values to the nearest bfloat16 (ties to even), as uint16 bits."""
    f = xp.ascontiguousarray(values, dtype=xp.float32)
    u = f.view(xp.uint32)
    rounding = xp.uint32(0x7FFF) + ((u >> xp.uint32(16)) & xp.uint32(1))
    bits = ((u + rounding) >> xp.uint32(16)).astype(xp.uint16)
    # NaN must stay NaN: rounding could carry a NaN's payload into the infinity pattern.
    return xp.where(xp.isnan(f), xp.uint16(0x7FC0), bits)


def from_bf16_bits(xp: Any, bits: Any) -> Any:
    """Widen uint16 bfloat16 bits to float32 exactly."""
    return (bits.astype(xp.uint32) << xp.uint32(16)).view(xp.float32)

