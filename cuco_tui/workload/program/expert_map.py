"""Expert parallelism with static routing (all-to-all → per-expert matmuls → all-to-all) mapped onto a
host-driven seed: which of solution's two inputs are the tokens and the experts' weights, in which
layout the weights are held, and how the arrived rows are grouped by expert.

The function (what GShard-style dispatch with a fixed capacity computes): rank r holds tokens
x [T, H] whose rows j*T/W .. (j+1)*T/W - 1 go to rank j, and EL = E/W local experts w [EL, H, F]
(or nn.Linear's [EL, F, H]). An equal-split all-to-all gives `arrived` [T, H] (source i's block at
rows i*T/W); viewed as [G, EL, T/(G*EL), H], local expert e multiplies the rows [:, e]:
  G = 1 ("by rank"): expert e takes arrived rows e*T/EL .. (e+1)*T/EL - 1, whoever sent them;
  G = W ("by source", BY_SOURCE = 1): each source's block is cut into EL equal parts, one per expert.
The products go back by the inverse all-to-all: y [T, F], row block j coming from rank j.
The float64 run decides, as for attention (attention_map.py): a mapping holds when, at every verify
shape and on every rank, the program's output is this function of the mapped buffers. Routing that
depends on the data (top-k, sorting, counts exchanged) is another function and stays unmapped.
Pure NumPy over the run's files: no torch here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cuco_tui.workload.program.attention_map import AMBIGUOUS, agrees
from cuco_tui.workload.program.layout import BufferMap, Layout, uniform_bf16

WEIGHT_LAYOUTS = {"[EL, H, F]": (0, 1, 2), "[EL, F, H]": (0, 2, 1)}  # the program's axis at each of w's axes
NOT_STATIC = ("its result is not the static-routing expert layer (tokens' row block j sent to rank j by an "
              "equal-split all-to-all, the arrived rows multiplied by the local experts in equal groups, by rank "
              "or by source, and sent back) for any assignment of its inputs to tokens [T, H] and weights "
              "[EL, H, F] or [EL, F, H] (checked on the float64 run at every verify shape); routing that depends "
              "on the data is not mapped")


@dataclass(frozen=True)
class _Guess:
    x: int
    w: int
    w_layout: str  # a WEIGHT_LAYOUTS name
    by_source: int  # 1: G = W groups, else 1


def _weights(shape: list[int], layout: str) -> tuple[int, int, int]:
    """(EL, H, F) of a weight shape read in `layout`."""
    el, a, b = (int(shape[i]) for i in WEIGHT_LAYOUTS[layout])
    return el, a, b


def _fits(g: _Guess, ins: list[list[int]], out: list[int], world: int) -> bool:
    x, w = ins[g.x], ins[g.w]
    if len(x) != 2 or len(w) != 3 or len(out) != 2:
        return False
    el, h, f = _weights(w, g.w_layout)
    t = int(x[0])
    groups = world if g.by_source else 1
    return int(x[1]) == h and [int(d) for d in out] == [t, f] and t % world == 0 and t % (groups * el) == 0


def static_experts(xs: list[Any], ws: list[Any], by_source: int) -> list[Any]:
    """y of every rank in float64: xs [T, H] and ws [EL, H, F] of every rank."""
    import numpy as np

    world = len(xs)
    t, h = xs[0].shape
    el, _, f = ws[0].shape
    blk, groups = t // world, world if by_source else 1
    outs = []
    for j in range(world):
        arrived = np.concatenate([x[j * blk:(j + 1) * blk] for x in xs])
        grouped = arrived.reshape(groups, el, t // (groups * el), h)
        outs.append(np.matmul(grouped, ws[j][None]).reshape(t, f))
    return [np.concatenate([o[j * blk:(j + 1) * blk] for o in outs]) for j in range(world)]


def _holds(g: _Guess, run: Any, n_shapes: int, world: int) -> bool:
    import numpy as np

    order = WEIGHT_LAYOUTS[g.w_layout]
    for i in range(n_shapes):
        xs = [run.input(i, r, g.x) for r in range(world)]
        ws = [np.transpose(run.input(i, r, g.w), order) for r in range(world)]
        got = static_experts(xs, ws, g.by_source)
        if not all(agrees(got[r], run.output(i, r, 0)) for r in range(world)):
            return False
    return True


def _derived(g: _Guess, sizes: dict[str, Any]) -> tuple[dict[str, dict[str, int]], str]:
    uneven = uniform_bf16(sizes, "the seed is")
    if uneven:
        return {}, uneven
    derived: dict[str, dict[str, int]] = {}
    for world, entry in sizes.items():
        for s in entry["shapes"]:
            one = s["ranks"][0]
            ins = [sh for sh, _ in one["inputs"]]
            if not _fits(g, ins, one["outputs"][0][0], int(world)):
                return {}, f"the tokens, weights and output do not fit the expert layer at {s['shape']} (world {world})"
            el, h, f = _weights(ins[g.w], g.w_layout)
            dims = {"T": int(ins[g.x][0]), "H": h, "F": f, "E": el * int(world), "BY_SOURCE": g.by_source}
            was = derived.setdefault(s["shape"], dims)
            if was != dims:
                what = "tokens per rank (T)" if was["T"] != dims["T"] else "experts (E/W x W)"
                return {}, f"the {what} at {s['shape']} change with the world size"
    return derived, ""


def experts_layout(sizes: dict[str, Any], run: Any, world: int, n_verify: int) -> tuple[Layout | None, str]:
    """The harness layout of a static-routing expert layer, or (None, why not)."""
    first = sizes[str(world)]["shapes"][0]["ranks"][0]
    if len(first["inputs"]) != 2 or len(first["outputs"]) != 1:
        return None, (f"the expert seed reads tokens and weights and writes one output: solution takes "
                      f"{len(first['inputs'])} input(s) and returns {len(first['outputs'])} output(s) (a router or a "
                      f"second projection inside the layer is not mapped)")
    ins = [sh for sh, _ in first["inputs"]]
    guesses = [_Guess(x, 1 - x, lay, by) for x in (0, 1) for lay in WEIGHT_LAYOUTS for by in (0, 1)
               if _fits(_Guess(x, 1 - x, lay, by), ins, first["outputs"][0][0], world)]
    if not guesses:
        return None, (f"its inputs ({', '.join(f'{len(s)}-D' for s in ins)}) and output "
                      f"({len(first['outputs'][0][0])}-D) are not tokens [T, H], weights [EL, H, F] or [EL, F, H] "
                      f"and y [T, F] that split by the world size and the local experts")
    held = [g for g in guesses if _holds(g, run, n_verify, world)]
    if not held:
        return None, NOT_STATIC
    if len({(g.x, g.w_layout) for g in held}) > 1:
        return None, AMBIGUOUS.format(n=len(held)).replace("q, k, v (or the mask)", "tokens and weights")
    # Both groupings hold where each rank has one expert: the same function there. It is the same at
    # every world size when each rank has one expert at all of them; else the import cannot tell.
    one_each = all(int(sh["ranks"][0]["inputs"][held[0].w][0][0]) == 1 for e in sizes.values() for sh in e["shapes"])
    if len(held) > 1 and not one_each:
        return None, (f"at world {world} each rank holds one expert, so the float64 run cannot tell whether the "
                      f"arrived rows are grouped by rank or by source: import at a world size where each rank "
                      f"holds two experts or more")
    found = held[0]
    derived, why = _derived(found, sizes)
    if not derived:
        return None, why
    axes = WEIGHT_LAYOUTS[found.w_layout]
    x = BufferMap("x", found.x, "bf16", "as_is", "x")
    w = BufferMap("w", found.w, "bf16", "as_is", "w") if axes == (0, 1, 2) else \
        BufferMap("w", found.w, "bf16", "axes", "w", axes)
    return Layout(tuple(sorted((x, w), key=lambda b: b.index)), (BufferMap("y", 0, "bf16", "as_is", "output"),),
                  "alltoall_experts", derived), ""


def layout_words(layout: Layout, names: list[str]) -> str:
    w = next(b for b in layout.inputs if b.name == "w")
    x = next(b for b in layout.inputs if b.name == "x")
    held = "[EL, F, H] (nn.Linear's; given to candidates as [EL, H, F])" if w.layout == "axes" else "[EL, H, F]"
    return f"`x` = program's `{names[x.index]}` [T, H], `w` = program's `{names[w.index]}` {held}, `y` = its output [T, F]"
