"""What the eye checks, at the sizes a new user tries (80x24, 120x40 and 160x48): the dashboard,
the candidate screen and the lineage screen (pytest-textual-snapshot); at 80x24 the speedups,
the statuses, the candidate's % of bound and every key in view, at 120x40 nothing cut. Fixed seeds, a fake
evaluator, hand-made records or a fixed recorded bundle, GPUs hidden: the same picture on every
machine. The 80x24 dashboard is a machine without GPUs (compile only: chart and GPUs one line
each); the larger ones have a GPU group and its bounds (the chart's bound line, % of bound)."""

from __future__ import annotations

import pytest
from textual.widgets import Static

from cuco_tui.app.app import CucoApp
from cuco_tui.app.screens.dashboard import DashboardScreen
from cuco_tui.app.screens.lineage import LineageScreen
from cuco_tui.core.bounds import Bounds, ShapeBound, Work
from cuco_tui.lineage import import_bundle
from cuco_tui.app.widgets.telemetry.panel import TelemetryPanel
from pilot_helpers import picture_settled, underlines_placed, wait_until
from candidate_session import BUNDLE, build_session, open_candidate
from dashboard_helpers import H200, fake_bounds, make_app, no_gpu_app, queue, with_engine

SIZES = [(80, 24), (120, 40), (160, 48)]
SIZE_IDS = ["80x24", "120x40", "160x48"]


@pytest.fixture(autouse=True)
def _no_gpu(monkeypatch):
    monkeypatch.setenv("CUCO_NO_GPU", "1")


async def settled(app, pilot) -> None:
    """A tab's underline slides into place after a refresh, and workers land when they land: a
    loaded machine took the picture before. The picture is taken once it stops changing."""
    assert await wait_until(pilot, lambda: underlines_placed(app.screen))
    await picture_settled(pilot)


@pytest.mark.parametrize("size", SIZES, ids=SIZE_IDS)
def test_dashboard(snap_compare, tmp_path, size):
    """The fast-path proposal waiting for review, the seed on the leaderboard."""
    app = no_gpu_app(tmp_path) if size == (80, 24) else with_engine(make_app(tmp_path), bounds_fn=fake_bounds)

    async def first_proposal(pilot) -> None:
        assert await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen) and queue(app).shown
                                and app.screen.state.board
                                and (app.screen.state.bounds is not None or app.screen.state.bounds_note))
        # The GPU probe and the telemetry reader answer from threads: GPUs hidden, both say so.
        assert await wait_until(pilot, lambda: app.screen.query_one("#no-gpu-banner").has_class("-visible")
                                and app.screen.query_one(TelemetryPanel).has_class("-none"))
        await settled(app, pilot)

    try:
        assert snap_compare(app, terminal_size=size, run_before=first_proposal)
    finally:
        if app.live_search is not None:
            app.live_search.stop()


@pytest.mark.parametrize("size", SIZES, ids=SIZE_IDS)
@pytest.mark.parametrize("cid", ["c0000", "c0001", "c0002"])
def test_candidate(snap_compare, tmp_path, cid, size):
    """On its first tab: timings with % of bound (c0000), compile errors (c0001), the deadlock
    (c0002). Hand-made records, no clock, the session folder shown by name only."""
    repo = build_session(tmp_path / "demo")
    repo.set_bounds(Bounds("gemm_allgather", 2, (0, 1),
                           (ShapeBound("square-8k", 1.0, 0.6, work=Work(549755813888, 67108864)),), H200))
    app = CucoApp()

    async def opened(pilot) -> None:
        await open_candidate(app, pilot, repo, cid)
        await settled(app, pilot)

    try:
        assert snap_compare(app, terminal_size=size, run_before=opened)
    finally:
        repo.close()


@pytest.mark.parametrize("size", SIZES, ids=SIZE_IDS)
def test_lineage(snap_compare, tmp_path, size):
    """The first recorded GPU session's lineage (no machine recorded then), c0011 selected."""
    import_bundle(BUNDLE, tmp_path / "example").close()
    app = CucoApp(open_session=tmp_path / "example")

    async def selected(pilot) -> None:
        assert await wait_until(pilot, lambda: isinstance(app.screen, LineageScreen) and app.screen.ready)
        app.screen.jump_to("c0011")
        facts = app.screen.query_one("#lineage-facts", Static)
        assert await wait_until(pilot, lambda: "c0011" in str(facts.render()))
        await settled(app, pilot)

    assert snap_compare(app, terminal_size=size, run_before=selected)
