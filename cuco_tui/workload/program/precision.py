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

from cuco_tui.core.workload import WorkloadError
from cuco_tui.workload.program.gloo_run import GlooRanks, GlooRun, ProgramRunError, temporary_folder

TORCH_DTYPE = {"bfloat16": "bfloat16", "float16": "float16"}  # the dtypes whose own rounding is measured
HEADROOM = 2.0  # the program's rounding and a candidate's, each up to the measured distance
# Past this a tolerance would let wrong answers through (a candidate writing zeros passes at rtol 1):
# a program that far from float64 makes choices its rounding flips (an argmax, a top-k routing).
CAP = 0.1
CAST_TIMEOUT_S = 120.0  # the program in its dtype at the verify shapes: seconds where it works


def own_rounding(ranks: GlooRanks, program: Path, run: GlooRun, verify: dict[str, dict[str, int]], dtype: str,
                 timeout: float) -> tuple[float | None, str, str]:
    """(the largest relative error of a floating output element of the program in `dtype` against
    its float64 run over the verify shapes, or None; the shape of it; why it was not measured).
    Integer outputs must match exactly whatever the tolerance: one that the program's rounding
    changes raises WorkloadError (PKB's 79, a k-nearest-neighbour search returning indices, whose
    reference differed from float64 on an H100 on 2026-12-07)."""
    if dtype not in TORCH_DTYPE:
        return None, "", f"{dtype} is not rounded beyond what the default tolerance allows for"
    worst, where = 0.0, ""
    for index, (shape, dims) in enumerate(verify.items()):
        try:
            got = _one_shape(ranks, program, run, index, shape, dims, dtype, min(timeout, CAST_TIMEOUT_S))
        except ProgramRunError as exc:
            return None, "", f"the program in {dtype} on the CPU failed ({str(exc)[:160]})"
        except WorkloadError:
            raise  # an integer output its rounding changes: the import is refused
        except (OSError, ValueError) as exc:  # its outputs in bf16 are not those of float64 (count, size)
            return None, "", f"the program in {dtype} on the CPU gave other outputs ({str(exc)[:120]})"
        if isinstance(got, str):
            return None, "", got
        if got > worst or not where:
            worst, where = got, shape
    return worst, where, ""


def _one_shape(ranks: GlooRanks, program: Path, run: GlooRun, index: int, shape: str, dims: dict[str, int],
               dtype: str, timeout: float) -> float | str:
    import numpy as np

    world = len(run.ranks)
    specs = [[{"layout": "as given", "shape": list(s)} for s, _ in rep["shapes"][shape]["inputs"]]
             for rep in run.ranks]
    outs = run.ranks[0]["shapes"][shape]["outputs"]
    floating = [j for j, (_, kind) in enumerate(outs) if kind.startswith(("float", "bfloat"))]
    integer = [j for j, (_, kind) in enumerate(outs) if j not in floating]
    worst = 0.0
    with temporary_folder() as tmp:
        folder = Path(tmp)
        for r in range(world):
            for i in range(len(specs[r])):
                shutil.copyfile(run.folder / f"in_{index}_{r}_{i}.npy", folder / f"in_0_{r}_{i}.npy")
        rounded = ranks.run(program, {shape: dims}, folder, mode="files", inputs=specs, timeout=timeout,
                            cast=TORCH_DTYPE[dtype])
        for r in range(world):
            for j in floating:
                want = np.asarray(run.output(index, r, j), dtype=np.float64)
                got = np.asarray(rounded.output(0, r, j), dtype=np.float64).reshape(want.shape)
                if not np.all(np.isfinite(got)):
                    return f"the program in {dtype} on the CPU gave non-finite values (output {j}, rank {r}, {shape})"
                rms = float(np.sqrt(np.mean(want * want))) if want.size else 0.0
                rel = np.abs(got - want) / (np.abs(want) + (rms if rms > 0 else 1.0))
                worst = max(worst, float(rel.max()) if rel.size else 0.0)
            for j in integer:
                want = np.asarray(run.output(index, r, j))
                differ = int(np.count_nonzero(np.asarray(rounded.output(0, r, j)).reshape(want.shape) != want))
                if differ:
                    raise WorkloadError(
                        f"{program.name}: output {j} ({outs[j][1]}) of solution in {dtype} differs from its float64 "
                        f"run at {differ} of {want.size} elements (rank {r}, {shape}, on the CPU): integers or flags chosen "
                        f"by rounded values (an argmax, a top-k, a comparison) cannot be checked against float64, so no candidate "
                        f"could pass; return the values they pick, or make the choice in float32 (nothing was "
                        f"written)")
    return worst


def widened(rtol: float, why: str, worst: float | None, not_measured: str, dtype: str, shape: str) -> tuple[float, str]:
    """The tolerance with room for the program's own rounding, and the sentence that says so."""
    if worst is None:
        return rtol, f"{why} (the program's own rounding not measured: {not_measured})"
    room = HEADROOM * worst
    if room <= rtol:
        return rtol, f"{why}; the program itself in {dtype} is {worst:.2g} from float64 at {shape} (CPU)"
    if room > CAP:
        return rtol, (f"{why}; kept, though the program itself in {dtype} is {worst:.2g} from float64 at {shape} "
                      f"(CPU): past any tolerance that still tells right from wrong (does its rounding flip a "
                      f"choice, an argmax or a routing?); a correct candidate may fail: check the reference with "
                      f"`cuco workload check --gpu`, and set rtol yourself if you accept that")
    digits = 10 ** (math.floor(math.log10(room)) - 1)
    wider = math.ceil(room / digits - 1e-9) * digits  # up to two significant digits
    return float(f"{wider:.2g}"), (f"{why}; widened from {rtol:g}: the program itself in {dtype} is {worst:.2g} from "
                                   f"float64 at {shape} (CPU), and a candidate may round as far again")
