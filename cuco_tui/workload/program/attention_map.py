"""An attention pattern (all-gather of K/V → attention, or Ulysses' all-to-all → attention →
all-to-all) mapped onto cp_attention: which of solution's inputs are q, k and v, which axis of each
holds the sequence, the batch, the heads and the head dim, and whether the mask is causal.

Programs write attention in too many ways (sdpa or matmul-softmax-matmul, masks built from aranges or
is_causal, heads repeated for GQA, the sequence traded for heads) for the trace to say all of that.
The float64 run does: a mapping holds when, at every verify shape and on every rank, the program's
output is cp_attention's function of the mapped buffers, o = softmax(q K^T / sqrt(D) + mask) V over
the keys of the whole sequence in rank order (query head h reading KV head h / (H/HKV), the batch
folded into the heads, the causal mask by global position), to float64 rounding. Whatever the
program does to get there, cp_attention's seed and templates then compute the same thing.
Pure NumPy over the run's files: no torch here."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from typing import Any

from cuco_tui.workload.program.layout import BufferMap, Layout, uniform_bf16

ATTENTION_PATTERNS = ("allgather_attention", "alltoall_attention")  # mapped onto cp_attention
# The program's layouts of an attention tensor: name -> the program's axis at each of the buffer's
# axes [S/W, (B,) heads, D]. The batch is folded into the heads: [S/W, B, H, D] is [S/W, B*H, D].
KINDS = {3: {"[S/W, H, D]": (0, 1, 2), "[H, S/W, D]": (1, 0, 2)},
         4: {"[B, S/W, H, D]": (1, 0, 2, 3), "[B, H, S/W, D]": (2, 0, 1, 3)}}
CHECK_RTOL = 1e-8  # float64 against float64: only the order of the sums differs
MAX_D = 256  # the largest head dim cuDNN's fused attention takes on Hopper
TOP_LEFT = 2  # a causal mask aligned top-left (is_causal=True over the gathered keys): not cp_attention's
TOP_LEFT_WHY = ("its causal mask is aligned top-left: the query at row i of a rank's chunk sees keys 0..i of the "
                "whole sequence (sdpa's is_causal=True over the gathered keys), not the keys up to its own global "
                "position r*S/W + i; cp_attention's candidates mask by global position (attn_mask from the rank's "
                "offset), so they cannot give this result (checked on the float64 run)")
NOT_ATTENTION = ("its result is not softmax(q k^T / sqrt(D) + mask) v over the whole sequence's keys in rank order "
                 "(causal by global position or not, grouped heads h -> h / (H/HKV)) for any assignment of its "
                 "inputs to q, k, v in the layouts " + ", ".join(k for kinds in KINDS.values() for k in kinds) +
                 " (checked on the float64 run at every verify shape)")


@dataclass(frozen=True)
class _Guess:
    q: int
    k: int
    v: int
    kind_in: str  # a KINDS name for q, k and v
    kind_out: str  # and for o
    causal: int


def _folded(shape: list[int], kind: str) -> tuple[int, int, int, int]:
    """(rows, batch, heads, D) of a program shape read in layout `kind`."""
    held = [int(shape[a]) for a in KINDS[len(shape)][kind]]
    return (held[0], held[1], held[2], held[3]) if len(held) == 4 else (held[0], 1, held[1], held[2])


def _shapes_fit(g: _Guess, ins: list[list[int]], out: list[int]) -> bool:
    q, k, v = (_folded(ins[i], g.kind_in) for i in (g.q, g.k, g.v))
    if k != v or q[0] != k[0] or q[1] != k[1] or q[3] != k[3] or q[2] % k[2]:
        return False
    return len(out) in KINDS and g.kind_out in KINDS[len(out)] and _folded(out, g.kind_out) == q


def _guesses(ins: list[list[int]], out: list[int]) -> list[_Guess]:
    """Every assignment whose shapes fit, q, k, v in the program's order first."""
    if len({len(s) for s in ins}) != 1 or len(ins[0]) not in KINDS or len(out) not in KINDS:
        return []
    found = []
    for qi, ki, vi in itertools.permutations(range(3)):
        for kind_in in KINDS[len(ins[0])]:
            for kind_out in KINDS[len(out)]:
                for causal in (0, 1):
                    g = _Guess(qi, ki, vi, kind_in, kind_out, causal)
                    if _shapes_fit(g, ins, out):
                        found.append(g)
    return found


def _held(array: Any, kind: str) -> Any:
    """A program array as [rows, B*heads, D] (the cp_attention buffer's memory)."""
    import numpy as np

    t = np.transpose(array, KINDS[array.ndim][kind])
    return t.reshape(t.shape[0], -1, t.shape[-1])


def cp_attention(q: Any, k_all: Any, v_all: Any, rank: int, causal: int) -> Any:
    """cp_attention's function in float64: q [S/W, H, D] of `rank`, k_all, v_all [S, HKV, D]. A
    head at a time: the scores of every head at once of a large verify shape would not fit."""
    import numpy as np

    sl, heads, d = q.shape
    group = heads // k_all.shape[1]
    hidden = None
    if causal:
        # 2: aligned top-left, query i seeing keys 0..i of the whole sequence (a diagnosis only)
        pos = (0 if causal == TOP_LEFT else rank * sl) + np.arange(sl)
        hidden = np.arange(k_all.shape[0])[None, :] > pos[:, None]
    out = np.empty(q.shape, dtype=np.float64)
    for h in range(heads):  # query head h reads KV head h / group
        scores = q[:, h] @ k_all[:, h // group].T / math.sqrt(d)
        if hidden is not None:
            scores[hidden] = -np.inf
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        out[:, h] = (scores / scores.sum(axis=-1, keepdims=True)) @ v_all[:, h // group]
    return out


def _holds(g: _Guess, run: Any, n_shapes: int, world: int) -> bool:
    import numpy as np

    for i in range(n_shapes):
        ks = np.concatenate([_held(run.input(i, r, g.k), g.kind_in) for r in range(world)])
        vs = np.concatenate([_held(run.input(i, r, g.v), g.kind_in) for r in range(world)])
        for r in range(world):
            want = _held(run.output(i, r, 0), g.kind_out)
            got = cp_attention(_held(run.input(i, r, g.q), g.kind_in), ks, vs, r, g.causal)
            if not agrees(got, want):
                return False
    return True


def agrees(got: Any, want: Any) -> bool:
    """Equal to float64 rounding, every element finite (a NaN compares false, so it fails here)."""
    import numpy as np

    scale = float(np.abs(want).max()) if want.size and np.all(np.isfinite(want)) else 0.0
    return scale > 0 and bool(np.all(np.abs(got - want) <= CHECK_RTOL * scale))


AMBIGUOUS = ("make_inputs' values do not tell the mapping apart: {n} ways of reading the inputs as q, k, v (or "
             "the mask) give the program's result; draw them at random, as the harness's checks will")


def _derived(g: _Guess, sizes: dict[str, Any]) -> tuple[dict[str, dict[str, int]], str]:
    """cp_attention's dims (S, H, HKV, D, CAUSAL) at every shape, the same at every world size, or why not."""
    uneven = uniform_bf16(sizes, "cp_attention's seed and templates are")
    if uneven:
        return {}, uneven
    derived: dict[str, dict[str, int]] = {}
    for world, entry in sizes.items():
        for s in entry["shapes"]:
            one = s["ranks"][0]
            if not _shapes_fit(g, [sh for sh, _ in one["inputs"]], one["outputs"][0][0]):
                return {}, f"q, k, v and the output do not fit one attention at {s['shape']} (world {world})"
            rows, batch, heads, d = _folded(one["inputs"][g.q][0], g.kind_in)
            kv_heads = _folded(one["inputs"][g.k][0], g.kind_in)[2]
            dims = {"S": rows * int(world), "H": batch * heads, "HKV": batch * kv_heads, "D": d, "CAUSAL": g.causal}
            if d % 8 or d > MAX_D:
                return {}, (f"cp_attention's attention (cuDNN) takes a head dim D that is a multiple of 8 up to "
                            f"{MAX_D}; {s['shape']} has D={d}")
            if derived.setdefault(s["shape"], dims) != dims:
                return {}, f"the sequence at {s['shape']} is not split across the ranks (S/W x W changes with W)"
    return derived, ""


def attention_layout(pattern: str, sizes: dict[str, Any], run: Any, world: int,
                     n_verify: int) -> tuple[Layout | None, str]:
    """The harness layout of an attention pattern, or (None, why not). `sizes`: world -> sizing JSON;
    `run`: the float64 run (gloo_run.GlooRun) at the first `n_verify` shapes at `world` ranks."""
    first = sizes[str(world)]["shapes"][0]["ranks"][0]
    if len(first["inputs"]) != 3 or len(first["outputs"]) != 1:
        return None, (f"cp_attention's seed reads q, k, v and writes o: solution takes {len(first['inputs'])} "
                      f"input(s) and returns {len(first['outputs'])} output(s)")
    ins = [sh for sh, _ in first["inputs"]]
    guesses = _guesses(ins, first["outputs"][0][0])
    if not guesses:
        ranks = ", ".join(f"{len(s)}-D" for s in ins)
        return None, (f"its inputs ({ranks}) and output ({len(first['outputs'][0][0])}-D) are not q, k, v and o of "
                      f"one attention in the layouts " + ", ".join(k for kinds in KINDS.values() for k in kinds) +
                      " (a projection inside solution is not part of the pattern)")
    held = [g for g in guesses if _holds(g, run, n_verify, world)]
    if not held:
        top_left = [replace(g, causal=TOP_LEFT) for g in guesses if g.causal]
        if any(_holds(g, run, n_verify, world) for g in top_left):
            return None, TOP_LEFT_WHY
        return None, NOT_ATTENTION
    if len(held) > 1:
        return None, AMBIGUOUS.format(n=len(held))
    found = held[0]
    derived, why = _derived(found, sizes)
    if not derived:
        return None, why
    names = {found.q: "q", found.k: "k", found.v: "v"}

    def buffer(name: str, index: int, kind: str, ndim: int) -> BufferMap:
        axes = KINDS[ndim][kind]
        same = axes == tuple(range(ndim))
        return BufferMap(name, index, "bf16", "as_is" if same else "axes", name, () if same else axes)

    inputs = tuple(buffer(names[i], i, found.kind_in, len(ins[i])) for i in range(3))
    outputs = (buffer("o", 0, found.kind_out, len(first["outputs"][0][0])),)
    return Layout(inputs, outputs, pattern, derived), ""


def program_kind(b: BufferMap) -> str:
    """The program's layout of an attention buffer, as KINDS names it."""
    if b.layout != "axes":
        return "[S/W, H, D]"
    return next(k for kinds in KINDS.values() for k, axes in kinds.items() if axes == tuple(b.axes))


def layout_words(layout: Layout, names: list[str]) -> str:
    """"`q` = program's `query` [B, H, S/W, D], ...": each buffer as the program holds it."""
    ins = [f"`{b.name}` = program's `{names[b.index]}` {program_kind(b)}" for b in layout.inputs]
    return ", ".join(ins + [f"`o` = its output {program_kind(b)}" for b in layout.outputs])
