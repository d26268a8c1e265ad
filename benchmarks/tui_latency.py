"""How fast the dashboard answers key presses while a live search evaluates candidates and the
telemetry panel polls NVML. Runs the real app headless (Textual's Pilot), a real offline search
and the real evaluation cascade; measures, per key press, the time until the app shows the
answer:

  focus   `tab`: focus moves to the next widget (the event loop alone)
  palette `ctrl+p`: the command palette is on screen (a screen pushed and drawn)
  review  `m`:   the review mode cycles; answered when the state panel shows the new mode (at
                 once; a thread worker then tells the engine, whose lock may be held across a git
                 commit);
                 pressed three times a round so the search is back in `auto` after each
  applied        the same presses, until the engine itself runs in the new mode

  python benchmarks/tui_latency.py [--evaluations 4] [--presses 30] [--gpus 0-7] [--out FILE.json]

Without GPUs (or with CUCO_NO_GPU=1) the evaluations are compile-only, on a fresh build cache so
every candidate really runs nvcc: the groups are placeholders that the cascade turns into
`no_gpu`; with --gpus the pool splits those GPUs into groups of the workload's world size."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from textual import events
from textual.command import CommandPalette

from cuco_tui.app.app import CucoApp
from cuco_tui.app.screens.dashboard import DashboardScreen
from cuco_tui.harness.gpus import inventory, parse_gpu_list
from cuco_tui.search.config import SearchConfig
from cuco_tui.executors import GpuGroup, GpuPool


def _summary(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {"n": len(xs), "median_ms": statistics.median(xs), "p95_ms": xs[int(0.95 * (len(xs) - 1))],
            "max_ms": xs[-1], "min_ms": xs[0]}


def _send_key(app: CucoApp, key: str, char: str | None) -> None:
    """The key as the terminal driver delivers it. Not pilot.press: that also waits until every
    widget's queue is empty (the chart and telemetry keep them busy), which is not what a user
    waits for."""
    event = events.Key(key, char)
    event.set_sender(app)
    app._driver.send_message(event)


async def _until(pilot, predicate, timeout_s: float) -> float | None:
    """Seconds until predicate() holds, polling every millisecond; None on timeout."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout_s:
        if predicate():
            return time.perf_counter() - t0
        await asyncio.sleep(0.001)
    return None


async def measure(args: argparse.Namespace, session: Path) -> dict:
    inv = inventory()
    if args.gpus and inv.count:
        gpus = parse_gpu_list(args.gpus)
        pool = None
        config = SearchConfig(workload="gemm_allgather", generations=200, islands=args.evaluations,
                              gpus=tuple(gpus), max_concurrent_builds=args.evaluations, seed=0)
    else:  # compile-only: one placeholder group per evaluation wanted
        pool = GpuPool([GpuGroup(i, (2 * i, 2 * i + 1)) for i in range(args.evaluations)])
        config = SearchConfig(workload="gemm_allgather", generations=200, islands=args.evaluations,
                              max_concurrent_builds=args.evaluations, seed=0)
    app = CucoApp(start_search=True, search_config=config, session=session, agent="offline",
                  executor=pool)
    focus, palette, review, applied, in_flight = [], [], [], [], []
    async with app.run_test(size=(120, 40)) as pilot:
        started = await _until(pilot, lambda: isinstance(app.screen, DashboardScreen), 30)
        if started is None:
            raise SystemExit("the dashboard did not open")
        screen: DashboardScreen = app.screen  # type: ignore[assignment]
        busy = await _until(pilot, lambda: screen.state.in_flight >= args.evaluations, args.warmup_s)
        print(f"{screen.state.in_flight} evaluations in flight after "
              f"{'%.1f s' % busy if busy is not None else 'the warm-up (fewer than asked)'}", file=sys.stderr)
        # Phase 1: keys that leave the search as it is (auto mode throughout).
        for i in range(args.presses):
            in_flight.append(screen.state.in_flight)
            before = app.focused
            t0 = time.perf_counter()
            _send_key(app, "tab", "\t")
            dt = await _until(pilot, lambda: app.focused is not before, 5)
            focus.append(1000 * (time.perf_counter() - t0) if dt is not None else float("inf"))
            await asyncio.sleep(args.interval_s)
            t0 = time.perf_counter()
            _send_key(app, "ctrl+p", None)
            dt = await _until(pilot, lambda: isinstance(app.screen, CommandPalette), 5)
            palette.append(1000 * (time.perf_counter() - t0) if dt is not None else float("inf"))
            _send_key(app, "escape", None)
            await _until(pilot, lambda: app.screen is screen, 5)
            await asyncio.sleep(args.interval_s)
        # Phase 2: the review mode cycles; `review` and `risky` hold proposals, whose diffs the
        # queue then renders: the heaviest drawing the dashboard does.
        for i in range(args.presses):
            in_flight.append(screen.state.in_flight)
            for _ in range(3):  # auto -> review -> risky -> auto: held proposals are released again
                mode = screen.state.review_mode
                t0 = time.perf_counter()
                _send_key(app, "m", "m")
                dt = await _until(pilot, lambda: screen.state.review_mode != mode, 5)
                review.append(1000 * (time.perf_counter() - t0) if dt is not None else float("inf"))
                new = screen.state.review_mode
                dt = await _until(pilot, lambda: screen.search.started and screen.search.review_mode == new, 10)
                applied.append(1000 * (time.perf_counter() - t0) if dt is not None else float("inf"))
                await asyncio.sleep(args.interval_s)
        committed = dict(screen.state.statuses)
        screen.search.stop()
    return {"focus": _summary(focus), "palette": _summary(palette), "review": _summary(review),
            "applied": _summary(applied),
            "in_flight": {"min": min(in_flight), "median": statistics.median(in_flight), "max": max(in_flight)},
            "committed": committed, "gpus": inv.count, "cpus": os.cpu_count()}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--evaluations", type=int, default=4)
    ap.add_argument("--presses", type=int, default=30)
    ap.add_argument("--interval-s", type=float, default=0.3)
    ap.add_argument("--warmup-s", type=float, default=120)
    ap.add_argument("--gpus", help="run on these GPUs (default: compile-only placeholders)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="cuco-latency-") as tmp:
        # A fresh build cache: every candidate is compiled for real, the load this measures.
        os.environ["CUCO_CACHE_DIR"] = str(Path(tmp) / "cache")
        result = asyncio.run(measure(args, Path(tmp) / "session"))
    for k in ("focus", "palette", "review", "applied"):
        r = result[k]
        print(f"{k:7s} n={r['n']} median {r['median_ms']:.1f} ms, p95 {r['p95_ms']:.1f} ms, max {r['max_ms']:.1f} ms")
    print(f"in flight during presses: {result['in_flight']}; committed: {result['committed']}; "
          f"{result['cpus']} CPUs, {result['gpus']} GPUs")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
