"""One call of a program's `solution`, recorded at the dispatcher: every aten op and c10d collective
in the order they ran, with the shapes they saw (imported by the processes that run the program;
needs torch).

Dataflow is kept as storage versions: a tensor's value is (its storage, how many writes that
storage has seen), so a view reads the value of its base, an in-place op or a collective that fills
a buffer makes a new value, and `patterns` can follow a gathered buffer into the matmul that reads
it. Each tensor argument is recorded with its view geometry (shape, stride, offset in elements),
which says whether a matmul reads a weight as stored or transposed. On the meta device storages have
no address: `dataflow=False` records ops and shapes only (what FLOPs and bytes need)."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

# c10d op -> (collective, the arguments it writes, the arguments it reads); "return" marks a
# functional collective whose result is a new tensor. wait_tensor is the identity on its argument.
COLLECTIVES: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "c10d::_allgather_base_": ("all_gather", ("output_tensor",), ("input_tensor",)),
    "c10d::allgather_": ("all_gather", ("output_tensors",), ("input_tensors",)),
    "c10d::allgather_into_tensor_coalesced_": ("all_gather", ("outputs",), ("inputs",)),
    "c10d::allgather_coalesced_": ("all_gather", ("output_lists",), ("input_list",)),
    "c10d::_reduce_scatter_base_": ("reduce_scatter", ("output_tensor",), ("input_tensor",)),
    "c10d::reduce_scatter_": ("reduce_scatter", ("output_tensors",), ("input_tensors",)),
    "c10d::reduce_scatter_tensor_coalesced_": ("reduce_scatter", ("outputs",), ("inputs",)),
    "c10d::allreduce_": ("all_reduce", ("tensors",), ("tensors",)),
    "c10d::allreduce_coalesced_": ("all_reduce", ("tensors",), ("tensors",)),
    "c10d::alltoall_base_": ("all_to_all", ("output",), ("input",)),
    "c10d::alltoall_": ("all_to_all", ("output_tensors",), ("input_tensors",)),
    "c10d::broadcast_": ("broadcast", ("tensors",), ("tensors",)),
    "c10d::reduce_": ("reduce", ("tensors",), ("tensors",)),
    "c10d::gather_": ("gather", ("output_tensors",), ("input_tensors",)),
    "c10d::scatter_": ("scatter", ("output_tensors",), ("input_tensors",)),
    "c10d::send": ("send", (), ("tensors",)),
    "c10d::recv_": ("recv", ("tensors",), ()),
    "c10d::recv_any_source_": ("recv", ("tensors",), ()),
    "c10d::barrier": ("barrier", (), ()),
    "_c10d_functional::all_gather_into_tensor": ("all_gather", ("return",), ("input",)),
    "_c10d_functional::all_gather_into_tensor_out": ("all_gather", ("out",), ("input",)),
    "_c10d_functional::reduce_scatter_tensor": ("reduce_scatter", ("return",), ("input",)),
    "_c10d_functional::all_reduce": ("all_reduce", ("return",), ("input",)),
    "_c10d_functional::all_reduce_": ("all_reduce", ("input",), ("input",)),
    "_c10d_functional::all_to_all_single": ("all_to_all", ("return",), ("input",)),
    "_c10d_functional::broadcast": ("broadcast", ("return",), ("input",)),
}
REDUCE_OPS = {0: "sum", 1: "avg", 2: "product", 3: "min", 4: "max"}  # c10d ReduceOp.RedOpType


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


class OpRecorder(TorchDispatchMode):
    """Records ops as dicts (JSON-ready) into `self.ops`; `start(inputs)` names the program's inputs."""

    def __init__(self, dataflow: bool = True) -> None:
        super().__init__()
        self.dataflow = dataflow
        self.ops: list[dict[str, Any]] = []
        self.version: dict[Any, int] = {}  # storage key -> current value id
        self.next_value = 0
        self.keep: list[torch.Tensor] = []  # every tensor seen, alive: no storage address is reused
        self.foreign: set[int] = set()  # values of storages the call did not make (a backend's scratch)
        self.last_collective: dict[str, Any] | None = None

    # -- values -----------------------------------------------------------------------------
    def _key(self, t: torch.Tensor) -> Any:
        ptr = t.untyped_storage().data_ptr() if self.dataflow and t.numel() else 0
        return ptr if ptr else ("tensor", id(t))

    def _new_value(self, t: torch.Tensor) -> int:
        self.next_value += 1
        self.version[self._key(t)] = self.next_value
        self.keep.append(t)
        return self.next_value

    def _value(self, t: torch.Tensor) -> int:
        key = self._key(t)
        if key not in self.version:
            value = self._new_value(t)  # a tensor from outside the call (a constant, a backend's scratch)
            self.foreign.add(value)
            return value
        self.keep.append(t)
        return self.version[key]

    def describe(self, t: torch.Tensor, value: int | None = None) -> dict[str, Any]:
        return {"value": self._value(t) if value is None else value, "shape": list(t.shape),
                "stride": list(t.stride()), "offset": int(t.storage_offset()), "dtype": _dtype(t)}

    def start(self, inputs: tuple) -> list[dict[str, Any]]:
        return [self.describe(t, self._new_value(t)) if isinstance(t, torch.Tensor) else {"value": None}
                for t in inputs]

    def finish(self, outputs: tuple) -> list[dict[str, Any]]:
        return [self.describe(t) for t in outputs if isinstance(t, torch.Tensor)]

    # -- ops --------------------------------------------------------------------------------
    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        schema = func._schema
        bound = dict(zip([a.name for a in schema.arguments], args))
        bound.update(kwargs)
        name = schema.name
        reads = [self.describe(t) for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        record: dict[str, Any] = {"op": str(func), "name": name, "reads": reads}
        scalars = {n: v for n, v in bound.items() if isinstance(v, (bool, int, float, str))}
        if scalars:  # alpha/beta of addmm and add, a cat's dim, gelu's approximation: what says whether an op is plain
            record["scalars"] = scalars
        if name in COLLECTIVES:  # what it reads, before it writes (an all-reduce reads and writes one buffer)
            record["inputs"] = self._reads_of(bound, COLLECTIVES[name][2])
        out = func(*args, **kwargs)
        results = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        if name == "_c10d_functional::wait_tensor":
            return out  # the identity on a tensor the collective already recorded
        if name in COLLECTIVES:
            kind, written, _ = COLLECTIVES[name]
            record["kind"] = "collective"
            record["collective"] = kind
            op = bound.get("reduce_op")
            if op is not None:
                record["reduce_op"] = REDUCE_OPS.get(op.op(), str(op.op())) if hasattr(op, "op") else str(op)
            targets = results if "return" in written else [
                t for n in written for t in tree_leaves(bound.get(n)) if isinstance(t, torch.Tensor)]
            record["writes"] = [self.describe(t, self._new_value(t)) for t in targets]
            self.last_collective = record
        elif self._finishes_collective(record, schema, bound):
            return out
        else:
            mutated = [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
            targets = [t for n in mutated for t in tree_leaves(bound.get(n)) if isinstance(t, torch.Tensor)]
            in_keys = {self._key(t) for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
            fresh = [t for t in results if self._key(t) not in in_keys]
            if not mutated and not fresh and results:
                record["kind"] = "view"  # every result aliases an argument: no new value
                record["writes"] = [self.describe(t) for t in results]
            else:
                record["kind"] = "compute"
                record["writes"] = [self.describe(t, self._new_value(t)) for t in targets + fresh]
        self.ops.append(record)
        return out

    def _finishes_collective(self, record: dict[str, Any], schema: Any, bound: dict[str, Any]) -> bool:
        """A backend's own step of the last collective (gloo's reduce-scatter copies its scratch into the
        output when waited on): an op that reads the backend's scratch and writes only into the
        collective's outputs. It is folded into the collective, whose outputs take the new values."""
        last = self.last_collective
        if last is None or not any(r["value"] in self.foreign for r in record["reads"]):
            return False
        mutated = [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
        targets = [t for n in mutated for t in tree_leaves(bound.get(n)) if isinstance(t, torch.Tensor)]
        outs = {self._storage_of(w): i for i, w in enumerate(last["writes"])}
        if not targets or any(self._key(t) not in outs for t in targets):
            return False
        for t in targets:
            last["writes"][outs[self._key(t)]] = self.describe(t, self._new_value(t))
        return True

    def _storage_of(self, desc: dict[str, Any]) -> Any:
        return next((k for k, v in self.version.items() if v == desc["value"]), None)

    def _reads_of(self, bound: dict[str, Any], names: tuple[str, ...]) -> list[dict[str, Any]]:
        return [self.describe(t) for n in names for t in tree_leaves(bound.get(n)) if isinstance(t, torch.Tensor)]


def flops_of(ops: list[dict[str, Any]]) -> int:
    """Floating-point operations of the matmuls and attentions in a trace (2 per multiply-add)."""
    total = 0
    for op in ops:
        name, reads = op["name"], op["reads"]
        shapes = [r["shape"] for r in reads]
        try:
            if name in ("aten::mm", "aten::addmm"):
                a, b = shapes[-2], shapes[-1]
                total += 2 * a[0] * a[1] * b[1]
            elif name in ("aten::bmm", "aten::baddbmm"):
                a, b = shapes[-2], shapes[-1]
                total += 2 * a[0] * a[1] * a[2] * b[2]
            elif "scaled_dot_product" in name:
                q, k = shapes[0], shapes[1]
                total += 4 * _prod(q[:-1]) * k[-2] * q[-1]  # Q K^T and P V
        except (IndexError, TypeError):
            continue
    return total


def comm_bytes_of(ops: list[dict[str, Any]], world: int) -> int:
    """Bytes one rank receives in the trace's collectives (ring algorithms)."""
    total = 0
    for op in ops:
        if op.get("kind") != "collective":
            continue
        kind = op["collective"]
        out_bytes = sum(_prod(w["shape"]) * _itemsize(w["dtype"]) for w in op["writes"])
        if kind == "all_gather" or kind == "all_to_all":
            total += out_bytes * (world - 1) // world
        elif kind == "reduce_scatter":
            total += out_bytes * (world - 1)
        elif kind == "all_reduce":
            total += 2 * out_bytes * (world - 1) // world
        elif kind in ("broadcast", "recv", "scatter", "gather", "reduce"):
            total += out_bytes
    return total


def _prod(shape: list[int]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _itemsize(dtype: str) -> int:
    return {"float64": 8, "int64": 8, "float32": 4, "int32": 4, "bfloat16": 2, "float16": 2, "int16": 2,
            "uint16": 2, "uint8": 1, "int8": 1, "bool": 1}.get(dtype, 4)
