"""cp_attention's reference attention, fused (PyTorch SDPA, FlashAttention backend) against the
three CuPy passes, on one GPU: the slowest rank's work (rank W-1, K_all and V_all filled with the
whole sequence) at every bench shape; CUDA events, median of --reps after 2 warm-ups.

  python benchmarks/cp_reference_modes.py [--world 2] [--reps 5] [--out FILE.json]"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from cuco_tui.workload.manifest import load_workload


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    import cupy

    w = load_workload("cp_attention")
    spec = importlib.util.spec_from_file_location("cp_ref", w.reference)
    ref_mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref_mod)
    rows = []
    for shape in w.bench_shapes:
        d = shape.dims
        rank = args.world - 1
        env = SimpleNamespace(comm=None, stream=cupy.cuda.Stream(non_blocking=True), world=args.world, rank=rank,
                              dims=d)
        io = ref_mod.io_spec(d, args.world, rank)
        with env.stream:
            ins = {n: cupy.empty(s, dtype=cupy.uint16) for n, s, _ in io["inputs"]}
            out = cupy.empty(io["outputs"][0][1], dtype=cupy.uint16)
        ref_mod.fill_inputs(cupy, ins, d, args.world, rank, seed=3)
        row = {"shape": shape.name, "dims": d, "world": args.world}
        outs = {}
        for mode in ("sdpa", "cupy"):
            ref = ref_mod.Reference(env, mode)
            with env.stream:
                ref.k_all[...] = cupy.tile(ins["k"], (args.world, 1, 1))
                ref.v_all[...] = cupy.tile(ins["v"], (args.world, 1, 1))
            times = []
            for i in range(args.reps + 2):
                start, end = cupy.cuda.Event(), cupy.cuda.Event()
                start.record(env.stream)
                ref.attention(ins, {"o": out})
                end.record(env.stream)
                end.synchronize()
                if i >= 2:
                    times.append(cupy.cuda.get_elapsed_time(start, end))
            row[f"{mode}_ms"] = statistics.median(times)
            row[f"{mode}_spread_ms"] = [min(times), max(times)]
            outs[mode] = out.get().copy()
            del ref
            cupy.get_default_memory_pool().free_all_blocks()
        a = outs["sdpa"].view(np.uint16).astype(np.uint32) << 16
        b = outs["cupy"].view(np.uint16).astype(np.uint32) << 16
        fa, fb = a.view(np.float32).astype(np.float64), b.view(np.float32).astype(np.float64)
        row["rel_l2_sdpa_vs_cupy"] = float(np.linalg.norm(fa - fb) / np.linalg.norm(fb))
        row["cupy_over_sdpa"] = row["cupy_ms"] / row["sdpa_ms"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
