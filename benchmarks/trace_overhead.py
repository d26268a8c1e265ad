"""What the wait trace points cost: candidates that wait through cuco::wait_geq /
cuco::lsa_barrier_sync, timed with tracing on and off in the same process, interleaved
repetition by repetition (the worker switches the context's trace pointer between launches:
EvalOptions.trace_ab), on a GPU group.

  python benchmarks/trace_overhead.py --gpus 0,1 [--runs 2] [--shapes long-seq,square-8k] [CANDIDATE.cu ...]

Reports per candidate and shape the median time with tracing on and off (slowest rank per
repetition) and the overhead in percent, with the spread of the per-pair ratio."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from cuco_tui.evaluate.cascade import EvalOptions, evaluate
from cuco_tui.harness.gpus import parse_gpu_list
from cuco_tui.harness.rank_events import RankEvent, TraceTimed
from cuco_tui.workload.manifest import load_workload


def overhead_rows(candidate: str, events: list[RankEvent]) -> list[dict[str, Any]]:
    """From the ranks' `trace_ab` events (TraceTimed): per shape, the slowest rank's time of each
    repetition with tracing on and off, and the overhead of the medians."""
    by_shape: dict[str, list[TraceTimed]] = {}
    for e in events:
        match e:
            case TraceTimed(shape=shape):
                by_shape.setdefault(shape, []).append(e)
    rows = []
    for shape, ranks in by_shape.items():
        on = [max(r.on_ms[i] for r in ranks) for i in range(min(len(r.on_ms) for r in ranks))]
        off = [max(r.off_ms[i] for r in ranks) for i in range(min(len(r.off_ms) for r in ranks))]
        ratios = sorted(a / b for a, b in zip(on, off))
        q = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else [ratios[0]] * 3
        rows.append({"candidate": candidate, "shape": shape, "on_ms": statistics.median(on),
                     "off_ms": statistics.median(off),
                     "overhead_pct": 100 * (statistics.median(on) / statistics.median(off) - 1),
                     "pair_ratio_p25": q[0], "pair_ratio_p75": q[2], "repetitions": len(on)})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("candidates", nargs="*", type=Path)
    ap.add_argument("--gpus", default="0,1")
    ap.add_argument("--runs", type=int, default=1, help="evaluations per candidate (each times every shape)")
    ap.add_argument("--shapes", default="long-seq,square-8k")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    w = load_workload("gemm_allgather")
    cands = args.candidates or [w.root / "candidates" / "ce_overlap.cu", w.root / "candidates" / "lsa_allgather.cu"]
    options = EvalOptions(gpus=parse_gpu_list(args.gpus), shapes=tuple(args.shapes.split(",")), trace_ab=True)
    rows = []
    for cand in cands:
        for _ in range(args.runs):
            events: list[RankEvent] = []
            r = evaluate(cand, w, options, events_out=events)
            if r.status.value != "measured":
                print(f"{cand.name}: {r.status.value}: {r.reason}", file=sys.stderr)
                continue
            rows += overhead_rows(cand.name, events)
    print("| candidate | shape | tracing on ms | tracing off ms | overhead | on/off per pair, IQR | n |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['candidate']} | {r['shape']} | {r['on_ms']:.4f} | {r['off_ms']:.4f} | {r['overhead_pct']:+.2f} % "
              f"| {r['pair_ratio_p25']:.4f}-{r['pair_ratio_p75']:.4f} | {r['repetitions']} |")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
