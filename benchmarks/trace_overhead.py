"""What the wait trace points cost: candidates that wait through cuco::wait_geq /
cuco::lsa_barrier_sync timed with tracing on and off, in alternation, on a GPU group.

  python benchmarks/trace_overhead.py --gpus 0,1 [--rounds 2] [CANDIDATE.cu ...]

Reports per candidate and shape: the median with tracing on and off (each relative to the
reference timed in the same run, so drift between runs cancels) and the overhead in percent."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from cuco_tui.evaluate.cascade import EvalOptions, evaluate
from cuco_tui.harness.gpus import parse_gpu_list
from cuco_tui.workload.manifest import load_workload


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("candidates", nargs="*", type=Path)
    ap.add_argument("--gpus", default="0,1")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--shapes", default="long-seq,square-8k")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    w = load_workload("gemm_allgather")
    cands = args.candidates or [w.root / "candidates" / "ce_overlap.cu", w.root / "candidates" / "lsa_allgather.cu"]
    shapes = tuple(args.shapes.split(","))
    rows = []
    for cand in cands:
        ratios: dict[tuple[str, bool], list[float]] = {}
        for _ in range(args.rounds):
            for trace in (True, False):
                r = evaluate(cand, w, EvalOptions(gpus=parse_gpu_list(args.gpus), shapes=shapes, trace=trace))
                if r.status.value != "measured":
                    print(f"{cand.name} trace={trace}: {r.status.value}: {r.reason}", file=sys.stderr)
                    continue
                for t in r.timings:
                    # candidate time over the reference of the same run: drift between runs cancels
                    ratios.setdefault((t.shape, trace), []).append(t.candidate.median / t.reference.median)
        for shape in shapes:
            on, off = ratios.get((shape, True)), ratios.get((shape, False))
            if not on or not off:
                continue
            on_m, off_m = sorted(on)[len(on) // 2], sorted(off)[len(off) // 2]
            rows.append({"candidate": cand.name, "shape": shape, "on": on_m, "off": off_m,
                         "overhead_pct": 100 * (on_m / off_m - 1), "runs": len(on)})
    print("| candidate | shape | time/ref, trace on | time/ref, trace off | overhead |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['candidate']} | {r['shape']} | {r['on']:.4f} | {r['off']:.4f} | {r['overhead_pct']:+.2f} % |")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
