"""The first Textual app: banner without a GPU, the candidate list, evaluating through the real
cascade (a real nvcc compile here, then no_gpu) and through stand-ins for the paths a CPU
machine cannot reach. Every wait is bounded."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from textual.widgets import Static, TextArea

from cuco_tui.app.app import CucoApp
from cuco_tui.app.messages import CandidateState
from cuco_tui.app.screens.evaluate import EvaluateScreen, SourceScreen
from cuco_tui.app.widgets.candidate_list import CandidateList
from cuco_tui.core.result import CascadeResult, Level, ShapeTiming, Spread, Status, Verification
from cuco_tui.workload.manifest import load_workload
from pilot_helpers import BACKSTOP_S, wait_until



SIZE = (120, 40)
WORKLOAD = load_workload("gemm_allgather")
SEED = WORKLOAD.seed
COMPILE_ERROR = WORKLOAD.root / "faults" / "compile_error.cu"


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch):
    monkeypatch.setenv("CUCO_NO_GPU", "1")  # the build cache is the session's (conftest): the seed is built once a run


def text(app: CucoApp, selector: str) -> str:
    return str(app.screen.query_one(selector, Static).render())


def state(app: CucoApp, path: Path) -> CandidateState:
    return app.screen.query_one(CandidateList).state_of(path)


async def evaluate(pilot, app: CucoApp, path: Path, timeout_s: float = 90.0) -> None:
    app.screen.query_one(CandidateList).select(path)
    await pilot.pause()
    await pilot.press("r")
    done = await wait_until(pilot, lambda: state(app, path) in (CandidateState.DONE, CandidateState.FAILED), timeout_s)
    assert done, f"{path.name} still {state(app, path).value!r} after {timeout_s} s"


# --- with the real cascade ---------------------------------------------------------------------


@pytest.mark.asyncio
async def test_banner_and_candidates():
    app = CucoApp()
    async with app.run_test(size=SIZE) as pilot:
        assert isinstance(app.screen, EvaluateScreen)
        banner = app.screen.query_one("#no-gpu-banner", Static)
        assert await wait_until(pilot, lambda: banner.has_class("-visible"), 10)
        assert banner.display
        assert text(app, "#no-gpu-banner").startswith("No GPU (GPUs hidden by CUCO_NO_GPU=1): candidates are compiled "
                                                      "(L0 + L1) but not run")
        names = [str(row.label) for row in app.screen.query("CandidateRow")]
        assert names[0] == "seed.cu"
        assert "candidates/lsa_allgather.cu" in names
        for fault in ("compile_error", "hang", "illegal_address", "unwritten", "wrong_values"):
            assert f"faults/{fault}.cu" in names
        assert "not evaluated" in text(app, "#result-status")


@pytest.mark.asyncio
async def test_evaluate_seed_ends_no_gpu():
    app = CucoApp()
    async with app.run_test(size=SIZE) as pilot:
        await evaluate(pilot, app, SEED)
        assert text(app, "#result-status") == "no_gpu"
        assert app.screen.query_one("#result-status").has_class("-warn")
        assert "L1 compile" in text(app, "#result-facts")
        assert "no_gpu" in text(app, "#result-reason")
        row = app.screen.query_one("#candidate-0")
        assert "done · no_gpu" in str(row.query_one(".candidate-state", Static).render())


@pytest.mark.asyncio
async def test_evaluate_compile_error_shows_the_line():
    app = CucoApp()
    async with app.run_test(size=SIZE) as pilot:
        await evaluate(pilot, app, COMPILE_ERROR)
        assert text(app, "#result-status") == "compile_error"
        assert app.screen.query_one("#result-status").has_class("-bad")
        diagnostics = text(app, "#result-diagnostics")
        assert "cublasSetStreem" in diagnostics
        assert "compile_error.cu:" in diagnostics


# --- with stand-ins for what needs a GPU -------------------------------------------------------


def measured(candidate: Path) -> CascadeResult:
    spread = Spread.of([1.0, 1.1, 1.2, 1.0, 0.9])
    ref = Spread.of([2.0, 2.2, 2.1, 2.0, 1.9])
    return CascadeResult(
        candidate=str(candidate), workload="gemm_allgather", status=Status.MEASURED, level=Level.BENCHMARK,
        reason="verified and measured on 1 shapes: 1.91x the reference (geometric mean)",
        verifications=[Verification("verify #1", True, 0.004, 0.001, 0, 0, 1024, "rank 0, y[1, 2]: got 1, want 1")],
        timings=[ShapeTiming("square-8k", {"M": 8192, "K": 8192, "N": 8192}, spread, ref, [spread, spread],
                             ref.median / spread.median)],
        world=2, gpus=[0, 1], build_seconds=4.2, run_seconds=12.0,
    )


@pytest.mark.asyncio
async def test_progress_states_and_measured_result():
    gate = threading.Event()

    def fake(candidate, workload, options, progress):
        progress(type("P", (), {"level": Level.COMPILE, "message": "compiling with nvcc"})())
        progress(type("P", (), {"level": Level.BENCHMARK, "message": "bench square-8k"})())
        assert gate.wait(BACKSTOP_S)
        return measured(candidate)

    app = CucoApp(evaluate_fn=fake)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("r")
        assert await wait_until(pilot, lambda: state(app, SEED) is CandidateState.BENCHMARKING, 10)
        assert text(app, "#result-status") == "benchmarking…"
        gate.set()
        assert await wait_until(pilot, lambda: state(app, SEED) is CandidateState.DONE, 10)
        assert text(app, "#result-status") == "measured"
        assert app.screen.query_one("#result-timings").display
        from rich.console import Console

        console = Console(width=120, record=True, color_system=None)
        console.print(app.screen.query_one("#result-timings", Static).content)
        console.print(app.screen.query_one("#result-verifications", Static).content)
        tables = console.export_text()
        assert "square-8k" in tables and "2.000" in tables and "1.000" in tables and "2.00x" in tables
        assert "verify #1" in tables


@pytest.mark.asyncio
async def test_evaluate_all_runs_one_after_another():
    running = 0
    most = 0
    lock = threading.Lock()
    order: list[str] = []

    def fake(candidate, workload, options, progress):
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        order.append(Path(candidate).name)
        threading.Event().wait(0.05)
        with lock:
            running -= 1
        return CascadeResult(candidate=str(candidate), workload=workload.name, status=Status.NO_GPU,
                             level=Level.COMPILE, reason="no_gpu: compiled only")

    app = CucoApp(evaluate_fn=fake)
    async with app.run_test(size=SIZE) as pilot:
        paths = app.screen.query_one(CandidateList).paths
        await pilot.press("R")
        assert await wait_until(pilot, lambda: all(state(app, p) is CandidateState.DONE for p in paths), 20)
        assert most == 1
        assert order == [p.name for p in paths]


@pytest.mark.asyncio
async def test_an_evaluation_that_raises_is_shown_not_fatal():
    def broken(candidate, workload, options, progress):
        raise RuntimeError("the build cache is gone")

    app = CucoApp(evaluate_fn=broken)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("r")
        assert await wait_until(pilot, lambda: state(app, SEED) is CandidateState.FAILED, 10)
        assert text(app, "#result-status") == "evaluation failed"
        assert "the build cache is gone" in text(app, "#result-reason")


@pytest.mark.asyncio
async def test_a_click_on_a_candidate_highlights_it_and_opens_nothing():
    """Enter opens the source; a click (which sends the list's Selected too) only highlights."""
    app = CucoApp(evaluate_fn=lambda *a, **k: pytest.fail("nothing should be evaluated"))
    async with app.run_test(size=SIZE) as pilot:
        listing = app.screen.query_one(CandidateList)
        items = listing.query("ListItem")
        assert len(items) > 1
        await pilot.click(items[1])
        await pilot.pause()
        assert isinstance(app.screen, EvaluateScreen)
        assert listing.highlighted is not None


@pytest.mark.asyncio
@pytest.mark.parametrize("key", ["o", "enter"])  # the README: o or Enter opens what is highlighted
async def test_view_source(key):
    app = CucoApp(evaluate_fn=lambda *a, **k: pytest.fail("nothing should be evaluated"))
    async with app.run_test(size=SIZE) as pilot:
        app.screen.query_one(CandidateList).select(COMPILE_ERROR)
        await pilot.pause()
        await pilot.press(key)
        assert await wait_until(pilot, lambda: isinstance(app.screen, SourceScreen), 5)
        area = app.screen.query_one(TextArea)
        assert area.read_only and "cublasSetStreem" in area.text
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, EvaluateScreen)
        assert app.screen.query_one(CandidateList).highlighted == COMPILE_ERROR
