"""How a program's tensors become the harness's buffers: their names, dtypes and layouts.

Without a mapped pattern the buffers are the program's own: solution's parameter names (in0, in1,
... where it takes *args), its outputs `out` (or out0, out1, ...), shapes as make_inputs and
solution give them. With a mapped pattern they take the names the pattern's seed and templates read
(`x`, `b`, `bias`, `residual`, `y`; `q`, `k`, `v`, `o` for attention) and the layout they read: a
weight the program holds as nn.Linear does ([N/W, K]) is given to the candidate transposed
([K, N/W]), and the program is handed a transposed view of it (`to_program`), so both compute on the
same numbers; an attention tensor the program holds as [B, H, S/W, D] is given to the candidate with
its axes reordered ("axes": [S/W, B, H, D], which is cp_attention's [S/W, B*H, D] in memory), and
the program is handed the permuted view. The pattern's
dims (M, K, N: totals, as its templates read them) are derived from the program's shapes; where a
program fixes each rank's K of a K-split product, so that the total grows with W, the per-rank KR
takes K's place.
No torch at import: `to_program` runs only in the processes that hold the tensors."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
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
    # | "axes" (the buffer holds the program's tensor with its axes in the order `axes`)
    role: str = ""  # its part in the pattern ("" without one)
    axes: tuple[int, ...] = ()  # "axes": the program's axis at each of the buffer's axes

    def order(self, ndim: int) -> tuple[int, ...]:
        """The program's axis at each axis of the buffer."""
        if self.layout == "axes":
            return tuple(self.axes)
        return tuple(range(ndim))[::-1] if self.layout == "transposed" else tuple(range(ndim))


@dataclass(frozen=True)
class Layout:
    inputs: tuple[BufferMap, ...]
    outputs: tuple[BufferMap, ...]
    pattern: str = ""  # the mapped pattern ("" for the program's own layout)
    derived: dict[str, dict[str, int]] = field(default_factory=dict)  # shape -> the pattern's dims
    # The program's dims named like a pattern's dim of other values (a batch folded into cp_attention's
    # H): the manifest holds them as `{dim}_prog` (program_name), the pattern's under the name it reads.
    renamed: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"inputs": [asdict(b) for b in self.inputs], "outputs": [asdict(b) for b in self.outputs],
                "pattern": self.pattern, "derived": self.derived, "renamed": list(self.renamed)}

    @staticmethod
    def from_json(d: dict[str, Any]) -> "Layout":
        return Layout(tuple(_buffer(b) for b in d["inputs"]), tuple(_buffer(b) for b in d["outputs"]),
                      d.get("pattern", ""), {k: dict(v) for k, v in d.get("derived", {}).items()},
                      tuple(d.get("renamed", ())))

    def manifest_name(self, dim: str) -> str:
        """The manifest's name of one of the program's dims."""
        return program_name(dim) if dim in self.renamed else dim


def program_name(dim: str) -> str:
    return f"{dim}_prog"


def _buffer(d: dict[str, Any]) -> BufferMap:
    return BufferMap(**{**d, "axes": tuple(d.get("axes", ()))})


def harness_shape(program_shape: list[int], layout: str, axes: tuple[int, ...] | list[int] = ()) -> list[int]:
    if layout == "axes":
        return [int(program_shape[a]) for a in axes]
    return list(program_shape[::-1]) if layout == "transposed" else list(program_shape)


def to_harness(array: Any, b: BufferMap) -> Any:
    """A program's tensor or array (its own shape) in buffer `b`'s layout: a permuted view, or the
    array itself ("as_is"). np.ascontiguousarray / .contiguous() makes it the buffer's memory."""
    order = b.order(array.ndim)
    if order == tuple(range(array.ndim)):
        return array
    return array.permute(*order) if hasattr(array, "permute") else array.transpose(order)


def to_program(tensor: Any, spec: dict[str, Any]) -> Any:
    """The program's view of a harness buffer (a torch tensor): the transposed view for "transposed",
    the program's shape otherwise. A view in both cases: the program reads the harness's memory.
    A bool input, which the harness holds as u8, is seen as bool again."""
    if spec.get("dtype") == "bool" and str(tensor.dtype) == "torch.uint8":
        import torch

        tensor = tensor.view(torch.bool)
    if spec["layout"] == "transposed":
        return tensor.t()
    if spec["layout"] == "axes":
        axes = list(spec["axes"])
        held = tensor.reshape(harness_shape(spec["shape"], "axes", axes))
        return held.permute(*[axes.index(a) for a in range(len(axes))])
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
    k_x = x[-1]
    rows = _numel(x) // k_x
    n_b = b[0] if roles["b_layout"] == "transposed" else b[1]
    k_b = b[1] if roles["b_layout"] == "transposed" else b[0]
    # the K each rank's x holds against the weight's: a K-gather's weight holds all W slices
    if k_b != (k_x * world if pattern == "allgather_k_matmul" else k_x):
        raise ValueError(f"the weight's K ({k_b}) is not the rows' K ({k_x})")
    if pattern == "allgather_matmul":
        dims, out = {"M": rows * world, "K": k_x, "N": n_b * world}, rows * world * n_b
    elif pattern == "allgather_k_matmul":
        dims, out = {"M": rows, "K": k_b, "N": n_b}, rows * n_b
    elif pattern == "matmul_allgather":
        dims, out = {"M": rows, "K": k_x, "N": n_b * world}, rows * n_b * world
    else:
        dims, out = {"M": rows, "K": k_x * world, "N": n_b}, rows * n_b // (world if pattern == "matmul_reducescatter"
                                                                           else 1)
    # The seed writes the pattern's whole result: an output that is part of it (an epilogue on
    # a slice) is another program.
    got = rank["outputs"][roles["output"]][0]
    if _numel(got) != out:
        raise ValueError(f"the output {list(got)} is not the pattern's result ({out} elements)")
    return dims


# The patterns whose K is split across the ranks: a program may fix each rank's K/W instead of the
# total K (ParallelKernelBench's gemm + all-reduce), so that K grows with W; their seed then reads
# the per-rank K, KR, which is the same at every world size.
PER_RANK_K = ("matmul_allreduce", "matmul_reducescatter")


def _at_every_world(pattern: str, shape: str,
                    by_world: dict[int, dict[str, int]]) -> tuple[dict[str, int] | None, str]:
    """The pattern's dims at a shape, the same at every world size, or (None, why not)."""
    first = next(iter(by_world.values()))
    if all(d == first for d in by_world.values()):
        return first, ""
    per_rank = {w: {"M": d["M"], "KR": d["K"] // w, "N": d["N"]} for w, d in by_world.items()}
    one = next(iter(per_rank.values()))
    if pattern in PER_RANK_K and all(d == one for d in per_rank.values()):
        return one, ""
    return None, f"the pattern's M, K, N at {shape} change with the world size"


def uniform_bf16(sizes: dict[str, Any], seed: str) -> str:
    """"" when at every world size and shape every rank's buffers have one set of shapes and are bf16,
    else why not. `seed`: what reads the buffers ("the pattern's seed and templates are")."""
    for world, entry in sizes.items():
        for s in entry["shapes"]:
            ranks = s["ranks"]
            if any(r != ranks[0] for r in ranks):
                return f"the ranks' shapes differ at {s['shape']} (world {world})"
            if any(dt != "bfloat16" for _, dt in ranks[0]["inputs"] + ranks[0]["outputs"]):
                return f"{seed} bf16; the program's buffers are not all bfloat16"
    return ""


def with_renames(layout: Layout, sizes: dict[str, Any], program_dims: tuple[str, ...]) -> Layout:
    """`layout` with the program's dims that a pattern's dim of other values names renamed (Layout.renamed)."""
    pattern = next(iter(layout.derived.values()), {})
    renamed = tuple(d for d in pattern if d in program_dims and any(
        s["dims"][d] != layout.derived[s["shape"]][d] for e in sizes.values() for s in e["shapes"]))
    return replace(layout, renamed=renamed)


def pattern_layout(pattern: str, roles: dict[str, Any], sizes: dict[int, dict[str, Any]],
                   n_inputs: int) -> tuple[Layout | None, str]:
    """The harness layout of a mapped pattern, or (None, why not). `sizes`: world -> sizing JSON."""
    if any(roles.get(r) is None for r in ("x", "b", "output")):
        return None, "an operand of the pattern is not one of solution's inputs"
    played = {roles[r]: r for r in ("x", "b", "bias", "residual") if r in roles}
    idle = [i for i in range(n_inputs) if i not in played]
    if idle:
        return None, f"input {idle[0]} plays no part in the pattern (the seed would not read it)"
    uneven = uniform_bf16(sizes, "the pattern's seed and templates are")
    if uneven:
        return None, uneven
    by_shape: dict[str, dict[int, dict[str, int]]] = {}
    for world, entry in sizes.items():
        for s in entry["shapes"]:
            try:
                by_shape.setdefault(s["shape"], {})[int(world)] = pattern_dims(pattern, roles, s["ranks"][0],
                                                                               int(world))
            except ValueError as exc:
                return None, f"{exc} at {s['shape']}"
    derived: dict[str, dict[str, int]] = {}
    for shape, by_world in by_shape.items():
        dims, why = _at_every_world(pattern, shape, by_world)
        if dims is None:
            return None, why
        derived[shape] = dims
    if len({tuple(d) for d in derived.values()}) > 1:  # K at some shapes, KR at others
        return None, "the pattern's K changes with the world size at some shapes and not at others"
    inputs = tuple(BufferMap(ROLE_NAMES[role], i, "bf16", roles["b_layout"] if role == "b" else "as_is", role)
                   for i, role in sorted(played.items()))
    outputs = (BufferMap("y", int(roles["output"]), "bf16", "as_is", "output"),)
    return Layout(inputs, outputs, pattern, derived), ""
