"""What a program's trace (tracing.py: one call of `solution`, rank 0, float64 on the CPU) is made
of: the patterns the tool knows, found by following values from the collectives to the matmuls.

- all-gather → matmul (rows gathered, then mm/addmm/linear; the weight as stored, [K, N/W], or as
  nn.Linear stores it, [N/W, K]; a bias; an elementwise epilogue of residual/bias adds and unary
  activations: relu, silu, gelu, sigmoid, tanh)
- matmul → reduce-scatter (sum, rows scattered) (+ the same epilogue)
- matmul → all-reduce (sum) (+ the same epilogue); for both, the matmul's result may be copied first
- all-to-all → per-expert matmuls → all-to-all; all-to-all → attention → all-to-all (Ulysses)
- all-gather of K/V → attention
- all-gather along K → matmul, matmul → all-gather along dim 1 (gather_patterns.py)

The first three and the last two are mappable onto the harness's building blocks when every op of the
trace is part of the pattern and its operands are the program's own inputs; a Match says which input
plays which role, or why it cannot be mapped. The attention patterns are mappable onto cp_attention
when the float64 run shows the program computes its function (attention_map.py decides, and says
why not); expert parallelism when it shows a static-routing expert layer (expert_map.py). Pure
Python over JSON: no torch here."""

from __future__ import annotations

from collections import Counter
from typing import Any

from cuco_tui.workload.program.gather_patterns import allgather_k_matmul, matmul_allgather
from cuco_tui.workload.program.trace_graph import (ALLOC, ANY_MATMUL, ATTENTION, COPY, MATMUL, Graph, Match,
                                                   contiguous, epilogue, epilogue_words, finish, matmul_operands, numel,
                                                   plain, short)


def _gathered(g: Graph, k: int, world: int) -> tuple[int | None, set[int], str]:
    """The value holding all ranks' rows of an all-gather (op k), the ops that made it, or a problem."""
    op = g.ops[k]
    src = op["inputs"][0] if op["inputs"] else None
    if src is None:
        return None, {k}, "an all-gather of nothing"
    if len(op["writes"]) == 1:
        out = op["writes"][0]
        if out["shape"][0] != world * src["shape"][0] or out["shape"][1:] != src["shape"][1:] or not contiguous(out):
            return None, {k}, "the all-gather does not stack the ranks' rows (dim 0)"
        return out["value"], {k}, ""
    values = [w["value"] for w in op["writes"]]
    for j in g.readers(values[0]):
        cat = g.ops[j]
        if cat["name"] == "aten::cat" and [r["value"] for r in cat["reads"]] == values and \
                cat.get("scalars", {}).get("dim", 0) == 0:
            return cat["writes"][0]["value"], {k, j}, ""
    return None, {k}, "the gathered list is not concatenated along dim 0"


def _allgather_matmul(g: Graph, k: int, world: int) -> Match | None:
    gathered, used, problem = _gathered(g, k, world)
    src = g.ops[k]["inputs"][0] if g.ops[k]["inputs"] else None
    written = {w["value"] for w in g.ops[k]["writes"]}
    if not any(g.ops[j]["name"] in ANY_MATMUL and g.reaches(written, j) for j in range(len(g.ops))):
        return None  # a gather that feeds no matmul: not this pattern
    mm = [j for j in (g.readers(gathered) if gathered is not None else []) if g.ops[j]["name"] in MATMUL]
    if gathered is None or not mm:
        return Match("allgather_matmul", "all-gather → matmul",
                     problem=problem or "the matmul does not read the gathered rows directly as a 2-D matrix")
    j = mm[0]
    a, b, bias = matmul_operands(g.ops[j])
    roles: dict[str, Any] = {}
    desc = "all-gather → matmul"
    x = g.whole_input(src)
    if x is None:
        problem = "the gathered tensor is computed inside solution, not one of its inputs"
    elif a["value"] != gathered or a["offset"] != 0 or not contiguous(a) or len(a["shape"]) != 2:
        problem = "the matmul reads part of the gathered rows"
    roles["x"] = x
    w, layout = g.weight(b)
    desc = f"all-gather → {'linear' if layout == 'transposed' else 'matmul'}"
    if w is None and not problem:
        problem = f"the weight: {layout}"
    roles["b"], roles["b_layout"] = w, layout
    used |= {j}
    if bias is not None:
        bi = g.input_of.get(bias["value"])
        if bi is None or len(g.inputs[bi]["shape"]) != 1 or not plain(g.ops[j]):
            problem = problem or "the addmm's bias is not a 1-D input added as is"
        roles["bias"] = bi
    value, epi, stop = epilogue(g, g.ops[j]["writes"][0], used)
    if "bias" in epi and "bias" in roles:
        problem = problem or "two biases"
    steps = (["bias"] if "bias" in roles else []) + epi.pop("epilogue", [])  # the addmm's bias comes first
    roles.update(epi)
    if steps:
        roles["epilogue"] = steps
    desc += epilogue_words(steps)
    problem = problem or (f"after the matmul, solution runs {stop}" if stop else "") or \
        finish(g, value, used, roles, "matmul")
    return Match("allgather_matmul", desc, roles, problem)


def _through_copies(g: Graph, read: dict[str, Any]) -> tuple[int | None, set[int]]:
    """The op that made the value `read` reads, looking through copies of a whole value into the whole
    of it (clone, copy_: `C = C_local.clone()` before an in-place all-reduce), and the copies."""
    copies: set[int] = set()
    k = g.writer.get(read["value"])
    while k is not None and g.ops[k]["name"] in COPY:
        op = g.ops[k]
        src = op["reads"][-1]  # clone(self), copy_(self, src)
        if len(op["writes"]) != 1 or not numel(src["shape"]) == numel(op["writes"][0]["shape"]) == \
                numel(read["shape"]) or not contiguous(src):
            break  # a copy into part of a buffer: what the collective reads is more than the copy
        copies.add(k)
        k = g.writer.get(src["value"])
    return k, copies


def _matmul_collective(g: Graph, k: int, world: int) -> Match | None:
    op = g.ops[k]
    kind = op["collective"]
    pattern = "matmul_reducescatter" if kind == "reduce_scatter" else "matmul_allreduce"
    arrow = "reduce-scatter" if kind == "reduce_scatter" else "all-reduce"
    ins = op["inputs"]
    if not ins:
        return None
    producer, copies = _through_copies(g, ins[0])
    if producer is None or g.ops[producer]["name"] not in ANY_MATMUL:
        return None
    desc = f"matmul → {arrow}"
    roles: dict[str, Any] = {}
    problem = ""
    mm = g.ops[producer]
    if mm["name"] not in MATMUL:
        problem = f"a batched matmul ({short(mm['name'])}) before the {arrow}"
    if op.get("reduce_op", "sum") != "sum":
        problem = problem or f"a {op['reduce_op']} {arrow}, not a sum"
    # the matmul's result as the collective reads it (a whole copy of it, when copied first)
    partial = {**mm["writes"][0], "value": ins[0]["value"]} if copies else mm["writes"][0]
    if kind == "reduce_scatter":
        outs = op["writes"]
        whole = len(ins) == 1 and ins[0]["value"] == partial["value"] and numel(ins[0]["shape"]) == \
            numel(partial["shape"]) and len(outs) == 1 and outs[0]["shape"][0] * world == partial["shape"][0]
        chunks = len(ins) == world and all(r["value"] == partial["value"] and r["offset"] == i * numel(r["shape"])
                                           for i, r in enumerate(ins))
        if not (whole or chunks):
            problem = problem or "the reduce-scatter does not scatter the matmul's rows (dim 0)"
    elif numel(ins[0]["shape"]) != numel(partial["shape"]):
        problem = problem or "the all-reduce reduces part of the matmul's result"
    a, b, bias = matmul_operands(mm)
    roles["x"] = g.whole_input(a)
    if roles["x"] is None:
        problem = problem or "the matmul's left operand is not one of solution's inputs, read whole"
    w, layout = g.weight(b)
    roles["b"], roles["b_layout"] = w, layout
    if w is None:
        problem = problem or f"the weight: {layout}"
    if layout == "transposed":
        desc = f"linear → {arrow}"
    if bias is not None:
        problem = problem or f"a bias added before the {arrow} (summed over the ranks): not mapped"
    used = {producer, k} | copies
    value, epi, stop = epilogue(g, op["writes"][0], used)
    roles.update(epi)
    desc += epilogue_words(epi.get("epilogue", []))
    problem = problem or (f"after the {arrow}, solution runs {stop}" if stop else "") or \
        finish(g, value, used, roles, arrow)
    return Match(pattern, desc, roles, problem)


def _alltoall_around(g: Graph, a2a: list[int]) -> Match | None:
    """all-to-all → matmuls → all-to-all. With attention among the ops between them it is the
    sequence traded for heads (Ulysses), not experts: its two matmuls are QK^T and PV. A softmax
    counts as attention when it reads scores of two exchanged operands (QK^T); a router's softmax
    reads tokens times a weight of the program's."""
    exchanged = {w["value"] for k in a2a for w in g.ops[k]["writes"]}

    def from_exchange(read: dict[str, Any]) -> bool:
        k = g.writer.get(read["value"])
        return read["value"] in exchanged or (k is not None and g.reaches(exchanged, k))

    scores = [m for m, op in enumerate(g.ops) if op["name"] in ANY_MATMUL and len(op["reads"]) >= 2
              and all(from_exchange(r) for r in op["reads"][-2:])]
    attn = [j for j, op in enumerate(g.ops) if "scaled_dot_product" in op["name"] or (
        any(a in op["name"] for a in ATTENTION) and any(g.reaches({w["value"] for w in g.ops[m]["writes"]}, j)
                                                        for m in scores))]
    for first in a2a:
        start = {w["value"] for w in g.ops[first]["writes"]}
        mms = [j for j, op in enumerate(g.ops) if op["name"] in ANY_MATMUL and g.reaches(start, j)]
        for second in a2a:
            if second == first:
                continue
            back = lambda j: g.reaches({w["value"] for w in g.ops[j]["writes"]}, second)  # noqa: E731
            if any(g.reaches(start, j) and back(j) for j in attn):
                return Match("alltoall_attention", "all-to-all → attention → all-to-all (sequence parallel, as "
                             "Ulysses)")
            via = [j for j in mms if back(j)]
            if via:
                return Match("alltoall_experts",
                             f"all-to-all → {len(via)} matmul(s) → all-to-all (expert parallel)")
    return None


def _allgather_attention(g: Graph, gathers: list[int]) -> Match | None:
    attn = [j for j, op in enumerate(g.ops) if any(a in op["name"] for a in ATTENTION)]
    # V meets the attention after the softmax, in the matmul that reads its probabilities.
    attn += [m for m, op in enumerate(g.ops) if op["name"] in ANY_MATMUL
             and any(g.reaches({w["value"] for w in g.ops[a]["writes"]}, m) for a in attn)]
    fed = [k for k in gathers if any(g.reaches({w["value"] for w in g.ops[k]["writes"]}, j) for j in attn)]
    if not fed:
        return None
    return Match("allgather_attention", f"all-gather of K/V ({len(fed)} gather(s)) → attention")


def recognize(trace: dict[str, Any], world: int) -> list[Match]:
    g = Graph(trace)
    coll = [(k, op) for k, op in enumerate(g.ops) if op["kind"] == "collective"]
    gathers = [k for k, op in coll if op["collective"] == "all_gather"]
    found: list[Match] = []
    attention = _allgather_attention(g, gathers)
    if attention:
        found.append(attention)
    else:
        found += [m for k in gathers if (m := allgather_k_matmul(g, k, world) or _allgather_matmul(g, k, world) or
                                         matmul_allgather(g, k, world))]
    found += [m for k, op in coll if op["collective"] in ("reduce_scatter", "all_reduce")
              if (m := _matmul_collective(g, k, world))]
    experts = _alltoall_around(g, [k for k, op in coll if op["collective"] == "all_to_all"])
    if experts:
        found.append(experts)
    return found


def summary(trace: dict[str, Any]) -> str:
    """`collectives: all_to_all x2; ops: mm x4, gelu x1`: what the trace holds, for messages."""
    ops = trace["ops"]
    coll = Counter(op["collective"] for op in ops if op["kind"] == "collective")
    comp = Counter(short(op["name"]) for op in ops if op["kind"] == "compute" and not op["name"].startswith(ALLOC))
    part = lambda c: ", ".join(f"{n} x{k}" for n, k in c.most_common()) or "none"  # noqa: E731
    return f"collectives: {part(coll)}; ops: {part(comp)}"
