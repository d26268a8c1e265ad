"""The README's key table, pressed on every screen (issue 36, items 11 and 18): b browses and l
shows a lineage from the lineage and candidate screens too, o opens what is highlighted at once
(the dashboard as the lineage), / finds c0030 however it is typed, esc from the lineage that
`cuco-tui open` opened goes to the session browser (not a workload's evaluate screen), and s
asks before it starts a search that the command line did not start."""

from __future__ import annotations

import pytest
from textual.widgets import Input, Label

from cuco_tui.app.app import CucoApp
from cuco_tui.app.screens.browse import BrowseScreen
from cuco_tui.app.screens.candidate import CandidateScreen
from cuco_tui.app.screens.dashboard import DashboardScreen
from cuco_tui.app.screens.evaluate import EvaluateScreen
from cuco_tui.app.screens.lineage import LineageScreen
from cuco_tui.app.widgets.confirm import Confirm
from cuco_tui.app.widgets.lineage.candidate_table import CandidateTable
from cuco_tui.harness.gpus import GpuInfo, GpuInventory
from cuco_tui.lineage import import_bundle
from candidate_session import BUNDLE
from dashboard_helpers import make_app, queue, stop
from pilot_helpers import wait_until

SIZE = (120, 40)


@pytest.fixture(autouse=True)
def _no_gpu(monkeypatch):
    monkeypatch.setenv("CUCO_NO_GPU", "1")


async def lineage_of_the_bundle(app, pilot) -> LineageScreen:
    assert await wait_until(pilot, lambda: isinstance(app.screen, LineageScreen) and app.screen.ready)
    return app.screen


def highlighted(screen: LineageScreen) -> str | None:
    return screen.query_one(CandidateTable).highlighted_id


@pytest.mark.asyncio
async def test_b_and_l_work_from_the_lineage_and_candidate_screens(tmp_path):
    import_bundle(BUNDLE, tmp_path / "example").close()
    app = CucoApp(open_session=tmp_path / "example", sessions_root=tmp_path / "none")
    async with app.run_test(size=SIZE) as pilot:
        lineage = await lineage_of_the_bundle(app, pilot)
        await pilot.press("b")
        assert await wait_until(pilot, lambda: isinstance(app.screen, BrowseScreen), 5)
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: app.screen is lineage, 5)
        await pilot.press("l")  # already there: it says so
        assert await wait_until(pilot, lambda: any("this is the lineage of example" in n.message
                                                   for n in app._notifications), 5)
        assert app.screen is lineage

        lineage.jump_to("c0011")
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: isinstance(app.screen, CandidateScreen) and app.screen.ready)
        candidate = app.screen
        lineage.jump_to("c0000")  # the lineage's cursor elsewhere meanwhile
        await pilot.press("l")  # back to the lineage beneath, on this candidate
        assert await wait_until(pilot, lambda: app.screen is lineage and highlighted(lineage) == "c0011", 5)
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: isinstance(app.screen, CandidateScreen) and app.screen.ready)
        assert app.screen is not candidate
        await pilot.press("b")
        assert await wait_until(pilot, lambda: isinstance(app.screen, BrowseScreen), 5)


@pytest.mark.asyncio
async def test_slash_finds_c0030_however_it_is_typed(tmp_path):
    from cuco_tui.core.records import candidate_id_of

    assert [candidate_id_of(t) for t in ("30", "c30", "0030", "c0030", " C30 ", "thirty", "", "c-1")] == [
        "c0030", "c0030", "c0030", "c0030", "c0030", None, None, None]
    import_bundle(BUNDLE, tmp_path / "example").close()
    app = CucoApp(open_session=tmp_path / "example")
    async with app.run_test(size=SIZE) as pilot:
        lineage = await lineage_of_the_bundle(app, pilot)
        for typed in ("30", "c30", "0030", "c0030"):
            lineage.jump_to("c0000")
            await pilot.press("slash")
            assert await wait_until(pilot, lambda: lineage.query_one("#lineage-jump", Input).has_focus, 5)
            await pilot.press(*typed, "enter")
            assert await wait_until(pilot, lambda: highlighted(lineage) == "c0030", 5), typed
        await pilot.press("slash", *"thirty", "enter")
        assert await wait_until(pilot, lambda: any("'thirty' is not a candidate id" in n.message
                                                   for n in app._notifications), 5)


@pytest.mark.asyncio
async def test_esc_from_an_opened_bundle_goes_to_the_browser_not_an_evaluate_screen(tmp_path):
    import_bundle(BUNDLE, tmp_path / "example").close()
    app = CucoApp(open_session=tmp_path / "example", sessions_root=tmp_path / "none")
    async with app.run_test(size=SIZE) as pilot:
        lineage = await lineage_of_the_bundle(app, pilot)
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: isinstance(app.screen, CandidateScreen) and app.screen.ready)
        await pilot.press("escape")  # the candidate, back to its lineage
        assert await wait_until(pilot, lambda: app.screen is lineage, 5)
        await pilot.press("escape")  # the lineage cuco-tui open opened: to the session browser
        assert await wait_until(pilot, lambda: isinstance(app.screen, BrowseScreen), 5)
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: app.screen is lineage, 5)
        await pilot.press("escape")  # again: the browser again, never the evaluate screen under it
        assert await wait_until(pilot, lambda: isinstance(app.screen, BrowseScreen), 5)


def test_the_question_names_the_workload_the_generations_and_the_gpus(tmp_path):
    from cuco_tui.app.widgets.search.start_question import start_question

    app = CucoApp(sessions_root=tmp_path)
    h200s = GpuInventory(tuple(GpuInfo(i, "NVIDIA H200", 143771) for i in range(2)))
    question, detail = start_question(app.search_launch, h200s)
    assert question == "Start a new search of gemm_allgather?"
    assert detail == (f"10 generations of gemm_allgather, in a new session under {tmp_path}. It runs on every GPU of "
                      "this machine at once: 2 x NVIDIA H200 (GPUs 0,1). The offline agent proposes. Nothing starts "
                      "unless you say yes.")
    _, detail = start_question(app.search_launch, GpuInventory((), problem="no NVIDIA driver"))
    assert "No GPU on this machine (no NVIDIA driver): every candidate is compiled only, nothing is timed." in detail
    _, detail = start_question(CucoApp(gpus=[1]).search_launch, h200s)
    assert "It runs on GPUs 1 (1 x NVIDIA H200)." in detail


@pytest.mark.asyncio
async def test_s_asks_first_and_no_or_esc_starts_nothing(tmp_path):
    app = make_app(tmp_path)
    app.start_search = False  # as `cuco-tui open` and `cuco-tui --evaluate` start
    async with app.run_test(size=SIZE) as pilot:
        for answer in ("n", "escape"):
            await pilot.press("s")
            assert await wait_until(pilot, lambda: isinstance(app.screen, Confirm), 5)
            said = " ".join(str(label.render()) for label in app.screen.query(Label))
            assert "Start a new search of gemm_allgather?" in said and "3 generations of gemm_allgather" in said
            await pilot.press(answer)
            assert await wait_until(pilot, lambda: isinstance(app.screen, EvaluateScreen), 5)
            assert app.dashboard is None and not app.live_search.started
            assert not (tmp_path / "session").exists()  # no session made
        await pilot.press("s")
        assert await wait_until(pilot, lambda: isinstance(app.screen, Confirm), 5)
        await pilot.press("y")
        assert await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen) and queue(app).ids)
        app.action_candidates()
        assert await wait_until(pilot, lambda: isinstance(app.screen, EvaluateScreen), 5)
        await pilot.press("s")  # the search runs: s goes back to it without asking
        assert await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen), 5)
        await stop(pilot, app)


@pytest.mark.asyncio
async def test_the_command_line_search_starts_without_asking(tmp_path):
    app = make_app(tmp_path)  # start_search: `cuco-tui` itself, or --resume
    async with app.run_test(size=SIZE) as pilot:
        assert await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen) and queue(app).ids)
        assert not any(isinstance(s, Confirm) for s in app.screen_stack)
        await stop(pilot, app)
