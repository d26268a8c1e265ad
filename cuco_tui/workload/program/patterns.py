"""What a program's trace (tracing.py: one call of `solution`, rank 0, float64 on the CPU) is made
of: the patterns the tool knows, found by following values from the collectives to the matmuls.

- all-gather → matmul (rows gathered, then mm/addmm/linear; the weight as stored, [K, N/W], or as
  nn.Linear stores it, [N/W, K]; a bias; an elementwise epilogue of residual/bias adds)
- matmul → reduce-scatter (sum, rows scattered) (+ the same epilogue)
- matmul → all-reduce (sum) (+ the same epilogue); for both, the matmul's result may be copied first
- all-to-all → per-expert matmuls → all-to-all
- all-gather of K/V → attention

The first three are mappable onto the harness's building blocks when every op of the trace is part
of the pattern and its operands are the program's own inputs; a Match says which input plays which
role, or why it cannot be mapped. Pure Python over JSON: no torch here."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

MATMUL = ("aten::mm", "aten::addmm")
ANY_MATMUL = MATMUL + ("aten::bmm", "aten::baddbmm", "aten::_grouped_mm", "aten::mv")
ATTENTION = ("scaled_dot_product", "aten::_softmax", "aten::softmax")
ADD = ("aten::add", "aten::add_")
COPY = ("aten::clone", "aten::copy_")
# Ops that make a buffer without computing anything from the program's values.
ALLOC = ("aten::empty", "aten::empty_strided", "aten::new_empty", "aten::new_empty_strided", "aten::empty_like",
         "aten::zeros", "aten::zeros_like", "aten::new_zeros")


@dataclass(frozen=True)
class Match:
    pattern: str  # allgather_matmul | matmul_reducescatter | matmul_allreduce | alltoall_experts | allgather_attention
    description: str  # one line, as `cuco workload import` prints it
    roles: dict[str, Any] = field(default_factory=dict)  # role -> input index, "b_layout", "output"
    problem: str = ""  # why it cannot be mapped onto a seed and templates ("" when it can)

    @property
    def mapped(self) -> bool:
        return self.pattern in MAPPABLE and not self.problem

    def to_json(self) -> dict[str, Any]:
        return {"pattern": self.pattern, "description": self.description, "roles": self.roles,
                "problem": self.problem}

    @staticmethod
    def from_json(d: dict[str, Any]) -> "Match":
        return Match(d["pattern"], d["description"], dict(d.get("roles", {})), d.get("problem", ""))


MAPPABLE = ("allgather_matmul", "matmul_reducescatter", "matmul_allreduce")


def _short(name: str) -> str:
    return name.split("::")[-1]


class Graph:
    """The trace as values and the ops that write and read them."""

    def __init__(self, trace: dict[str, Any]) -> None:
        self.ops: list[dict[str, Any]] = trace["ops"]
        self.inputs: list[dict[str, Any]] = trace["inputs"]
        self.outputs: list[dict[str, Any]] = trace["outputs"]
        self.input_of = {d["value"]: i for i, d in enumerate(self.inputs) if d.get("value") is not None}
        self.writer: dict[int, int] = {}
        for k, op in enumerate(self.ops):
            if op["kind"] != "view":
                for w in op["writes"]:
                    self.writer[w["value"]] = k

    def readers(self, value: int) -> list[int]:
        return [k for k, op in enumerate(self.ops) if op["kind"] != "view" and any(r["value"] == value for r in
                                                                                    op["reads"])]

    def computing(self) -> list[int]:
        """Ops that compute (not views, not bare allocations)."""
        return [k for k, op in enumerate(self.ops) if op["kind"] != "view" and not op["name"].startswith(ALLOC)]

    def reaches(self, start: set[int], target: int) -> bool:
        """Whether op `target` reads a value that depends on any value in `start`."""
        seen, todo = set(start), list(start)
        while todo:
            v = todo.pop()
            for k in self.readers(v):
                if k == target:
                    return True
                for w in self.ops[k]["writes"]:
                    if w["value"] not in seen:
                        seen.add(w["value"])
                        todo.append(w["value"])
        return False

    def whole_input(self, desc: dict[str, Any]) -> int | None:
        """The program input that `desc` reads whole and in its row-major order (any shape), else None."""
        i = self.input_of.get(desc["value"])
        if i is None:
            return None
        inp = self.inputs[i]
        if desc["offset"] != inp["offset"] or _numel(desc["shape"]) != _numel(inp["shape"]):
            return None
        return i if _contiguous(desc) and _contiguous(inp) else None

    def weight(self, desc: dict[str, Any]) -> tuple[int | None, str]:
        """(input, "as_is" | "transposed") for a matmul's right operand read from a 2-D program input."""
        i = self.input_of.get(desc["value"])
        if i is None:
            return None, "computed inside solution"
        inp = self.inputs[i]
        if len(inp["shape"]) != 2 or not _contiguous(inp) or desc["offset"] != inp["offset"]:
            return None, f"input {i} is not a whole 2-D row-major weight"
        if desc["shape"] == inp["shape"] and desc["stride"] == inp["stride"]:
            return i, "as_is"
        if desc["shape"] == inp["shape"][::-1] and desc["stride"] == inp["stride"][::-1]:
            return i, "transposed"
        return None, f"input {i} is read in a layout other than as stored or transposed"


def _numel(shape: list[int]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _contiguous(d: dict[str, Any]) -> bool:
    expect, stride = 1, []
    for s in reversed(d["shape"]):
        stride.append(expect)
        expect *= int(s)
    return all(st == e or sz == 1 for st, e, sz in zip(d["stride"], reversed(stride), d["shape"]))


def _plain(op: dict[str, Any]) -> bool:
    """An add or addmm without a scale (alpha = beta = 1)."""
    return all(op.get("scalars", {}).get(k, 1) == 1 for k in ("alpha", "beta"))


def _matmul_operands(op: dict[str, Any]) -> tuple[dict, dict, dict | None]:
    reads = op["reads"]
    return (reads[1], reads[2], reads[0]) if op["name"] == "aten::addmm" else (reads[0], reads[1], None)


def _epilogue(g: Graph, value: int, used: set[int]) -> tuple[int, dict[str, int], str]:
    """Follow residual/bias adds of program inputs from `value`; returns the final value, the roles
    found ({"bias": i, "residual": j}) and, when an op other than those reads it, that op's name."""
    roles: dict[str, int] = {}
    shape = None
    while True:
        readers = [k for k in g.readers(value) if k not in used]
        if not readers:
            return value, roles, ""
        if len(readers) > 1:
            return value, roles, ", ".join(_short(g.ops[k]["name"]) for k in readers)
        k = readers[0]
        op = g.ops[k]
        if not op["name"].startswith(ADD) or not _plain(op) or len(op["reads"]) != 2:
            return value, roles, _short(op["name"])
        mine = next((r for r in op["reads"] if r["value"] == value), None)
        other = next((r for r in op["reads"] if r["value"] != value), None)
        if mine is None or other is None:
            return value, roles, _short(op["name"])
        shape = shape or mine["shape"]
        i = g.input_of.get(other["value"])
        if i is None:
            return value, roles, f"{_short(op['name'])} of a value computed inside solution"
        role = "bias" if len(g.inputs[i]["shape"]) == 1 and g.inputs[i]["shape"][0] == shape[-1] else \
            "residual" if _numel(g.inputs[i]["shape"]) == _numel(shape) and g.whole_input(other) is not None else ""
        if not role or role in roles:
            return value, roles, f"{_short(op['name'])} of input {i} (neither a bias nor a residual of the output)"
        roles[role] = i
        used.add(k)
        value = op["writes"][0]["value"]


def _finish(g: Graph, value: int, used: set[int], roles: dict[str, Any], what: str) -> str:
    """The problem that keeps the pattern from being mapped ("" when none): the output must be the
    final value, and every computing op of the trace part of the pattern."""
    outs = [j for j, d in enumerate(g.outputs) if d["value"] == value]
    if len(g.outputs) != 1 or not outs:
        return f"solution returns {len(g.outputs)} output(s), not the {what}'s result alone"
    roles["output"] = outs[0]
    extra = [k for k in g.computing() if k not in used]
    if extra:
        return "solution also runs " + ", ".join(sorted({_short(g.ops[k]["name"]) for k in extra}))
    return ""


def _gathered(g: Graph, k: int, world: int) -> tuple[int | None, set[int], str]:
    """The value holding all ranks' rows of an all-gather (op k), the ops that made it, or a problem."""
    op = g.ops[k]
    src = op["inputs"][0] if op["inputs"] else None
    if src is None:
        return None, {k}, "an all-gather of nothing"
    if len(op["writes"]) == 1:
        out = op["writes"][0]
        if out["shape"][0] != world * src["shape"][0] or out["shape"][1:] != src["shape"][1:] or not _contiguous(out):
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
    a, b, bias = _matmul_operands(g.ops[j])
    roles: dict[str, Any] = {}
    desc = "all-gather → matmul"
    x = g.whole_input(src)
    if x is None:
        problem = "the gathered tensor is computed inside solution, not one of its inputs"
    elif a["value"] != gathered or a["offset"] != 0 or not _contiguous(a) or len(a["shape"]) != 2:
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
        if bi is None or len(g.inputs[bi]["shape"]) != 1 or not _plain(g.ops[j]):
            problem = problem or "the addmm's bias is not a 1-D input added as is"
        roles["bias"] = bi
    value, epi, stop = _epilogue(g, g.ops[j]["writes"][0]["value"], used)
    if "bias" in epi and "bias" in roles:
        problem = problem or "two biases"
    roles.update(epi)
    desc += "".join(f" + {r}" for r in ("bias", "residual") if r in roles)
    problem = problem or (f"after the matmul, solution runs {stop}" if stop else "") or \
        _finish(g, value, used, roles, "matmul")
    return Match("allgather_matmul", desc, roles, problem)


def _through_copies(g: Graph, read: dict[str, Any]) -> tuple[int | None, set[int]]:
    """The op that made the value `read` reads, looking through copies of a whole value into the whole
    of it (clone, copy_: `C = C_local.clone()` before an in-place all-reduce), and the copies."""
    copies: set[int] = set()
    k = g.writer.get(read["value"])
    while k is not None and g.ops[k]["name"] in COPY:
        op = g.ops[k]
        src = op["reads"][-1]  # clone(self), copy_(self, src)
        if len(op["writes"]) != 1 or not _numel(src["shape"]) == _numel(op["writes"][0]["shape"]) == \
                _numel(read["shape"]) or not _contiguous(src):
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
        problem = f"a batched matmul ({_short(mm['name'])}) before the {arrow}"
    if op.get("reduce_op", "sum") != "sum":
        problem = problem or f"a {op['reduce_op']} {arrow}, not a sum"
    # the matmul's result as the collective reads it (a whole copy of it, when copied first)
    partial = {**mm["writes"][0], "value": ins[0]["value"]} if copies else mm["writes"][0]
    if kind == "reduce_scatter":
        outs = op["writes"]
        whole = len(ins) == 1 and ins[0]["value"] == partial["value"] and _numel(ins[0]["shape"]) == \
            _numel(partial["shape"]) and len(outs) == 1 and outs[0]["shape"][0] * world == partial["shape"][0]
        chunks = len(ins) == world and all(r["value"] == partial["value"] and r["offset"] == i * _numel(r["shape"])
                                           for i, r in enumerate(ins))
        if not (whole or chunks):
            problem = problem or "the reduce-scatter does not scatter the matmul's rows (dim 0)"
    elif _numel(ins[0]["shape"]) != _numel(partial["shape"]):
        problem = problem or "the all-reduce reduces part of the matmul's result"
    a, b, bias = _matmul_operands(mm)
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
    value, epi, stop = _epilogue(g, op["writes"][0]["value"], used)
    roles.update(epi)
    desc += "".join(f" + {r}" for r in ("bias", "residual") if r in roles)
    problem = problem or (f"after the {arrow}, solution runs {stop}" if stop else "") or \
        _finish(g, value, used, roles, arrow)
    return Match(pattern, desc, roles, problem)


def _alltoall_experts(g: Graph, a2a: list[int]) -> Match | None:
    for first in a2a:
        start = {w["value"] for w in g.ops[first]["writes"]}
        mms = [j for j, op in enumerate(g.ops) if op["name"] in ANY_MATMUL and g.reaches(start, j)]
        for second in a2a:
            if second == first:
                continue
            via = [j for j in mms if g.reaches({w["value"] for w in g.ops[j]["writes"]}, second)]
            if via:
                return Match("alltoall_experts",
                             f"all-to-all → {len(via)} matmul(s) → all-to-all (expert parallel)",
                             problem="no seed for expert parallelism from a program yet: search it with the Claude "
                                     "agent, or see workloads/moe_dispatch_combine")
    return None


def _allgather_attention(g: Graph, gathers: list[int]) -> Match | None:
    attn = [j for j, op in enumerate(g.ops) if any(a in op["name"] for a in ATTENTION)]
    fed = [k for k in gathers if any(g.reaches({w["value"] for w in g.ops[k]["writes"]}, j) for j in attn)]
    if not fed:
        return None
    return Match("allgather_attention", f"all-gather of K/V ({len(fed)} gather(s)) → attention",
                 problem="no seed for attention from a program yet: search it with the Claude agent, or see "
                         "workloads/cp_attention")


def recognize(trace: dict[str, Any], world: int) -> list[Match]:
    g = Graph(trace)
    coll = [(k, op) for k, op in enumerate(g.ops) if op["kind"] == "collective"]
    gathers = [k for k, op in coll if op["collective"] == "all_gather"]
    found: list[Match] = []
    attention = _allgather_attention(g, gathers)
    if attention:
        found.append(attention)
    else:
        found += [m for k in gathers if (m := _allgather_matmul(g, k, world))]
    found += [m for k, op in coll if op["collective"] in ("reduce_scatter", "all_reduce")
              if (m := _matmul_collective(g, k, world))]
    experts = _alltoall_experts(g, [k for k, op in coll if op["collective"] == "all_to_all"])
    if experts:
        found.append(experts)
    return found


def summary(trace: dict[str, Any]) -> str:
    """`collectives: all_to_all x2; ops: mm x4, gelu x1`: what the trace holds, for messages."""
    ops = trace["ops"]
    coll = Counter(op["collective"] for op in ops if op["kind"] == "collective")
    comp = Counter(_short(op["name"]) for op in ops if op["kind"] == "compute" and not op["name"].startswith(ALLOC))
    part = lambda c: ", ".join(f"{n} x{k}" for n, k in c.most_common()) or "none"  # noqa: E731
    return f"collectives: {part(coll)}; ops: {part(comp)}"
