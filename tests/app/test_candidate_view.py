"""The candidate view (one candidate of a session: source, diffs against its parents, compiler
errors with their lines, run logs, deadlock diagnosis, verification, timings; re-benchmark, make
parent, export) and the engine commands behind its actions. Sessions are built under tmp_path
from hand-made records, so every section has known content; the engine tests use the offline
agent and fake evaluators, as tests/search/test_search_engine.py does (tests/engine_helpers.py)."""

from __future__ import annotations

import io
import json
import threading
import zlib
from dataclasses import replace
from pathlib import Path

import pytest
from textual.command import CommandPalette
from textual.content import Content
from textual.widgets import OptionList, Static

from cuco_tui.agents.offline import OfflineAgent
from cuco_tui.app.widgets.confirm import Confirm
from cuco_tui.core.ending import END_STATES
from cuco_tui.app.app import CucoApp
from cuco_tui.app.screens.browse import BrowseScreen
from cuco_tui.app.screens.candidate import CandidateScreen
from cuco_tui.app.screens.dashboard import DashboardScreen, parse_budget
from cuco_tui.app.screens.lineage import LineageScreen
from cuco_tui.app.widgets.candidate import sections
from cuco_tui.core.profile import KERNEL, MEMCPY, Activity, Profile, summarize
from cuco_tui.core.profile_trace import chrome_trace
from cuco_tui.lineage.profiles import keep_profile
from cuco_tui.app.widgets.candidate.deadlock import parse_report
from cuco_tui.app.widgets.candidate.model import CandidateView
from cuco_tui.app.widgets.lineage.candidate_details import facts_text
from cuco_tui.app.widgets.search import editor
from cuco_tui.app.widgets.lineage.candidate_table import CandidateTable
from cuco_tui.app.widgets.search.leaderboard import Leaderboard
from cuco_tui.app.widgets.search.proposal_queue import ProposalQueue
from cuco_tui.app.widgets.text_prompt import TextPrompt
from cuco_tui.core.bounds import Bounds, ShapeBound, Work
from cuco_tui.design.space import Capabilities
from cuco_tui.core.result import (
    CascadeResult,
    Diagnostic,
    Level,
    ShapeTiming,
    Spread,
    Status,
)
from cuco_tui.harness.deadlock import analyze
from cuco_tui.harness.launcher import RankOutcome
from cuco_tui.core.records import CandidateRecord
from cuco_tui.harness.rank_events import Done, from_json
from cuco_tui.lineage import SessionRepo
from cuco_tui.search.engine import SteeringError
from cuco_tui.search.events import AwaitingReview, CandidateCommitted
from candidate_session import BROKEN, _record, _result, _timing, build_session, open_candidate, section_text
from dashboard_helpers import H200
from dashboard_helpers import make_app as make_dashboard_app
from pilot_helpers import run_from_palette, screen_lines, wait_until
from engine_helpers import W
from engine_helpers import make as make_engine

SIZE = (120, 40)
SEED = W.seed.read_text()


@pytest.fixture(autouse=True)
def _no_gpu(monkeypatch):
    # No NVML: the same screens (and snapshots) on a GPU host as here.
    monkeypatch.setenv("CUCO_NO_GPU", "1")


def engine_timing(speedup: float) -> ShapeTiming:
    ref = Spread.of([1.0] * 10)
    cand = Spread.of([1.0 / speedup] * 10)
    return ShapeTiming("square-8k", {"M": 8192, "K": 8192, "N": 8192}, cand, ref, [cand, cand], speedup)


# ---------------------------------------------------------------------------- engine commands


class ById:
    """Compile errors for the candidates named in `fail`, by the id the engine gives the file;
    else measured, with a speedup from the source (so a re-benchmark measures the same)."""

    def __init__(self, fail=()):
        self.fail = set(fail)
        self.calls: list[str] = []

    def __call__(self, path, workload, options, progress=None, kept=None):
        cid = Path(path).stem
        self.calls.append(cid)
        base = dict(candidate=str(path), workload=workload.name, world=2, gpus=list(options.gpus or ()))
        if cid in self.fail:
            return CascadeResult(**base, status=Status.COMPILE_ERROR, level=Level.COMPILE, reason="expected ';'")
        speedup = 0.8 + (zlib.crc32(Path(path).read_text().encode()) % 100) / 100
        return CascadeResult(**base, status=Status.MEASURED, level=Level.BENCHMARK, reason="measured",
                             timings=[engine_timing(speedup)])


def test_prefer_parent_gives_the_next_proposal_that_parent_once(tmp_path):
    """The offline agent in exploit: a failed candidate is never drawn while a good one exists,
    so only the engineer's choice makes it a parent, for one proposal."""
    agent = OfflineAgent(W, Capabilities(world=2), seed=4)
    asked: list = []
    propose = agent.propose

    def watched(request):
        asked.append(request)
        return propose(request)

    agent.propose = watched
    # Without the look-ahead, generation 2 is proposed only after c0001 is committed (below).
    engine, repo, bus = make_engine(tmp_path, agent=agent, evaluator=ById(fail={"c0001"}), generations=3,
                                    islands=1, explore_share=0.0, fast_path=False, lookahead=False)

    def on_commit(e):
        if isinstance(e, CandidateCommitted) and e.record.id == "c0001":
            assert e.record.status == "compile_error"
            engine.prefer_parent("c0001")  # generation 1 waits for c0001 before generation 2 starts
            assert engine.preferred_parent == "c0001"

    bus.subscribe(on_commit)
    engine.run()
    assert not bus.errors, bus.errors
    by_gen = {r.generation: r for r in asked}
    assert by_gen[1].parents[0].id == "c0000"
    assert by_gen[2].parents[0].id == "c0001"  # the failed one, as asked
    assert "c0001" in by_gen[2].feedback  # its failure goes to the agent
    assert by_gen[3].parents[0].id != "c0001"  # once only
    assert engine.preferred_parent is None
    committed = {r.id: r for r in repo.records()}
    assert committed["c0002"].parents[0] == "c0001" and committed["c0002"].generation == 2


def test_prefer_parent_and_rebenchmark_refuse_what_they_cannot_do(tmp_path):
    engine, repo, bus = make_engine(tmp_path, evaluator=ById(), generations=1, islands=1)
    with pytest.raises(SteeringError, match="running search"):
        engine.prefer_parent("c0000")  # not running yet
    with pytest.raises(SteeringError, match="running search"):
        engine.rebenchmark("c0000")
    errors: list[str] = []

    def on_commit(e):
        if isinstance(e, CandidateCommitted) and e.record.id == "c0000":
            for call in (lambda: engine.prefer_parent("c0099"), lambda: engine.rebenchmark("c0099")):
                try:
                    call()
                except SteeringError as exc:
                    errors.append(str(exc))

    bus.subscribe(on_commit)
    engine.run()
    assert not bus.errors, bus.errors
    assert errors == ["no committed candidate 'c0099' in this search"] * 2
    assert not engine.running
    with pytest.raises(SteeringError, match="not running"):
        engine.rebenchmark("c0000")  # the search is over


def test_rebenchmark_commits_a_new_candidate_whose_parent_is_the_original(tmp_path):
    evaluator = ById()
    engine, repo, bus = make_engine(tmp_path, evaluator=evaluator, generations=2, islands=1, review_mode="review",
                                    fast_path=False)
    queued: list[str] = []

    def on_event(e):
        # generation 1's proposal waits for review: the loop idles in its drain, and the
        # re-benchmark still runs then; the proposal is accepted once the re-benchmark is in
        if isinstance(e, AwaitingReview) and not queued:
            queued.append(engine.rebenchmark("c0000"))
        elif isinstance(e, CandidateCommitted) and queued and e.record.id == queued[0]:
            for held in engine.awaiting_review():
                threading.Thread(target=engine.review, args=(held.id, "accept")).start()
        elif isinstance(e, AwaitingReview):
            threading.Thread(target=engine.review, args=(e.candidate, "accept")).start()

    bus.subscribe(on_event)
    engine.run()
    assert not bus.errors, bus.errors
    assert queued == ["c0002"]  # c0001 is the held proposal
    records = {r.id: r for r in repo.records()}
    again, seed = records["c0002"], records["c0000"]
    assert again.kind == "rebenchmark" and again.parents == ("c0000",)
    assert again.rationale == "re-benchmark of c0000" and again.agent == "engineer"
    assert again.source == seed.source and again.design == seed.design
    assert again.status == "measured" and again.speedup == pytest.approx(seed.speedup)
    assert again.generation == 1 and again.extra["rebenchmark_of"] == "c0000"
    assert evaluator.calls.count("c0002") == 1
    assert records["c0001"].review == "accepted"


# ---------------------------------------------------------------------------- the candidate screen


@pytest.mark.asyncio
async def test_compile_error_shows_the_offending_line_with_a_caret(tmp_path):
    repo = build_session(tmp_path / "demo")
    app = CucoApp()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_candidate(app, pilot, repo, "c0001")
        tabs = screen.tabs
        assert tabs.ids == ["overview", "source", "diff-c0000", "errors", "logs"]  # nothing else has content
        assert tabs.active == "errors"  # opens where the failure is explained
        errors = section_text(screen, "errors")
        assert 'c0001.cu:36:27: error: expected a ";"' in errors
        assert "    const int W = ctx->world\n" + " " * 30 + "^" in errors
        overview = section_text(screen, "overview")
        assert "timings: not measured: compile_error" in overview
        assert "verification: not run (stopped at L1 compile)" in overview
        assert "not measured: compile_error" in str(screen.query_one("#candidate-head", Static).content)
        assert "-  const int W = ctx->world;" in section_text(screen, "diff-c0000")
        assert "logs/nvcc.txt" in section_text(screen, "logs")
        assert "❱ 36   const int W = ctx->world\n" in section_text(screen, "source")  # marked in the gutter
        await pilot.press("right_square_bracket")
        assert tabs.active == "logs"
        await pilot.press("escape")
        assert not isinstance(app.screen, CandidateScreen)
    repo.close()


LONG_NOTE = ("2 ranks shared GPU 0: a correctness check only. NCCL treats the ranks as separate hosts and moves "
             "their data through host sockets, so nothing was timed: a candidate that relies on device-initiated "
             "communication fails here and needs one GPU per rank.")


@pytest.mark.asyncio
async def test_long_diagnostics_wrap_at_80_columns(tmp_path):
    """Issue 36, item 17: a long diagnostic was cut at the pane's edge; its message wraps, while
    the source line under it keeps its caret in place."""
    repo = build_session(tmp_path / "demo")
    repo.commit_candidate(_record("c0005", ("c0000",), SEED, _result(
        "c0005", Status.RUNTIME_ERROR, Level.VERIFY, "rank 0: illegal address",
        diagnostics=[Diagnostic(level=2, severity="note", message=LONG_NOTE, code="shared-gpu"),
                     Diagnostic(level=2, severity="error", rank=0, message="cudaErrorIllegalAddress: an illegal "
                                "memory access was encountered (during candidate launch (check 1))",
                                file="c0005.cu", line=36, column=3, code="runtime")])))
    app = CucoApp()
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await open_candidate(app, pilot, repo, "c0005")
        assert screen.tabs.active == "errors"
        await pilot.pause()
        shown = " ".join(" ".join(line.split()) for line in screen_lines(app))
        assert "needs one GPU per rank." in shown  # the note's last words, on screen
        assert "(during candidate launch (check 1))" in shown
        lines = screen_lines(app)
        source = next(i for i, line in enumerate(lines) if line.strip() == SEED.splitlines()[35].strip())
        assert lines[source + 1].strip() == "^" and lines[source + 1].index("^") == lines[source].index("c")
    repo.close()


@pytest.mark.asyncio
async def test_an_l0_finding_gets_its_source_line_from_the_candidate(tmp_path):
    repo = build_session(tmp_path / "demo")
    app = CucoApp()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_candidate(app, pilot, repo, "c0004")
        assert screen.tabs.active == "errors"
        assert screen.query_one("#tab-errors").parent is not None
        text = section_text(screen, "errors")
        assert "c0004.cu:36:3: error: the frozen region changed" in text
        assert "    const int W = ctx->world\n      ^" in text  # the line read from candidate.cu
    repo.close()


@pytest.mark.asyncio
async def test_deadlocked_candidate_shows_where_each_rank_waits(tmp_path):
    repo = build_session(tmp_path / "demo")
    app = CucoApp()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_candidate(app, pilot, repo, "c0002")
        assert screen.tabs.active == "deadlock"
        assert "timings" not in screen.tabs.ids and "verification" not in screen.tabs.ids
        text = section_text(screen, "deadlock")
        assert "Deadlock: a cycle of waits." in text
        rows = [line.split() for line in text.splitlines() if line.strip().startswith(("0 ", "1 "))]
        # rank, at (line), waits for, from, expected, last seen, blocks, source
        assert rows[0][:9] == ["0", "47", "flag", "3", "rank", "1", "1", "0", "2"]
        assert rows[1][:9] == ["1", "47", "flag", "3", "rank", "0", "1", "0", "2"]
        assert all("peer_wait<<<2," in " ".join(r) for r in rows)  # the waiting line of source
        logs = section_text(screen, "logs")
        assert "logs/rank0.stderr.txt" in logs and "logs/rank1.stderr.txt" in logs
    repo.close()


@pytest.mark.asyncio
async def test_timings_per_shape_and_per_rank(tmp_path):
    repo = build_session(tmp_path / "demo")
    app = CucoApp()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_candidate(app, pilot, repo, "c0000")
        assert screen.tabs.active == "timings"
        assert "diff" not in " ".join(screen.tabs.ids)  # a seed has no parent
        text = section_text(screen, "timings")
        shape, spread = [line.split() for line in text.splitlines() if line.strip().startswith("square-8k")][:2]
        # the speedup and % of the bound first (no bound: the session keeps none), the times; then their
        # spread and one rank's TFLOP/s and GB/s (gemm_allgather's counts at world 2)
        assert shape == ["square-8k", "1.20x", "±3%", "-", "-", "1.000", "1.200"]
        assert spread == ["square-8k", "0.980-1.020", "1.180-1.220", "4.0", "30", "550", "67"]
        assert "geometric mean speedup 1.13x ±2% over 2 shape(s)" in text
        ranks = [line.split() for line in text.splitlines() if "-" in line and line.split()[:1] in (["mlp-up"], ["1"])]
        assert ["mlp-up", "0", "2.600", "2.580-2.620", "2.560-2.660", "30"] in ranks
        assert ["1", "2.850*", "2.830-2.870", "2.810-2.910", "30"] in ranks  # the slowest rank, marked
    repo.close()


@pytest.mark.asyncio
async def test_a_profile_kept_with_the_candidate_has_a_tab_with_each_ranks_exposed_communication(tmp_path):
    repo = build_session(tmp_path / "demo")
    acts = [Activity(KERNEL, "gemm_kernel", 0, 2_000_000, 0, 7),
            Activity(MEMCPY, "memcpy dtod", 1_000_000, 3_000_000, 0, 9, "dtod", 1 << 20)]
    trace = tmp_path / "trace.json"
    trace.write_text(chrome_trace({0: acts}).text)
    keep_profile(repo, "c0000", Profile("square-8k", 5, (summarize(acts, 0),), trace=str(trace)))
    app = CucoApp()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_candidate(app, pilot, repo, "c0000")
        assert "profile" in screen.tabs.ids
        text = section_text(screen, "profile")
        assert "profile of 5 launches at square-8k" in text
        row = next(line.replace("│", " ").split() for line in text.splitlines() if "33.3%" in line)
        assert row == ["0", "1.000", "33.3%", "3.000", "2.000", "2.000", "50%"]
        assert "gemm_kernel" in text and "refs/profiles/c0000:profile.trace.json" in text
        await app.pop_screen()
        other = await open_candidate(app, pilot, repo, "c0001")
        assert "profile" not in other.tabs.ids  # nothing kept: no tab
    repo.close()


def test_no_bound_is_explained_by_what_the_session_had():
    """Issue 36, item 13: a session timed on 2 x H200 before bounds were recorded said "no bound:
    the session measured none (it needs a GPU)". A GPU is blamed only where none timed it."""
    with_gpus = CascadeResult.from_dict(_result("c0000", Status.MEASURED, Level.BENCHMARK, "measured",
                                                timings=[_timing("square-8k", 1.2, 1.0, (1.0, 0.9))]))
    record = CandidateRecord(id="c0000", generation=0, island=0, kind="seed", parents=(), source=SEED, design={},
                             rationale="", agent="offline", status="measured", result=with_gpus.to_dict())
    view = CandidateView("old-h200x2", record, with_gpus, (), ())
    said = view.no_bound()
    assert said.startswith("no bound recorded: this session was timed on GPUs") and "needs a GPU" not in said
    assert said in rendered(sections.timings(view).parts)
    no_gpu = replace(with_gpus, gpus=[])
    assert "it needs a GPU" in CandidateView("cpu", record, no_gpu, (), ()).no_bound()
    other = Bounds("gemm_allgather", 2, (0, 1), (ShapeBound("mlp-up", 1.0, 0.6, work=Work(1, 1)),), H200)
    assert CandidateView("s", record, with_gpus, (), (), bounds=other).no_bound() == (
        "no bound for square-8k: the session's bounds do not cover it")
    bounds = Bounds("gemm_allgather", 2, (0, 1), (ShapeBound("square-8k", 1.0, 0.6, work=Work(1, 1)),), H200)
    assert CandidateView("s", record, with_gpus, (), (), bounds=bounds).no_bound() == ""


def test_the_overview_says_what_its_speedup_and_time_are(tmp_path):
    """Issue 36, item 19: "speedup 1.15x · 5.692 ms", the time the sum of the shapes' medians, unlabelled."""
    repo = build_session(tmp_path / "demo")
    two = facts_text(repo.record("c0000")).plain
    assert "speedup 1.13x ±2% (geomean of 2 shapes) · 3.850 ms (sum of their medians)" in two
    one = CascadeResult.from_dict(_result("c0009", Status.MEASURED, Level.BENCHMARK, "measured",
                                          timings=[_timing("square-8k", 1.2, 1.0, (1.0, 0.9))]))
    record = replace(repo.record("c0000"), result=one.to_dict(), speedup=1.2, latency_ms=1.0)
    assert "speedup 1.20x ±3% (1 shape) · 1.000 ms (median)" in facts_text(record).plain
    repo.close()


def _session_with_bounds(tmp_path):
    repo = build_session(tmp_path / "demo")
    repo.set_bounds(Bounds("gemm_allgather", 2, (0, 1), (ShapeBound("square-8k", 1.0, 0.6, work=Work(1, 1)),
                                                          ShapeBound("mlp-up", 2.0, 1.5, work=Work(1, 1))), H200))
    return repo


async def _timings_at_80x24(app, pilot, repo) -> list[str]:
    """c0000 opened on its Timings tab: the lines on screen."""
    screen = await open_candidate(app, pilot, repo, "c0000")
    assert screen.tabs.active == "timings"
    await pilot.pause()
    return screen_lines(app)


@pytest.mark.asyncio
async def test_speedup_and_pct_of_bound_are_in_view_at_80_columns(tmp_path):
    """Issue 36, item 17: at 80x24 the Timings table stopped after "IQR %"; each shape's speedup
    and % of the bound now come first."""
    repo = _session_with_bounds(tmp_path)
    app = CucoApp()
    async with app.run_test(size=(80, 24)) as pilot:
        lines = await _timings_at_80x24(app, pilot, repo)
        header = next(line for line in lines if line.strip().startswith("shape"))
        assert "speedup" in header and "% bound" in header
        row = next(line.split() for line in lines if line.strip().startswith("square-8k"))
        assert row[1:4] == ["1.20x", "±3%", "72%"]  # 1.2 of a bound at 1.667x, with its spread
        assert " ".join(" ".join(lines).split()).count("% of the bound") == 1  # the mean, in the summary line
        shown = " ".join(lines)  # and every key of the screen, on a second line where one is not enough
        for key in ("r Re-benchmark", "u Use as parent", "w Export", "] Next tab", "[ Prev tab", "esc Back", "q Quit",
                    "s Search", "l Lineage", "b Browse", "^p palette"):
            assert key in shown, key
    repo.close()


@pytest.mark.asyncio
async def test_every_timings_column_is_in_view_at_80_columns(tmp_path):
    """A new user's 80x24: the one per-shape table was cut after "reference"; two tables now fit."""
    from cuco_tui.app.widgets.candidate.timings import SHAPE_COLUMNS, SPREAD_COLUMNS

    repo = _session_with_bounds(tmp_path)
    app = CucoApp()
    async with app.run_test(size=(80, 24)) as pilot:
        lines = await _timings_at_80x24(app, pilot, repo)
        for columns in (SHAPE_COLUMNS, SPREAD_COLUMNS):
            header = next(line for line in lines if line.strip().startswith("shape") and columns[1] in line)
            assert [c for c in columns if c not in header] == []
        spread = next(line.split() for line in lines if "0.980-1.020" in line)
        assert spread[:7] == ["square-8k", "0.980-1.020", "1.180-1.220", "4.0", "30", "0", "0"]  # to GB/s, the last
    repo.close()


@pytest.mark.asyncio
async def test_crossover_has_a_diff_per_parent_and_its_verification_error(tmp_path):
    repo = build_session(tmp_path / "demo")
    app = CucoApp()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_candidate(app, pilot, repo, "c0003")
        assert screen.tabs.active == "verification"
        assert [i for i in screen.tabs.ids if i.startswith("diff-")] == ["diff-c0000", "diff-c0002"]
        assert "+  const float alpha = 2.0f" in section_text(screen, "diff-c0000")
        assert "-  peer_wait<<<2, 1, 0, stream>>>" in section_text(screen, "diff-c0002")
        text = section_text(screen, "verification")
        assert "wrong output at verify: max relative error 0.5 exceeds 0.02" in text
        assert "worst element rank 1, y[513, 7]: got 3.1, want 2.9" in text
    repo.close()


@pytest.mark.asyncio
async def test_an_unknown_id_says_so(tmp_path):
    repo = build_session(tmp_path / "demo")
    app = CucoApp()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_candidate(app, pilot, repo, "c0099")
        assert "no candidate 'c0099'" in screen.error
    repo.close()


@pytest.mark.asyncio
async def test_export_writes_what_cuco_export_writes_and_says_where(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    repo = build_session(tmp_path / "demo")
    app = CucoApp()
    async with app.run_test(size=SIZE) as pilot:
        await open_candidate(app, pilot, repo, "c0001")
        await pilot.press("w")
        folder = tmp_path / "export" / "demo-c0001"
        assert await wait_until(pilot, lambda: any("export" == n.title for n in app._notifications))
        assert any(str(folder) in n.message for n in app._notifications)
    assert (folder / "demo-c0001.cu").read_text() == BROKEN
    assert json.loads((folder / "result.json").read_text())["status"] == "compile_error"
    assert "nvcc " in (folder / "README.md").read_text() and (folder / "cuco_runtime.cuh").is_file()
    repo.close()


@pytest.mark.asyncio
async def test_browsing_turns_off_rebenchmark_and_make_parent_and_says_why(tmp_path):
    repo = build_session(tmp_path / "demo")
    app = CucoApp()
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_candidate(app, pilot, repo, "c0000")
        assert screen.check_action("rebenchmark", ()) is None  # dimmed in the footer
        await pilot.press("r")
        assert await wait_until(pilot, lambda: any("re-benchmark needs a running search" in n.message
                                                   for n in app._notifications), 5)
        await pilot.press("ctrl+p")
        assert await wait_until(pilot, lambda: isinstance(app.screen, CommandPalette), 5)
        await run_from_palette(pilot, "next proposal", "Candidate: use it as the parent")
        assert await wait_until(pilot, lambda: any("use as parent needs a running search" in n.message
                                                   for n in app._notifications), 5)
    repo.close()


@pytest.mark.asyncio
async def test_enter_in_the_lineage_opens_the_candidate(tmp_path):
    repo = build_session(tmp_path / "demo")
    repo.close()
    app = CucoApp(open_session=tmp_path / "demo")
    async with app.run_test(size=SIZE) as pilot:
        assert await wait_until(pilot, lambda: isinstance(app.screen, LineageScreen) and app.screen.ready)
        lineage = app.screen
        lineage.jump_to("c0002")
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: isinstance(app.screen, CandidateScreen) and app.screen.ready)
        assert app.screen.candidate_id == "c0002" and app.screen.search is None
        assert app.screen.tabs.active == "deadlock"
        await pilot.press("escape")
        assert app.screen is lineage


def slot(site, kind, peer, ident, expected=1, observed=0, i=0, label=""):
    """One block's entry in a rank's wait trace, as the watchdog dumps it."""
    return {"slot": i, "state": "waiting", "site": site, "kind": kind, "peer": peer, "id": ident,
            "expected": expected, "observed": observed, "completed": 0, **({"label": label} if label else {})}


def hung_rank(rank, trace, what="candidate launch (check 1)", event="timeout"):
    return RankOutcome(rank, rank, 0, 124, [from_json({"event": event, "rank": rank, "what": what, "trace": trace})])


def test_deadlock_reports_parse_back_into_deadlock_py_waits():
    """The table reads what harness/deadlock.py writes: every wait it renders comes back whole."""

    out = hung_rank
    done = RankOutcome(1, 1, 0, 0, [Done(rank=1)])
    cases = [  # a cycle, a missing signal, a short barrier, no traced wait
        [out(0, [slot(50, "signal", 1, 2, 4, 3), slot(51, "flag", 1, 9, 2, 1, i=1)]),
         out(1, [slot(52, "signal", 0, 2, 4, 3)])],
        [out(0, [slot(61, "flag", 1, 5, 4, 3)]), done],
        [out(0, [slot(88, "barrier", -1, b, i=b) for b in range(4)]),
         out(1, [], what="harness barrier", event="aborted")],
        [out(0, []), out(1, [])],
        # named waits (a cuco::WaitSite): at the launch's file:line, the handshake by its name
        [out(0, [slot(46, "flag", 1, 7, label="neighbour go")]), out(1, [slot(46, "flag", 0, 7, label="neighbour go")])],
        [out(0, [slot(61, "signal", 1, 5, 4, 3, label="chunk ready; then go")]), done],
        [out(0, [slot(88, "barrier", -1, b, i=b, label="all here") for b in range(2)]),
         out(1, [], what="harness barrier", event="aborted")],
    ]
    for outcomes in cases:
        for file, source in (("", ""), ("c0004.cu", SEED)):
            d = analyze(outcomes, file=file, source=source)
            view = parse_report(d.render())
            assert view.summary == d.summary
            for parsed, truth in zip(view.ranks, d.ranks, strict=True):
                assert parsed.rank == truth.rank
                assert [w.describe() for w in parsed.waits] == [w.describe() for w in truth.waits]
                assert [(w.site, w.kind, w.label) for w in parsed.waits] == [(w.site, w.kind, w.label) for w in truth.waits]
            assert len(view.notes) == len(d.details) - len(d.ranks)  # the quoted lines: not a rank's words


def test_a_deadlock_of_named_waits_gives_one_account():
    """Issue 36, item 14: a cycle of named waits (the failures bundle's c0004) was shown as "No
    traced wait was recorded on any rank" above the very waits; its quoted source line as rank 1's."""
    source = SEED.replace("  return 0;\n}\n\nstatic int candidate_teardown",
                          '  wait_for_neighbour<<<1, 32, 0, stream>>>(c->flag, (ctx->rank + 1) % W, '
                          'cuco::trace_of(ctx), CUCO_WAIT_SITE("neighbour go"));\n'
                          "  return 0;\n}\n\nstatic int candidate_teardown", 1)
    site = next(i for i, line in enumerate(source.splitlines(), 1) if "wait_for_neighbour" in line)
    report = analyze([hung_rank(0, [slot(site, "flag", 1, 7, label="neighbour go")]),
                      hung_rank(1, [slot(site, "flag", 0, 7, label="neighbour go")])],
                     file="c0004.cu", source=source).render()
    result = CascadeResult(candidate="/scratch/c0004.cu", workload="gemm_allgather", status=Status.DEADLOCK,
                           level=Level.VERIFY, reason="rank 0: hung", world=2, gpus=[0, 1], deadlock_report=report)
    record = CandidateRecord(id="c0004", generation=2, island=0, kind="crossover", parents=("c0000",),
                             source=source, design={}, rationale="", agent="offline", status="deadlock",
                             result=result.to_dict())
    view = CandidateView("demo", record, result, (), ())
    text = rendered(sections.deadlock(view).parts)
    assert "No traced wait" not in text
    rows = [line.split() for line in text.splitlines() if line.strip().startswith(("0 ", "1 "))]
    # rank, at, waits for, from, expected, last seen, blocks
    assert rows == [["0", f"c0004.cu:{site}", "'neighbour", "go'", "(flag", "7)", "rank", "1", "1", "0", "1"],
                    ["1", f"c0004.cu:{site}", "'neighbour", "go'", "(flag", "7)", "rank", "0", "1", "0", "1"]]
    assert "rank 1: waits:" not in text and "rank 0: waits:" not in text  # said once, in the table
    assert f"c0004.cu:{site}: wait_for_neighbour<<<1, 32, 0, stream>>>" in text  # the quote, on its own
    assert site in sections._marked_lines(view)  # and marked in the Source tab
    # A wait in words this version cannot read is shown as written, never as "no traced wait".
    from cuco_tui.app.widgets.candidate.deadlock import deadlock_parts

    future = rendered(deadlock_parts("Deadlock: x.\n  rank 0: waits: 1 warp at a new kind of wait", []))
    assert "No traced wait" not in future and "rank 0: waits: 1 warp at a new kind of wait" in future


def test_a_deadlock_at_the_launch_of_an_unnamed_wait_reads_back_into_the_table():
    """Issue 32: an unnamed wait is reported at its kernel's launch ("c0004.cu:47 (in peer_wait at
    line 13)"); the table reads it back whole, shows the launch in its "at" column, and the Source
    tab marks both the launch and the wait."""
    from cuco_tui.evaluate.launch_sites import launch_locator

    source = SEED.replace("struct Candidate {", "__global__ void peer_wait(const unsigned* f, int peer, cuco::Trace t) {\n"
                          "  if (threadIdx.x == 0) cuco::wait_geq<unsigned>(t, CUCO_SITE, peer, 3, f, 1u);\n}\n\n"
                          "struct Candidate {", 1)
    once = source.replace("  return 0;\n}\n\nstatic int candidate_teardown",
                          "  peer_wait<<<1, 32, 0, stream>>>(c->flag, (ctx->rank + 1) % W, cuco::trace_of(ctx));\n"
                          "  return 0;\n}\n\nstatic int candidate_teardown", 1)
    twice = once.replace("  peer_wait<<<", "  peer_wait<<<1, 32, 0, stream>>>(c->flag, 0, cuco::trace_of(ctx));\n"
                         "  peer_wait<<<", 1)
    for text in (once, twice):
        lines = text.splitlines()
        wait = next(i for i, line in enumerate(lines, 1) if "cuco::wait_geq" in line)
        launches = [i for i, line in enumerate(lines, 1) if "peer_wait<<<" in line]
        d = analyze([hung_rank(0, [{**slot(wait, "flag", 1, 3), "function": "peer_wait"}]),
                     hung_rank(1, [{**slot(wait, "barrier", -1, 0), "function": "peer_wait"}])],
                    file="c0004.cu", source=text, locate=launch_locator(text, "c0004.cu"))
        view = parse_report(d.render())
        for parsed, truth in zip(view.ranks, d.ranks, strict=True):
            assert [w.describe() for w in parsed.waits] == [w.describe() for w in truth.waits]
            assert [w.lines for w in parsed.waits] == [w.lines for w in truth.waits] == [tuple(sorted((*launches, wait)))]
        at = f"c0004.cu:{launches[0]}" + "".join(f" or {n}" for n in launches[1:]) + f" (in peer_wait at line {wait})"
        assert truth.waits[0].where() == at
        result = CascadeResult(candidate="/scratch/c0004.cu", workload="gemm_allgather", status=Status.DEADLOCK,
                               level=Level.VERIFY, reason="rank 0: hung", world=2, gpus=[0, 1],
                               deadlock_report=d.render())
        record = CandidateRecord(id="c0004", generation=2, island=0, kind="diff", parents=("c0000",), source=text,
                                 design={}, rationale="", agent="offline", status="deadlock", result=result.to_dict())
        cview = CandidateView("demo", record, result, (), ())
        shown = rendered(sections.deadlock(cview).parts)
        assert "No traced wait" not in shown and "rank 0: waits:" not in shown  # every wait read into the table
        row = next(line for line in shown.splitlines() if line.strip().startswith("0 "))
        assert at in row and "rank 1" in row
        assert {wait, *launches} <= sections._marked_lines(cview)


def rendered(parts) -> str:
    """A section's parts as plain text, each at its natural width."""
    from rich.console import Console

    console = Console(width=300, record=True, color_system=None, file=io.StringIO())
    for part in parts:
        part = getattr(part, "part", part)
        part = getattr(part, "content", part)
        console.print(part.plain if isinstance(part, Content) else part)
    return console.export_text()


def test_budget_answers():
    assert parse_budget("5", None) == 5.0
    assert parse_budget("$2.50", 1.0) == 2.5
    assert parse_budget("+2", 3.0) == 5.0
    assert parse_budget("+2", None) == 2.0
    assert parse_budget("none", 3.0) is None
    with pytest.raises(ValueError, match="not a number"):
        parse_budget("lots", None)
    with pytest.raises(ValueError, match="0 dollars or more"):
        parse_budget("-1", None)


# ---------------------------------------------------------------------------- from the live dashboard


def dashboard_text(app, selector: str) -> str:
    return str(app.get_screen("dashboard").query_one(selector, Static).render())


async def stop_search(app, pilot) -> None:
    if not isinstance(app.screen, DashboardScreen):
        app.pop_screen()
    await pilot.press("x")
    assert await wait_until(pilot, lambda: isinstance(app.screen, Confirm), 5)
    await pilot.press("y")
    assert await wait_until(pilot, lambda: dashboard_text(app, "#state-run").partition(" ")[0] in END_STATES)


@pytest.mark.asyncio
async def test_dashboard_opens_the_best_candidate_with_the_engine_attached(tmp_path):
    app = make_dashboard_app(tmp_path)  # review mode: the fast path waits, the seed is committed
    async with app.run_test(size=SIZE) as pilot:
        assert await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen)
                                and app.screen.query_one(ProposalQueue).ids and app.screen.state.best_id)
        dashboard = app.screen
        await pilot.press("o")  # at once: the highlighted row, the best
        assert await wait_until(pilot, lambda: isinstance(app.screen, CandidateScreen) and app.screen.ready)
        screen = app.screen
        assert screen.candidate_id == "c0000" and screen.search is dashboard.search
        assert screen.check_action("rebenchmark", ()) is True
        assert "live search attached" in str(screen.query_one("#candidate-head", Static).content)

        await pilot.press("r")  # while the fast-path proposal waits for review
        assert await wait_until(pilot, lambda: any("committed as c0002" in n.message for n in app._notifications), 5)
        assert await wait_until(pilot, lambda: "c0002" in dashboard.state.sources)
        await pilot.press("u")
        assert await wait_until(pilot, lambda: dashboard.search.preferred_parent == "c0000", 5)
        await pilot.press("l")  # its session's lineage, on this candidate
        assert await wait_until(pilot, lambda: isinstance(app.screen, LineageScreen) and app.screen.ready, 10)
        assert app.screen.repo is screen.repo and app.screen.query_one(CandidateTable).highlighted_id == "c0000"
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: app.screen is screen, 5)
        await pilot.press("escape")
        assert app.screen is dashboard
        await stop_search(app, pilot)
    with SessionRepo.open(tmp_path / "session") as repo:
        again = repo.record("c0002")
        assert again.kind == "rebenchmark" and again.parents == ("c0000",)
        assert again.rationale == "re-benchmark of c0000" and again.status == "measured"
        assert again.speedup == pytest.approx(repo.record("c0000").speedup)


@pytest.mark.asyncio
async def test_the_lineage_of_the_running_session_opens_candidates_with_the_search_attached(tmp_path):
    app = make_dashboard_app(tmp_path)
    app.sessions_root = tmp_path  # the search's session is the one to browse
    async with app.run_test(size=SIZE) as pilot:
        assert await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen)
                                and app.screen.query_one(ProposalQueue).ids and app.screen.state.best_id)
        dashboard = app.screen
        await pilot.press("b")
        assert await wait_until(pilot, lambda: isinstance(app.screen, BrowseScreen)
                                and app.screen.query_one(OptionList).option_count == 1
                                and "session  session" in str(app.screen.query_one(OptionList)
                                                              .get_option_at_index(0).prompt))
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: isinstance(app.screen, LineageScreen) and app.screen.ready)
        app.screen.jump_to("c0000")
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: isinstance(app.screen, CandidateScreen) and app.screen.ready)
        assert app.screen.search is dashboard.search
        assert "live search attached" in str(app.screen.query_one("#candidate-head", Static).content)
        await pilot.press("escape", "escape")  # the candidate, then the lineage
        assert await wait_until(pilot, lambda: app.screen is dashboard, 5)
        await stop_search(app, pilot)


@pytest.mark.asyncio
async def test_dashboard_slash_goes_to_an_id_and_refuses_unknown_ones(tmp_path):
    app = make_dashboard_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        assert await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen)
                                and app.screen.query_one(ProposalQueue).ids)
        await pilot.press("slash")
        assert await wait_until(pilot, lambda: isinstance(app.screen, TextPrompt), 5)
        await pilot.press(*"c0042", "enter")
        assert await wait_until(pilot, lambda: any("no committed candidate 'c0042'" in n.message
                                                   for n in app._notifications), 5)
        assert isinstance(app.screen, DashboardScreen)
        await pilot.press("slash")
        assert await wait_until(pilot, lambda: isinstance(app.screen, TextPrompt), 5)
        await pilot.press("0", "enter")  # the seed, typed short
        assert await wait_until(pilot, lambda: any("c0000 highlighted" in n.message for n in app._notifications), 5)
        assert app.screen.query_one(Leaderboard).highlighted == "c0000"
        await stop_search(app, pilot)


@pytest.mark.asyncio
async def test_dashboard_budget_prompt_changes_the_cap(tmp_path):
    app = make_dashboard_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        assert await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen)
                                and app.screen.query_one(ProposalQueue).ids)
        await pilot.press("dollar_sign")
        assert await wait_until(pilot, lambda: isinstance(app.screen, TextPrompt), 5)
        await pilot.press(*"7.5", "enter")
        assert await wait_until(pilot, lambda: "$0.00 of $7.50" in dashboard_text(app, "#state-facts"), 5)
        await pilot.press("dollar_sign")
        assert await wait_until(pilot, lambda: isinstance(app.screen, TextPrompt), 5)
        await pilot.press(*"+2", "enter")
        assert await wait_until(pilot, lambda: "$0.00 of $9.50" in dashboard_text(app, "#state-facts"), 5)
        await pilot.press("dollar_sign")
        assert await wait_until(pilot, lambda: isinstance(app.screen, TextPrompt), 5)
        await pilot.press(*"none", "enter")
        assert await wait_until(pilot, lambda: "(no cap)" in dashboard_text(app, "#state-facts"), 5)
        await stop_search(app, pilot)


@pytest.mark.asyncio
async def test_dashboard_edit_sends_the_editors_text(tmp_path, monkeypatch):
    import subprocess
    import sys

    script = tmp_path / "ed.py"
    script.write_text("import sys\nopen(sys.argv[1], 'a').write('// edited by hand\\n')\n")
    monkeypatch.setenv("VISUAL", f"{sys.executable} {script}")
    # No terminal to hand over under Pilot: the editor runs without Textual's suspend.
    monkeypatch.setattr(editor, "run_suspended", lambda app, command: subprocess.call(command))
    app = make_dashboard_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        assert await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen)
                                and app.screen.query_one(ProposalQueue).ids)
        cid = app.screen.query_one(ProposalQueue).selected
        await pilot.press("e")
        assert await wait_until(pilot, lambda: cid in app.screen.state.sources)
        assert app.screen.state.sources[cid].endswith("// edited by hand\n")
        await stop_search(app, pilot)
    with SessionRepo.open(tmp_path / "session") as repo:
        assert repo.record(cid).review == "edited"


@pytest.mark.asyncio
async def test_dashboard_edit_without_a_terminal_says_so(tmp_path):
    app = make_dashboard_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        assert await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen)
                                and app.screen.query_one(ProposalQueue).ids)
        await pilot.press("e")
        assert await wait_until(pilot, lambda: any("cannot be handed to an editor" in n.message
                                                   for n in app._notifications), 5)
        await stop_search(app, pilot)
