"""ParallelKernelBench's inputs, introspected for benchmarks/parallelkernelbench.py (step 1 there):

    python3 benchmarks/pkb_introspect.py PKB_CLONE IDS OUT.json [WORLDS]

run in a process of its own (it imports torch and PKB's code): for every problem of IDS (`1-20,33`),
solution's parameter names and each of create_input_tensor's outputs classed over every world size,
rank, shape and two trials (_classify says into what), each problem bounded by an alarm."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parent)]
from parallelkernelbench import INTROSPECT_WORLDS, SHAPES, Problem, discover, parse_ids  # noqa: E402


def _plain(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    return isinstance(value, (list, tuple)) and type(value) in (list, tuple) and all(_plain(v) for v in value)


def _kind(value: Any) -> str:
    import torch

    if isinstance(value, torch.Tensor):
        return "tensor"
    return "plain" if _plain(value) else type(value).__name__


def introspect_problem(pkb: Path, problem: Problem,
                       world_sizes: tuple[int, ...] = INTROSPECT_WORLDS) -> dict[str, Any]:
    """{"params": solution's parameter names or None, "args": [{"kind", "value"?}], "device", "error"?}."""
    import inspect

    import torch
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if str(pkb) not in sys.path:
        sys.path.insert(0, str(pkb))
    from utils.input_output_tensors import create_input_tensor

    out: dict[str, Any] = {"params": None}
    try:
        module = _load(problem.path, f"pkb_reference_{problem.id}")
        params = list(inspect.signature(module.solution).parameters.values())
        if all(p.kind == p.POSITIONAL_OR_KEYWORD for p in params):
            out["params"] = [p.name for p in params]
    except Exception as exc:  # noqa: BLE001 - PKB's module: report, go on with the next problem
        return {**out, "error": f"loading it failed: {type(exc).__name__}: {_first_line(exc)}"}
    calls: list[tuple] = []
    keys: list[str] = []  # "world/rank/MxN" of each call
    again: list[tuple] = []  # the same calls at another trial: a plain value that changes is random
    worlds: list[bool] = []  # per call and input: whether it is the world's process group
    for device in ("meta", "cpu"):
        calls, keys, again, worlds, out["device"] = [], [], [], [], device
        try:
            for world in world_sizes:
                for rank in range(world):
                    if dist.is_initialized():
                        dist.destroy_process_group()
                    dist.init_process_group("cpu:fake,meta:fake", store=FakeStore(), rank=rank, world_size=world)
                    for dims in SHAPES.values():
                        for trial, into in ((0, calls), (1, again)):
                            made = create_input_tensor(rank, world, problem.id, (dims["M"], dims["N"]),
                                                       torch.float32, trial=trial, device=device)
                            into.append(tuple(made) if isinstance(made, (tuple, list)) else (made,))
                        keys.append(f"{world}/{rank}/{dims['M']}x{dims['N']}")
                        worlds.append(tuple(v is dist.group.WORLD for v in calls[-1]))
            out.pop("error", None)
            break
        except Exception as exc:  # noqa: BLE001 - PKB's input builder: try the next device, else report
            out["error"] = f"create_input_tensor on {device} failed: {type(exc).__name__}: {_first_line(exc)}"
    if dist.is_initialized():
        dist.destroy_process_group()
    if "error" in out or len({len(c) for c in calls + again}) != 1:
        out.setdefault("error", "create_input_tensor gives a different number of inputs by rank or shape")
        return out
    out["args"] = [_classify([c[i] for c in calls], [c[i] for c in again], [w[i] for w in worlds], keys)
                   for i in range(len(calls[0]))]
    return out


def _classify(values: list[Any], again: list[Any], world_group: list[bool], keys: list[str]) -> dict[str, Any]:
    """One of PKB's inputs over every call: a tensor; a constant; the world's process group (given
    at call time); an nn.Linear (its weight and bias become inputs); a list of tensors of the same
    length at every call (each an input); a plain value that follows the world size, rank and shape
    but not the trial (held per call, given by M and N); else other."""
    import torch

    kinds = {_kind(v) for v in values}
    if kinds == {"tensor"}:
        return {"kind": "tensor"}
    if kinds == {"plain"} and all(v == values[0] and repr(v) == repr(values[0]) for v in values):
        return {"kind": "constant", "value": repr(values[0])}
    if all(world_group):
        return {"kind": "world_group"}
    if all(type(v) is torch.nn.Linear for v in values) and len({v.bias is None for v in values}) == 1:
        return {"kind": "linear", "bias": values[0].bias is not None}
    if all(isinstance(v, (list, tuple)) and v and all(isinstance(t, torch.Tensor) for t in v) for v in values) \
            and len({len(v) for v in values}) == 1:
        return {"kind": "tensor_list", "length": len(values[0])}
    if kinds == {"plain"} and all(repr(a) == repr(b) for a, b in zip(values, again)):
        return {"kind": "derived", "values": {k: repr(v) for k, v in zip(keys, values)}}
    varies = " (varies with the shape, world size or rank)" if kinds == {"plain"} else ""
    return {"kind": "other", "what": "/".join(sorted(kinds)) + varies}


def _load(path: Path, name: str) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:200]


def main(pkb: str, ids: str, out: str, worlds: str = "") -> int:
    """Every problem of IDS, each bounded by an alarm."""
    import warnings

    warnings.simplefilter("ignore")
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    wanted = parse_ids(ids)
    # The importer sizes at 2, 4 and 8 ranks; an import at another world size needs its values too.
    every = tuple(sorted(set(INTROSPECT_WORLDS) | {int(w) for w in worlds.split(",") if w.strip()}))
    report: dict[str, Any] = {}

    def expired(*_: Any) -> None:
        raise TimeoutError("building its inputs took over 60 s")

    signal.signal(signal.SIGALRM, expired)
    for problem in discover(Path(pkb)):
        if problem.id in wanted:
            signal.alarm(60)
            try:
                report[str(problem.id)] = introspect_problem(Path(pkb), problem, every)
            except Exception as exc:  # noqa: BLE001 - one problem's failure is its row, not the run's
                report[str(problem.id)] = {"params": None, "error": f"{type(exc).__name__}: {_first_line(exc)}"}
            finally:
                signal.alarm(0)
    Path(out).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
