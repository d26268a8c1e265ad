"""The search end to end on CPU: the real offline agent, the real lineage, the real cascade
(static checks and a real nvcc compile; CUCO_NO_GPU=1 stops it at no_gpu). `cuco search` runs
as a subprocess; a SIGKILL mid-run followed by --resume loses nothing committed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from build_cache import shared_build_cache
from repo_paths import DATA, REPO

offline = pytest.importorskip("cuco_tui.agents.offline", reason="the offline agent (cuco_tui.agents.offline) "
                              "has not landed yet")
lineage = pytest.importorskip("cuco_tui.lineage", reason="the lineage store (cuco_tui.lineage) has not landed yet")
if not hasattr(lineage, "SessionRepo"):
    pytest.skip("cuco_tui.lineage has no SessionRepo yet", allow_module_level=True)

from cuco_tui.agents.base import BudgetExhausted  # noqa: E402
from cuco_tui.toolchain.toolchain import discover  # noqa: E402
from cuco_tui.design.space import Capabilities  # noqa: E402
from cuco_tui.lineage import SessionRepo  # noqa: E402
from cuco_tui.search.config import SearchConfig  # noqa: E402
from cuco_tui.search.engine import SearchEngine  # noqa: E402
from cuco_tui.search.events import AwaitingReview, EventBus, SearchFinished  # noqa: E402
from cuco_tui.search.sessions import create_session  # noqa: E402
from cuco_tui.workload.manifest import load_workload  # noqa: E402

if not discover().can_compile:
    pytest.skip("no CUDA toolchain here (nvcc, NCCL and cuBLAS headers): the cascade cannot compile",
                allow_module_level=True)

W = load_workload("gemm_allgather")
MAIN = "import sys; from cuco_tui.cli import main; sys.exit(main())"
FINE = {"no_gpu", "rejected", "compile_error"}
GENERATIONS = 3


def cli_env(cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(CUCO_NO_GPU="1", CUCO_CACHE_DIR=str(cache))
    env.pop("ANTHROPIC_API_KEY", None)
    return env


# A backstop against a hang, not a budget: a busy 2-core machine took over 400 s for a search that
# takes two minutes idle.
BACKSTOP_S = 1800


def cuco(args: list[str], env: dict[str, str], timeout: float = BACKSTOP_S) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", MAIN, *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


def commit_parents(repo: SessionRepo) -> dict[str, tuple[str, ...]]:
    """Candidate id -> the candidate ids of its commit's parents, read from git itself."""
    by_sha = {repo.commit_of(r.id): r.id for r in repo.records()}
    out = {}
    for sha, cid in by_sha.items():
        commit = repo.git_repo.commit(sha)
        out[cid] = tuple(by_sha[p.hexsha] for p in commit.parents if p.hexsha in by_sha)
    return out


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return shared_build_cache(tmp_path_factory)  # the folder conftest gives every test: compiles are shared


@pytest.fixture(scope="module")
def searched(tmp_path_factory, cache):
    """`cuco search --generations 3 --agent offline` on a fresh session: 11 candidates on three
    islands, every one compiled by nvcc. Seed 2 draws no fused_tile (CUTLASS, a minute of nvcc each;
    tests/workloads/gemm_allgather/test_fused_gemm.py builds those)."""
    session = tmp_path_factory.mktemp("search") / "s"
    proc = cuco(["search", "--workload", "gemm_allgather", "--generations", str(GENERATIONS), "--seed", "2",
                 "--agent", "offline", "--session", str(session), "--json"], cli_env(cache))
    return session, proc


def test_search_finishes_and_commits_every_candidate(searched):
    session, proc = searched
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["reason"] == "done" and summary["generations"] == GENERATIONS
    committed = [line for line in proc.stderr.splitlines() if "] committed c" in line]
    with SessionRepo.open(session) as repo:
        records = repo.records(with_source=True)
        assert len(records) == len(committed) == summary["candidates"]
        assert len({r.id for r in records}) == len(records)
        assert {r.status for r in records} <= FINE, {r.status for r in records}
        assert sum(r.status == "no_gpu" for r in records) >= 8
        for r in records:
            if r.status != "no_gpu":
                assert r.result and r.result["reason"], r.id
            else:
                assert r.result["level"] == 1 and r.result["build_seconds"] > 0  # really compiled
        # one commit per candidate, with the candidate's parents as its commit parents
        parents = commit_parents(repo)
        assert set(parents) == {r.id for r in records}
        for r in records:
            assert parents[r.id] == tuple(dict.fromkeys(r.parents)), r.id
        seed = records[0]
        assert seed.kind == "seed" and seed.generation == 0
        assert any(r.kind == "fast_path" and r.design.get("backend") == "nccl_lsa" for r in records)
        assert max(r.generation for r in records) == GENERATIONS
        assert {r.island for r in records if r.generation > 0} == {0, 1, 2}
        assert set(repo.island_heads()) == {0, 1, 2}
    # every compile ahead is said as it starts (its queue, when builds wait for a builder)
    built = [r.id for r in records if r.status in ("no_gpu", "compile_error")]
    assert all(any(f"] {cid} L1: compiling" in line for line in proc.stderr.splitlines()) for cid in built), \
        proc.stderr[-3000:]


def test_show_sessions_and_export(searched, cache, tmp_path):
    session, proc = searched
    env = cli_env(cache)
    shown = cuco(["show", str(session)], env)
    assert shown.returncode == 0 and "c0000" in shown.stdout and "seed" in shown.stdout
    one = cuco(["show", str(session), "c0001"], env)
    assert one.returncode == 0 and "diff against c0000" in one.stdout and "fast_path" in one.stdout
    listed = cuco(["sessions", "--root", str(session.parent), "--json"], env)
    assert json.loads(listed.stdout)[0]["name"] == session.name
    no_best = cuco(["export", str(session), "--best", str(tmp_path / "out")], env)
    assert no_best.returncode == 2 and "no measured candidate" in no_best.stderr
    exported = cuco(["export", str(session), "--best", str(tmp_path / "out"), "--candidate", "c0001"], env)
    assert exported.returncode == 0, exported.stderr
    assert (tmp_path / "out" / "result.json").exists()
    assert json.loads((tmp_path / "out" / "result.json").read_text())["candidate"] == "c0001"
    assert "EVOLVE-BLOCK-START" in (tmp_path / "out" / f"{session.name}-c0001.cu").read_text()
    missing = cuco(["show", str(session.parent / "nope")], env)
    assert missing.returncode == 2 and "no session" in missing.stderr


def test_sigkill_mid_run_then_resume_loses_nothing(tmp_path, cache):
    session = tmp_path / "killed"
    env = cli_env(cache)
    # Seed 7 at 2 generations: 8 candidates, none of them fused_tile (a minute of nvcc each).
    proc = subprocess.Popen([sys.executable, "-c", MAIN, "search", "--generations", "2", "--agent", "offline",
                             "--seed", "7", "--session", str(session)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            cwd=REPO)
    seen = []
    try:
        for line in proc.stderr:
            if "] committed c" in line:
                seen.append(line.split("] committed ")[1].split()[0])
                if len(seen) == 3:
                    os.killpg(proc.pid, signal.SIGKILL)
                    break
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(BACKSTOP_S)
    assert len(seen) == 3 and proc.returncode == -signal.SIGKILL
    with SessionRepo.open(session) as repo:
        before = {r.id: r for r in repo.records()}
    assert set(seen) <= set(before)
    last_gen = max(r.generation for r in before.values())

    resumed = cuco(["search", "--resume", str(session), "--json"], env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed at generation {last_gen + 1}" in resumed.stderr
    with SessionRepo.open(session) as repo:
        after = {r.id: r for r in repo.records()}
        parents = commit_parents(repo)
    for cid, rec in before.items():
        assert after[cid] == rec  # nothing committed was lost or changed
    new = [r for cid, r in after.items() if cid not in before]
    assert new and min(r.generation for r in new) == last_gen + 1
    assert max(r.generation for r in after.values()) == 2
    assert all(parents[r.id] == tuple(dict.fromkeys(r.parents)) for r in new)
    assert {r.status for r in after.values()} <= FINE
    assert json.loads(resumed.stdout)["candidates"] == len(after)


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setenv("CUCO_NO_GPU", "1")


def _engine(tmp_path, agent=None, **cfg):
    config = SearchConfig(workload="gemm_allgather", **{"generations": 1, "islands": 2, **cfg})
    repo = create_session(W, config, tmp_path / "session")
    bus = EventBus()
    agent = agent or offline.OfflineAgent(W, Capabilities(world=2), seed=3)
    return SearchEngine(W, agent, repo, config, events=bus), repo, bus


def test_review_with_the_offline_agent(tmp_path, no_gpu):
    engine, repo, bus = _engine(tmp_path, review_mode="review", fast_path=False)
    decisions = iter([("reject", "copy engines are out of scope today"), ("accept", "")])

    def on_event(e):
        if isinstance(e, AwaitingReview):
            decision, reason = next(decisions)
            threading.Thread(target=engine.review, args=(e.candidate, decision, reason)).start()

    bus.subscribe(on_event)
    engine.run()
    with repo:
        recs = {r.review: r for r in repo.records() if r.generation == 1}
    rejected = recs["rejected: copy engines are out of scope today"]
    assert rejected.status == "rejected"
    assert rejected.result["reason"] == "rejected in review: copy engines are out of scope today"
    assert recs["accepted"].status == "no_gpu"


def test_pause_and_resume_with_the_offline_agent(tmp_path, no_gpu):
    engine, repo, bus = _engine(tmp_path, fast_path=False)
    engine.pause()
    done = threading.Event()
    t = threading.Thread(target=lambda: (engine.run(), done.set()), daemon=True)
    t.start()
    time.sleep(1.0)
    with repo._lock:
        committed = len(repo)
    assert not done.is_set() and committed <= 1  # the seed at most: no proposal while paused
    engine.resume()
    assert done.wait(BACKSTOP_S)
    with repo:
        assert len(repo) == 3


def test_budget_exhaustion_ends_cleanly_with_the_offline_agent(tmp_path, no_gpu):
    real = offline.OfflineAgent(W, Capabilities(world=2), seed=3)  # proposes no fused_tile (a minute of nvcc)

    class Capped:
        name = "offline"
        spent_usd = 0.0

        def set_budget(self, usd):
            pass  # the real agent's: nothing to cap

        def __init__(self):
            self.calls = 0

        def propose(self, request):
            self.calls += 1
            if self.calls > 2:
                raise BudgetExhausted("the budget is spent")
            return real.propose(request)

        def summarize(self, history):
            return real.summarize(history)

    engine, repo, bus = _engine(tmp_path, agent=Capped(), generations=5)
    summary = engine.run()
    assert summary.reason == "budget"
    assert bus.history()[-1] == bus.history(SearchFinished)[0]
    with repo:
        assert len(repo) == summary.candidates == 3  # seed, fast path, one of generation 1


def test_show_reads_a_bundle_and_survives_a_closed_pipe(tmp_path):
    """`cuco show sessions/examples/X.bundle` as it reads a session; piping it into `head`
    ends quietly."""
    bundle = DATA / "gemm_allgather-52-candidates.bundle"
    env = dict(os.environ, CUCO_NO_GPU="1", CUCO_CACHE_DIR=str(tmp_path / "cache"))
    shown = cuco(["show", str(bundle)], env)
    assert shown.returncode == 0, shown.stderr
    assert "best" in shown.stdout and "c0000" in shown.stdout and "seed" in shown.stdout
    # `true` exits at once: every write of cuco's finds the pipe closed.
    piped = subprocess.run(f"set -o pipefail; {sys.executable} -c {MAIN!r} show {bundle} | true", shell=True,
                           executable="/bin/bash", env=env, capture_output=True, text=True,
                           cwd=REPO)
    assert piped.returncode == 0, piped.stderr
    assert "Traceback" not in piped.stderr and "BrokenPipe" not in piped.stderr
