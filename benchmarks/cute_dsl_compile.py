"""How long the CuTe DSL takes to compile a Hopper GEMM, against the CUTLASS C++ library build of
the fused GEMM (issue 34, item 1: "weigh the CuTe DSL for the fused GEMM").

    python3 benchmarks/cute_dsl_compile.py --dsl-python /tmp/dslenv/bin/python \\
        --example CLONE/examples/python/CuTeDSL/cute/hopper/kernel/dense_gemm/dense_gemm_persistent.py \\
        [--configs 128x256/2x1,128x256/1x2] [--cxx]

No GPU is needed: the DSL compiles ahead of time against fake tensors (dynamic M, N, K) for the
architecture named by CUTE_DSL_ARCH (sm_90a here) and exports an object file and a C header
(`export_to_c`), which is how a candidate would link it. The kernel compiled is NVIDIA's persistent
TMA + WGMMA example from a local clone of NVIDIA/cutlass (kept outside this repository: nothing of
it is copied here), with bf16 operands, fp32 accumulation. `--dsl-python` is an interpreter with
`nvidia-cutlass-dsl` installed (a virtual environment of its own: its cuda-bindings need not match
this project's). Each configuration compiles in a fresh process with the DSL's caches off, and the
PTX it kept is checked for WGMMA and TMA instructions, so a compile that silently produced a
different kernel does not count. With `--cxx`, the fused GEMM library of the same configuration
(cuco_tile_gemm_lib.h, one CUTLASS C++ build) is built in an empty cache, on the same machine."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Run by --dsl-python: compiles one configuration and prints "seconds <compile> <export>".
_DRIVER = r"""
import importlib.util, os, sys, time
import cutlass, cutlass.cute as cute
import cuda.bindings.driver as cuda
from cutlass.cute.runtime import make_fake_compact_tensor
example, bm, bn, cm, cn, out = sys.argv[1], *map(int, sys.argv[2:6]), sys.argv[6]
spec = importlib.util.spec_from_file_location("dsl_example", example)
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
kernel_class = next(v for k, v in vars(mod).items() if k.startswith("Hopper") and k.endswith("Kernel"))
M, N, K = cute.SymInt(divisibility=128), cute.SymInt(divisibility=128), cute.SymInt(divisibility=64)
def fake(rows, cols):  # (rows, cols, batch 1), the cols contiguous
    return make_fake_compact_tensor(cutlass.BFloat16, (rows, cols, 1), stride_order=(1, 0, 2), assumed_align=16)
gemm = kernel_class(cutlass.Float32, (bm, bn), (cm, cn), 1, True)
# the persistent grid: clusters an H100 SXM's 132 SMs hold at once (no GPU here to ask)
t0 = time.perf_counter()
compiled = cute.compile(gemm, fake(M, K), fake(N, K), fake(M, N), 132 // (cm * cn), cuda.CUstream(0))
t1 = time.perf_counter()
compiled.export_to_c(file_path=out, file_name="gemm", function_prefix="cuco_gemm")
t2 = time.perf_counter()
print(f"seconds {t1 - t0:.2f} {t2 - t1:.2f}")
"""


def parse_configs(text: str) -> list[tuple[int, int, int, int]]:
    """'128x256/2x1,...' -> [(128, 256, 2, 1), ...]; one line on a malformed entry."""
    out = []
    for item in text.split(","):
        try:
            tile, cluster = item.strip().split("/")
            bm, bn = (int(v) for v in tile.split("x"))
            cm, cn = (int(v) for v in cluster.split("x"))
        except ValueError:
            raise SystemExit(f"error: --configs entry {item!r} is not TILExTILE/CLUSTERxCLUSTER (e.g. 128x256/2x1)")
        out.append((bm, bn, cm, cn))
    return out


def dsl_compile(python: str, example: Path, config: tuple[int, int, int, int], arch: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="cute-dsl-") as tmp:
        env = {**os.environ, "CUTE_DSL_ARCH": arch, "CUTE_DSL_NO_CACHE": "1", "CUTE_DSL_CACHE_DIR": f"{tmp}/cache",
               "CUTE_DSL_KEEP": "ptx", "CUTE_DSL_DUMP_DIR": f"{tmp}/dump"}
        os.makedirs(f"{tmp}/dump")
        start = time.perf_counter()
        try:
            proc = subprocess.run([python, "-c", _DRIVER, str(example), *map(str, config), tmp], env=env,
                                  capture_output=True, text=True, timeout=900)
        except subprocess.TimeoutExpired:
            return {"problem": "no result within 900 s"}
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()
            return {"problem": tail[-1] if tail else f"exit {proc.returncode}"}
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("seconds ")), None)
        obj = Path(tmp) / "gemm.o"
        if line is None or not obj.is_file():
            return {"problem": "the driver printed no time" if line is None else "no object file was exported"}
        compile_s, export_s = (float(v) for v in line.split()[1:])
        ptx = "".join(p.read_text() for p in Path(f"{tmp}/dump").glob("*.ptx"))
        return {"compile": compile_s, "export": export_s, "process": wall,
                "wgmma": ptx.count("wgmma.mma_async"), "tma": ptx.count("cp.async.bulk.tensor"),
                "target": next((ln.split()[1] for ln in ptx.splitlines() if ln.startswith(".target")), "?"),
                "object_kb": obj.stat().st_size / 1024}


def cxx_build(config: tuple[int, int, int, int]) -> dict:
    from cuco_tui.toolchain import BuildCache
    from cuco_tui.toolchain.nvcc import ensure_gemm_library
    from cuco_tui.toolchain.tile_gemm_lib import CONFIGS, KernelConfig
    from cuco_tui.toolchain.toolchain import discover

    kc = KernelConfig(*config)
    if kc not in CONFIGS:
        return {"problem": f"the fused GEMM library has no configuration {kc.name}"}
    with tempfile.TemporaryDirectory(prefix="cxx-gemm-") as tmp:
        start = time.perf_counter()
        lib = ensure_gemm_library(kc, discover(), BuildCache(Path(tmp)))
        wall = time.perf_counter() - start
    return {"build": wall} if lib.ok else {"problem": lib.problem}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dsl-python", required=True, help="an interpreter with nvidia-cutlass-dsl installed")
    ap.add_argument("--example", required=True, type=Path, help="the DSL's Hopper persistent GEMM example (a local clone)")
    ap.add_argument("--configs", default="128x256/2x1,128x256/1x2,128x128/1x1,128x128/2x1,64x256/1x1",
                    help="tile/cluster pairs, e.g. 128x256/2x1")
    ap.add_argument("--arch", default="sm_90a")
    ap.add_argument("--cxx", action="store_true", help="also build the fused GEMM's C++ library of each configuration")
    args = ap.parse_args(argv)
    if not args.example.is_file():
        print(f"error: no DSL example at {args.example}", file=sys.stderr)
        return 2
    python = shutil.which(args.dsl_python)  # a path, or a name on PATH
    if python is None:
        print(f"error: --dsl-python {args.dsl_python} is not an executable interpreter", file=sys.stderr)
        return 2
    configs = parse_configs(args.configs)
    print(f"{os.cpu_count()} cores; arch {args.arch}; bf16 in, fp32 accumulate; fresh process, caches off\n")
    print("| tile / cluster | DSL compile s | export s | process s | PTX wgmma / TMA ops | object KB |"
          + (" C++ library build s |" if args.cxx else ""))
    print("|---|---|---|---|---|---|" + ("---|" if args.cxx else ""))
    failed = False
    for config in configs:
        name = f"{config[0]}x{config[1]} / {config[2]}x{config[3]}"
        d = dsl_compile(python, args.example, config, args.arch)
        if "problem" in d:
            cells = f"failed: {d['problem']} | | | | |"
            failed = True
        elif not d["wgmma"] or not d["tma"] or d["target"] != args.arch:
            cells = f"{d['compile']:.2f} (not a {args.arch} WGMMA+TMA kernel: target {d['target']}) | | | | |"
            failed = True
        else:
            cells = (f"{d['compile']:.2f} | {d['export']:.2f} | {d['process']:.1f} | {d['wgmma']} / {d['tma']} | "
                     f"{d['object_kb']:.0f} |")
        if args.cxx:
            c = cxx_build(config)
            cells += f" {c['build']:.1f} |" if "build" in c else f" {c['problem']} |"
        print(f"| {name} | {cells}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
