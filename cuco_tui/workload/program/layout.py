"""How a program's tensors become the harness's buffers: their names, dtypes and layouts.

Without a mapped pattern the buffers are the program's own: solution's parameter names (in0, in1,
... where it takes *args), its outputs `out` (or out0, out1, ...), shapes as make_inputs and
solution give them. With a mapped pattern they take the names the pattern's seed and templates read
(`x`, `b`, `bias`, `residual`, `y`) and the layout they read: a weight the program holds as
nn.Linear does ([N/W, K]) is given to the candidate transposed ([K, N/W]), and the program is
handed a transposed view of it (`to_program`), so both compute on the same numbers. The pattern's
dims (M, K, N: totals, as its templates read them) are derived from the program's shapes.
No torch at import: `to_program` runs only in the processes that hold the tensors."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

HARNESS_DTYPES = {"bfloat16": "bf16", "float16": "f16", "float32": "f32", "int32": "i32", "int64": "i64",
                  "uint8": "u8", "bool": "u8"}
ROLE_NAMES = {"x": "x", "b": "b", "bias": "bias", "residual": "residual", "output": "y"}


@dataclass(frozen=True)
class BufferMap:
    name: str  # the harness buffer's name (what a candidate passes to cuco::input / cuco::output)
    index: int  # its place in make_inputs' tuple or solution's outputs
    dtype: str  # harness dtype (bf16, f16, f32, ...)
    layout: str = "as_is"  # "as_is" | "transposed" (2-D: the buffer holds the program's tensor transposed)
    role: str = ""  # its part in the pattern ("" without one)


@dataclass(frozen=True)
class Layout:
    inputs: tuple[BufferMap, ...]
    outputs: tuple[BufferMap, ...]
    pattern: str = ""  # the mapped pattern ("" for the program's own layout)
    derived: dict[str, dict[str, int]] = field(default_factory=dict)  # shape -> the pattern's dims

    def to_json(self) -> dict[str, Any]:
        return {"inputs": [asdict(b) for b in self.inputs], "outputs": [asdict(b) for b in self.outputs],
                "pattern": self.pattern, "derived": self.derived}

    @staticmethod
    def from_json(d: dict[str, Any]) -> "Layout":
        return Layout(tuple(BufferMap(**b) for b in d["inputs"]), tuple(BufferMap(**b) for b in d["outputs"]),
                      d.get("pattern", ""), {k: dict(v) for k, v in d.get("derived", {}).items()})

    def input_specs(self, program_shapes: list[list[int]]) -> list[dict[str, Any]]:
        """What to_program needs for each input at a shape (the program's own shapes)."""
        return [{"layout": b.layout, "shape": program_shapes[b.index]} for b in self.inputs]


def harness_shape(program_shape: list[int], layout: str) -> list[int]:
    return list(program_shape[::-1]) if layout == "transposed" else list(program_shape)


def to_program(tensor: Any, spec: dict[str, Any]) -> Any:
    """The program's view of a harness buffer (a torch tensor): the transposed view for "transposed",
    the program's shape otherwise. A view in both cases: the program reads the harness's memory.
    A bool input, which the harness holds as u8, is seen as bool again."""
    if spec.get("dtype") == "bool" and str(tensor.dtype) == "torch.uint8":
        import torch

        tensor = tensor.view(torch.bool)
    if spec["layout"] == "transposed":
        return tensor.t()
    return tensor.reshape(spec["shape"])


def program_layout(input_names: list[str], first: dict[str, Any]) -> Layout:
    """The program's own buffers. `first`: one rank's sizes at one shape ({"inputs", "outputs"})."""
    n_in, n_out = len(first["inputs"]), len(first["outputs"])
    names = list(input_names) if len(input_names) == n_in and len(set(input_names)) == n_in else \
        [f"in{i}" for i in range(n_in)]
    outs = ["out"] if n_out == 1 else [f"out{j}" for j in range(n_out)]
    outs = [o if o not in names else f"{o}_" for o in outs]
    return Layout(tuple(BufferMap(n, i, HARNESS_DTYPES.get(first["inputs"][i][1], "?")) for i, n in enumerate(names)),
                  tuple(BufferMap(n, j, HARNESS_DTYPES.get(first["outputs"][j][1], "?")) for j, n in enumerate(outs)))


def _numel(shape: list[int]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def pattern_dims(pattern: str, roles: dict[str, Any], rank: dict[str, Any], world: int) -> dict[str, int]:
    """M, K, N (totals) of a pattern at one shape, from one rank's program shapes."""
    x = rank["inputs"][roles["x"]][0]
    b = rank["inputs"][roles["b"]][0]
    k_local = x[-1]
    rows = _numel(x) // k_local
    n_local = b[0] if roles["b_layout"] == "transposed" else b[1]
    k_b = b[1] if roles["b_layout"] == "transposed" else b[0]
    if k_b != k_local:
        raise ValueError(f"the weight's K ({k_b}) is not the rows' K ({k_local})")
    if pattern == "allgather_matmul":
        return {"M": rows * world, "K": k_local, "N": n_local * world}
    return {"M": rows, "K": k_local * world, "N": n_local}


def pattern_layout(pattern: str, roles: dict[str, Any], sizes: dict[int, dict[str, Any]],
                   program_dims: tuple[str, ...], n_inputs: int) -> tuple[Layout | None, str]:
    """The harness layout of a mapped pattern, or (None, why not). `sizes`: world -> sizing JSON."""
    if any(roles.get(r) is None for r in ("x", "b", "output")):
        return None, "an operand of the pattern is not one of solution's inputs"
    played = {roles[r]: r for r in ("x", "b", "bias", "residual") if r in roles}
    idle = [i for i in range(n_inputs) if i not in played]
    if idle:
        return None, f"input {idle[0]} plays no part in the pattern (the seed would not read it)"
    derived: dict[str, dict[str, int]] = {}
    for world, entry in sizes.items():
        for s in entry["shapes"]:
            ranks = s["ranks"]
            if any(r != ranks[0] for r in ranks):
                return None, f"the ranks' shapes differ at {s['shape']} (world {world})"
            for kind in ("inputs", "outputs"):
                if any(dt != "bfloat16" for _, dt in ranks[0][kind]):
                    return None, "the pattern's seed and templates are bf16; the program's buffers are not all " \
                                 "bfloat16"
            try:
                dims = pattern_dims(pattern, roles, ranks[0], int(world))
            except ValueError as exc:
                return None, f"{exc} at {s['shape']}"
            if derived.setdefault(s["shape"], dims) != dims:
                return None, f"the pattern's M, K, N at {s['shape']} change with the world size"
            clash = [d for d in dims if d in program_dims and s["dims"][d] != dims[d]]
            if clash:
                return None, (f"the program's dim {clash[0]} ({s['dims'][clash[0]]} at {s['shape']}) is not the "
                              f"pattern's {clash[0]} ({dims[clash[0]]}), which its templates read by that name")
    inputs = tuple(BufferMap(ROLE_NAMES[role], i, "bf16", roles["b_layout"] if role == "b" else "as_is", role)
                   for i, role in sorted(played.items()))
    outputs = (BufferMap("y", int(roles["output"]), "bf16", "as_is", "output"),)
    return Layout(inputs, outputs, pattern, derived), ""
