"""Screenshots (SVG) of the dashboard during a live offline search, driven by Textual's Pilot:
the real app, the real search and evaluation cascade, the GPU telemetry panel polling NVML.
One screenshot every --every measured candidates (so the latency chart is seen moving), and a
last one when --shots are taken or --seconds pass.

  python benchmarks/tui_screenshots.py --out docs/screenshots [--gpus 0,1] [--shots 3] [--every 4] [--seconds 300]

Without a GPU the search is compile-only: the screenshots then show the no-GPU banner and an
empty chart (useful to check the script; the pictures worth keeping come from a GPU host)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

from cuco_tui.app.app import CucoApp
from cuco_tui.app.screens.dashboard import DashboardScreen
from cuco_tui.harness.gpus import parse_gpu_list
from cuco_tui.search.config import SearchConfig


def _measured(screen: DashboardScreen) -> int:
    return screen.state.statuses.get("measured", 0)


async def shoot(args: argparse.Namespace, session: Path) -> list[dict]:
    gpus = tuple(parse_gpu_list(args.gpus)) if args.gpus else ()
    config = SearchConfig(workload=args.workload, generations=args.generations, gpus=gpus, seed=args.seed)
    app = CucoApp(workload_name=args.workload, start_search=True, search_config=config, session=session,
                  agent="offline")
    shots: list[dict] = []
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    async with app.run_test(size=(args.width, args.height)) as pilot:
        while not isinstance(app.screen, DashboardScreen):
            await pilot.pause(0.1)
        screen: DashboardScreen = app.screen  # type: ignore[assignment]
        next_at = args.every
        while len(shots) < args.shots:
            over = time.monotonic() - start > args.seconds
            if _measured(screen) >= next_at or over or screen.state.over:
                await pilot.pause(1.5)  # one more telemetry poll drawn
                name = f"{args.prefix}-{len(shots) + 1}.svg"
                app.save_screenshot(filename=name, path=str(args.out))
                shots.append({"file": name, "seconds": round(time.monotonic() - start, 1),
                              "measured": _measured(screen), "statuses": dict(screen.state.statuses),
                              "best": screen.state.best_speedup, "generation": screen.state.generation})
                print(f"saved {args.out / name}: {shots[-1]}", file=sys.stderr)
                next_at = _measured(screen) + args.every
                if over or screen.state.over:
                    break
            await pilot.pause(0.5)
        screen.search.stop()
    return shots


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--workload", default="gemm_allgather")
    ap.add_argument("--gpus")
    ap.add_argument("--generations", type=int, default=30)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--shots", type=int, default=3)
    ap.add_argument("--every", type=int, default=4, help="measured candidates between screenshots")
    ap.add_argument("--seconds", type=float, default=300)
    ap.add_argument("--width", type=int, default=160)
    ap.add_argument("--height", type=int, default=48)
    ap.add_argument("--prefix", default="dashboard")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="cuco-shots-") as tmp:
        shots = asyncio.run(shoot(args, Path(tmp) / "session"))
    (args.out / f"{args.prefix}.json").write_text(json.dumps(shots, indent=1))
    return 0 if shots else 1


if __name__ == "__main__":
    sys.exit(main())
