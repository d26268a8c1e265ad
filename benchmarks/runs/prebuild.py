"""Warm the build cache before a device call's tests and benchmarks: compiles, in parallel, each
workload's seed and every strategy template at its default knobs and at each value of each knob
(one knob changed at a time), plus gemm_allgather's hand-written candidates. The GPU tests and
the benchmarks evaluate one candidate at a time, so without this each waits on nvcc in turn;
the cache is keyed by source bytes, so a test that renders the same source finds it built.
The fused and grouped GEMM libraries the candidates link (cuco_tile_gemm_lib.h,
cuco_grouped_gemm_lib.h: one CUTLASS build per kernel configuration) start first, side by side, and the candidates that link them are queued last, so
that no builder waits on a library's lock while other candidates could compile.

  CUCO_CACHE_DIR=/tmp/cc/build python3 benchmarks/runs/prebuild.py [--jobs 12] [WORKLOAD ...]
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cuco_tui.agents.offline import StrategyBook
from cuco_tui.toolchain import BuildCache, compile_candidate
from cuco_tui.toolchain.attention import ensure_library
from cuco_tui.toolchain.nvcc import ensure_gemm_library, gemm_libraries_named
from cuco_tui.toolchain.toolchain import discover
from cuco_tui.workload.manifest import list_workloads, load_workload


LIBRARY_KNOBS = ("tile", "cluster")  # the knobs that pick a fused GEMM library's kernel configuration


def sources(name: str) -> dict[str, str]:
    w = load_workload(name)
    out = {f"{name}/seed": w.seed.read_text()}
    book = StrategyBook.load(w.root, w.seed)
    for s in book.strategies:
        for knobs in s.one_knob_changes():
            tag = "_".join(str(v) for v in knobs.values()) or "default"
            out[f"{name}/{s.name}/{tag}"] = book.render(s, knobs)
        # Every kernel configuration of a fused GEMM template (tile x cluster), not only those one
        # knob changed alone reaches: each is a library of its own, and the test suite builds one.
        picks = [k for k in LIBRARY_KNOBS if k in s.knobs]
        if len(picks) > 1:
            for values in itertools.product(*(s.knobs[k] for k in picks)):
                knobs = s.normalized({**s.default_knobs(), **dict(zip(picks, values))})
                out[f"{name}/{s.name}/config_" + "_".join(map(str, values))] = book.render(s, knobs)
    cands = w.root / "candidates"
    if cands.is_dir():
        for p in sorted(cands.glob("*.cu")):
            out[f"{name}/{p.stem}"] = p.read_text()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workloads", nargs="*", help="default: every workload")
    ap.add_argument("--jobs", type=int, default=12)
    ap.add_argument("--files", nargs="+", metavar="CU", help="compile these candidate files (instead of workloads)")
    args = ap.parse_args(argv)
    names = [] if args.files and not args.workloads else args.workloads or list_workloads()
    srcs: dict[str, str] = {f"file/{Path(f).stem}": Path(f).read_text() for f in args.files or []}
    for n in names:
        srcs.update(sources(n))
    # Identical renders (a knob the template ignores) compile once; those that link a fused or
    # grouped GEMM library go last (their builds wait for it).
    unique = {text: label for label, text in srcs.items()}
    linking = {text for text in unique if gemm_libraries_named(text)[0]}
    configs = sorted({c for text in linking for c in gemm_libraries_named(text)[0]}, key=lambda c: (c.STEM, c.tag))
    unique = dict(sorted(unique.items(), key=lambda item: item[0] in linking))
    toolchain, cache = discover(), BuildCache()
    tmp = Path(tempfile.mkdtemp(prefix="cuco-prebuild-"))

    def build(item: tuple[str, str]) -> tuple[str, bool, float]:
        text, label = item
        path = tmp / (label.replace("/", "__") + ".cu")
        path.write_text(text)
        t0 = time.monotonic()
        r = compile_candidate(path, toolchain, cache)
        return label, r.ok, time.monotonic() - t0

    t0 = time.monotonic()
    failed = 0
    with ThreadPoolExecutor(args.jobs) as pool:
        # The attention library and the fused GEMM libraries (each one long, mostly single-threaded
        # compile) start first, beside each other and the candidates.
        attention = None
        if any("attention" in load_workload(n).libraries for n in names):
            attention = pool.submit(ensure_library, toolchain, cache)
        gemm_libraries = [pool.submit(ensure_gemm_library, c, toolchain, cache) for c in configs]
        for label, ok, secs in pool.map(build, unique.items()):
            failed += not ok
            print(f"{'ok ' if ok else 'FAIL'} {secs:6.1f} s  {label}", flush=True)
        for future in gemm_libraries:
            lib = future.result()
            failed += not lib.ok
            print(f"{'ok ' if lib.ok else 'FAIL'} {lib.seconds:6.1f} s  {lib.config.LABEL} library {lib.config.tag} "
                  f"{'(cached) ' if lib.cached else ''}{lib.path or lib.problem}", flush=True)
        if attention is not None:
            lib = attention.result()
            failed += not lib.ok
            print(f"{'ok ' if lib.ok else 'FAIL'} {lib.seconds:6.1f} s  attention library "
                  f"{'(cached) ' if lib.cached else ''}{lib.path or lib.problem}", flush=True)
    print(f"{len(unique)} sources ({len(srcs)} renders), {failed} failed, {time.monotonic() - t0:.0f} s, cache {cache.root}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
