"""Benchmark gemm_reducescatter on a GPU group, everything in one run: the reference and its
ceilings (GEMM alone, reduce-scatter alone, copy-engine peer bandwidth, the bounds), then the seed,
every strategy template at its default knobs (one file per distinct source) and the knob points of
POINTS through the full cascade, beside PyTorch's async-TP of the same call (`--yardstick`, the JSON of
benchmarks/yardstick_gemm_rs.py). Writes JSON and a Markdown table: per shape, each candidate's
median, its speedup over the reference timed in its own run, and its time over the bound
max(GEMM, bytes / peer bandwidth) of this run's baseline.

  python3 benchmarks/gemm_rs.py --gpus 0,1 --out DIR [--yardstick rs_gemm_w2.json] [CANDIDATE.cu ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from eval_table import candidate_cells  # noqa: E402  (the candidates' cells against a bound)

WORKLOAD = "gemm_reducescatter"
# Knob points timed beside the defaults: ce_push where the 2026-11-26 searches ended (chunks 2, 256
# summing blocks), and ce_fold at 8 chunks, its smallest last chunk (the fold left after the last
# byte lands) for the shapes the reduce-scatter dominates.
POINTS = (("ce_push", {"chunks": 2, "reduce_blocks": 256}), ("ce_fold", {"chunks": 8}))


def _bound(shape: dict[str, Any]) -> float:
    """max(GEMM, bytes / peer bandwidth) where the peer copy was measured, else max(parts)."""
    return shape.get("link_bound_ms") or shape["overlap_bound_ms"]


def report(baseline: dict[str, Any], results: dict[str, dict[str, Any]], yardstick: list[dict[str, Any]],
           header: str = "") -> str:
    """The Markdown table: `baseline` as Baseline.to_dict(), `results` candidate name ->
    CascadeResult.to_dict(), `yardstick` the shapes of yardstick_gemm_rs.py's JSON."""
    yard = {(y["M"], y["K"], y["N"]): y for y in yardstick}
    names = list(results)
    head = ["shape (M,K,N)", "reference", "GEMM", "RS", "peer GB/s", "bound"]
    head += [f"{n}: ms, x ref, / bound" for n in names] + ["best / bound"]
    if yard:
        head += ["torch seq", "async-TP", "async-TP x ref", "async-TP / bound"]
    lines = [header] if header else []
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in baseline["shapes"]:
        dims = (s["dims"]["M"], s["dims"]["K"], s["dims"]["N"])
        bound, ref = _bound(s), s["reference"]["median"]
        parts = s["parts"]
        row = [f"{s['shape']} {','.join(map(str, dims))}", f"{ref:.3f}",
               f"{parts['gemm']['median']:.3f}" if "gemm" in parts else "-",
               f"{parts['reducescatter']['median']:.3f}" if "reducescatter" in parts else "-",
               f"{s['peer_gbps']:.0f}" if s.get("peer_gbps") else "-", f"{bound:.3f}"]
        cells, best = candidate_cells(results, names, s["shape"], bound)
        row += cells
        row.append(f"{best / bound:.2f}" if best is not None else "-")
        if yard:
            y = yard.get(dims)
            if y and "asynctp" in y:
                at = y["asynctp"][0]
                row += [f"{y['sequential'][0]:.3f}", f"{at:.3f}", f"{ref / at:.2f}x", f"{at / bound:.2f}"]
            else:
                row += ["-", "-", "-", "-"]
        lines.append("| " + " | ".join(row) + " |")
    for n in names:
        if results[n]["status"] != "measured":
            lines.append(f"\n{n}: {results[n]['status']}: {results[n].get('reason', '')[:300]}")
    return "\n".join(lines)


def read_yardstick(path: Path | None) -> list[dict[str, Any]]:
    if path is None or not path.exists():
        return []
    return list(json.loads(path.read_text()).get("shapes", []))


def default_candidates(w, folder: Path) -> list[Path]:
    """The seed, then each strategy at its defaults (`NAME.cu`) and the POINTS
    (`NAME-VALUE-...cu`, the knobs in the strategy's order), rendered into `folder`; one file per
    distinct source."""
    from cuco_tui.agents.offline.strategy import StrategyBook

    book = StrategyBook.load(w.root, w.seed)
    folder.mkdir(parents=True, exist_ok=True)
    cands, seen = [w.seed], {w.seed.read_text()}
    named = [(s.name, s, s.default_knobs()) for s in book.strategies]
    for name, knobs in POINTS:
        s = book.get(name)
        full = s.normalized({**s.default_knobs(), **knobs})
        named.append((name + "".join(f"-{full[k]}" for k in s.knobs), s, full))
    for label, s, knobs in named:
        text = book.render(s, knobs)
        if text not in seen:  # host_sequential renders the seed
            seen.add(text)
            path = folder / f"{label}.cu"
            path.write_text(text)
            cands.append(path)
    return cands


def main() -> int:
    from cuco_tui.evaluate.baseline import measure_baseline
    from cuco_tui.evaluate.cascade import EvalOptions, evaluate
    from cuco_tui.harness.gpus import parse_gpu_list
    from cuco_tui.workload.manifest import load_workload

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("candidates", nargs="*", type=Path)
    ap.add_argument("--gpus", default="0,1")
    ap.add_argument("--out", type=Path, default=Path("."))
    ap.add_argument("--yardstick", type=Path)
    args = ap.parse_args()
    w = load_workload(WORKLOAD)
    gpus = parse_gpu_list(args.gpus)
    options = EvalOptions(gpus=gpus)
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.strftime("%Y-%m-%d %H:%M:%S")

    base = measure_baseline(w, options)
    print(f"baseline measured in {base.seconds:.1f} s", file=sys.stderr)
    cands = list(args.candidates) or default_candidates(w, args.out / "rendered")
    results = {}
    for cand in cands:
        t0 = time.monotonic()
        r = evaluate(cand, w, options)
        print(f"{cand.name}: {r.status.value} in {time.monotonic() - t0:.0f} s: {r.reason}", file=sys.stderr)
        results[cand.stem] = r.to_dict()
    yard = read_yardstick(args.yardstick)
    (args.out / f"{WORKLOAD}.json").write_text(json.dumps(
        {"started": started, "gpus": gpus, "baseline": base.to_dict(), "candidates": results, "yardstick": yard},
        indent=1))
    header = (f"{WORKLOAD} on GPUs {args.gpus}, started {started}. ms = median over repetitions of the slowest rank; "
              f"x ref: speedup over the reference timed in the same run; / bound: time over max(GEMM, bytes / peer "
              f"bandwidth) of this run's baseline.\n")
    table = report(base.to_dict(), results, yard, header)
    (args.out / f"{WORKLOAD}.md").write_text(table + "\n")
    print(table)
    return 0 if all(r["status"] == "measured" for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
