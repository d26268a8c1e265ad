"""Where `cuco search` (and `cuco-tui`) put a session, and what a refusal leaves: every bad flag or
place is one line and exit 2 before anything is made; a session records its workload so that a
resume works from any folder; sessions default to the user's own folder ($CUCO_SESSIONS_DIR
here, as conftest sets it), which `cuco sessions` and `--resume NAME` find from anywhere."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from repo_paths import REPO

from cuco_tui.app.live_search import LiveSearch
from cuco_tui.app.search_launch import SearchLaunch
from cuco_tui.cli import main, tui_main
from cuco_tui.core.records import CandidateRecord
from cuco_tui.core.workload import WorkloadError
from cuco_tui.harness import gpus as gpus_module
from cuco_tui.harness.gpus import GpuInfo, GpuInventory
from cuco_tui.lineage import SessionRepo
from cuco_tui.search.config import SearchConfig
from cuco_tui.search.sessions import create_session, example_bundles, open_session, sessions_root
from cuco_tui.workload.manifest import load_workload

ONE = GpuInventory((GpuInfo(0, "NVIDIA H100", 81559, 132),))
SEARCH = ["search", "--workload", "gemm_allgather", "--agent", "offline"]


def one_line(capsys, rc: int, *words: str) -> str:
    err = capsys.readouterr().err.strip()
    assert rc == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for w in words:
        assert w in err, err
    return err


def tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


def session_with(path: Path, generations: int, done: int) -> Path:
    """A session of gemm_allgather whose candidates reach generation `done`."""
    with SessionRepo.create(path, "gemm_allgather", {"generations": generations, "islands": 1}) as repo:
        for g in range(done + 1):
            repo.commit_candidate(CandidateRecord(
                id=f"c{g:04d}", generation=g, island=0, kind="seed" if g == 0 else "diff",
                parents=() if g == 0 else (f"c{g - 1:04d}",), source=f"// {g}\n", design={}, rationale="",
                agent="offline", status="no_gpu", result={"reason": "compiled only"}))
    return path


def state_of(path: Path) -> tuple[str, ...]:
    """Everything git holds of a session (refs and their commits): unchanged when nothing was written."""
    with SessionRepo.open(path) as repo:
        return tuple(sorted(f"{r.path} {r.commit.hexsha}" for r in repo.git_repo.refs))


# ---------------------------------------------------------------------------- where a new session goes


def test_a_regular_file_as_the_session_is_refused_and_kept(tmp_path, capsys):
    target = tmp_path / "notes.txt"
    target.write_text("mine\n")
    one_line(capsys, main(SEARCH + ["--session", str(target)]), str(target), "is a file")
    assert target.read_text() == "mine\n" and tree(tmp_path) == ["notes.txt"]


def test_a_folder_holding_other_things_is_refused_and_kept(tmp_path, capsys):
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "kernel.cu").write_text("// mine\n")
    one_line(capsys, main(SEARCH + ["--session", str(tmp_path / "work")]), "holds other files")
    assert tree(tmp_path) == ["work", "work/kernel.cu"]


def test_an_existing_session_is_not_made_again(tmp_path, capsys):
    session = session_with(tmp_path / "s", generations=2, done=1)
    before = state_of(session)
    one_line(capsys, main(SEARCH + ["--session", str(session)]), "already holds a session", "--resume")
    assert state_of(session) == before


@pytest.mark.parametrize("place", ["under-a-file", "root-a-file", "proc"])
def test_a_place_that_cannot_hold_a_session_is_one_line(tmp_path, capsys, place):
    (tmp_path / "f").write_text("x")
    flags = {"under-a-file": ["--session", str(tmp_path / "f" / "s")],
             "root-a-file": ["--root", str(tmp_path / "f")],
             "proc": ["--session", "/proc/cuco-no-such-place/s"]}[place]
    one_line(capsys, main(SEARCH + flags), "cannot make" if place != "root-a-file" else "is a file")
    assert tree(tmp_path) == ["f"]


def test_an_empty_folder_is_a_fine_place(tmp_path):
    from cuco_tui.search.sessions import new_session_folder

    (tmp_path / "empty").mkdir()
    assert new_session_folder(tmp_path / "empty") == tmp_path / "empty"


# ---------------------------------------------------------------------------- a refusal creates nothing


@pytest.mark.parametrize("flags, words", [
    (["--world", "3"], ("runs on 2, 4, 8 GPUs, not 3",)),
    (["--generations", "0"], ("--generations", "1 or more")),
    (["--evaluations", "0"], ("--evaluations", "1 or more")),
    (["--islands", "0"], ("at least one island",)),
    (["--gpus", "0,0"], ("named twice",)),
    (["--partition", "gpu"], ("--executor slurm",)),
    (["--gpus", "0"], ("1 GPU", "--share-gpu")),  # one GPU here, two ranks needed
])
def test_a_refused_search_leaves_no_session(tmp_path, capsys, monkeypatch, flags, words):
    monkeypatch.setattr(gpus_module, "inventory", lambda: ONE)
    monkeypatch.setenv("CUCO_SESSIONS_DIR", str(tmp_path / "default"))
    one_line(capsys, main(SEARCH + flags), *words)
    one_line(capsys, main(SEARCH + flags + ["--root", str(tmp_path / "root")]), *words)
    assert tree(tmp_path) == []  # neither the default folder nor --root got a session
    assert main(["sessions"]) == 0 and "no sessions" in capsys.readouterr().out


@pytest.mark.parametrize("flags, words", [
    (["--world", "3"], ("runs on 2, 4, 8 GPUs, not 3",)),
    (["--generations", "1"], ("has run its generations up to 1", "more than 1")),
    (["--generations", "0"], ("1 or more",)),
    (["--session", "elsewhere"], ("--session", "--resume")),
])
def test_a_resume_with_a_bad_flag_changes_nothing(tmp_path, capsys, flags, words):
    session = session_with(tmp_path / "s", generations=2, done=1)
    before = state_of(session)
    one_line(capsys, main(["search", "--resume", str(session), "--agent", "offline"] + flags), *words)
    assert state_of(session) == before and tree(tmp_path / "s" / "scratch") == []
    assert not (Path.cwd() / "elsewhere").exists()


@pytest.mark.parametrize("argv, words", [
    (["--generations", "0"], ("1 or more",)),
    (["--gpus", "0"], ("1 GPU",)),
])
def test_cuco_tui_refuses_before_the_app_or_a_session(capsys, monkeypatch, argv, words):
    monkeypatch.setattr(gpus_module, "inventory", lambda: ONE)
    before = tree(sessions_root())
    one_line(capsys, tui_main(argv + ["--agent", "offline"]), *words)
    assert tree(sessions_root()) == before


def test_a_resume_of_a_session_that_evaluated_its_total_asks_for_a_higher_one(tmp_path, capsys):
    session = tmp_path / "s"
    with SessionRepo.create(session, "gemm_allgather", {"generations": 5, "islands": 1, "evaluations": 2}) as repo:
        for g in range(2):
            repo.commit_candidate(CandidateRecord(
                id=f"c{g:04d}", generation=g, island=0, kind="seed" if g == 0 else "diff",
                parents=() if g == 0 else ("c0000",), source=f"// {g}\n", design={}, rationale="",
                agent="offline", status="no_gpu", result={"reason": "compiled only"}))
    before = state_of(session)
    resume = ["search", "--resume", str(session), "--agent", "offline"]
    one_line(capsys, main(resume), "has evaluated 2 candidates", "given --evaluations 2",
             "give a higher --evaluations")
    one_line(capsys, main(resume + ["--evaluations", "2"]), "has evaluated 2 candidates", "--evaluations is")
    one_line(capsys, tui_main(["--resume", str(session), "--agent", "offline"]), "give a higher --evaluations")
    assert state_of(session) == before


def test_cuco_tui_resume_with_too_few_generations_is_refused(tmp_path, capsys):
    session = session_with(tmp_path / "s", generations=2, done=2)
    before = state_of(session)
    one_line(capsys, tui_main(["--resume", str(session), "--generations", "2", "--agent", "offline"]),
             "more than 2")
    assert state_of(session) == before


def test_the_apps_search_refused_at_start_leaves_no_session(tmp_path):
    w = load_workload("gemm_allgather")
    launch = SearchLaunch(w, SearchConfig(workload="gemm_allgather", world=3), session=tmp_path / "s", agent="offline")
    with LiveSearch(launch) as search, pytest.raises(WorkloadError, match="not 3"):
        search.start()
    assert not (tmp_path / "s").exists()


# ---------------------------------------------------------------------------- the workload, from anywhere


def test_a_workload_given_by_a_relative_path_is_recorded_whole(tmp_path, monkeypatch):
    assert main(["workload", "new", "my_layer", "--dir", str(tmp_path / "work")]) == 0
    monkeypatch.chdir(tmp_path)
    w = load_workload("work/my_layer")  # as `--workload work/my_layer` reads it
    with create_session(w, SearchConfig(workload="work/my_layer"), tmp_path / "s") as repo:
        recorded = repo.session_info()["workload"]
    assert recorded == str((tmp_path / "work" / "my_layer").resolve())
    monkeypatch.chdir("/")
    repo, found, config = open_session(tmp_path / "s")
    repo.close()
    assert found.root.resolve() == (tmp_path / "work" / "my_layer").resolve() and config.workload == recorded


def test_a_shipped_workload_is_recorded_by_name(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    w = load_workload("workloads/gemm_allgather")
    with create_session(w, SearchConfig(workload="workloads/gemm_allgather"), tmp_path / "s") as repo:
        assert repo.session_info()["workload"] == "gemm_allgather"


def test_an_old_session_with_a_relative_workload_resumes_where_it_can_and_says_what_it_lacks(tmp_path, monkeypatch,
                                                                                              capsys):
    # made before paths were recorded whole: relative to the clone, where the README's commands run
    with SessionRepo.create(tmp_path / "old", "workloads/gemm_allgather", {"generations": 2}):
        pass
    monkeypatch.chdir(tmp_path)
    repo, found, _ = open_session(tmp_path / "old")
    repo.close()
    assert found.name == "gemm_allgather"
    # relative to a folder that is not here any more
    with SessionRepo.create(tmp_path / "lost", "layers/my_layer", {"generations": 2}):
        pass
    one_line(capsys, main(["search", "--resume", str(tmp_path / "lost"), "--agent", "offline"]),
             "'layers/my_layer'", str(tmp_path / "layers" / "my_layer"), "folder the search was started in")


# ---------------------------------------------------------------------------- the user's sessions folder


def test_sessions_live_in_the_users_data_folder_unless_told(tmp_path):
    assert sessions_root({"CUCO_SESSIONS_DIR": str(tmp_path / "mine")}) == tmp_path / "mine"
    assert sessions_root({"XDG_DATA_HOME": str(tmp_path / "data")}) == tmp_path / "data" / "cuco" / "sessions"
    assert sessions_root({}) == Path.home() / ".local" / "share" / "cuco" / "sessions"
    assert REPO not in sessions_root({}).parents  # never inside the installed package or its clone
    # the tests' own (conftest): never the user's real folder
    assert Path(os.environ["CUCO_SESSIONS_DIR"]) == sessions_root() != sessions_root({})


def test_a_session_by_name_is_found_from_any_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CUCO_SESSIONS_DIR", str(tmp_path / "sessions"))
    session_with(tmp_path / "sessions" / "mine", generations=2, done=1)
    monkeypatch.chdir("/")
    assert main(["sessions"]) == 0
    out = capsys.readouterr().out
    assert f"sessions under {tmp_path / 'sessions'}" in out and "mine" in out
    assert main(["show", "mine"]) == 0 and "c0001" in capsys.readouterr().out
    assert main(["search", "--resume", "mine", "--world", "3"]) == 2  # found by name; refused for the world
    assert "not 3" in capsys.readouterr().err


def test_the_examples_of_the_clone_stay_reachable_from_the_browser(tmp_path, monkeypatch):
    monkeypatch.setenv("CUCO_SESSIONS_DIR", str(tmp_path / "empty"))
    shipped = sorted((REPO / "sessions" / "examples").glob("*.bundle"))
    assert shipped and example_bundles() == shipped
    assert example_bundles(tmp_path) == []  # a folder given by name: its own examples/ only


# ---------------------------------------------------------------------------- what the progress lines say


def test_a_resume_says_in_one_line_which_evaluations_a_kill_cut_short():
    from cuco_tui.cli.search import ProgressPrinter
    from cuco_tui.search import events as ev

    printer = ProgressPrinter(None)
    line = printer.line(ev.SessionRestored(records=(), best=None, lost=("c0004", "c0006"), next_id="c0007"))
    assert "\n" not in line and "c0004, c0006" in line and "scratch/" in line and "start at c0007" in line
    assert "lost" not in printer.line(ev.SessionRestored(records=(), best=None))


@pytest.mark.parametrize("reason, said", [("done", "ended: finished"), ("stopped", "ended: stopped"),
                                          ("budget", "ended: stopped (budget)"),
                                          ("agent exhausted", "ended: exhausted")])
def test_the_end_is_said_in_the_words_cuco_sessions_lists(reason, said):
    from cuco_tui.cli.search import ProgressPrinter
    from cuco_tui.search import events as ev
    from cuco_tui.search.summary import SearchSummary

    assert ProgressPrinter(None).line(ev.SearchFinished(summary=SearchSummary.of([]), reason=reason)) == said


def test_a_resume_refuses_another_workload_and_takes_its_own(tmp_path, capsys):
    session = session_with(tmp_path / "s", generations=2, done=1)
    before = state_of(session)
    one_line(capsys, main(["search", "--resume", str(session), "--workload", "kv_transfer"]),
             "searches gemm_allgather, not kv_transfer", "drop --workload")
    # its own workload, by name or folder, is no contradiction (refused here for the world only)
    for given in ("gemm_allgather", str(REPO / "workloads" / "gemm_allgather")):
        one_line(capsys, main(["search", "--resume", str(session), "--workload", given, "--world", "3"]), "not 3")
    assert state_of(session) == before
