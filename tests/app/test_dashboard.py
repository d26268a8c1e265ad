"""The search dashboard, driven by Pilot: the real engine, lineage and offline agent on a
session under tmp_path, a fake evaluator that returns a measured CascadeResult at once. Every
wait is bounded."""

from __future__ import annotations

import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest
from textual.app import App
from textual.command import CommandPalette
from textual.content import Content
from textual.geometry import Region
from textual.widgets import DataTable, Static

from cuco_tui.app.app import CucoApp
from cuco_tui.app.screens.dashboard import DashboardScreen
from cuco_tui.app.search_state import PendingProposal
from cuco_tui.app.widgets.diff_text import ADDED
from cuco_tui.app.widgets.search.in_flight import InFlightTable
from cuco_tui.app.widgets.search.proposal_queue import ProposalQueue
from cuco_tui.app.widgets.search.speedup_chart import SpeedupChart
from cuco_tui.app.widgets.confirm import Confirm
from cuco_tui.app.widgets.text_prompt import TextPrompt
from cuco_tui.evaluate.cascade import Progress
from cuco_tui.core.result import Level
from cuco_tui.lineage import SessionRepo
from dashboard_helpers import dashboard, fake_evaluate, make_app, queue, stop, text
from pilot_helpers import BACKSTOP_S, run_from_palette, wait_until


SIZE = (120, 40)


@pytest.fixture(autouse=True)
def _no_gpu_telemetry(monkeypatch):
    # The telemetry panel reads NVML: hidden GPUs keep the screen (and its snapshot) the same
    # on a GPU host as here.
    monkeypatch.setenv("CUCO_NO_GPU", "1")


DESIGN = ("// cuco-design: backend=nccl_lsa placement=before sync=global issuer=multi_cta streams=1 "
          "comm_sms=64 chunk={}")
KNOB_DIFF = ("--- c0003/candidate.cu\n+++ c0004/candidate.cu\n@@ -5,3 +5,3 @@\n #include \"cuco_runtime.cuh\"\n"
             f"-{DESIGN.format(8)}\n+{DESIGN.format(2)}\n // EVOLVE-BLOCK-START\n")


class QueueApp(App):
    """The proposal queue alone, as wide as the dashboard's right column at 80x24 (40 cells)."""

    CSS_PATH = Path(sys.modules[CucoApp.__module__].__file__).with_name(CucoApp.CSS_PATH)
    CSS = "ProposalQueue { width: 40; } #proposal-detail { height: 1fr; }"

    def compose(self):
        yield ProposalQueue()


@pytest.mark.asyncio
async def test_a_change_past_the_panes_edge_is_in_view_and_marked():
    """Issue 36, item 16: the review pane cut the diff at its width, and the only change (chunk=8 to
    2 at the end of the design line) was past the cut: the - and + lines looked the same. The lines
    wrap, and the changed characters are marked."""
    app = QueueApp()
    async with app.run_test(size=(80, 24)) as pilot:
        proposals = app.query_one(ProposalQueue)
        await proposals.show((PendingProposal("c0004", "diff", ("c0003",), "smaller chunks", diff=KNOB_DIFF),))
        assert await wait_until(pilot, lambda: proposals.shown == "c0004")
        await pilot.pause()
        static = proposals.query_one("#proposal-diff", Static)
        assert static.size.width <= 40
        strips = static.render_lines(Region(0, 0, static.size.width, static.size.height))
        lines = [strip.text.rstrip() for strip in strips]
        old = next(i for i, line in enumerate(lines) if line.startswith("-// cuco-design"))
        new = next(i for i, line in enumerate(lines) if line.startswith("+// cuco-design"))
        assert "".join(lines[old:new]).endswith("chunk=8")  # wrapped onto the next line, not cut
        assert "".join(lines[new:]).replace(" // EVOLVE-BLOCK-START", "").endswith("chunk=2")
        marked = ["".join(seg.text for seg in strip if seg.style is not None and seg.style.reverse)
                  for strip in strips]
        assert [m for m in marked if m] == ["8", "2"]  # the change, and only it, marked


@pytest.mark.asyncio
async def test_review_accept_then_reject_with_a_reason(tmp_path):

    app = make_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        assert await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen) and queue(app).ids)
        screen = dashboard(app)
        first = queue(app).selected
        assert first == "c0001"  # c0000 is the seed, evaluated without review
        assert text(app, "#state-run") == "running"
        assert await wait_until(pilot, lambda: queue(app).shown == first, 5)
        diff = screen.query_one("#proposal-diff", Static).content
        assert isinstance(diff, Content) and any(span.style == ADDED for span in diff.spans)  # coloured
        assert diff.plain.startswith("--- c0000/candidate.cu\n+++ c0001/candidate.cu\n@@ ")
        assert diff.plain == queue(app).proposal(first).diff.rstrip("\n")
        head = text(app, "#proposal-head")
        assert "rationale" in head and "backend=" in head

        await pilot.press("y")
        assert await wait_until(pilot, lambda: first in screen.state.sources)  # committed
        assert await wait_until(pilot, lambda: queue(app).ids and queue(app).selected != first)
        second = queue(app).selected
        assert second is not None and second != first

        await pilot.press("n")
        assert await wait_until(pilot, lambda: isinstance(app.screen, TextPrompt), 5)
        await pilot.press(*"too risky")
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen), 5)
        assert await wait_until(pilot, lambda: second in screen.state.sources)
        assert "rejected 1" in text(app, "#state-facts")
        await stop(pilot, app)

    with SessionRepo.open(tmp_path / "session") as repo:
        accepted = repo.record(first)
        assert accepted.review == "accepted" and accepted.status == "measured"
        rejected = repo.record(second)
        assert rejected.status == "rejected"
        assert rejected.review == "rejected: too risky"


@pytest.mark.asyncio
async def test_pause_holds_new_proposals_and_resume_lets_them_come(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        assert await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen) and queue(app).ids)
        screen = dashboard(app)
        await pilot.press("p")
        assert await wait_until(pilot, lambda: text(app, "#state-run") == "paused", 5)
        await pilot.press("a")  # accept what waits: the engine would now propose more, were it not paused
        assert await wait_until(pilot, lambda: not queue(app).ids, 10)
        await pilot.pause(1.0)
        assert not queue(app).ids and text(app, "#state-run") == "paused"
        await pilot.press("p")
        assert await wait_until(pilot, lambda: text(app, "#state-run") == "running", 5)
        assert await wait_until(pilot, lambda: bool(queue(app).ids))
        assert screen.query_one(SpeedupChart).points  # the seed and the accepted one were measured
        await stop(pilot, app)


@pytest.mark.asyncio
async def test_review_mode_cycles_and_the_hint_key_says_the_offline_agent_reads_none(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        assert await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen) and queue(app).ids)
        screen = dashboard(app)
        assert "hints      not read by this agent" in text(app, "#state-facts")
        await pilot.press("h")  # no prompt for a hint nobody reads: one line says so
        assert await wait_until(pilot, lambda: any("offline agent does not read hints" in str(n.message)
                                                   for n in app._notifications), 5)
        assert not isinstance(app.screen, TextPrompt) and screen.search.hints == ()
        await pilot.press("m")  # review -> risky
        assert await wait_until(pilot, lambda: screen.search.review_mode == "risky", 5)
        await pilot.press("m")  # risky -> auto: what waits is accepted, the rest runs unattended
        assert await wait_until(pilot, lambda: screen.search.review_mode == "auto", 5)
        assert await wait_until(pilot, lambda: text(app, "#state-run").strip() == "finished", 30)
        assert not queue(app).ids and not screen.query_one(InFlightTable).candidates


@pytest.mark.asyncio
async def test_s_opens_the_dashboard_from_the_evaluate_screen(tmp_path):
    app = make_app(tmp_path)
    app.start_search = False
    async with app.run_test(size=SIZE) as pilot:
        assert not isinstance(app.screen, DashboardScreen)
        await pilot.press("s")
        assert await wait_until(pilot, lambda: isinstance(app.screen, Confirm), 5)  # asks first
        await pilot.press("y")
        assert await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen), 5)
        assert await wait_until(pilot, lambda: bool(queue(app).ids))
        await pilot.press("escape")  # esc never drops the engineer out of the search
        await pilot.pause(0.3)
        assert isinstance(app.screen, DashboardScreen)
        app.action_candidates()  # the palette's "Evaluate": the workload's candidates, the search going on
        assert await wait_until(pilot, lambda: not isinstance(app.screen, DashboardScreen), 5)
        await pilot.press("s")
        assert await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen), 5)
        assert queue(app).ids  # the same search, still waiting
        await stop(pilot, app)


@pytest.mark.asyncio
async def test_evaluations_in_flight_show_stage_and_gpu_group(tmp_path):
    gate = threading.Event()

    def slow(path, workload, options, progress=None, kept=None):
        if Path(path).stem != "c0000":  # the seed goes through at once
            progress(Progress(Level.BENCHMARK, "bench square-8k"))
            assert gate.wait(BACKSTOP_S)
        return fake_evaluate(path, workload, options)

    app = make_app(tmp_path)
    app.search_launch = replace(app.search_launch, evaluate_fn=slow)
    async with app.run_test(size=SIZE) as pilot:
        assert await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen) and queue(app).ids)
        flight = dashboard(app).query_one(InFlightTable)
        await pilot.press("y")
        assert await wait_until(pilot, lambda: flight.candidates == ["c0001"], 10)
        table = flight.query_one(DataTable)
        assert table.get_row("c0001")[1:3] == ["L3 bench", "0,1"]
        assert "1 evaluating" in text(app, "#state-facts")
        gate.set()
        assert await wait_until(pilot, lambda: not flight.candidates, 10)
        assert "0 evaluating" in text(app, "#state-facts")
        await stop(pilot, app)


@pytest.mark.asyncio
async def test_command_palette_pauses_the_search(tmp_path):
    app = make_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        assert await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen) and queue(app).ids)
        await pilot.press("ctrl+p")
        assert await wait_until(pilot, lambda: isinstance(app.screen, CommandPalette), 5)
        await run_from_palette(pilot, "pause or resume", "Search: pause or resume")
        assert await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen), 5)
        assert await wait_until(pilot, lambda: text(app, "#state-run") == "paused", 5)
        await stop(pilot, app)


@pytest.mark.asyncio
async def test_a_search_that_cannot_start_says_why(tmp_path):
    SessionRepo.create(tmp_path / "session", "gemm_allgather", {}).close()  # the folder is taken
    app = make_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        assert await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen)
                                and text(app, "#state-run") == "failed", 10)
        assert any("cannot search" in n.message and "already holds a session" in n.message
                   for n in app._notifications)
        await pilot.press("p")  # nothing to steer: a warning, not a crash
        assert await wait_until(pilot, lambda: any("the search is over" in n.message for n in app._notifications))


def test_a_compile_shows_its_time_so_far_and_the_builds_queued_behind_it():
    from cuco_tui.app.search_state import Evaluation
    from cuco_tui.app.widgets.search.in_flight import elapsed, step_text

    compiling = Evaluation("c0004", 1, (), "compiling", since=1000.0)
    assert step_text(compiling, 1042.4, 2) == "compiling 0:42 (2 queued)"
    assert step_text(compiling, 1042.4, 0) == "compiling 0:42"
    assert step_text(Evaluation("c0005", 1, (), "build queued", since=1040.0), 1042.0, 2) == "build queued 0:02 (2 queued)"
    assert step_text(Evaluation("c0006", 2, (0, 1), "verify square-8k", since=1000.0), 1042.0, 2) == "verify square-8k"
    assert step_text(Evaluation("c0007", 1, (), "compile"), 1042.0, 2) == "compile"  # no start known: no time
    assert [elapsed(s) for s in (0, 59.9, 61, 3599, 3723, -3)] == ["0:00", "0:59", "1:01", "59:59", "1:02:03", "0:00"]


@pytest.mark.asyncio
async def test_the_in_flight_compile_time_counts_up_every_second_from_its_start():
    """The clock is the test's: the cell follows it, redrawn by the widget's own timer."""
    from textual.app import App

    from cuco_tui.app.search_state import Evaluation

    now = [1042.0]

    class Flight(App):
        def compose(self):
            yield InFlightTable(clock=lambda: now[0])

    app = Flight()
    async with app.run_test(size=(80, 10)) as pilot:
        flight = app.query_one(InFlightTable)
        flight.show((Evaluation("c0004", 1, (), "compiling", since=1000.0),), queued=2)
        table = flight.query_one(DataTable)
        assert table.get_row("c0004")[3] == "compiling 0:42 (2 queued)"
        now[0] = 1043.0
        assert await wait_until(pilot, lambda: table.get_row("c0004")[3] == "compiling 0:43 (2 queued)", 10)
