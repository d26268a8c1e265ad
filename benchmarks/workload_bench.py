"""Benchmark any workload on a GPU group, everything in one run: the reference and its parts
alone (compute, communication), then the seed, the workload's hand-written candidates and,
with --templates, every offline-agent strategy rendered at its default knobs (and at each
value of its first knob with --knob-sweep) through the full cascade. Writes JSON and a
Markdown table.

  python benchmarks/workload_bench.py --workload kv_transfer --gpus 0,1 --out DIR --templates [CANDIDATE.cu ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from cuco_tui.agents.offline.strategy import StrategyBook
from cuco_tui.evaluate.baseline import COMM_PARTS, measure_baseline
from cuco_tui.evaluate.cascade import EvalOptions, evaluate
from cuco_tui.harness.gpus import parse_gpu_list
from cuco_tui.workload.manifest import load_workload


def render_templates(workload, dest: Path, sweep: bool) -> list[Path]:
    """Every strategy at its default knobs; with `sweep`, also each value of its first knob."""
    book = StrategyBook.load(workload.root, workload.seed)
    dest.mkdir(parents=True, exist_ok=True)
    files = []
    for s in book.strategies:
        for knobs in s.one_knob_changes(list(s.knobs)[:1] if sweep else []):
            tag = "_".join(str(v) for v in knobs.values())
            path = dest / (f"{s.name}_{tag}.cu" if tag else f"{s.name}.cu")
            path.write_text(book.render(s, knobs))
            files.append(path)
    return files


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("candidates", nargs="*", type=Path)
    ap.add_argument("--workload", "-w", required=True)
    ap.add_argument("--gpus", default="0,1")
    ap.add_argument("--out", type=Path, default=Path("."))
    ap.add_argument("--templates", action="store_true", help="also every strategy template at its default knobs")
    ap.add_argument("--knob-sweep", action="store_true", help="with --templates: each value of the first knob too")
    ap.add_argument("--no-seed", action="store_true")
    args = ap.parse_args()
    w = load_workload(args.workload)
    gpus = parse_gpu_list(args.gpus)
    options = EvalOptions(gpus=gpus)
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%d %H:%M:%S")

    base = measure_baseline(w, options)
    print(f"baseline measured in {base.seconds:.1f} s", file=sys.stderr)
    cands = list(args.candidates) or ([] if args.no_seed else w.candidates())
    if args.templates:
        cands += render_templates(w, args.out / "rendered", args.knob_sweep)
    results = {}
    for cand in cands:
        t0 = time.monotonic()
        r = evaluate(cand, w, options)
        print(f"{cand.name}: {r.status.value} in {time.monotonic() - t0:.1f} s: {r.reason}", file=sys.stderr)
        results[cand.name] = r.to_dict()

    (args.out / f"{w.name}.json").write_text(json.dumps(
        {"started": started, "gpus": gpus, "baseline": base.to_dict(), "candidates": results}, indent=1))

    names = list(results)
    part_names = list(base.shapes[0].parts) if base.shapes else []
    lines = [f"{w.name} on GPUs {args.gpus}, started {started}. ms = median over repetitions of the slowest "
             f"rank; (IQR %) in brackets; speedups over the reference measured in the same run.", ""]
    head = ["shape", "reference"] + [f"{p} alone" + (" (comm)" if p in COMM_PARTS else "") for p in part_names]
    head += ["peer GB/s", "max(parts)"] + [f"{n}" for n in names]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in base.shapes:
        row = [f"{s.shape} {','.join(map(str, s.dims.values()))}", f"{s.reference.median:.3f} ({s.reference.iqr_pct:.1f})"]
        row += [f"{s.parts[p].median:.3f}" for p in part_names]
        row += [f"{s.peer_gbps:.0f}" if s.peer_gbps else "-", f"{s.overlap_bound_ms:.3f}"]
        for n in names:
            t = next((t for t in results[n]["timings"] if t["shape"] == s.shape), None)
            if t is None:
                row.append(results[n]["status"])
            else:
                iqr = 100 * (t["candidate"]["p75"] - t["candidate"]["p25"]) / t["candidate"]["median"]
                row.append(f"{t['candidate']['median']:.3f} ({iqr:.1f}) {t['speedup']:.2f}x")
        lines.append("| " + " | ".join(row) + " |")
    lines += [f"\nWarning, the reference: {m}" for m in base.warnings]
    table = "\n".join(lines)
    (args.out / f"{w.name}.md").write_text(table + "\n")
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
