"""How far an imported program lands from float64 when it computes in its own dtype, measured at
import, so that the tolerance a candidate is verified with leaves room for the program's own
rounding. A candidate is compared with the program run on the GPU in bf16 (say), not with float64:
where the program itself is 2.3 % off float64 at its worst element (PKB's 72, an FFT convolution
in bf16, seen on an H200 on 2026-12-07), a correct candidate that rounds differently can be as far
again from it, and a fixed 2 % would call that candidate wrong.

The program runs once more on the CPU ranks of the import, at the first verify shape, on the
float64 run's own inputs rounded to its dtype; each output is compared with the float64 run's by
the harness's relative error (|got - want| / (|want| + rms(want)), harness/verify.py)."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

from cuco_tui.workload.program.gloo_run import GlooRanks, GlooRun, ProgramRunError, temporary_folder

TORCH_DTYPE = {"bfloat16": "bfloat16", "float16": "float16"}  # the dtypes whose own rounding is measured
HEADROOM = 2.0  # the program's rounding and a candidate's, each up to the measured distance


def own_rounding(ranks: GlooRanks, program: Path, run: GlooRun, shape: str, dims: dict[str, int], dtype: str,
                 timeout: float) -> tuple[float | None, str]:
    """(the largest relative error of an output element of the program in `dtype` against its float64
    run, or None, with why it was not measured)."""
    import numpy as np

    if dtype not in TORCH_DTYPE:
        return None, f"{dtype} is not rounded beyond what the default tolerance allows for"
    world = len(run.ranks)
    specs = [[{"layout": "as given", "shape": list(s)} for s, _ in rep["shapes"][shape]["inputs"]]
             for rep in run.ranks]
    n_out = len(run.ranks[0]["shapes"][shape]["outputs"])
    with temporary_folder() as tmp:
        folder = Path(tmp)
        for r in range(world):
            for i in range(len(specs[r])):
                shutil.copyfile(run.folder / f"in_0_{r}_{i}.npy", folder / f"in_0_{r}_{i}.npy")
        try:
            rounded = ranks.run(program, {shape: dims}, folder, mode="files", inputs=specs, timeout=timeout,
                                cast=TORCH_DTYPE[dtype])
        except ProgramRunError as exc:
            return None, f"the program in {dtype} on the CPU failed ({str(exc)[:160]})"
        worst = 0.0
        for r in range(world):
            for j in range(n_out):
                want = np.asarray(run.output(0, r, j), dtype=np.float64)
                got = np.asarray(rounded.output(0, r, j), dtype=np.float64).reshape(want.shape)
                if not np.all(np.isfinite(got)):
                    return None, f"the program in {dtype} on the CPU gave non-finite values (output {j}, rank {r})"
                rms = float(np.sqrt(np.mean(want * want))) if want.size else 0.0
                rel = np.abs(got - want) / (np.abs(want) + (rms if rms > 0 else 1.0))
                worst = max(worst, float(rel.max()) if rel.size else 0.0)
    return worst, ""


def widened(rtol: float, why: str, worst: float | None, not_measured: str, dtype: str, shape: str) -> tuple[float, str]:
    """The tolerance with room for the program's own rounding, and the sentence that says so."""
    if worst is None:
        return rtol, f"{why} (the program's own rounding not measured: {not_measured})"
    room = HEADROOM * worst
    if room <= rtol:
        return rtol, f"{why}; the program itself in {dtype} is {worst:.2g} from float64 at {shape} (CPU)"
    digits = 10 ** (math.floor(math.log10(room)) - 1)
    wider = math.ceil(room / digits) * digits  # up to two significant digits
    return float(f"{wider:.2g}"), (f"{why}; widened from {rtol:g}: the program itself in {dtype} is {worst:.2g} from "
                                   f"float64 at {shape} (CPU), and a candidate may round as far again")
