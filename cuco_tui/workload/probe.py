"""`python -m cuco_tui.workload.probe MANIFEST_DIR`: import a workload's reference in a process of
its own and try its contract without a GPU (io_spec on every shape, world size and rank; fill_inputs
and expected with NumPy on the smallest verification shape; the Reference class's methods). Prints
one JSON object: {"problems": [...], "notes": [...]}. `cuco workload check` runs it."""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path
from typing import Any

from cuco_tui.core.reference import load_reference
from cuco_tui.core.workload import Workload
from cuco_tui.workload.manifest import load_workload


def one_line(exc: BaseException) -> str:
    """An exception of the workload's code as one line, with the file and line it came from."""
    frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    where = f" ({Path(frame.filename).name}:{frame.lineno})" if frame else ""
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}{where}"


def probe(w: Workload) -> dict[str, list[str]]:
    problems: list[str] = []
    notes: list[str] = []
    try:
        ref = load_reference(w.reference)
    except BaseException as exc:  # the user's module: anything may come out of it
        return {"problems": [f"{w.reference.name} cannot be imported: {one_line(exc)}"], "notes": []}
    missing = ref.missing()
    if missing:
        problems.append(f"{w.reference.name} lacks {', '.join(missing)} (docs/workloads.md: the reference's API)")
    for method in ref.missing_methods():
        problems.append(f"{w.reference.name}: Reference has no method {method}(inputs, outputs)")
    if "Reference" not in missing and not ref.counts_rank_bytes():
        notes.append("Reference has no comm_bytes(): the baseline cannot give a bytes/bandwidth bound")
    if missing:
        return {"problems": problems, "notes": notes}
    for world in w.world_sizes:
        for shape in w.verify_shapes + w.bench_shapes:
            for rank in range(world):
                where = f"({shape.name}, world {world}, rank {rank})"
                try:
                    problems += ref.spec_problems(dict(shape.dims), world, rank, where)
                except BaseException as exc:
                    problems.append(f"io_spec{where} failed: {one_line(exc)}")
                if len(problems) > 5:
                    return {"problems": problems, "notes": notes}
    import numpy as np

    smallest = min(w.verify_shapes, key=lambda s: np.prod(list(s.dims.values())))
    world = min(w.world_sizes)
    dims = dict(smallest.dims)
    all_inputs = []
    try:
        for rank in range(world):
            spec = ref.io_spec(dims, world, rank)
            inputs = {b.name: np.zeros(b.shape, dtype=_numpy_dtype(b.dtype)) for b in spec.inputs}
            ref.fill_inputs(np, inputs, dims, world, rank, 1)
            for name, arr in inputs.items():
                if arr.size > 1 and np.all(arr == arr.flat[0]):
                    problems.append(f"fill_inputs({smallest.name}, rank {rank}) leaves {name!r} constant; draw "
                                    f"random values (constant inputs hide indexing bugs)")
            all_inputs.append(inputs)
    except BaseException as exc:
        problems.append(f"fill_inputs({smallest.name}, world {world}) with NumPy failed: {one_line(exc)}")
        return {"problems": problems, "notes": notes}
    try:
        want = ref.expected(all_inputs, dims, world)
    except BaseException as exc:
        problems.append(f"expected({smallest.name}, world {world}) failed: {one_line(exc)}")
        return {"problems": problems, "notes": notes}
    if not isinstance(want, list) or len(want) != world:
        problems.append(f"expected() must return one dict per rank ({world}), not {type(want).__name__}")
        return {"problems": problems, "notes": notes}
    for rank, answer in enumerate(want):
        outs = {b.name: b.shape for b in ref.io_spec(dims, world, rank).outputs}
        for name, extents in outs.items():
            got = answer.get(name) if isinstance(answer, dict) else None
            if got is None:
                problems.append(f"expected() gives rank {rank} no {name!r}")
            elif tuple(np.shape(got)) != extents:
                problems.append(f"expected() gives rank {rank} {name!r} of shape {tuple(np.shape(got))}, "
                                f"io_spec says {extents}")
            elif not np.all(np.isfinite(got)):
                problems.append(f"expected() gives rank {rank} non-finite values in {name!r}")
    notes.append(f"reference probed on {smallest.name} at world {world} with NumPy (no GPU)")
    return {"problems": problems, "notes": notes}


def _numpy_dtype(name: str) -> Any:
    import numpy as np

    return {"bf16": np.uint16, "f16": np.float16, "f32": np.float32, "i32": np.int32, "i64": np.int64,
            "u8": np.uint8}[name]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m cuco_tui.workload.probe WORKLOAD_DIR", file=sys.stderr)
        return 2
    print(json.dumps(probe(load_workload(Path(argv[0])))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
