"""The two all-gather patterns whose blocks are not the ranks' rows (patterns.py has the rows' one):

- all-gather along K → matmul: each rank holds x [M, K/W], a slice of the reduction dim; the ranks'
  slices are gathered side by side (all_gather into a list, then torch.cat(dim=1)), or the slice is
  transposed first and gathered into a tensor that holds A^T [K, M] (all_gather_into_tensor of
  x.t().contiguous()), then one matmul with a whole weight [K, N] (or nn.Linear's [N, K]); with the
  transposed spelling the program may compute C^T = B^T A^T and return its transpose.
- matmul → all-gather along dim 1: y_r = x [M, K] @ b_r [K, N/W], then all_gather of the ranks'
  outputs into a list, concatenated along dim 1 (every rank ends with y [M, N]).

A recognizer returns None when the trace is not built this way (the next one tries), else a Match,
mapped or saying why not. Pure Python over JSON: no torch here."""

from __future__ import annotations

from typing import Any

from cuco_tui.workload.program.trace_graph import (ANY_MATMUL, COPY, MATMUL, Graph, Match, contiguous, epilogue,
                                                   finish, matmul_operands, numel)

CAT = "aten::cat"


def _cat_of(g: Graph, values: list[int], dims: tuple[int, ...]) -> int | None:
    """The op that concatenates exactly `values`, in order, along one of `dims`."""
    for j in g.readers(values[0]):
        op = g.ops[j]
        if op["name"] == CAT and [r["value"] for r in op["reads"]] == values and \
                op.get("scalars", {}).get("dim", 0) in dims:
            return j
    return None


def _transposed_input(g: Graph, src: dict[str, Any]) -> tuple[int | None, int | None]:
    """(input, copy op) when `src` is a contiguous copy of a whole 2-D program input read transposed
    (`x.t().contiguous()`), else (None, None)."""
    k = g.writer.get(src["value"])
    if k is None or g.ops[k]["name"] not in COPY or len(g.ops[k]["writes"]) != 1:
        return None, None
    read = g.ops[k]["reads"][-1]
    i = g.input_of.get(read["value"])
    if i is None:
        return None, None
    inp = g.inputs[i]
    if len(inp["shape"]) == 2 and contiguous(inp) and read["offset"] == inp["offset"] and \
            read["shape"] == inp["shape"][::-1] and read["stride"] == inp["stride"][::-1]:
        return i, k
    return None, None


def _flip(layout: str) -> str:
    return {"as_is": "transposed", "transposed": "as_is"}.get(layout, layout)


def allgather_k_matmul(g: Graph, k: int, world: int) -> Match | None:
    op = g.ops[k]
    src = op["inputs"][0] if op["inputs"] else None
    if src is None or len(src["shape"]) != 2:
        return None
    used = {k}
    if len(op["writes"]) > 1:  # all_gather into a list, then cat along dim 1
        cat = _cat_of(g, [w["value"] for w in op["writes"]], (1, -1))
        if cat is None:
            return None
        used.add(cat)
        gathered, rows_k = g.ops[cat]["writes"][0]["value"], False
        x, problem = g.whole_input(src), ""
        m, k_local = src["shape"]
    else:  # the slice transposed, gathered into a tensor: A^T [K, M], the ranks' K blocks stacked
        out = op["writes"][0]
        x, copy = _transposed_input(g, src)
        if x is None or numel(out["shape"]) != world * numel(src["shape"]) or not contiguous(out):
            return None
        used.add(copy)
        gathered, rows_k, problem = out["value"], True, ""
        k_local, m = src["shape"]
    kk = world * k_local
    mms = [j for j in g.readers(gathered) if g.ops[j]["name"] in MATMUL]
    if not mms:
        if any(g.ops[j]["name"] in ANY_MATMUL and g.reaches({gathered}, j) for j in range(len(g.ops))):
            return Match("allgather_k_matmul", "all-gather along K → matmul",
                         problem="the matmul does not read the gathered K blocks directly as a 2-D matrix")
        return None
    j = mms[0]
    a, b, bias = matmul_operands(g.ops[j])
    reads = lambda d, shape, stride: d["value"] == gathered and d["offset"] == 0 and \
        d["shape"] == shape and d["stride"] == stride  # noqa: E731
    if reads(a, [m, kk], [kk, 1]) and not rows_k:  # A [M, K] @ B
        (w, layout), out_t = g.weight(b), False
    elif reads(a, [m, kk], [1, m]) and rows_k:  # (A^T)^T @ B
        (w, layout), out_t = g.weight(b), False
    elif reads(b, [kk, m], [m, 1]) and rows_k:  # C^T = B^T @ A^T; the program returns C^T transposed
        (w, layout), out_t = g.weight(a), True
        layout = _flip(layout)
    else:
        return Match("allgather_k_matmul", "all-gather along K → matmul",
                     problem="the matmul reads the gathered K blocks in a layout other than [M, K]")
    desc = f"all-gather along K → {'linear' if layout == 'transposed' else 'matmul'}"
    roles: dict[str, Any] = {"x": x, "b": w, "b_layout": layout}
    if x is None:
        problem = "the gathered slice is computed inside solution, not one of its inputs"
    elif w is None:
        problem = f"the weight: {layout}"
    used.add(j)
    value, epi, stop = epilogue(g, g.ops[j]["writes"][0], used)
    if bias is not None or epi:
        problem = problem or "an epilogue after the matmul (a bias, a residual or an activation): not mapped for a " \
                              "K-gathered matmul yet"
    problem = problem or (f"after the matmul, solution runs {stop}" if stop else "") or \
        finish(g, value, used, roles, "matmul")
    if not problem and out_t:
        out = g.outputs[roles["output"]]
        if out["shape"] != [m, g.ops[j]["writes"][0]["shape"][0]]:
            problem = "solution returns C^T without transposing it back"
    return Match("allgather_k_matmul", desc, roles, problem)


def matmul_allgather(g: Graph, k: int, world: int) -> Match | None:
    op = g.ops[k]
    src = op["inputs"][0] if op["inputs"] else None
    producer = g.writer.get(src["value"]) if src is not None else None
    if producer is None or g.ops[producer]["name"] not in ANY_MATMUL or len(op["writes"]) < 2:
        return None
    cat = _cat_of(g, [w["value"] for w in op["writes"]], (1, -1))
    if cat is None:
        return None
    desc = "matmul → all-gather along dim 1"
    mm = g.ops[producer]
    if mm["name"] not in MATMUL:
        return Match("matmul_allgather", desc, problem=f"a batched matmul ({mm['name']}) before the all-gather")
    a, b, bias = matmul_operands(mm)
    roles: dict[str, Any] = {"x": g.whole_input(a)}
    w, layout = g.weight(b)
    roles["b"], roles["b_layout"] = w, layout
    if layout == "transposed":
        desc = "linear → all-gather along dim 1"
    problem = ""
    if roles["x"] is None:
        problem = "the matmul's left operand is not one of solution's inputs, read whole"
    elif w is None:
        problem = f"the weight: {layout}"
    elif bias is not None or numel(src["shape"]) != numel(mm["writes"][0]["shape"]):
        problem = "the all-gather gathers more than the matmul's plain product"
    used = {producer, k, cat}
    value, epi, stop = epilogue(g, g.ops[cat]["writes"][0], used)
    if epi:
        problem = problem or "an epilogue after the all-gather (a bias, a residual or an activation): not mapped yet"
    problem = problem or (f"after the all-gather, solution runs {stop}" if stop else "") or \
        finish(g, value, used, roles, "all-gather")
    return Match("matmul_allgather", desc, roles, problem)
