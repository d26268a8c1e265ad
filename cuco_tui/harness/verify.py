"""Comparing a candidate's output with the reference, element by element.

Works on NumPy and CuPy arrays alike (`xp`). Outputs are poisoned before each run with a
NaN whose bit pattern no arithmetic produces, so elements left unwritten are told apart
from NaNs the candidate computed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from cuco_tui.harness.bf16 import from_bf16_bits

# A bf16 NaN (exponent all ones, mantissa 0x25): hardware and cuBLAS produce 0x7FC0/0x7FFF.
POISON_BF16 = 0x7FA5
# The float32 counterpart, for workloads with f32 outputs.
POISON_F32 = 0x7FA5A5A5
# Every output dtype a manifest may name (core/workload.py DTYPES): the word its buffer is poisoned
# through and the poison. f16 gets a NaN no arithmetic makes; the integers a value an answer is
# unlikely to hold (an imported program's counts or indices), counted as unwritten where it stays.
POISONS = {"bf16": ("uint16", POISON_BF16), "f32": ("uint32", POISON_F32), "f16": ("uint16", 0x7DA5),
           "i32": ("int32", 0x7FA5A5A5), "i64": ("int64", 0x7FA5A5A5A5A5A5A5), "u8": ("uint8", 0xA5)}
INTEGERS = ("i32", "i64", "u8")


@dataclass(frozen=True)
class Comparison:
    elements: int
    unwritten: int
    nonfinite: int
    max_rel_error: float
    sum_sq_diff: float
    sum_sq_ref: float
    worst_index: tuple[int, ...]
    worst_got: float
    worst_want: float
    floor: float = 0.0

    @property
    def l2_rel_error(self) -> float:
        """||got - want|| / ||want||."""
        if self.sum_sq_ref > 0:
            return float(np.sqrt(self.sum_sq_diff / self.sum_sq_ref))
        return 0.0 if self.sum_sq_diff == 0 else float("inf")

    def passed(self, rtol: float) -> bool:
        ok = self.unwritten == 0 and self.nonfinite == 0 and self.max_rel_error <= rtol
        # A floor loosens the element test where the output is small; the norm test keeps
        # errors spread over many small elements (a dropped chunk, a shifted mask) in view.
        return ok and (self.floor == 0 or self.l2_rel_error <= rtol)


def poison(xp: Any, array: Any, dtype: str) -> None:
    if dtype not in POISONS:
        raise ValueError(f"cannot poison outputs of dtype {dtype}")
    word, value = POISONS[dtype]
    array.view(getattr(xp, word)).fill(value)


def unwritten_count(xp: Any, array: Any, dtype: str, want: Any = None) -> int:
    """Elements still holding the poison; where `want` holds that very value too (an integer
    output may: u8's poison is 165), they count as written."""
    word, value = POISONS[dtype]
    left = array.view(getattr(xp, word)) == value
    if want is not None and dtype in INTEGERS:  # a float poison is a NaN no answer holds
        same = (want == value) if want.dtype == xp.float64 else (want.view(getattr(xp, word)) == value)
        left = left & ~same
    return int(left.sum())


def as_float(xp: Any, array: Any, dtype: str) -> Any:
    if dtype == "bf16":
        return from_bf16_bits(xp, array.view(xp.uint16))
    if dtype == "f16":
        return array.view(xp.float16).astype(xp.float32)
    if dtype == "f32":
        return array.astype(xp.float32, copy=False)
    if dtype in INTEGERS:
        return array.astype(xp.float64)
    raise ValueError(f"cannot compare outputs of dtype {dtype}")


def compare(xp: Any, got: Any, want: Any, dtype: str, floor: float = 0.0) -> Comparison:
    """Relative error per element: |got - want| / (|want| + max(rms(want), floor * max|want|)).

    `floor` (a workload's `[tolerance] floor`) is for outputs that are means of many terms, like
    attention's softmax-weighted values: there most elements are far smaller than the terms they
    average, so rounding the terms (bf16 probabilities) shows as a large error relative to the
    result and to its rms. With a floor, passing also needs the relative L2 error within rtol."""
    unwritten = unwritten_count(xp, got, dtype, want)
    g = as_float(xp, got, dtype).astype(xp.float64)
    # float64 `want`: a workload's expected() (`cuco workload check --gpu`); else a buffer like `got`
    w = want if want.dtype == xp.float64 else as_float(xp, want, dtype).astype(xp.float64)
    finite = xp.isfinite(g)
    nonfinite = int(g.size - int(finite.sum()))
    diff = xp.abs(xp.where(finite, g, 0.0) - w)
    rms = float(xp.sqrt(xp.mean(w * w))) if w.size else 0.0
    if floor > 0 and w.size:
        rms = max(rms, floor * float(xp.max(xp.abs(w))))
    rel = diff / (xp.abs(w) + (rms if rms > 0 else 1.0))
    if dtype in INTEGERS:  # counts and indices are right or wrong: any difference fails
        rel = xp.where(diff > 0.5, xp.inf, 0.0)
    rel = xp.where(finite, rel, xp.inf)
    flat = int(xp.argmax(rel)) if rel.size else 0
    idx = tuple(int(i) for i in np.unravel_index(flat, rel.shape)) if rel.size else ()
    return Comparison(
        elements=int(g.size),
        unwritten=unwritten,
        nonfinite=nonfinite,
        max_rel_error=float(rel.reshape(-1)[flat]) if rel.size else 0.0,
        sum_sq_diff=float(xp.sum(diff * diff)),
        sum_sq_ref=float(xp.sum(w * w)),
        worst_index=idx,
        worst_got=float(g.reshape(-1)[flat]) if g.size else 0.0,
        worst_want=float(w.reshape(-1)[flat]) if w.size else 0.0,
        floor=floor,
    )
