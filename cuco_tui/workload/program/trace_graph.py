"""A program's trace (tracing.py) as a graph of values and the ops that write and read them, the Match
a recognizer returns, and the steps the recognizers share (patterns.py, gather_patterns.py): an
operand read whole from a program input, a weight in either layout, an elementwise epilogue of
residual/bias adds, the rule that every op of the trace be part of the pattern. Pure Python over
JSON: no torch here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MATMUL = ("aten::mm", "aten::addmm")
ANY_MATMUL = MATMUL + ("aten::bmm", "aten::baddbmm", "aten::_grouped_mm", "aten::mv")
ATTENTION = ("scaled_dot_product", "aten::_softmax", "aten::softmax", "aten::_safe_softmax")
ADD = ("aten::add", "aten::add_")
COPY = ("aten::clone", "aten::copy_")
# Ops that make a buffer without computing anything from the program's values.
ALLOC = ("aten::empty", "aten::empty_strided", "aten::new_empty", "aten::new_empty_strided", "aten::empty_like",
         "aten::zeros", "aten::zeros_like", "aten::new_zeros")


@dataclass(frozen=True)
class Match:
    pattern: str  # allgather_matmul | matmul_reducescatter | matmul_allreduce | allgather_k_matmul |
    # matmul_allgather | alltoall_experts | alltoall_attention | allgather_attention
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


MAPPABLE = ("allgather_matmul", "matmul_reducescatter", "matmul_allreduce", "allgather_k_matmul", "matmul_allgather",
            "allgather_attention", "alltoall_attention", "alltoall_experts")  # the last three: when the
# float64 run shows the function (attention_map.py, expert_map.py)


def short(name: str) -> str:
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
        if desc["offset"] != inp["offset"] or numel(desc["shape"]) != numel(inp["shape"]):
            return None
        return i if contiguous(desc) and contiguous(inp) else None

    def weight(self, desc: dict[str, Any]) -> tuple[int | None, str]:
        """(input, "as_is" | "transposed") for a matmul's right operand read from a 2-D program input."""
        i = self.input_of.get(desc["value"])
        if i is None:
            return None, "computed inside solution"
        inp = self.inputs[i]
        if len(inp["shape"]) != 2 or not contiguous(inp) or desc["offset"] != inp["offset"]:
            return None, f"input {i} is not a whole 2-D row-major weight"
        if desc["shape"] == inp["shape"] and desc["stride"] == inp["stride"]:
            return i, "as_is"
        if desc["shape"] == inp["shape"][::-1] and desc["stride"] == inp["stride"][::-1]:
            return i, "transposed"
        return None, f"input {i} is read in a layout other than as stored or transposed"


def numel(shape: list[int]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def contiguous(d: dict[str, Any]) -> bool:
    expect, stride = 1, []
    for s in reversed(d["shape"]):
        stride.append(expect)
        expect *= int(s)
    return all(st == e or sz == 1 for st, e, sz in zip(d["stride"], reversed(stride), d["shape"]))


def plain(op: dict[str, Any]) -> bool:
    """An add or addmm without a scale (alpha = beta = 1)."""
    return all(op.get("scalars", {}).get(k, 1) == 1 for k in ("alpha", "beta"))


def matmul_operands(op: dict[str, Any]) -> tuple[dict, dict, dict | None]:
    reads = op["reads"]
    return (reads[1], reads[2], reads[0]) if op["name"] == "aten::addmm" else (reads[0], reads[1], None)


# Elementwise functions of one value an epilogue may apply (the step names of `epilogue`; the seed's
# epilogue kernel computes each in fp32). gelu is named by its approximation.
ACTIVATIONS = {"aten::relu": "relu", "aten::silu": "silu", "aten::gelu": "gelu", "aten::sigmoid": "sigmoid",
               "aten::tanh": "tanh"}


def _activation(op: dict[str, Any]) -> str:
    """The step name of a unary activation op (in place or not), "" for any other op."""
    step = ACTIVATIONS.get(op["name"].removesuffix("_"), "")
    if step == "gelu" and op.get("scalars", {}).get("approximate", "none") == "tanh":
        return "gelu_tanh"
    return step


def epilogue(g: Graph, start: dict[str, Any], used: set[int]) -> tuple[int, dict[str, Any], str]:
    """Follow residual/bias adds of program inputs and unary activations from the value `start`
    describes (the pattern's result); returns the final value, the roles found ({"bias": i,
    "residual": j, "epilogue": [steps in order]}, a step "bias"/"residual" adding that input, any
    other an ACTIVATIONS name) and, when an op other than those reads it, that op's name. Each step
    must read and write the whole result: storage versions cannot tell an op on a view of it (a
    relu_ of some columns) from one on all of it, and the seed's kernel covers every element."""
    roles: dict[str, Any] = {}
    steps: list[str] = []
    value, size = start["value"], numel(start["shape"])

    def whole(d: dict[str, Any]) -> bool:
        return numel(d["shape"]) == size and d["offset"] == start["offset"] and contiguous(d)

    while True:
        readers = [k for k in g.readers(value) if k not in used]
        if steps:
            roles["epilogue"] = list(steps)
        if not readers:
            return value, roles, ""
        if len(readers) > 1:
            return value, roles, ", ".join(short(g.ops[k]["name"]) for k in readers)
        k = readers[0]
        op = g.ops[k]
        mine = next((r for r in op["reads"] if r["value"] == value), None)
        if mine is not None and not whole(mine) or len(op["writes"]) != 1 or not whole(op["writes"][0]):
            return value, roles, f"{short(op['name'])} on part of the result"
        act = _activation(op)
        if act:
            if len(op["reads"]) != 1 or mine is None:
                return value, roles, short(op["name"])
            steps.append(act)
            used.add(k)
            value = op["writes"][0]["value"]
            continue
        if not op["name"].startswith(ADD) or not plain(op) or len(op["reads"]) != 2:
            return value, roles, short(op["name"])
        other = next((r for r in op["reads"] if r["value"] != value), None)
        if mine is None or other is None:
            return value, roles, short(op["name"])
        i = g.input_of.get(other["value"])
        if i is None:
            return value, roles, f"{short(op['name'])} of a value computed inside solution"
        shape = mine["shape"]
        role = "bias" if len(g.inputs[i]["shape"]) == 1 and g.inputs[i]["shape"][0] == shape[-1] else \
            "residual" if numel(g.inputs[i]["shape"]) == numel(shape) and g.whole_input(other) is not None else ""
        if not role or role in roles:
            return value, roles, f"{short(op['name'])} of input {i} (neither a bias nor a residual of the output)"
        roles[role] = i
        steps.append(role)
        used.add(k)
        value = op["writes"][0]["value"]


def epilogue_words(steps: list[str]) -> str:
    """' + bias → silu + residual': the steps as a pattern's description continues."""
    return "".join(f" + {s}" if s in ("bias", "residual") else f" → {s}" for s in steps)


def finish(g: Graph, value: int, used: set[int], roles: dict[str, Any], what: str) -> str:
    """The problem that keeps the pattern from being mapped ("" when none): the output must be the
    final value, and every computing op of the trace part of the pattern."""
    outs = [j for j, d in enumerate(g.outputs) if d["value"] == value]
    if len(g.outputs) != 1 or not outs:
        return f"solution returns {len(g.outputs)} output(s), not the {what}'s result alone"
    roles["output"] = outs[0]
    extra = [k for k in g.computing() if k not in used]
    if extra:
        return "solution also runs " + ", ".join(sorted({short(g.ops[k]["name"]) for k in extra}))
    return ""
