"""`python -m cuco_tui.workload.saved_check WORKLOAD_DIR RUN_DIR WORLD`: the reference's outputs that a
GPU run saved (`cuco workload check --gpu`: reference-SHAPE-rankR.npz in the run folder, written by
harness/worker.py's reference_shape) against the workload's float64 expected() on the very same
inputs. It runs in a process of its own, as the CPU probe does: the workload's module is the
user's code and, for an imported program, expected() starts gloo ranks of its own. Prints one JSON
object, {"rows": [...], "problems": [...]}: a row per shape, rank and output with the comparison
the harness makes of a candidate (harness/verify.py, the workload's rtol and floor)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from cuco_tui.core.reference import load_reference
from cuco_tui.core.workload import Workload
from cuco_tui.harness.verify import compare
from cuco_tui.workload.manifest import load_workload
from cuco_tui.workload.probe import one_line


def saved_file(rundir: Path, shape: str, rank: int) -> Path:
    return Path(rundir) / f"reference-{shape}-rank{rank}.npz"


def _as_numpy_convention(array: Any, dtype: str) -> Any:
    """A saved buffer as fill_inputs(numpy) makes it (probe.py): the harness keeps f16 as raw uint16
    bits on the GPU, NumPy has float16; bf16 stays raw bits in both."""
    return array.view("float16") if dtype == "f16" else array


def check_saved(w: Workload, rundir: Path, world: int) -> dict[str, list]:
    import numpy as np

    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    try:
        ref = load_reference(w.reference)
    except BaseException as exc:  # the user's module: anything may come out of it
        return {"rows": [], "problems": [f"{w.reference.name} cannot be imported: {one_line(exc)}"]}
    for shape in w.verify_shapes:
        dims = dict(shape.dims)
        specs = [ref.io_spec(dims, world, rank) for rank in range(world)]
        missing = [r for r in range(world) if not saved_file(rundir, shape.name, r).is_file()]
        if missing:
            problems.append(f"{shape.name}: no saved buffers of rank(s) {', '.join(map(str, missing))}")
            continue
        saved = [np.load(saved_file(rundir, shape.name, r)) for r in range(world)]
        inputs = [{b.name: _as_numpy_convention(saved[r][f"in.{b.name}"], b.dtype) for b in specs[r].inputs}
                  for r in range(world)]
        try:
            want = ref.expected(inputs, dims, world)
        except BaseException as exc:
            problems.append(f"expected({shape.name}, world {world}) failed: {one_line(exc)}")
            continue
        for rank in range(world):
            for b in specs[rank].outputs:
                got = saved[rank][f"out.{b.name}"]
                expect = np.asarray(want[rank][b.name], dtype=np.float64).reshape(got.shape)
                c = compare(np, got, expect, b.dtype, w.floor)
                rows.append({"shape": shape.name, "rank": rank, "output": b.name, "passed": c.passed(w.rtol),
                             "max_rel_error": c.max_rel_error, "l2_rel_error": c.l2_rel_error,
                             "unwritten": c.unwritten, "nonfinite": c.nonfinite, "elements": c.elements,
                             "worst_index": list(c.worst_index), "worst_got": c.worst_got,
                             "worst_want": c.worst_want})
    return {"rows": rows, "problems": problems}


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m cuco_tui.workload.saved_check WORKLOAD_DIR RUN_DIR WORLD", file=sys.stderr)
        return 2
    w = load_workload(Path(argv[0]))
    print(json.dumps(check_saved(w, Path(argv[1]), int(argv[2]))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
