"""All-gather of a weight → matmul (FSDP, ZeRO-3) mapped onto gemm_allgather by transposition.

Rank r holds its rows of the tokens, x_r [T/W, K], and a shard of the weight in nn.Linear's layout,
w_r [N/W, K]; the shards are gathered into the whole weight and y_r = x_r @ W^T [T/W, N]. Transposed,
y_r^T [N, T/W] = AllGather(w)[N, K] @ x_r^T [K, T/W], which is gemm_allgather's y = AllGather(x) @ b
with its x the weight's shards, its b the rank's tokens transposed and its y the result transposed:
gemm_allgather's M is the program's N, its N the program's T. The buffers hold them so ("axes"
(1, 0) for b and y: the program is given the transposed views, its tokens copied into its own
layout before a call), and gemm_allgather's seed and templates compute it.

As for attention (attention_map.py), the float64 run decides: the mapping holds when at every
verify shape and on every rank the program's output is x_r @ W^T. Pure NumPy: no torch here."""

from __future__ import annotations

from typing import Any

from cuco_tui.workload.program.attention_map import AMBIGUOUS, agrees
from cuco_tui.workload.program.layout import BufferMap, Layout, uniform_bf16

DESCRIPTION = "all-gather of a weight → matmul (FSDP: the shards of an nn.Linear weight gathered, then x @ W^T)"
NOT_THIS = ""  # the program is not a weight gather: the recognizer's own reason stands


def _fits(x: list[int], w: list[int], out: list[int], world: int) -> bool:
    return len(x) == 2 and len(w) == 2 and len(out) == 2 and x[1] == w[1] and \
        [int(d) for d in out] == [int(x[0]), int(w[0]) * world]


def _holds(xi: int, run: Any, n_shapes: int, world: int) -> bool:
    import numpy as np

    wi = 1 - xi
    for i in range(n_shapes):
        whole = np.concatenate([run.input(i, r, wi) for r in range(world)])
        if not all(agrees(run.input(i, r, xi) @ whole.T, run.output(i, r, 0)) for r in range(world)):
            return False
    return True


def weight_gather_layout(sizes: dict[str, Any], run: Any, world: int, n_verify: int) -> tuple[Layout | None, str]:
    """gemm_allgather's layout of a weight-gathering matmul; (None, NOT_THIS) where the program is not
    one; (None, why) where it is one that cannot be mapped."""
    first = sizes[str(world)]["shapes"][0]["ranks"][0]
    if len(first["inputs"]) != 2 or len(first["outputs"]) != 1:
        return None, NOT_THIS
    ins, out = [sh for sh, _ in first["inputs"]], first["outputs"][0][0]
    held = [xi for xi in (0, 1) if _fits(ins[xi], ins[1 - xi], out, world) and _holds(xi, run, n_verify, world)]
    if not held:
        return None, NOT_THIS
    if len(held) > 1:
        return None, AMBIGUOUS.format(n=2).replace("q, k, v (or the mask)", "tokens and weight")
    xi = held[0]
    uneven = uniform_bf16(sizes, "gemm_allgather's seed and templates are")
    if uneven:
        return None, uneven
    derived: dict[str, dict[str, int]] = {}
    for w, entry in sizes.items():
        for s in entry["shapes"]:
            one = s["ranks"][0]
            x, wt = one["inputs"][xi][0], one["inputs"][1 - xi][0]
            dims = {"M": int(wt[0]) * int(w), "K": int(x[1]), "N": int(x[0]) * int(w)}
            if derived.setdefault(s["shape"], dims) != dims:
                what = "tokens per rank" if derived[s["shape"]]["N"] != dims["N"] else "weight's rows"
                return None, (f"the {what} at {s['shape']} are fixed per rank (their total changes with the world "
                              f"size); gemm_allgather's dims are totals: split them by the world size in make_inputs")
    inputs = (BufferMap("x", 1 - xi, "bf16", "as_is", "x"), BufferMap("b", xi, "bf16", "axes", "b", (1, 0)))
    return Layout(tuple(sorted(inputs, key=lambda b: b.index)), (BufferMap("y", 0, "bf16", "axes", "output", (1, 0)),),
                  "allgather_matmul", derived), ""
