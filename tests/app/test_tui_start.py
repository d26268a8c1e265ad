"""How cuco-tui starts: on a new search (the dashboard) with the agent that fits, on all local
GPUs or the ones named, resuming a session, and, without a GPU, with a banner, a compile-only
search and the example sessions offered to browse."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from textual.widgets import OptionList

from cuco_tui.app.app import CucoApp
from cuco_tui.app.live_search import LiveSearch, SearchNotStarted
from cuco_tui.app.screens.browse import BrowseScreen
from cuco_tui.app.screens.dashboard import DashboardScreen
from cuco_tui.app.screens.lineage import LineageScreen
from cuco_tui.app.search_launch import SearchLaunch
from cuco_tui.app.search_state import RunPhase
from cuco_tui.app.widgets.gpu_banner import GpuBanner
from cuco_tui.cli import tui_main
from cuco_tui.lineage import SessionRepo, open_session_or_bundle
from cuco_tui.search.config import SearchConfig
from cuco_tui.executors import GpuGroup, GpuPool
from cuco_tui.workload.manifest import load_workload
from pilot_helpers import BACKSTOP_S, wait_until
from dashboard_helpers import fake_evaluate
from repo_paths import REPO

EXAMPLE = REPO / "sessions" / "examples" / "gemm_allgather-offline-h200x2.bundle"


@pytest.fixture
def started(monkeypatch):
    """tui_main's app, captured instead of run."""
    apps: list[CucoApp] = []
    monkeypatch.setattr(CucoApp, "run", lambda self, *a, **k: apps.append(self))
    return apps


def test_plain_cuco_tui_opens_a_new_offline_search_of_gemm_allgather(started):
    assert tui_main([]) == 0
    app = started[0]
    assert app.start_search
    assert app.workload.name == "gemm_allgather"
    assert app.search_launch.agent_kind == "offline"  # no ANTHROPIC_API_KEY (conftest)
    assert app.search_launch.resume is None
    assert app.search_launch.config.gpus == ()  # every local GPU


def test_the_claude_agent_when_a_key_is_set_with_its_default_budget(started, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    assert tui_main(["--workload", "kv_transfer", "--gpus", "0-3", "-g", "4"]) == 0
    launch = started[0].search_launch
    assert launch.agent_kind == "claude"
    assert launch.workload.name == "kv_transfer"
    assert launch.config.gpus == (0, 1, 2, 3)
    assert launch.config.generations == 4
    assert launch.config.budget_usd == 5.0


def test_named_agent_review_mode_and_evaluate_screen(started):
    assert tui_main(["--agent", "offline", "--review", "review"]) == 0
    assert started[0].search_launch.config.review_mode == "review"
    assert started[0].search_launch.agent_kind == "offline"
    assert tui_main(["--evaluate"]) == 0  # the search's flags with it: tests/cli/test_search_flag_refusals.py
    assert not started[1].start_search


@pytest.mark.parametrize("argv, message", [
    (["--workload", "nope"], "nope"),
    (["--gpus", "x"], "x"),
    (["--resume", "/nowhere/at/all"], "/nowhere/at/all"),
])
def test_bad_arguments_say_why_and_start_nothing(started, capsys, argv, message):
    assert tui_main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("cuco-tui: ") and message in err
    assert not started


def _small_session(tmp_path: Path) -> Path:
    """A finished 1-generation session made with the fake evaluator."""
    w = load_workload("gemm_allgather")
    config = SearchConfig(workload="gemm_allgather", generations=1, islands=2, seed=0, max_concurrent_builds=1)
    launch = SearchLaunch(w, config, fake_evaluate, tmp_path / "s1",
                          (("compile_ahead", False), ("design_context", lambda point: "")), agent="offline",
                          executor=GpuPool([GpuGroup(0, (0, 1))]))
    with LiveSearch(launch) as search:
        search.start()
        search.run()
    return tmp_path / "s1"


def test_live_search_owns_the_session_it_opens_and_closes_it_once(tmp_path):
    w = load_workload("gemm_allgather")
    config = SearchConfig(workload="gemm_allgather", generations=2, islands=1, seed=0, max_concurrent_builds=1)
    launch = SearchLaunch(w, config, fake_evaluate, tmp_path / "s2",
                          (("compile_ahead", False), ("design_context", lambda point: "")), agent="offline",
                          executor=GpuPool([GpuGroup(0, (0, 1))]))
    search = LiveSearch(launch)
    assert not search.started and not search.running and search.session is None
    assert not search.works_on(tmp_path / "s2")
    for control in (search.pause, lambda: search.add_hint("x"), search.open_repo, lambda: search.review_mode):
        with pytest.raises(SearchNotStarted, match="still starting"):
            control()
    search.stop()  # before the engine exists: it stops as soon as it is built
    search.start()
    assert search.started and search.session == tmp_path / "s2" and search.works_on(tmp_path / "s2")
    assert not search.works_on(tmp_path)
    with pytest.raises(RuntimeError, match="starts once"):
        search.start()
    summary = search.run()
    assert summary.reason == "stopped" and not search.running
    with search.open_repo() as own:  # a handle of the caller's: the search's own stays open
        assert {r.id for r in own.records()} == {"c0000"}  # the seed, then it stopped
    search.close()
    search.close()  # idempotent: the dashboard's worker closes it once, whatever ended the run
    with pytest.raises(RuntimeError, match="starts once"):
        search.start()
    with SessionRepo.open(tmp_path / "s2") as repo:
        assert [r.id for r in repo.records()] == ["c0000"]


def test_resume_continues_the_session_with_its_own_workload(tmp_path, started):
    path = _small_session(tmp_path)
    with SessionRepo.open(path) as repo:
        before = {r.id for r in repo.records()}
    assert tui_main(["--resume", str(path), "-g", "2"]) == 0
    launch = started[0].search_launch
    assert launch.resume == path and dict(launch.resume_overrides)["generations"] == 2
    resumed = SearchLaunch(launch.workload, launch.config, fake_evaluate, resume=path, agent="offline",
                           resume_overrides=(("generations", 2),),
                           engine_options=(("compile_ahead", False), ("design_context", lambda point: "")),
                           executor=GpuPool([GpuGroup(0, (0, 1))]))
    with LiveSearch(resumed) as search:
        search.start()
        search.run()
    with SessionRepo.open(path) as repo:
        records = repo.records()
    assert before < {r.id for r in records}  # nothing lost, more added
    assert max(r.generation for r in records) == 2


@pytest.mark.asyncio
async def test_browse_offers_the_example_bundle_and_opens_its_lineage(tmp_path):
    (tmp_path / "examples").mkdir()
    shutil.copy(EXAMPLE, tmp_path / "examples" / EXAMPLE.name)
    app = CucoApp(sessions_root=tmp_path, evaluate_fn=fake_evaluate)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("b")
        assert await wait_until(pilot, lambda: isinstance(app.screen, BrowseScreen)
                                and app.screen.query_one(OptionList).option_count == 1
                                and "example" in str(app.screen.query_one(OptionList).get_option_at_index(0).prompt))
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: isinstance(app.screen, LineageScreen), timeout_s=30)


@pytest.mark.asyncio
async def test_cuco_tui_open_imports_a_bundle_once_and_shows_that_copy(tmp_path, monkeypatch):
    """The bundle is imported once, to refuse a bad one before the app starts, and the app shows
    that copy (it was imported a second time inside the app); nothing of it outlives the app."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the imports land, to count them
    seen = []

    def run(app, *args, **kwargs):  # the app as cuco-tui starts it, run here under run_test
        seen.append((app.open_session, sorted(p.name for p in tmp_path.iterdir())))

    monkeypatch.setattr(CucoApp, "run", run)
    assert tui_main(["open", str(EXAMPLE)]) == 0
    (repo, imported), = seen
    assert isinstance(repo, SessionRepo) and len(imported) == 1 and repo.path.parent == tmp_path / imported[0]
    assert not any(tmp_path.iterdir())  # closed when the app ended
    monkeypatch.undo()
    app = CucoApp(open_session=open_session_or_bundle(EXAMPLE), evaluate_fn=fake_evaluate)
    async with app.run_test(size=(120, 40)) as pilot:
        assert await wait_until(pilot, lambda: isinstance(app.screen, LineageScreen) and app.screen.ready,
                                timeout_s=30)
        assert app.screen.repo is app.open_session


@pytest.mark.asyncio
async def test_without_a_gpu_the_search_compiles_only_under_a_banner(tmp_path, monkeypatch):
    """The real cascade, GPUs hidden: the seed is compiled with nvcc and committed as no_gpu."""
    monkeypatch.setenv("CUCO_NO_GPU", "1")
    config = SearchConfig(workload="gemm_allgather", generations=1, islands=1, seed=0, max_concurrent_builds=1)
    app = CucoApp(start_search=True, search_config=config, session=tmp_path / "live", agent="offline")
    async with app.run_test(size=(120, 40)) as pilot:
        assert await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen))
        banner = app.screen.query_one(GpuBanner)
        assert await wait_until(pilot, lambda: banner.has_class("-visible"))
        assert "b browses the example sessions" in str(banner.render())
        assert await wait_until(pilot, lambda: app.screen.state.statuses.get("no_gpu", 0) >= 1, timeout_s=180)
        app.screen.search.stop()
    with SessionRepo.open(tmp_path / "live") as repo:
        seed = next(r for r in repo.records() if r.kind == "seed")
    assert seed.status == "no_gpu"
    assert seed.result["level"] >= 1  # compiled for real before it stopped


@pytest.mark.asyncio
async def test_q_while_evaluating_stops_commits_what_runs_then_quits(tmp_path):
    import threading

    release = threading.Event()

    def slow_evaluate(path, workload, options, progress=None, kept=None):
        from cuco_tui.evaluate.cascade import Progress
        from cuco_tui.core.result import Level

        if progress:
            progress(Progress(Level.VERIFY, "running on GPUs 0,1"))
        release.wait(BACKSTOP_S)
        return fake_evaluate(path, workload, options, progress)

    config = SearchConfig(workload="gemm_allgather", generations=3, islands=2, seed=0, max_concurrent_builds=1)
    app = CucoApp(start_search=True, search_config=config, session=tmp_path / "s", agent="offline",
                  evaluate_fn=slow_evaluate,
                  executor=GpuPool([GpuGroup(0, (0, 1))]),
                  engine_options={"compile_ahead": False, "design_context": lambda point: ""})
    async with app.run_test(size=(120, 40)) as pilot:
        assert await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen)
                                and app.screen.state.in_flight >= 1)
        await pilot.press("q")
        assert await wait_until(pilot, lambda: any("Stopping: 1 evaluation(s) in flight" in str(n.message)
                                                   for n in app._notifications))
        assert app.is_running and app.screen.state.run is RunPhase.STOPPING
        release.set()
        assert await wait_until(pilot, lambda: not app.is_running, timeout_s=30)
    with SessionRepo.open(tmp_path / "s") as repo:
        assert [r.id for r in repo.records()] == ["c0000"]  # the seed that was running: committed
