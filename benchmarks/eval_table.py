"""One table from `cuco eval --json` results and a `cuco baseline --json`, all of one device call:
per candidate and shape, its time (median of the slowest rank, IQR %), the reference's time in the
same run, the speedup, and the time over the perfect-overlap bound of `cuco baseline`
(evaluate/baseline.py's bound, the one a search measures against: max(compute alone, bytes / peer
copy bandwidth)).

    python3 benchmarks/eval_table.py BASELINE.json NAME=EVAL.json [NAME=EVAL.json ...] [--md]
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from cuco_tui.evaluate.baseline import Baseline, bound


def bounds(baseline: dict) -> dict[str, float]:
    """Per shape, the bound of a `cuco baseline --json` output."""
    return {s.shape: bound(s) for s in Baseline.from_dict(baseline).shapes}


def candidate_cells(results: dict[str, dict], names: list[str], shape: str,
                    bound: float | None) -> tuple[list[str], float | None]:
    """Per candidate of `names` (`results`: name -> CascadeResult.to_dict()), its cell at `shape`,
    "ms speedup x time over `bound`" (its status where it has no timing there), and the best time."""
    cells, best = [], None
    for n in names:
        t = next((t for t in results[n].get("timings", []) if t["shape"] == shape), None)
        if t is None:
            cells.append(results[n]["status"])
            continue
        ms = t["candidate"]["median"]
        best = ms if best is None else min(best, ms)
        cells.append(f"{ms:.3f} {t['speedup']:.2f}x " + (f"{ms / bound:.2f}" if bound else "-"))
    return cells, best


def main(argv: list[str]) -> int:
    md = "--md" in argv
    args = [a for a in argv if a != "--md"]
    if len(args) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    bound = bounds(json.loads(Path(args[0]).read_text())) if Path(args[0]).is_file() else {}
    sep = " | " if md else "  "
    head = ["candidate", "shape", "ms", "IQR %", "ref ms", "speedup", "bound ms", "x bound"]
    print(sep.join(head))
    for item in args[1:]:
        name, _, path = item.partition("=")
        try:
            r = json.loads(Path(path).read_text())
        except (OSError, ValueError) as exc:
            print(f"{name}{sep}unreadable: {exc}")
            continue
        if not r.get("timings"):
            print(f"{name}{sep}{r.get('status')}: {r.get('reason', '')[:150]}")
            continue
        speeds = []
        for t in r["timings"]:
            c, ref = t["candidate"]["median"], t["reference"]["median"]
            iqr = 100 * (t["candidate"]["p75"] - t["candidate"]["p25"]) / c if c else 0
            b = bound.get(t["shape"])
            speeds.append(t["speedup"])
            print(sep.join([name, t["shape"], f"{c:.3f}", f"{iqr:.1f}", f"{ref:.3f}", f"{t['speedup']:.2f}x",
                            f"{b:.3f}" if b else "-", f"{c / b:.2f}" if b else "-"]))
        print(f"{name}{sep}geomean {math.exp(sum(map(math.log, speeds)) / len(speeds)):.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
