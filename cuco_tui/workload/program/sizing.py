"""Every shape of a program sized without memory or peers (runs in the process that loads the
program; needs torch): make_inputs on the meta device and `solution` under torch.distributed's fake
process group, which returns from every collective at once. A program the meta device cannot run
(a loss that reads `.item()`, a `.tolist()`, an op without a meta kernel) is sized on the CPU
instead, under the same fake group, where its inputs are small enough (CPU_SIZING_BYTES). Gives
each rank's input and output shapes and dtypes at every shape and world size, one rank's FLOPs and
received bytes, and which dims the program splits across ranks (an extent that is dim // world at
every shape); a split dim that does not divide by the world size is the program's error, found
here before anything runs."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from cuco_tui.workload.program.tracing import OpRecorder, comm_bytes_of, flops_of
from cuco_tui.workload.program.user_module import (Convention, ProgramError, as_tuple, bound_solution, check_inputs,
                                                   failure)

WORLD_SIZES = (2, 4, 8)  # offered beside the one asked for, where the program runs at every shape
# The most input bytes a rank's shape may hold to be sized on the CPU when the meta device cannot
# run the program. It bounds memory, not time: PyTorch's bf16 matmul runs at ~20 GFLOP/s on one
# CPU core, so a GEMM-heavy program at this size takes about a minute a rank and shape (the
# import's time limit names the CPU sizing when it runs out there).
CPU_SIZING_BYTES = 256 << 20


@dataclass
class Sizes:
    world: int
    shapes: list[dict[str, Any]]  # {"shape", "dims", "flops", "comm_bytes", "ranks": [{"inputs", "outputs"}]}
    ops: dict[str, list[dict[str, Any]]]  # shape -> rank 0's trace (on the meta device, else on the CPU)

    def to_json(self) -> dict[str, Any]:
        return {"world": self.world, "shapes": self.shapes}


def _fake_group(rank: int, world: int) -> None:
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        dist.destroy_process_group()
    # The fake backend named for the meta device too: batched point-to-point ops (batch_isend_irecv)
    # look their backend up by the tensors' device, which "fake" alone leaves without one.
    dist.init_process_group("cpu:fake,cuda:fake,meta:fake", store=FakeStore(), rank=rank, world_size=world)


def _spec(tensors: tuple[torch.Tensor, ...]) -> list[list[Any]]:
    return [[list(t.shape), str(t.dtype).removeprefix("torch.")] for t in tensors]


def check_dtype_honoured(module: Any, conv: Convention, world: int) -> None:
    """make_inputs asked for float64 on the meta device gives float64 meta tensors."""
    shape = conv.verify[0]
    _fake_group(0, world)
    try:
        inputs = as_tuple(module.make_inputs(0, world, **conv.shapes[shape], dtype=torch.float64, device="meta"),
                          "make_inputs")
    except ProgramError:
        raise
    except Exception as exc:
        raise _meta_failure(f"make_inputs(0, {world}, {shape}, dtype=torch.float64, device='meta')", exc,
                            conv.path) from None
    check_inputs(inputs, torch.float64, "meta", list(conv.input_names))


def _meta_only(exc: BaseException) -> bool:
    """Whether `exc` is the meta device's limit (no data: .item(), .tolist(), an op without a meta
    kernel) rather than the program's own failure, which any device would raise."""
    return "meta" in str(exc).lower() or isinstance(exc, NotImplementedError)


def _meta_failure(what: str, exc: BaseException, path: str, why_not_cpu: str = "") -> ProgramError:
    err = failure(what, exc, path)
    if not _meta_only(exc):
        return err  # the program's own failure, whatever the device
    cpu = f"; {why_not_cpu}" if why_not_cpu else ""
    return ProgramError(f"{err}; the tool sizes every shape on the meta device (no memory, no peers){cpu}: "
                        f"create tensors on `device` and keep `solution` free of .item() and .tolist()")


def _nbytes(tensors: tuple[torch.Tensor, ...]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


@dataclass
class _Ran:
    """One traced call of a rank at a shape, or what failed in it (`what`, `exc`)."""

    inputs: tuple[torch.Tensor, ...] = ()
    outputs: tuple[torch.Tensor, ...] = ()
    ops: list[dict[str, Any]] = field(default_factory=list)
    what: str = ""
    exc: BaseException | None = None


def _run(module: Any, conv: Convention, shape: str, dims: dict[str, int], rank: int, world: int, dtype: Any,
         device: str) -> _Ran:
    """make_inputs and one traced call of solution on `device` under the fake group. A broken
    convention raises ProgramError; the program's own exception comes back with the call it ended."""
    _fake_group(rank, world)
    try:
        inputs = as_tuple(module.make_inputs(rank, world, **dims, dtype=dtype, device=device), "make_inputs")
    except ProgramError:
        raise
    except Exception as exc:
        return _Ran(what=f"make_inputs({rank}, {world}, {shape}, device='{device}')", exc=exc)
    check_inputs(inputs, dtype, device, list(conv.input_names))
    recorder = OpRecorder(dataflow=False)
    try:
        with recorder:  # in the grad mode solution sets itself (its own autograd, or @torch.no_grad())
            outputs = as_tuple(bound_solution(module, dims)(*inputs), "solution")
    except ProgramError:
        raise
    except Exception as exc:
        return _Ran(inputs, what=f"solution at {shape}, rank {rank} of {world}", exc=exc)
    return _Ran(inputs, outputs, recorder.ops)


def _size_rank(module: Any, conv: Convention, shape: str, dims: dict[str, int], rank: int, world: int,
               dtype: Any) -> _Ran:
    """One rank at one shape: on the meta device, else (where only the meta device's lack of data
    stops it) on the CPU, if its inputs are small enough."""
    meta = _run(module, conv, shape, dims, rank, world, dtype, "meta")
    if meta.exc is None:
        return meta
    if not _meta_only(meta.exc):
        raise failure(meta.what, meta.exc, conv.path) from None
    if not meta.inputs:  # make_inputs itself needs data: its size cannot be known before running it
        raise _meta_failure(meta.what, meta.exc, conv.path) from None
    size = _nbytes(meta.inputs)
    if size > CPU_SIZING_BYTES:
        raise _meta_failure(meta.what, meta.exc, conv.path,
                            f"its {size / 2**20:.0f} MiB of inputs at {shape} are too many to size it on the CPU "
                            f"instead (at most {CPU_SIZING_BYTES >> 20} MiB)") from None
    cpu = _run(module, conv, shape, dims, rank, world, dtype, "cpu")
    if cpu.exc is None:
        return cpu
    if _meta_only(cpu.exc):  # the meta device's words, whatever the CPU run hit
        raise _meta_failure(meta.what, meta.exc, conv.path) from None
    raise failure(f"{cpu.what} (on the CPU: the meta device cannot run it)", cpu.exc, conv.path) from None


def size_world(module: Any, conv: Convention, world: int) -> Sizes:
    dtype = getattr(torch, conv.dtype)
    out: list[dict[str, Any]] = []
    ops: dict[str, list[dict[str, Any]]] = {}
    for shape, dims in conv.shapes.items():
        ranks = []
        flops = comm = 0
        for rank in range(world):
            ran = _size_rank(module, conv, shape, dims, rank, world, dtype)
            inputs, outputs = ran.inputs, ran.outputs
            if rank == 0:
                flops, comm = flops_of(ran.ops), comm_bytes_of(ran.ops, world)
                ops[shape] = ran.ops
            ranks.append({"inputs": _spec(inputs), "outputs": _spec(outputs)})
        out.append({"shape": shape, "dims": dims, "flops": flops, "comm_bytes": comm, "ranks": ranks})
    if dist.is_initialized():
        dist.destroy_process_group()
    return Sizes(world, out, ops)


def split_dims(sizes: Sizes, dims: tuple[str, ...]) -> dict[str, str]:
    """dim -> the buffer extent that shows the program splits it ("input 0 axis 1"): an extent equal to
    dim // world at every shape and smaller than dim at one."""
    found: dict[str, str] = {}
    world = sizes.world
    first = sizes.shapes[0]["ranks"][0]
    for kind in ("inputs", "outputs"):
        for i, (shape0, _) in enumerate(first[kind]):
            for axis in range(len(shape0)):
                for d in dims:
                    rows = [(s["dims"][d], s["ranks"][0][kind][i][0]) for s in sizes.shapes
                            if i < len(s["ranks"][0][kind]) and axis < len(s["ranks"][0][kind][i][0])]
                    if len(rows) != len(sizes.shapes):
                        continue
                    if all(ext[axis] == v // world for v, ext in rows) and any(ext[axis] != v for v, ext in rows):
                        found.setdefault(d, f"{kind[:-1]} {i} axis {axis}")
    return found


def check_divides(sizes: Sizes, conv: Convention) -> None:
    """A split dim that does not divide by the world size: the program would floor it silently."""
    for d, evidence in split_dims(sizes, conv.dims).items():
        for s in sizes.shapes:
            v = s["dims"][d]
            if v % sizes.world:
                raise ProgramError(f"shape {s['shape']}: {d}={v} does not divide by the world size {sizes.world} "
                                   f"(the program splits {d} across ranks: {evidence} is {d} // world)")


def size_all(module: Any, conv: Convention, world: int) -> tuple[dict[int, Sizes], dict[int, str]]:
    """Sizes at `world` (any problem is the program's error) and at the other usual world sizes
    (a problem there leaves that size out, with the reason)."""
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    check_dtype_honoured(module, conv, world)
    main = size_world(module, conv, world)
    check_divides(main, conv)
    done, refused = {world: main}, {}
    for w in WORLD_SIZES:
        if w == world:
            continue
        try:
            other = size_world(module, conv, w)
            check_divides(other, conv)
            done[w] = other
        except ProgramError as exc:
            refused[w] = str(exc)
    return dict(sorted(done.items())), refused
