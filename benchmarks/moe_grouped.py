"""moe_dispatch_combine's reference expert phase on one GPU in its four GEMM modes: one cuBLAS
grouped GEMM per projection, two cublasGemmEx per expert, auto (per expert when the experts average
at least PER_EXPERT_MIN_ROWS rows, else grouped), and cutlass (the reference's default: the prebuilt
CUTLASS grouped GEMM, one launch per projection), each with and without its CUDA graph, on the
per-rank problem of every bench shape: the rows rank 0 receives at world size 2 under the
reference's own routing (both ranks' tokens, drawn by the workload's input generator),
rank 0's expert weights. The phase runs through the Reference class itself (its expert launches,
its pointer kernel, its graph cache); times are CUDA events around one call, median and quartiles
of --reps, the eight variants interleaved (the order rotates every repetition). Every variant's
results are compared with each other and with a float64 expert MLP computed on the GPU from the
same bf16 inputs. The table says which way auto took and how its time compares with the faster
of the two fixed ways (it should be that one's, within noise).
Then the float64 check of the whole reference (route, NCCL to itself, experts, combine) on a
one-rank communicator at the verify shapes and a many-blocks shape, every GEMM mode, three runs
each (eager, captured, replayed), against `expected` (float64, CPU) and `simulate`.

  python benchmarks/moe_grouped.py [--reps 25] [--world 2] [--shapes NAME,...] [--out FILE.json]

$OUT, when set and --out is not, receives moe_grouped.json. Exit status 1 when a check fails."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from cuco_tui.harness.bf16 import from_bf16_bits
from cuco_tui.core.reference import reference_module
from cuco_tui.workload.manifest import load_workload

W = load_workload("moe_dispatch_combine")
REF = reference_module(W.reference)
VARIANTS = tuple((gemm, graphs) for graphs in (True, False) for gemm in ("grouped", "per_expert", "auto", "cutlass"))
F64_REL_L2 = 1e-2  # the GPU test's bound for the whole reference against float64
PAIR_REL_L2 = 1e-2  # each variant against grouped+graph: the same math, other kernels, other roundings


def _name(gemm: str, graphs: bool) -> str:
    return f"{gemm}{'+graph' if graphs else ' eager'}"


def _host(xp: Any, a: Any) -> np.ndarray:
    return a.get() if hasattr(a, "get") else np.asarray(a)


def expert_phase_rows(xp: Any, dims: dict[str, int], world: int, seed: int) -> tuple[np.ndarray, Any, Any]:
    """What rank 0 computes at `world` ranks: the counts exchange it would end with (int32 [2E]:
    what it sends per global expert, then what it receives per (source, local expert)), and its
    rows in the expert layout (by local expert, then source, then the source's pair order), as
    (token index into the sources' x stacked [world * T, H], the stacked x)."""
    E, T = dims["E"], dims["T"]
    el = E // world
    xs, idxs = [], []
    for p in range(world):
        _, x, idx, _ = REF.token_inputs(xp, dims, p, seed)
        xs.append(x)
        idxs.append(idx.reshape(-1))
    host_idx = [_host(xp, i) for i in idxs]
    recv = np.stack([np.bincount(i, minlength=E)[:el] for i in host_idx])
    counts = np.concatenate([np.bincount(host_idx[0], minlength=E), recv.reshape(-1)]).astype(np.int32)
    keys, tokens = [], []
    pairs = T * REF.TOPK
    for p, idx in enumerate(idxs):
        mine = xp.nonzero(idx < el)[0]
        # unique keys: (local expert, source, pair), so no sort needs to be stable
        keys.append((idx[mine].astype(xp.int64) * world + p) * pairs + mine)
        tokens.append(mine // REF.TOPK + p * T)
    order = xp.argsort(xp.concatenate(keys))
    return counts, xp.concatenate(tokens)[order], xp.concatenate(xs)


def float64_experts(cupy: Any, plan: Any, xe: Any, w13: Any, w2: Any, inter: int) -> Any:
    """y = (silu(x W1) * (x W3)) W2 per expert in float64 on the GPU, from the bf16 inputs."""
    y = cupy.empty((plan.rows, w2.shape[2]), dtype=cupy.float64)
    for e, r0, n in plan.experts:
        a = from_bf16_bits(cupy, xe[r0:r0 + n]).astype(cupy.float64) @ from_bf16_bits(cupy, w13[e]).astype(cupy.float64)
        h = a[:, :inter] / (1.0 + cupy.exp(-a[:, :inter])) * a[:, inter:]
        y[r0:r0 + n] = h @ from_bf16_bits(cupy, w2[e]).astype(cupy.float64)
    return y


def _errors(cupy: Any, got_bits: Any, want: Any) -> dict[str, float]:
    """Relative L2 and harness.verify's elementwise criterion |got - want| / (|want| + rms)."""
    got = from_bf16_bits(cupy, got_bits).astype(cupy.float64)
    rms = float(cupy.sqrt(cupy.mean(want * want)))
    return {"rel_l2": float(cupy.linalg.norm(got - want) / cupy.linalg.norm(want)),
            "max_rel": float(cupy.max(cupy.abs(got - want) / (cupy.abs(want) + rms))),
            "finite": bool(cupy.isfinite(got).all())}


def _quartiles(times: list[float]) -> dict[str, float]:
    q1, med, q3 = statistics.quantiles(times, n=4, method="inclusive")
    return {"median_ms": med, "q1_ms": q1, "q3_ms": q3, "n": len(times)}


def bench_shape(cupy: Any, shape: Any, world: int, reps: int, seed: int) -> dict[str, Any]:
    d = shape.dims
    el, inter = d["E"] // world, d["I"]
    t0 = time.monotonic()
    counts, tokens, x_all = expert_phase_rows(cupy, d, world, seed)
    plan = REF.plan_from_counts(counts, world)
    assert plan.rows == len(tokens), (plan.rows, len(tokens))
    io = REF.io_spec(d, world, 0)
    inputs = {n: cupy.empty(s, dtype={"bf16": cupy.uint16, "i32": cupy.int32, "f32": cupy.float32}[t])
              for n, s, t in io["inputs"]}
    REF.fill_inputs(cupy, inputs, d, world, 0, seed)  # rank 0's weights (and its x and routing again)
    weights = {"w13": inputs["w13"], "w2": inputs["w2"]}
    cupy.cuda.Device().synchronize()  # made on the default stream; the timed stream does not wait for it
    stream = cupy.cuda.Stream(non_blocking=True)
    refs = {}
    for gemm, graphs in VARIANTS:
        env = SimpleNamespace(comm=None, stream=stream, world=world, rank=0, dims=d)
        ref = REF.Reference(env, graphs=graphs, gemm=gemm)
        with stream:
            ref.counts[...] = cupy.asarray(counts)
            ref.xe[:plan.rows] = x_all[tokens]
            ref.y.fill(0x7FC1)  # poisoned: a row left unwritten shows as NaN
        ref.plan = plan
        refs[_name(gemm, graphs)] = ref
    stream.synchronize()
    setup_s = time.monotonic() - t0
    for ref in refs.values():  # eager, capture, replay: every graph is built before the timing
        for _ in range(3):
            ref.experts(weights)
    stream.synchronize()
    times: dict[str, list[float]] = {name: [] for name in refs}
    names = list(refs)
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    for rep in range(reps):
        for name in names[rep % len(names):] + names[:rep % len(names)]:
            start.record(stream)
            refs[name].experts(weights)
            end.record(stream)
            end.synchronize()
            times[name].append(cupy.cuda.get_elapsed_time(start, end))
    want = float64_experts(cupy, plan, refs["grouped+graph"].xe, weights["w13"], weights["w2"], inter)
    first = refs["grouped+graph"].y[:plan.rows]
    row: dict[str, Any] = {
        "shape": shape.name, "dims": d, "world": world, "rank": 0, "rows": plan.rows, "experts": len(plan.experts),
        "local_experts": el, "rows_per_expert": [min(n for _, _, n in plan.experts), max(n for _, _, n in plan.experts)],
        "setup_s": round(setup_s, 1), "warnings": {n: r.warnings for n, r in refs.items() if r.warnings},
        "modes": {n: r.gemm for n, r in refs.items()}, "variants": {},
    }
    for name, ref in refs.items():
        got = ref.y[:plan.rows]
        row["variants"][name] = {**_quartiles(times[name]), "vs_float64": _errors(cupy, got, want),
                                 "equal_to_grouped_graph": bool(cupy.array_equal(got, first)),
                                 "vs_grouped_graph_rel_l2": _errors(cupy, got, from_bf16_bits(cupy, first).astype(
                                     cupy.float64))["rel_l2"]}
    v = row["variants"]
    row["per_expert_over_grouped"] = v["per_expert+graph"]["median_ms"] / v["grouped+graph"]["median_ms"]
    row["auto_ways"] = list(refs["auto+graph"].ways(plan))
    best = min(v["grouped+graph"]["median_ms"], v["per_expert+graph"]["median_ms"])
    row["auto_over_best"] = v["auto+graph"]["median_ms"] / best
    row["cutlass_over_auto"] = v["cutlass+graph"]["median_ms"] / v["auto+graph"]["median_ms"]
    row["auto_took_the_faster"] = row["auto_ways"][0] == ("per_expert" if row["per_expert_over_grouped"] < 1
                                                          else "grouped")
    row["ok"] = (not row["warnings"] and all(r.gemm == g for (g, _), r in zip(VARIANTS, refs.values()))
                 and all(x["vs_float64"]["finite"] and x["vs_float64"]["rel_l2"] < F64_REL_L2
                         and x["vs_grouped_graph_rel_l2"] < PAIR_REL_L2 for x in v.values()))
    del refs, inputs, weights, want, first, x_all, tokens
    cupy.get_default_memory_pool().free_all_blocks()
    return row


def reference_checks(cupy: Any) -> list[dict[str, Any]]:
    """The whole reference on a one-rank communicator (NCCL send/recv to itself, every expert on
    the rank) against float64 and `simulate`, as tests/workloads/moe_dispatch_combine/test_moe_gpu.py does."""
    from cupy.cuda import nccl

    shapes = [(s.name, s.dims) for s in W.verify_shapes] + [("many-blocks", dict(T=4096, H=64, E=256, I=64, HOT=60))]
    out = []
    for name, dims in shapes:
        for gemm in REF.GEMM_MODES:
            comm = nccl.NcclCommunicator(1, nccl.get_unique_id(), 0)
            env = SimpleNamespace(comm=comm, stream=cupy.cuda.Stream(non_blocking=True), world=1, rank=0, dims=dims)
            io = REF.io_spec(dims, 1)
            kinds = {"bf16": cupy.uint16, "i32": cupy.int32, "f32": cupy.float32}
            inputs = {n: cupy.empty(s, dtype=kinds[t]) for n, s, t in io["inputs"]}
            outputs = {n: cupy.empty(s, dtype=kinds[t]) for n, s, t in io["outputs"]}
            with env.stream:
                REF.fill_inputs(cupy, inputs, dims, 1, 0, seed=11)
            env.stream.synchronize()
            host = {k: cupy.asnumpy(v) for k, v in inputs.items()}
            want = REF.expected([host], dims, 1)[0]["out"]
            sim = REF.simulate([host], dims, 1)[0]["out"]
            ref = REF.Reference(env, graphs=True, gemm=gemm)
            rels = []
            for _ in range(3):  # eager, captured, replayed
                with env.stream:
                    outputs["out"].fill(0x7FC1)
                ref.run(inputs, outputs)
                env.stream.synchronize()
                got = from_bf16_bits(np, cupy.asnumpy(outputs["out"])).astype(np.float64)
                rels.append((float(np.linalg.norm(got - want) / np.linalg.norm(want)),
                             float(np.linalg.norm(got - sim) / np.linalg.norm(sim)), bool(np.isfinite(got).all())))
            comm.destroy()
            ok = all(f and a < 1e-2 and b < 5e-3 for a, b, f in rels) and not ref.warnings and ref.gemm == gemm
            out.append({"shape": name, "dims": dims, "gemm": gemm, "ways": list(ref.ways(ref.plan)),
                        "rel_l2_vs_float64": [a for a, _, _ in rels],
                        "rel_l2_vs_simulate": [b for _, b, _ in rels], "warnings": ref.warnings, "ok": ok})
            print(json.dumps(out[-1]), flush=True)
    return out


def load_grouped_library() -> None:
    """The prebuilt grouped GEMM the reference's cutlass mode calls, built where this machine lacks
    it and loaded as the rank workers preload it (RTLD_GLOBAL)."""
    from cuco_tui.harness import grouped_gemm
    from cuco_tui.toolchain import BuildCache
    from cuco_tui.toolchain.grouped_gemm_lib import REFERENCE_CONFIG
    from cuco_tui.toolchain.nvcc import ensure_gemm_library
    from cuco_tui.toolchain.toolchain import discover

    lib = ensure_gemm_library(REFERENCE_CONFIG, discover(), BuildCache())
    if not lib.ok or grouped_gemm.loaded(REFERENCE_CONFIG.entry, [str(lib.path)]) is None:
        raise SystemExit(f"cannot load the grouped GEMM library: {lib.problem or 'its entry point is missing'}")


def cublas_version(cupy: Any) -> int | None:
    """The version of the libcublas the reference calls (e.g. 130100 for 13.1.0)."""
    import ctypes

    lib, version = REF.raw_cublas(), ctypes.c_int(0)
    get = getattr(lib, "cublasGetVersion_v2", None)
    if get is None or get(ctypes.c_void_p(cupy.cuda.device.get_cublas_handle()), ctypes.byref(version)) != 0:
        return None
    return version.value


def table(rows: list[dict[str, Any]], checks: list[dict[str, Any]]) -> str:
    names = [_name(g, gr) for g, gr in VARIANTS]
    lines = ["| shape | rows | experts (rows each) | " + " | ".join(f"{n} ms [q1, q3]" for n in names)
             + " | per_expert / grouped (graphs) | auto's way | auto / the faster (graphs) | cutlass / auto (graphs) "
             "| y vs float64 rel L2 (grouped, per_expert, auto, cutlass) | ok |",
             "|---" * (len(names) + 9) + "|"]
    for r in rows:
        v = r["variants"]
        cells = [f"{v[n]['median_ms']:.3f} [{v[n]['q1_ms']:.3f}, {v[n]['q3_ms']:.3f}]" for n in names]
        lo, hi = r["rows_per_expert"]
        errors = ", ".join(f"{v[f'{g}+graph']['vs_float64']['rel_l2']:.2e}"
                           for g in ("grouped", "per_expert", "auto", "cutlass"))
        way = r["auto_ways"][0] + ("" if r["auto_took_the_faster"] else " (the slower)")
        lines.append(f"| {r['shape']} | {r['rows']} | {r['experts']} ({lo}-{hi}) | " + " | ".join(cells)
                     + f" | {r['per_expert_over_grouped']:.2f}x | {way} | {r['auto_over_best']:.2f}x "
                     f"| {r['cutlass_over_auto']:.2f}x | {errors} "
                     f"| {'yes' if r['ok'] else 'NO'} |")
    lines.append("")
    lines.append("| reference float64 check | gemm (auto's way) | rel L2 vs float64 (eager, capture, replay) | ok |")
    lines.append("|---|---|---|---|")
    for c in checks:
        mode = c["gemm"] + (f" ({c['ways'][0]})" if c["gemm"] == "auto" else "")
        lines.append(f"| {c['shape']} | {mode} | " + ", ".join(f"{x:.2e}" for x in c["rel_l2_vs_float64"])
                     + f" | {'yes' if c['ok'] else 'NO'} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=25, help="timed calls per variant (at least 20)")
    ap.add_argument("--world", type=int, default=2, help="the world size whose per-rank problem is timed")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--shapes", help="comma-separated bench shape names (default: every bench shape)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.reps < 20:
        print("--reps must be at least 20 (median and quartiles of a handful mean little)", file=sys.stderr)
        return 2
    known = {s.name: s for s in W.bench_shapes}
    wanted = args.shapes.split(",") if args.shapes else list(known)
    if unknown := [n for n in wanted if n not in known]:
        print(f"unknown bench shape(s) {', '.join(unknown)}; known: {', '.join(known)}", file=sys.stderr)
        return 2
    out = args.out or (Path(os.environ["OUT"]) / "moe_grouped.json" if os.environ.get("OUT") else None)
    import cupy

    load_grouped_library()

    props = cupy.cuda.runtime.getDeviceProperties(0)
    device = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    blas = cublas_version(cupy)
    rows = []
    for name in wanted:
        rows.append(bench_shape(cupy, known[name], args.world, args.reps, args.seed))
        print(json.dumps(rows[-1]), flush=True)
    checks = reference_checks(cupy)
    text = table(rows, checks)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"device": device, "cublas": blas, "cupy": cupy.__version__, "reps": args.reps,
                                   "world": args.world,
                                   "shapes": rows, "reference_checks": checks}, indent=1))
    print(f"\ndevice: {device}, cuBLAS {blas}; world {args.world}, rank 0's expert phase; {args.reps} timed calls "
          f"per variant\n")
    print(text)
    return 0 if all(r["ok"] for r in rows) and all(c["ok"] for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
