"""The prebuilt grouped GEMM (cuco_grouped_gemm_lib.h) against cuBLAS on ONE GPU, on the expert
problems of moe_dispatch_combine's bench shapes: per world size W (default 2 and 4), rank 0's
local experts with the rows it receives under the workload's own routing (every rank's tokens,
drawn by its input generator), both projections (gate+up: n = 2I, k = H; down: n = H, k = I).
For each, benchmarks/grouped_gemm_bench.cu times one cublasGemmEx per expert (the reference's way
when experts average 128 rows or more), cublasGemmGroupedBatchedEx (its way below that), and each
library configuration in one launch and in four (expert_pipeline's cut), interleaved, the L2
flushed before every call; every variant is first checked against the per-expert cuBLAS result.
Prints a table (median ms, TFLOP/s, each configuration's speed in % of the faster cuBLAS way);
writes the JSON lines and the table to --out (default $OUT, if set). Exit status 1 when a check
fails.

  python3 benchmarks/grouped_gemm.py [--worlds 2,4] [--shapes NAME,...] [--reps 15] [--out DIR]
  python3 benchmarks/grouped_gemm.py --problems-only     # the problems' row counts (no GPU)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cuco_tui.toolchain import BuildCache  # noqa: E402
from cuco_tui.toolchain.grouped_gemm_lib import CONFIGS  # noqa: E402
from cuco_tui.toolchain.nvcc import ensure_gemm_library, nvcc_flags  # noqa: E402
from cuco_tui.toolchain.process import child_env  # noqa: E402
from cuco_tui.toolchain.tile_gemm_lib import link_flags  # noqa: E402
from cuco_tui.toolchain.toolchain import discover  # noqa: E402
from cuco_tui.workload.manifest import load_workload  # noqa: E402
from moe_grouped import expert_phase_rows  # noqa: E402 (beside this file)

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "grouped_gemm_bench.cu"
SEED = 3  # benchmarks/moe_grouped.py's default: the same routing


def received_rows(dims: dict[str, int], world: int, seed: int = SEED) -> list[int]:
    """Rows rank 0's local experts receive at `world` ranks (from every source, itself included),
    from the counts exchange moe_grouped.py derives for the same rank."""
    counts, _, _ = expert_phase_rows(np, dims, world, seed)
    return [int(r) for r in np.asarray(counts[dims["E"]:]).reshape(world, -1).sum(axis=0)]


def problems(shapes: list[str], worlds: list[int]) -> list[tuple[str, int, int, list[int]]]:
    """(label, n, k, rows per expert) for every shape, world size and projection."""
    w = load_workload("moe_dispatch_combine")
    known = {s.name: s for s in w.bench_shapes}
    out = []
    for name in shapes:
        dims = dict(known[name].dims)
        for world in worlds:
            rows = received_rows(dims, world)
            out.append((f"{name}/W{world}/gate_up", 2 * dims["I"], dims["H"], rows))
            out.append((f"{name}/W{world}/down", dims["H"], dims["I"], rows))
    return out


def build(build_dir: Path) -> tuple[Path, list[str]]:
    """The benchmark linked against every grouped GEMM library (built first where the cache lacks
    one), and the configurations as the driver names them."""
    tc = discover()
    if not tc.can_compile or tc.cutlass is None:
        raise SystemExit("cannot build: needs nvcc, cuBLAS and the CUTLASS headers (pip install nvidia-cutlass)")
    with ThreadPoolExecutor(len(CONFIGS)) as pool:  # one nvcc each, a minute or more apiece
        libraries = list(pool.map(lambda c: ensure_gemm_library(c, tc, BuildCache()), CONFIGS))
    failed = [lib.problem for lib in libraries if not lib.ok]
    if failed:
        raise SystemExit(failed[0])
    build_dir.mkdir(parents=True, exist_ok=True)
    exe = build_dir / "grouped_gemm_bench"
    flags = [f for f in nvcc_flags(tc) if f != "-shared"] + [f"-I{HERE}"] + link_flags(libraries)
    p = subprocess.run([str(tc.nvcc), *flags, str(DRIVER), "-o", str(exe)], capture_output=True,
                       text=True, env=child_env())
    if p.returncode != 0:
        raise SystemExit(f"nvcc failed on {DRIVER.name}:\n{(p.stdout + p.stderr)[-4000:]}")
    return exe, [f"{c.block_m}x{c.block_n}/{c.cluster_m}x{c.cluster_n}" for c in CONFIGS]


def table(results: list[dict]) -> str:
    """Per problem: the two cuBLAS ways' ms, then each configuration's ms and % of the faster one."""
    by_problem: dict[str, dict[str, dict]] = {}
    for r in results:
        by_problem.setdefault(r["problem"], {})[r["variant"]] = r
    variants = list(dict.fromkeys(r["variant"] for r in results))
    lines = ["| problem | rows (min-max a group) | " + " | ".join(variants) + " |",
             "|---|---|" + "---|" * len(variants)]
    for name, row in by_problem.items():
        best = min((row[v]["median_ms"] for v in ("cublas", "cublas_grouped") if v in row and row[v]["ok"]),
                   default=0.0)
        first = next(iter(row.values()))
        cells = []
        for v in variants:
            r = row.get(v)
            if r is None or not r["ok"]:
                cells.append("failed" if r is not None else "")
                continue
            pct = f" {100 * best / r['median_ms']:.0f}%" if best and not v.startswith("cublas") else ""
            spread = 100 * (r["q3_ms"] - r["q1_ms"]) / r["median_ms"] if r["median_ms"] else 0
            cells.append(f"{r['median_ms']:.3f} ({r['tflops']:.0f} TF, ±{spread / 2:.0f}%){pct}")
        lines.append(f"| {name} | {first['rows']} ({first['min_rows']}-{first['max_rows']}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--shapes", default="", help="bench shapes (default: all)")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--out", type=Path, default=Path(os.environ["OUT"]) if os.environ.get("OUT") else None)
    ap.add_argument("--problems-only", action="store_true")
    args = ap.parse_args()
    w = load_workload("moe_dispatch_combine")
    names = [s.name for s in w.bench_shapes]
    shapes = [s for s in args.shapes.split(",") if s] or names
    unknown = [s for s in shapes if s not in names]
    if unknown:
        raise SystemExit(f"unknown bench shape {unknown[0]!r} (known: {', '.join(names)})")
    try:
        worlds = [int(x) for x in args.worlds.split(",") if x]
    except ValueError:
        raise SystemExit(f"--worlds takes world sizes such as 2,4, not {args.worlds!r}") from None
    allowed = list(w.world_sizes)
    if not worlds or any(x not in allowed for x in worlds):
        raise SystemExit(f"--worlds takes world sizes moe_dispatch_combine allows ({', '.join(map(str, allowed))}), "
                         f"not {args.worlds!r}")
    if args.reps < 1:
        raise SystemExit("--reps must be at least 1")
    probs = problems(shapes, worlds)
    for label, n, k, rows in probs:
        print(f"{label}: n={n} k={k} {len(rows)} experts, {sum(rows)} rows ({min(rows)}-{max(rows)}, "
              f"median {statistics.median(rows):.0f})", file=sys.stderr)
    if args.problems_only:
        return 0
    with tempfile.TemporaryDirectory(prefix="cuco-gg-") as tmp:
        exe, configs = build(Path(tmp))
        spec = Path(tmp) / "problems.txt"
        spec.write_text("".join(f"{label} {n} {k} {len(rows)} {' '.join(map(str, rows))}\n"
                                for label, n, k, rows in probs))
        run = subprocess.run([str(exe), str(spec), str(args.reps), *configs], capture_output=True, text=True,
                             env=child_env())
    sys.stderr.write(run.stderr)
    if run.returncode not in (0, 1):  # 1: a check failed (the table says which); else it did not run
        last = (run.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"grouped_gemm_bench exited with status {run.returncode}: {last}", file=sys.stderr)
        return 1
    extent = {label: (min(rows), max(rows)) for label, _, _, rows in probs}
    results = []
    for line in run.stdout.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            r["min_rows"], r["max_rows"] = extent[r["problem"]]
            results.append(r)
    text = table(results)
    print(text)
    for r in results:
        if not r["ok"]:
            print(f"{r['problem']} {r['variant']}: {r['error']}", file=sys.stderr)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "grouped_gemm.json").write_text(json.dumps(results, indent=1))
        (args.out / "grouped_gemm.md").write_text(text + "\n")
    return 0 if run.returncode == 0 and results else 1


if __name__ == "__main__":
    sys.exit(main())
