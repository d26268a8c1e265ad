"""The runtime's fused GEMM (cuco_tile_gemm.cuh) against cuBLAS on ONE GPU, per gemm_allgather
bench shape: the per-rank problem at world size W (default 2), M x K x N/W, rank 0, every
arrival flag already set. Builds benchmarks/fused_gemm_bench.cu (one translation unit per
kernel configuration, compiled in parallel; ptxas's resource usage of each printed), verifies
every fused variant against cuBLAS, times them all interleaved with cublasGemmEx and the best
of cuBLASLt's heuristics (L2 flushed before each call). A second pass, in its own process under
--late-timeout, runs the default with its flags set late by a second stream: rows copied in from
pinned host memory, then device to device with the copy-engine mover's tg::ce_copy (a hang there
would mean the copy waited for an SM the spinning GEMM holds). Prints a table; writes JSON to
--out (default $OUT, if set). Exit status 0 only if everything verified and the best fused
variant reached 95% of cuBLAS's speed on every shape.

  python3 benchmarks/fused_gemm.py [--out DIR] [--world 2] [--reps 30] [--shapes name,...]
  python3 benchmarks/fused_gemm.py --build-only      # compile and show resource usage (no GPU)
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cuco_tui.toolchain.nvcc import CUTLASS_FLAGS, cuda_arch  # noqa: E402
from cuco_tui.toolchain.process import child_env  # noqa: E402
from cuco_tui.toolchain.toolchain import Toolchain, discover  # noqa: E402
from cuco_tui.workload.manifest import load_workload  # noqa: E402

HERE = Path(__file__).resolve().parent
DRIVER, CONFIG_UNIT, HEADER = HERE / "fused_gemm_bench.cu", HERE / "fused_gemm_configs.cu", HERE / "fused_gemm_bench.h"
UTIL = HERE / "bench_util.cuh"  # what the driver shares with grouped_gemm_bench.cu
CONFIGS = 4  # CUCO_BENCH_CONFIGS in fused_gemm_bench.h
TARGET = 95.0  # % of cuBLAS's speed the fused GEMM should reach on every shape


def _flags(tc: Toolchain) -> list[str]:
    arch = cuda_arch()
    flags = ["-std=c++17", "-O3", f"-gencode=arch=compute_{arch},code=sm_{arch}", *CUTLASS_FLAGS]
    for inc in (tc.runtime_include, tc.nccl.include, tc.cublas.include, tc.cutlass):
        if inc is not None:
            flags.append(f"-I{inc}")
    return flags


def _libs(tc: Toolchain) -> list[str]:
    libs = []
    for lib in (tc.cublas.lib, tc.nccl.lib):
        if lib is not None:
            libs += [f"-L{lib}", "-Xlinker", f"-rpath={lib}"]
    return libs + ["-l:libcublasLt.so.13", f"-l:{tc.cublas.soname}", f"-l:{tc.nccl.soname}"]


def _run(cmd: list[str], cwd: Path) -> tuple[int, str, float]:
    t0 = time.monotonic()
    p = subprocess.run(cmd, cwd=cwd, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p.returncode, p.stdout, time.monotonic() - t0


_ENTRY = re.compile(r"Compiling entry function '(\w+)' for '(\w+)'")
_USAGE = re.compile(r"Used (\d+) registers")
_SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_CONFIG = re.compile(r"ConfigILi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)E")


def resource_usage(log: str) -> list[dict]:
    """ptxas -v lines of the fused GEMM kernels: registers, stack frame, spills."""
    out, current = [], None
    for line in log.splitlines():
        m = _ENTRY.search(line)
        if m:
            current = None
            if "fused_gemm_kernel" in m.group(1):
                c = _CONFIG.search(m.group(1))
                current = {"kernel": "x".join(c.groups()[:2]) + "/" + "x".join(c.groups()[2:]) if c else m.group(1)}
                out.append(current)
            continue
        if current is None:
            continue
        if m := _SPILL.search(line):
            current.update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
        elif m := _USAGE.search(line):
            current["registers"] = int(m.group(1))
    return out


def build(build_dir: Path, jobs: int) -> tuple[Path, list[dict]]:
    """The benchmark binary and ptxas's resource usage of each kernel configuration. Each unit's
    object is cached under `build_dir` by the hash of everything it is built from, so editing
    the driver does not recompile the kernels (about 45 s of CPU each)."""
    tc = discover()
    if tc.nvcc is None or not tc.cublas.found or tc.cutlass is None:
        problems = list(tc.problems) + ([tc.cutlass_problem] if tc.cutlass is None else [])
        raise SystemExit("cannot build: " + "; ".join(problems))
    flags = _flags(tc) + [f"-I{HERE}"]
    common = hashlib.sha256()
    for f in [HEADER, UTIL, *tc.runtime_headers()]:
        common.update(f.read_bytes())
    common.update("\0".join(flags + [tc.nvcc_version, tc.cutlass_version]).encode())
    build_dir.mkdir(parents=True, exist_ok=True)
    units = [(CONFIG_UNIT, [f"-DCUCO_BENCH_ONLY={i}", "-Xptxas", "-v"]) for i in range(CONFIGS)] + [(DRIVER, [])]
    objects, todo = [], []
    for src, extra in units:
        h = common.copy()
        h.update(src.read_bytes() + "\0".join(extra).encode())
        obj = build_dir / f"{src.stem}-{h.hexdigest()[:16]}.o"
        objects.append(obj)
        if not (obj.is_file() and obj.with_suffix(".log").is_file()):
            todo.append((src, extra, obj))
    nvcc = str(tc.nvcc)
    print(f"build: {len(todo)} of {len(units)} units to compile with {jobs} jobs in {build_dir} "
          f"(CUTLASS {tc.cutlass_version}, {tc.nvcc_version})", file=sys.stderr)
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max(jobs, 1)) as pool:
        futures = [(obj, pool.submit(_run, [nvcc, *flags, *extra, "-c", str(src), "-o", str(obj) + ".tmp"], build_dir))
                   for src, extra, obj in todo]
        for obj, fut in futures:
            rc, log, secs = fut.result()
            print(f"build: {obj.name} {'ok' if rc == 0 else 'FAILED'} in {secs:.0f} s", file=sys.stderr)
            if rc != 0:
                raise SystemExit(f"nvcc failed on {obj.name}:\n{log[-6000:]}")
            os.replace(str(obj) + ".tmp", obj)
            obj.with_suffix(".log").write_text(log)
    link = hashlib.sha256("\0".join(o.name for o in objects).encode()).hexdigest()[:16]
    exe = build_dir / f"fused_gemm_bench-{link}"
    if not exe.is_file():
        rc, log, _ = _run([nvcc, *map(str, objects), *_libs(tc), "-o", str(exe)], build_dir)
        if rc != 0:
            raise SystemExit(f"link failed:\n{log[-4000:]}")
    usage = [u for obj in objects for u in resource_usage(obj.with_suffix(".log").read_text())]
    print(f"build: {exe} ready in {time.monotonic() - t0:.0f} s", file=sys.stderr)
    return exe, usage


def _fmt(v: dict) -> str:
    return f"{v['median_ms']:.3f} [{v['q1_ms']:.3f}-{v['q3_ms']:.3f}]"


def _late_text(late: dict | None) -> str:
    if late is None:
        return "not run"
    return f"{late['ms']:.3f} ms {'ok' if late['ok'] else 'WRONG'} (copies alone {late['copy_ms']:.3f})"


def report(timing: list[dict], late: list[dict]) -> tuple[str, bool]:
    """The short table, and whether every shape verified and reached the target."""
    lines = ["shape (M,K,N) -> per-rank GEMM | cuBLAS ms [q1-q3] | fused ms [q1-q3] | fused/cuBLAS speed | "
             "fused TFLOP/s | best fused variant | late flags: host copies | late flags: copy-engine D2D"]
    lines.append("|".join(["---"] * 8))
    good = True
    for r in timing:
        key = (r["M"], r["K"], r["N"])
        lates = {x["mode"]: x for x in late if (x["M"], x["K"], x["N"]) == key}
        good &= all(x["ok"] for x in lates.values())
        ok = [v for v in r["variants"] if v["ok"] and v["median_ms"] > 0]
        blas = min((v for v in ok if v["kind"] != "fused"), key=lambda v: v["median_ms"], default=None)
        fused = [v for v in ok if v["kind"] == "fused"]
        default = next((v for v in fused if v["name"] == "128x256/2x1/auto"), None)
        best = min((v for v in fused if "reserved" not in v["name"]), key=lambda v: v["median_ms"], default=None)
        if blas is None or default is None or best is None:
            good = False
            lines.append(f"{r['M']},{r['K']},{r['N']} | no result | " + "; ".join(
                f"{v['name']}: {v['why']}" for v in r["variants"] if not v["ok"]))
            continue
        speed = 100.0 * blas["median_ms"] / default["median_ms"]
        best_speed = 100.0 * blas["median_ms"] / best["median_ms"]
        good &= best_speed >= TARGET and all(v["ok"] for v in r["variants"])
        m, k, n = r["gemm"]
        lines.append(f"{r['M']},{r['K']},{r['N']} -> {m}x{k}x{n} | {_fmt(blas)} ({blas['name']}) | {_fmt(default)} | "
                     f"{speed:.1f}% | {default['tflops']:.0f} | {best['name']} {best['median_ms']:.3f} "
                     f"({best_speed:.1f}%) | {_late_text(lates.get('h2d'))} | {_late_text(lates.get('ce_d2d'))}")
    return "\n".join(lines), good


def _records(out: str, part: str) -> list[dict]:
    return [r for r in (json.loads(line) for line in out.splitlines() if line.startswith("{")) if r.get("part") == part]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path(os.environ["OUT"]) if os.environ.get("OUT") else None)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--chunks", type=int, default=4)
    ap.add_argument("--shapes", default="", help="bench shape names (default: all of gemm_allgather's)")
    ap.add_argument("--build-dir", type=Path, default=Path(os.environ.get("CUCO_FUSED_BENCH_DIR", "/tmp/cuco-fused-bench")))
    ap.add_argument("--jobs", type=int, default=min(CONFIGS + 1, os.cpu_count() or 1))
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--late-timeout", type=float, default=180.0)
    args = ap.parse_args()
    if args.reps < 20:
        print("note: fewer than 20 repetitions", file=sys.stderr)

    exe, usage = build(args.build_dir, args.jobs)
    print("resource usage (ptxas, sm_90a):")
    for u in usage:
        print(f"  {u['kernel']:>14}: {u.get('registers', '?')} registers, {u.get('stack', '?')} B stack, "
              f"{u.get('spill_stores', '?')} B spill stores, {u.get('spill_loads', '?')} B spill loads")
    if args.build_only:
        return 0

    w = load_workload("gemm_allgather")
    wanted = [s for s in args.shapes.split(",") if s]
    unknown = set(wanted) - {s.name for s in w.bench_shapes}
    if unknown:
        raise SystemExit(f"unknown shape(s) {', '.join(sorted(unknown))}: use {', '.join(s.name for s in w.bench_shapes)}")
    shapes = [s for s in w.bench_shapes if not wanted or s.name in wanted]
    cmd = [str(exe), "--world", str(args.world), "--reps", str(args.reps), "--warmup", str(args.warmup),
           "--chunks", str(args.chunks)]
    for s in shapes:
        cmd += ["--shape", f"{s.dims['M']},{s.dims['K']},{s.dims['N']}"]
    t0 = time.monotonic()
    timing_run = subprocess.run(cmd + ["--no-late"], env=child_env(), stdout=subprocess.PIPE, text=True)
    timing_s = time.monotonic() - t0
    # The late-flags pass apart and under a limit: its copy-engine mode hangs if a copy needs an SM.
    try:
        late_run = subprocess.run(cmd + ["--late-only"], env=child_env(), stdout=subprocess.PIPE, text=True,
                                  timeout=args.late_timeout)
        late_out, late_rc = late_run.stdout, late_run.returncode
    except subprocess.TimeoutExpired as exc:
        late_out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        late_rc = 124
        print(f"the late-flags pass did not finish in {args.late_timeout} s: a GEMM waited for a copy that never "
              f"ran (see the last 'late' line above)", file=sys.stderr)
    device = (_records(timing_run.stdout, "device") or [{}])[0]
    timing, late = _records(timing_run.stdout, "timing"), _records(late_out, "late")
    table, good = report(timing, late)
    print(f"\n{device.get('device', '?')}, {device.get('sms', '?')} SMs; W={args.world}; {args.reps} interleaved "
          f"repetitions after {args.warmup} warm-ups; timing pass {timing_s:.0f} s; target >= {TARGET:.0f}% "
          f"of cuBLAS's speed (best variant)\n")
    print(table)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "fused_gemm.json").write_text(json.dumps(
            {"device": device, "world": args.world, "reps": args.reps, "resources": usage, "shapes": timing,
             "late": late, "late_rc": late_rc, "table": table}, indent=1))
        print(f"\nJSON: {args.out / 'fused_gemm.json'}")
    for name, rc in (("timing", timing_run.returncode), ("late-flags", late_rc)):
        if rc != 0:
            print(f"the {name} pass exited with {rc}", file=sys.stderr)
            return rc
    return 0 if good else 1

if __name__ == "__main__":
    sys.exit(main())
