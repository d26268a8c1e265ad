"""Benchmark gemm_allgather on a GPU group, everything in one run: the reference and its
ceilings (GEMM alone, all-gather alone, copy-engine peer bandwidth, the overlap bounds),
then each candidate through the full cascade. Writes JSON and a Markdown table.

  python benchmarks/gemm_allgather.py --gpus 0,1 --out DIR [--yardstick ag_gemm_w2.json] [CANDIDATE.cu ...]

Default candidates: the seed and every file in workloads/gemm_allgather/candidates/.
`--yardstick` merges PyTorch async-TP figures measured in the same session by
../shared/gpu/yardstick_ag_gemm.py (torchrun), so the table can compare against them."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from cuco_tui.evaluate.baseline import measure_baseline
from cuco_tui.evaluate.cascade import EvalOptions, evaluate
from cuco_tui.harness.gpus import parse_gpu_list
from cuco_tui.workload.manifest import load_workload


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("candidates", nargs="*", type=Path)
    ap.add_argument("--gpus", default="0,1")
    ap.add_argument("--out", type=Path, default=Path("."))
    ap.add_argument("--yardstick", type=Path)
    args = ap.parse_args()
    w = load_workload("gemm_allgather")
    gpus = parse_gpu_list(args.gpus)
    options = EvalOptions(gpus=gpus)
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%d %H:%M:%S")

    base = measure_baseline(w, options)
    print(f"baseline measured in {base.seconds:.1f} s", file=sys.stderr)
    results = {}
    for cand in args.candidates or w.candidates():
        r = evaluate(cand, w, options, progress=lambda p: print(f"  {cand.name}: L{int(p.level)} {p.message}", file=sys.stderr))
        print(f"{cand.name}: {r.status.value}: {r.reason}", file=sys.stderr)
        results[cand.name] = r.to_dict()
    yard = {}
    if args.yardstick and args.yardstick.exists():
        for rec in json.loads(args.yardstick.read_text())["shapes"]:
            yard[(rec["M"], rec["K"], rec["N"])] = rec

    (args.out / "gemm_allgather.json").write_text(json.dumps(
        {"started": started, "gpus": gpus, "baseline": base.to_dict(), "candidates": results,
         "yardstick": [v for v in yard.values()]}, indent=1))

    names = list(results)
    lines = [f"gemm_allgather on GPUs {args.gpus}, started {started}. ms = median over repetitions of the slowest "
             f"rank; (IQR %) in brackets; speedups are over the reference measured in the same run.", ""]
    head = ["shape (M,K,N)", "reference", "GEMM alone", "AG alone", "peer GB/s", "max(GEMM,AG)", "max(GEMM,bytes/peer)"]
    head += [f"{n} ms (x ref)" for n in names]
    if yard:
        head += ["torch seq", "async-TP", "async-TP x ref"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in base.shapes:
        dims = tuple(s.dims.values())
        row = [f"{s.shape} {','.join(map(str, dims))}", f"{s.reference.median:.3f} ({s.reference.iqr_pct:.1f})",
               f"{s.parts['gemm'].median:.3f}", f"{s.parts['allgather'].median:.3f}",
               f"{s.peer_gbps:.0f}" if s.peer_gbps else "-", f"{s.overlap_bound_ms:.3f}",
               f"{s.link_bound_ms:.3f}" if s.link_bound_ms else "-"]
        for n in names:
            t = next((t for t in results[n]["timings"] if t["shape"] == s.shape), None)
            if t is None:
                row.append(results[n]["status"])
            else:
                iqr = 100 * (t["candidate"]["p75"] - t["candidate"]["p25"]) / t["candidate"]["median"]
                row.append(f"{t['candidate']['median']:.3f} ({iqr:.1f}) {t['speedup']:.2f}x")
        if yard:
            y = yard.get(dims)
            if y and "asynctp" in y:
                row += [f"{y['sequential'][0]:.3f}", f"{y['asynctp'][0]:.3f}", f"{s.reference.median / y['asynctp'][0]:.2f}x"]
            else:
                row += ["-", "-", "-"]
        lines.append("| " + " | ".join(row) + " |")
    table = "\n".join(lines)
    (args.out / "gemm_allgather.md").write_text(table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
