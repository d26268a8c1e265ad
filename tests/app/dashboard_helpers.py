"""The dashboard app the TUI tests drive (test_dashboard, test_supervise_tui, test_snapshots, ...):
the real engine, lineage and offline agent on a session under tmp_path, with a fake evaluator that
returns a measured CascadeResult at once; the Pilot steps they share (stop, the queue, a widget's text)."""

from __future__ import annotations

import zlib
from dataclasses import replace
from pathlib import Path

from textual.widgets import Static

from cuco_tui.app.app import CucoApp
from cuco_tui.app.screens.dashboard import DashboardScreen
from cuco_tui.app.widgets.confirm import Confirm
from cuco_tui.app.widgets.search.proposal_queue import ProposalQueue
from cuco_tui.core.bounds import Bounds, ShapeBound, Work
from cuco_tui.core.ending import END_STATES
from cuco_tui.core.machine import MachineInfo
from cuco_tui.core.result import CascadeResult, Level, ShapeTiming, Spread, Status
from cuco_tui.evaluate.cascade import Progress
from cuco_tui.executors import GpuGroup, GpuPool
from cuco_tui.search.config import SearchConfig
from pilot_helpers import wait_until


def fake_evaluate(path, workload, options, progress=None, kept=None):
    """Measured at once; the speedup is a fixed function of the source."""
    source = Path(path).read_text()
    speedup = 0.8 + (zlib.crc32(source.encode()) % 100) / 100
    if progress:
        progress(Progress(Level.COMPILE, "compile"))
        progress(Progress(Level.BENCHMARK, "bench square-8k"))
    ref = Spread.of([1.0] * 5)
    cand = Spread.of([1.0 / speedup] * 5)
    return CascadeResult(candidate=str(path), workload=workload.name, status=Status.MEASURED, level=Level.BENCHMARK,
                         timings=[ShapeTiming("square-8k", {"M": 8192, "K": 8192, "N": 8192}, cand, ref, [cand],
                                              speedup)],
                         world=2, gpus=list(options.gpus or ()), reason="measured")


def make_app(tmp_path: Path, review_mode: str = "review", **cfg) -> CucoApp:
    cfg.setdefault("generations", 3)
    cfg.setdefault("islands", 2)
    config = SearchConfig(workload="gemm_allgather", max_concurrent_builds=1, seed=0, **cfg)
    return CucoApp(evaluate_fn=fake_evaluate, start_search=True, review_mode=review_mode, search_config=config,
                   session=tmp_path / "session",
                   executor=GpuPool([GpuGroup(0, (0, 1))]),
                   engine_options={"compile_ahead": False, "design_context": lambda point: ""})


async def stop(pilot, app: CucoApp) -> None:
    """x, then yes in the question it asks; the search ends (stopped, or finished just before)."""
    await pilot.press("x")
    assert await wait_until(pilot, lambda: isinstance(app.screen, Confirm), 5)
    await pilot.press("y")
    assert await wait_until(pilot, lambda: text(app, "#state-run").partition(" ")[0] in END_STATES)


def dashboard(app: CucoApp) -> DashboardScreen:
    assert isinstance(app.screen, DashboardScreen), app.screen
    return app.screen


def queue(app: CucoApp) -> ProposalQueue:
    return dashboard(app).query_one(ProposalQueue)


def text(app: CucoApp, selector: str) -> str:
    return str(app.screen.query_one(selector, Static).render())


H200 = MachineInfo(gpus=("NVIDIA H200", "NVIDIA H200"), driver="570.86.15", cuda_toolkit="13.0.48", nccl="2.28.9")


def fake_bounds(workload, gpus, world) -> Bounds:
    """A bound at 2x the reference on the fake evaluator's one shape (square-8k)."""
    return Bounds(workload.name, world, tuple(gpus),
                  (ShapeBound("square-8k", 1.0, 0.5, 0.45, 0.5, 200.0, Work(549755813888, 67108864)),), H200)


def with_engine(app: CucoApp, **options) -> CucoApp:
    app.search_launch = replace(app.search_launch,
                                engine_options=tuple({**dict(app.search_launch.engine_options), **options}.items()))
    return app


def no_gpu_app(tmp_path: Path, **cfg) -> CucoApp:
    """The search of a machine without GPUs: CPU slots only (the fake evaluator still answers)."""
    app = make_app(tmp_path, **cfg)
    app.search_launch = replace(app.search_launch, executor=GpuPool.cpu_only(1))
    return app
