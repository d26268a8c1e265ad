"""The engineer's program file and its convention, checked (runs in the processes that run the
program; needs torch): `SHAPES` (names starting with "verify" are verify shapes, the rest bench
shapes), `make_inputs(rank, world, *, dims..., dtype=..., device=...)`, `solution(*inputs)`, or
`solution(*inputs, *, some dims...)`: keyword-only parameters of solution named as make_inputs' dims
are given the shape's values at every call (a head count, a block size the program needs beside its
tensors; `**dims` takes them all). Every problem is a ProgramError whose message is one line naming it."""

from __future__ import annotations

import functools
import importlib.util
import inspect
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from cuco_tui.workload.program.layout import HARNESS_DTYPES


class ProgramError(Exception):
    """The program breaks the convention, or fails when run: one line saying what and where."""


@dataclass(frozen=True)
class Convention:
    path: str
    dims: tuple[str, ...]  # make_inputs' dimension keywords, in its signature's order
    shapes: dict[str, dict[str, int]]  # SHAPES as given, in order
    dtype: str  # make_inputs' default dtype, a torch dtype name ("bfloat16")
    input_names: tuple[str, ...]  # solution's parameter names ("" for *args: in0, in1, ... then)

    @property
    def verify(self) -> list[str]:
        return [n for n in self.shapes if n.startswith("verify")]

    @property
    def bench(self) -> list[str]:
        return [n for n in self.shapes if not n.startswith("verify")]

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "dims": list(self.dims), "shapes": self.shapes, "dtype": self.dtype,
                "input_names": list(self.input_names)}


def where(exc: BaseException, path: str) -> str:
    """` (program.py:12)`: the last frame of the traceback inside the program's file, else the last."""
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ else []
    mine = [f for f in frames if Path(f.filename).resolve() == Path(path).resolve()]
    frame = (mine or frames or [None])[-1]
    return f" ({Path(frame.filename).name}:{frame.lineno})" if frame else ""


def failure(what: str, exc: BaseException, path: str) -> ProgramError:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return ProgramError(f"{what} failed: {type(exc).__name__}{': ' + text if text else ''}{where(exc, path)}")


def load_module(path: str) -> ModuleType:
    name = Path(path).name
    source = Path(path).read_text()
    try:
        compile(source, path, "exec")
    except SyntaxError as exc:
        raise ProgramError(f"{name}:{exc.lineno}: syntax error: {exc.msg}") from None
    spec = importlib.util.spec_from_file_location(f"cuco_program_{Path(path).stem}", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[spec.name] = module  # type: ignore[union-attr]  (dataclasses and pickling look it up)
    try:
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    except BaseException as exc:  # the user's module: anything may come out of it
        raise failure(f"importing {name}", exc, path) from None
    return module


def check_convention(module: ModuleType, path: str) -> Convention:
    name = Path(path).name
    shapes = getattr(module, "SHAPES", None)
    if shapes is None:
        raise ProgramError(f"{name} defines no SHAPES: a dict of named shapes, e.g. SHAPES = {{\"verify\": "
                           f"dict(M=256, K=192, N=320), \"large\": dict(M=8192, K=4096, N=6144)}}")
    if isinstance(shapes, dict) and not shapes:
        raise ProgramError(f"{name}: SHAPES is empty: name at least a verify shape and a bench shape, e.g. SHAPES = "
                           f"{{\"verify\": dict(M=256, K=192, N=320), \"large\": dict(M=8192, K=4096, N=6144)}}")
    if not isinstance(shapes, dict):
        raise ProgramError(f"{name}: SHAPES must map shape names to dicts of dims, not {type(shapes).__name__}")
    odd = next((k for k, v in shapes.items() if not isinstance(v, dict)), None)
    if odd is not None:
        raise ProgramError(f"{name}: SHAPES must map shape names to dicts of dims, and SHAPES[{odd!r}] is a "
                           f"{type(shapes[odd]).__name__}")
    for fn in ("make_inputs", "solution"):
        if not callable(getattr(module, fn, None)):
            what = ("make_inputs(rank, world, *, dims..., dtype, device), which builds one rank's inputs"
                    if fn == "make_inputs" else "solution(*inputs), the function every rank runs under "
                                                 "torch.distributed")
            raise ProgramError(f"{name} defines no {what}")
    params = list(inspect.signature(module.make_inputs).parameters.values())
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) < 2:
        raise ProgramError(f"{name}: make_inputs must take rank and world first: make_inputs(rank, world, *, "
                           f"dims..., dtype, device)")
    named = {p.name: p for p in params[2:]}
    for kw in ("dtype", "device"):
        if kw not in named and not any(p.kind == p.VAR_KEYWORD for p in params):
            raise ProgramError(f"{name}: make_inputs takes no `{kw}` keyword; it must build its inputs with the "
                               f"{kw} it is given (the tool asks for float64 on the CPU)")
    default = named["dtype"].default if "dtype" in named else inspect.Parameter.empty
    if not isinstance(default, torch.dtype):
        raise ProgramError(f"{name}: make_inputs' dtype default must be the torch dtype the program runs in "
                           f"(dtype=torch.bfloat16), not {default!r}" if default is not inspect.Parameter.empty
                           else f"{name}: make_inputs' dtype has no default: give the dtype the program runs in "
                                f"(dtype=torch.bfloat16)")
    dtype = str(default).removeprefix("torch.")
    if dtype not in HARNESS_DTYPES:
        raise ProgramError(f"{name}: make_inputs' default dtype {dtype} is not one the harness runs "
                           f"({', '.join(k for k in HARNESS_DTYPES if k != 'bool')})")
    dims = tuple(p.name for p in params[2:] if p.name not in ("dtype", "device")
                 and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD))
    if not dims:
        dims = tuple(next(iter(shapes.values())))
    clean: dict[str, dict[str, int]] = {}
    for shape, values in shapes.items():
        if not isinstance(shape, str) or not shape.replace("-", "_").replace(".", "_").isidentifier():
            raise ProgramError(f"{name}: SHAPES names a shape {shape!r}; use letters, digits, '-' and '_'")
        missing = [d for d in dims if d not in values]
        extra = [d for d in values if d not in dims]
        if missing or extra:
            problem = (f"lacks {', '.join(missing)}" if missing else f"gives {', '.join(extra)}, which make_inputs "
                                                                     f"does not take")
            raise ProgramError(f"{name}: SHAPES[{shape!r}] {problem} (make_inputs takes {', '.join(dims)})")
        for d, v in values.items():
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ProgramError(f"{name}: SHAPES[{shape!r}] gives {d}={v!r}; every dim is a positive integer")
        clean[shape] = {d: int(values[d]) for d in dims}
    _check_solution_dims(module.solution, dims, name)
    conv = Convention(path, dims, clean, dtype, _input_names(module.solution))
    if not conv.verify:
        raise ProgramError(f"{name}: SHAPES has no verify shape: name at least one shape `verify...` (small: it "
                           f"runs in float64 on the CPU here and is checked on the GPU)")
    if not conv.bench:
        raise ProgramError(f"{name}: SHAPES has only verify shapes: add a bench shape (any name not starting with "
                           f"`verify`), the size the search is timed on")
    return conv


def _params(solution: Any) -> list[inspect.Parameter]:
    try:
        return list(inspect.signature(solution).parameters.values())
    except (TypeError, ValueError):
        return []


def _input_names(solution: Any) -> tuple[str, ...]:
    """solution's names of its tensor inputs: its positional parameters (keyword-only ones are dims)."""
    params = [p for p in _params(solution) if p.kind not in (p.KEYWORD_ONLY, p.VAR_KEYWORD)]
    if any(p.kind == p.VAR_POSITIONAL for p in params):
        return ()
    return tuple(p.name for p in params)


def _check_solution_dims(solution: Any, dims: tuple[str, ...], name: str) -> None:
    """solution's keyword-only parameters without a default must be dims: nothing else is given."""
    odd = [p.name for p in _params(solution) if p.kind == p.KEYWORD_ONLY and p.name not in dims
           and p.default is inspect.Parameter.empty]
    if odd:
        raise ProgramError(f"{name}: solution takes the keyword {odd[0]}, which is not a dim of make_inputs "
                           f"({', '.join(dims)}); its keyword-only parameters are given the shape's dims by name")


def dims_for(solution: Any, dims: dict[str, int]) -> dict[str, int]:
    """The shape's dims solution takes by keyword: its keyword-only parameters named as dims, or
    every dim where it takes **kwargs."""
    params = _params(solution)
    if any(p.kind == p.VAR_KEYWORD for p in params):
        inputs = {p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)}
        return {d: int(v) for d, v in dims.items() if d not in inputs}
    wanted = {p.name for p in params if p.kind == p.KEYWORD_ONLY}
    return {d: int(v) for d, v in dims.items() if d in wanted}


def bound_solution(module: ModuleType, dims: dict[str, int]) -> Any:
    """solution with the shape's dims it takes by keyword bound: call it with the inputs alone."""
    given = dims_for(module.solution, dims)
    return functools.partial(module.solution, **given) if given else module.solution


def load_program(path: str) -> tuple[ModuleType, Convention]:
    module = load_module(path)
    return module, check_convention(module, path)


def as_tuple(value: Any, what: str) -> tuple[torch.Tensor, ...]:
    """make_inputs' or solution's result as a tuple of tensors (one tensor is a tuple of one)."""
    items = (value,) if isinstance(value, torch.Tensor) else value
    if not isinstance(items, (tuple, list)) or not items or not all(isinstance(t, torch.Tensor) for t in items):
        raise ProgramError(f"{what} must return a tensor or a tuple of tensors, not {_kind(value)}")
    return tuple(items)


def _kind(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of " + ", ".join(sorted({type(v).__name__ for v in value})) if value \
            else f"an empty {type(value).__name__}"
    return type(value).__name__


def check_inputs(inputs: tuple[torch.Tensor, ...], dtype: torch.dtype, device: str, names: list[str]) -> None:
    """make_inputs honours dtype (every floating-point input in it) and device."""
    for i, t in enumerate(inputs):
        label = f"input {i} ({names[i]})" if i < len(names) else f"input {i}"
        if t.device.type != torch.device(device).type:
            raise ProgramError(f"make_inputs ignores device: asked for {device!r}, {label} is on {t.device}")
        if t.is_floating_point() and t.dtype != dtype:
            raise ProgramError(f"make_inputs ignores dtype: asked for {dtype}, {label} is {t.dtype}")
    if not any(t.is_floating_point() for t in inputs):
        raise ProgramError("make_inputs gives no floating-point input: nothing shows that it honours dtype")
