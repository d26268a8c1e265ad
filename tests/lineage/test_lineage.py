"""The session store: one commit per candidate, refs, the rebuildable index, bundles."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

import git
import pytest

from cuco_tui.lineage import (
    SessionError,
    SessionRepo,
    export_bundle,
    import_bundle,
    list_sessions,
    new_session_path,
)
from cuco_tui.lineage.index import INDEX_FILE, CandidateIndex
from cuco_tui.lineage.message import parse_trailers
from cuco_tui.core.records import CandidateRecord
from lineage_records import make

BASE_FILES = {"candidate.cu", "design.json", "result.json", "rationale.md", "record.json"}


def git_out(path: Path, *args: str, stdin: str | None = None) -> str:
    return subprocess.run(
        ["git", "-C", str(path), *args], input=stdin, capture_output=True, text=True, check=True
    ).stdout


@pytest.fixture
def session(tmp_path: Path):
    repo = SessionRepo.create(tmp_path / "s", "gemm_allgather", {"islands": 2, "budget": 3.5})
    yield repo
    repo.close()


def family(repo: SessionRepo) -> dict[str, CandidateRecord]:
    """A seed, two children, a grandchild, and a crossover of the grandchild and a child."""
    recs = [
        make("c0000", chunks=1, speedup=1.0),
        make("c0001", ("c0000",), island=0, generation=1, chunks=2, speedup=1.2),
        make("c0002", ("c0000",), island=1, generation=1, chunks=3, status="incorrect", speedup=None),
        make("c0003", ("c0001",), island=0, generation=2, chunks=4, speedup=1.4, logs={"rank0": "r0\n", "nvcc": "warn"}),
        make("c0004", ("c0003", "c0002"), island=1, generation=3, chunks=5, speedup=1.3),
    ]
    for r in recs:
        repo.commit_candidate(r)
    return {r.id: r for r in recs}


def without_source(r: CandidateRecord) -> CandidateRecord:
    return CandidateRecord.from_dict({**r.to_dict(), "source": ""})


# ---- create / open -----------------------------------------------------------------------


def test_create_and_open(tmp_path: Path):
    path = tmp_path / "s"
    with SessionRepo.create(path, "gemm_allgather", {"islands": 2}) as repo:
        info = repo.session_info()
        assert info["workload"] == "gemm_allgather" and info["config"] == {"islands": 2}
        assert info["format"] == 1 and info["created"] > 0
        assert len(repo) == 0 and repo.records() == []
    # Nothing in the session folder but the repository, and git sees it from the folder.
    assert sorted(os.listdir(path)) == [".git"]
    assert "session gemm_allgather" in git_out(path, "log", "--oneline", "main")
    with SessionRepo.open(path) as again:
        assert again.session_info() == info
    with pytest.raises(SessionError, match="already holds a session"):
        SessionRepo.create(path, "gemm_allgather", {})


def test_open_refuses_what_is_not_a_session(tmp_path: Path):
    with pytest.raises(SessionError, match="not a cuco session"):
        SessionRepo.open(tmp_path)
    plain = tmp_path / "plain"
    git.Repo.init(plain).close()
    with pytest.raises(SessionError, match="not a cuco session"):
        SessionRepo.open(plain)
    with pytest.raises(SessionError, match="not a cuco session"):
        SessionRepo.create(plain, "gemm_allgather", {})
    with pytest.raises(SessionError, match="not JSON"):
        SessionRepo.create(tmp_path / "bad", "w", {"f": object()})


# ---- commits -----------------------------------------------------------------------------


def test_commits_carry_the_lineage(session: SessionRepo):
    recs = family(session)
    g = session.git_repo
    commit = {cid: g.commit(session.commit_of(cid)) for cid in recs}
    root = g.commit("refs/tags/root")
    assert root.parents == ()
    assert [p.hexsha for p in commit["c0000"].parents] == [root.hexsha]
    assert [p.hexsha for p in commit["c0001"].parents] == [commit["c0000"].hexsha]
    assert [p.hexsha for p in commit["c0002"].parents] == [commit["c0000"].hexsha]
    assert [p.hexsha for p in commit["c0003"].parents] == [commit["c0001"].hexsha]
    # The crossover is a merge commit, parents in the record's order.
    assert [p.hexsha for p in commit["c0004"].parents] == [commit["c0003"].hexsha, commit["c0002"].hexsha]
    # main names the newest candidate.
    assert g.commit("refs/heads/main").hexsha == commit["c0004"].hexsha
    assert session.children("c0000") == ["c0001", "c0002"]
    assert session.children("c0002") == ["c0004"]
    assert session.children("c0004") == []
    # Nothing was checked out into the session folder.
    assert sorted(os.listdir(session.path)) == [".git"]
    assert git_out(session.path, "fsck", "--strict") == ""


def test_every_candidate_stays_reachable(session: SessionRepo):
    """main names only the newest candidate; leaves no one descends from keep their own tag."""
    session.commit_candidate(make("c0000"))
    session.commit_candidate(make("c0001", ("c0000",), chunks=2, status="compile_error", speedup=None))
    session.commit_candidate(make("c0002", ("c0000",), chunks=3))
    assert git_out(session.path, "rev-parse", "c0001") == session.commit_of("c0001") + "\n"
    assert "c0001" in git_out(session.path, "log", "--oneline", "--all")
    git_out(session.path, "gc", "--prune=now", "--quiet")
    assert git_out(session.path, "show", "c0001:candidate.cu") == make("c0001", chunks=2).source
    path = session.path
    session.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{index_file(path)}{suffix}").unlink(missing_ok=True)
    with SessionRepo.open(path) as repo:
        assert [r.id for r in repo.records()] == ["c0000", "c0001", "c0002"]


def test_trees_hold_exactly_the_candidate_files(session: SessionRepo):
    recs = family(session)
    for cid, rec in recs.items():
        files = set(git_out(session.path, "ls-tree", "-r", "--name-only", session.commit_of(cid)).split())
        expected = BASE_FILES | {f"logs/{n}.txt" for n in (rec.result or {}).get("logs", {})}
        assert files == expected, cid
    sha = session.commit_of("c0003")
    assert git_out(session.path, "show", f"{sha}:candidate.cu") == recs["c0003"].source
    assert git_out(session.path, "show", f"{sha}:logs/rank0.txt") == "r0\n"
    assert '"chunks": 4' in git_out(session.path, "show", f"{sha}:design.json")
    assert "source" not in git_out(session.path, "show", f"{sha}:record.json").split('"')


def test_pending_result_and_odd_log_names(session: SessionRepo):
    session.commit_candidate(make("c0000", result=False, status="rejected", speedup=None))
    sha = session.commit_of("c0000")
    assert git_out(session.path, "show", f"{sha}:result.json").strip() == '{\n  "status": "pending"\n}'
    session.commit_candidate(make("c0001", ("c0000",), logs={"rank 0/stderr": "a", "rank_0_stderr": "b", "": "c"}))
    files = git_out(session.path, "ls-tree", "-r", "--name-only", session.commit_of("c0001")).split()
    assert sorted(f for f in files if f.startswith("logs/")) == [
        "logs/log.txt",
        "logs/rank_0_stderr-2.txt",
        "logs/rank_0_stderr.txt",
    ]


def test_messages_tell_the_story(session: SessionRepo):
    family(session)
    message = session.git_repo.commit(session.commit_of("c0004")).message
    assert message.splitlines()[0] == "c0004 crossover measured 1.30x"
    assert "Use 5 chunks so the copy overlaps the GEMM.\nSecond line." in message
    assert "Details that stay out" not in message
    parsed = git_out(session.path, "interpret-trailers", "--parse", stdin=message)
    trailers = dict(line.split(": ", 1) for line in parsed.splitlines())
    assert trailers == {
        "Candidate-Id": "c0004",
        "Generation": "3",
        "Island": "1",
        "Kind": "crossover",
        "Status": "measured",
        "Speedup": "1.3000",
        "Latency-Ms": "0.2500",
        "Agent": "offline",
        "Cost-Usd": "0.0125",
        "Parents": "c0003, c0002",
    }
    assert parse_trailers(message) == trailers
    failed = session.git_repo.commit(session.commit_of("c0002")).message
    assert failed.splitlines()[0] == "c0002 diff incorrect"
    assert parse_trailers(failed)["Speedup"] == "-"
    graph = git_out(session.path, "log", "--graph", "--oneline", "--all")
    for cid in ("c0000", "c0001", "c0002", "c0003", "c0004", "session gemm_allgather"):
        assert cid in graph
    assert len(graph.splitlines()) >= 6


def test_a_dashed_rationale_line_does_not_hide_the_trailers(session: SessionRepo):
    rec = make("c0000")
    rec = CandidateRecord.from_dict({**rec.to_dict(), "rationale": "Plan:\n--- not a patch\nend"})
    session.commit_candidate(rec)
    message = session.git_repo.commit(session.commit_of("c0000")).message
    parsed = git_out(session.path, "interpret-trailers", "--parse", stdin=message)
    assert "Candidate-Id: c0000" in parsed


def test_commit_refuses_duplicates_and_unknown_parents(session: SessionRepo):
    session.commit_candidate(make("c0000"))
    with pytest.raises(SessionError, match="already in session"):
        session.commit_candidate(make("c0000"))
    with pytest.raises(SessionError, match="parent c0009"):
        session.commit_candidate(make("c0001", ("c0009",)))
    with pytest.raises(SessionError, match="no candidate"):
        session.commit_of("c0042")
    for bad in ("c 1", "best", "root", ".c1", "c1.lock"):
        with pytest.raises(SessionError, match="must be letters"):
            session.commit_candidate(make(bad))
    assert [r.id for r in session.records()] == ["c0000"]


# ---- refs --------------------------------------------------------------------------------


def test_island_refs_and_best_tag(session: SessionRepo):
    family(session)
    session.set_island_head(0, "c0003")
    session.set_island_head(1, "c0002")
    session.set_island_head(1, "c0004")  # moves
    session.set_best("c0001")
    session.set_best("c0003")  # moves, with force
    refs = dict(
        reversed(line.split(" ", 1))
        for line in git_out(session.path, "for-each-ref", "--format=%(objectname) %(refname)").splitlines()
    )
    assert refs["refs/heads/island-0"] == session.commit_of("c0003")
    assert refs["refs/heads/island-1"] == session.commit_of("c0004")
    assert refs["refs/tags/best"] == session.commit_of("c0003")
    assert git_out(session.path, "cat-file", "-t", "refs/tags/best").strip() == "commit"  # lightweight
    assert session.island_heads() == {0: "c0003", 1: "c0004"}
    assert session.best() == "c0003"
    assert session.best_measured() == ("c0003", 1.4)
    with pytest.raises(SessionError, match="no candidate"):
        session.set_best("c0099")
    # The moves are part of the index's fingerprint: reopening does not rebuild.
    path = session.path
    session.close()
    with SessionRepo.open(path) as again:
        assert again.island_heads() == {0: "c0003", 1: "c0004"}


# ---- reading -----------------------------------------------------------------------------


def test_records_round_trip(session: SessionRepo):
    recs = family(session)
    assert session.records() == [without_source(r) for r in recs.values()]
    assert session.records(with_source=True) == list(recs.values())
    assert session.record("c0004") == recs["c0004"]
    assert session.source_of("c0002") == recs["c0002"].source
    assert "c0003" in session and "c0099" not in session and len(session) == 5
    with pytest.raises(SessionError, match="no candidate"):
        session.record("c0099")


def test_diff_shows_the_changed_line(session: SessionRepo):
    family(session)
    diff = session.diff("c0001", "c0003")
    assert "--- c0001/candidate.cu" in diff and "+++ c0003/candidate.cu" in diff
    assert "-int chunks = 2;" in diff and "+int chunks = 4;" in diff
    assert " // EVOLVE-BLOCK-START" in diff
    assert session.diff("c0001", "c0001") == ""


# ---- the index ---------------------------------------------------------------------------


def index_file(repo_path: Path) -> Path:
    return repo_path / ".git" / INDEX_FILE


def test_index_is_rebuilt_when_deleted_or_unreadable(session: SessionRepo):
    family(session)
    session.set_island_head(0, "c0003")
    before = session.records()
    path = session.path
    session.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{index_file(path)}{suffix}").unlink(missing_ok=True)
    with SessionRepo.open(path) as repo:
        assert repo.records() == before
        assert repo.children("c0000") == ["c0001", "c0002"]
        assert repo.island_heads() == {0: "c0003"}
    for suffix in ("-wal", "-shm"):
        Path(f"{index_file(path)}{suffix}").unlink(missing_ok=True)
    index_file(path).write_bytes(b"this is not a database" * 100)
    with SessionRepo.open(path) as repo:
        assert repo.records() == before


def test_stale_index_is_rebuilt(session: SessionRepo):
    family(session)
    path = session.path
    before = session.records()
    session.close()
    # Rows lost behind the fingerprint's back would be invisible if only rows were checked;
    # the fingerprint is what tells: here, a ref moved by someone else.
    conn = sqlite3.connect(index_file(path))
    with conn:
        conn.execute("DELETE FROM candidates WHERE id = 'c0002'")
    conn.close()
    git_out(path, "branch", "somebody-else", "main")
    with SessionRepo.open(path) as repo:
        assert repo.records() == before


def test_crash_between_commit_and_index_loses_nothing(session: SessionRepo, monkeypatch):
    recs = family(session)
    path = session.path

    def boom(*args, **kwargs):
        raise RuntimeError("killed before the index write")

    monkeypatch.setattr(CandidateIndex, "add", boom)
    late = make("c0005", ("c0004",), generation=4, chunks=6, speedup=1.5)
    with pytest.raises(RuntimeError):
        session.commit_candidate(late)
    monkeypatch.undo()
    expected = [without_source(r) for r in recs.values()] + [without_source(late)]
    # Another process opening the session now sees a stale index and rebuilds it.
    with SessionRepo.open(path) as other:
        assert other.records() == expected
    # The writer itself rebuilds before its next use, and goes on committing.
    assert session.records() == expected
    session.commit_candidate(make("c0006", ("c0005",), generation=5, chunks=7))
    assert [r.id for r in session.records()] == [f"c000{i}" for i in range(7)]
    session.close()
    with SessionRepo.open(path) as again:
        assert len(again) == 7 and again.record("c0005") == late


KILL_SCRIPT = """
import os, sys
from cuco_tui.lineage import SessionRepo
from cuco_tui.lineage.index import CandidateIndex
sys.path.insert(0, sys.argv[2])
from lineage_records import make
CandidateIndex.add = lambda *a, **k: os._exit(9)  # the process dies between git and the index
repo = SessionRepo.open(sys.argv[1])
repo.commit_candidate(make("c0001", ("c0000",), chunks=2))
"""


def test_killed_process_loses_no_committed_candidate(session: SessionRepo):
    session.commit_candidate(make("c0000"))
    path = session.path
    session.close()
    done = subprocess.run(
        [sys.executable, "-c", KILL_SCRIPT, str(path), str(Path(__file__).parent)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 9, done.stderr
    with SessionRepo.open(path) as repo:
        assert [r.id for r in repo.records()] == ["c0000", "c0001"]
        assert repo.children("c0000") == ["c0001"]


def test_truncated_index_is_rebuilt(session: SessionRepo):
    family(session)
    before = session.records()
    path = session.path
    session.close()
    data = index_file(path).read_bytes()
    index_file(path).write_bytes(data[: len(data) // 2])
    with SessionRepo.open(path) as repo:
        assert repo.records() == before


def test_index_damaged_past_its_header_is_rebuilt(session: SessionRepo, monkeypatch):
    family(session)
    before = session.records()
    path = session.path
    session.close()
    real = CandidateIndex.fingerprint
    calls = []

    def malformed(self):
        calls.append(1)
        if len(calls) == 1:
            raise sqlite3.DatabaseError("database disk image is malformed")
        return real(self)

    monkeypatch.setattr(CandidateIndex, "fingerprint", malformed)
    with SessionRepo.open(path) as repo:
        assert repo.records() == before


def no_rebuild(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("the index was rebuilt")

    monkeypatch.setattr("cuco_tui.lineage.repo.rebuild_index", refuse)


def test_a_fresh_index_is_not_rebuilt(session: SessionRepo, monkeypatch):
    family(session)
    session.set_best("c0003")
    session.set_island_head(2, "c0004")
    path = session.path
    session.close()
    no_rebuild(monkeypatch)
    with SessionRepo.open(path) as repo:
        assert len(repo) == 5 and repo.best() == "c0003"


def test_two_writers_take_turns(session: SessionRepo, monkeypatch):
    """Two SessionRepo objects have their own connections, as two processes would."""
    other = SessionRepo.open(session.path)
    try:
        session.commit_candidate(make("c0000"))
        other.commit_candidate(make("c0001", ("c0000",), chunks=2))
        session.commit_candidate(make("c0002", ("c0001",), chunks=3))
        other.set_best("c0002")
        session.set_island_head(0, "c0001")
        assert [r.id for r in other.records()] == ["c0000", "c0001", "c0002"]
    finally:
        other.close()
    path = session.path
    session.close()
    no_rebuild(monkeypatch)
    with SessionRepo.open(path) as repo:
        assert [r.id for r in repo.records()] == ["c0000", "c0001", "c0002"]
        assert repo.best() == "c0002" and repo.island_heads() == {0: "c0001"}


def test_pack_keeps_everything(session: SessionRepo, monkeypatch):
    recs = family(session)
    session.set_best("c0003")
    session.pack()
    assert git_out(session.path, "count-objects", "-v").splitlines()[0] == "count: 0"
    assert session.records(with_source=True) == list(recs.values())
    path = session.path
    session.close()
    no_rebuild(monkeypatch)  # packed refs list the same refs: the fingerprint holds
    with SessionRepo.open(path) as repo:
        assert repo.records(with_source=True) == list(recs.values())
        assert repo.best() == "c0003"
        repo.commit_candidate(make("c0005", ("c0004",), chunks=9))
        assert repo.source_of("c0005").count("chunks = 9") == 1


def test_summaries(session: SessionRepo):
    recs = family(session)
    rows = session.summaries()
    assert [s.id for s in rows] == list(recs)
    s = rows[4]
    assert s.commit == session.commit_of("c0004") and s.parents == ("c0003", "c0002")
    assert (s.generation, s.island, s.kind, s.status, s.speedup) == (3, 1, "crossover", "measured", 1.3)
    assert s.design == {"backend": "cuda_ipc", "knobs": {"chunks": 5}} and s.agent == "offline"
    assert rows[2].speedup is None and rows[2].latency_ms is None


def test_threads_share_one_session(session: SessionRepo):
    session.commit_candidate(make("c0000"))
    errors: list[BaseException] = []

    def writer(island: int) -> None:
        try:
            first = 1 + 10 * island
            for i in range(first, first + 10):
                session.commit_candidate(make(f"c{i:04d}", ("c0000",), island=island, chunks=i))
                session.set_island_head(island, f"c{i:04d}")
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def reader() -> None:
        try:
            for _ in range(20):
                session.records()
                session.summaries()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    threads.append(threading.Thread(target=reader))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(session) == 41 and len(session.children("c0000")) == 40
    assert session.island_heads() == {0: "c0010", 1: "c0020", 2: "c0030", 3: "c0040"}


# ---- bundles -----------------------------------------------------------------------------


def test_bundle_round_trip(session: SessionRepo, tmp_path: Path):
    recs = family(session)
    session.set_island_head(0, "c0003")
    session.set_island_head(1, "c0004")
    session.set_best("c0003")
    bundle = export_bundle(session, tmp_path / "examples" / "family.bundle")
    assert bundle.is_file()
    with import_bundle(bundle, tmp_path / "imported") as copy:
        assert copy.records(with_source=True) == list(recs.values())
        assert copy.session_info() == session.session_info()
        assert copy.island_heads() == {0: "c0003", 1: "c0004"}
        assert copy.best() == "c0003"
        assert copy.commit_of("c0004") == session.commit_of("c0004")
        assert git_out(copy.path, "for-each-ref") == git_out(session.path, "for-each-ref")
        assert copy.git_repo.commit("HEAD").hexsha == session.commit_of("c0004")
    with pytest.raises(SessionError, match="not empty"):
        import_bundle(bundle, tmp_path / "imported")
    junk = tmp_path / "junk.bundle"
    junk.write_text("not a bundle")
    with pytest.raises(SessionError, match="not a readable git bundle"):
        import_bundle(junk, tmp_path / "never")
    assert not (tmp_path / "never").exists()


# ---- sessions folder ---------------------------------------------------------------------


def test_list_sessions(tmp_path: Path):
    root = tmp_path / "sessions"
    assert list_sessions(root) == []
    when = datetime(2026, 11, 23, 4, 27)
    first = new_session_path(root, "gemm_allgather", now=when)
    assert first == root / "gemm_allgather-20261123-0427"
    with SessionRepo.create(first, "gemm_allgather", {}) as a:
        family(a)
    second = new_session_path(root, "gemm_allgather", now=when)
    assert second == root / "gemm_allgather-20261123-0427-2"
    with SessionRepo.create(second, "gemm_allgather", {}) as b:
        b.commit_candidate(make("c0000", status="incorrect", speedup=None))
    assert new_session_path(root, "odd name/x", now=when).name == "odd-name-x-20261123-0427"
    (root / "examples").mkdir()
    (root / "examples" / "x.bundle").write_text("")
    git.Repo.init(root / "not-a-session").close()

    found = {s.name: s for s in list_sessions(root)}
    assert set(found) == {first.name, second.name}
    assert found[first.name].candidates == 5
    assert found[first.name].best_speedup == 1.4 and found[first.name].best_id == "c0003"
    assert found[first.name].workload == "gemm_allgather"
    assert found[second.name].candidates == 1 and found[second.name].best_speedup is None
    for s in found.values():
        assert s.created > 0 and s.modified >= int(s.created) - 1


def test_a_session_whose_search_ran_out_is_listed_so_until_it_runs_again(tmp_path: Path):
    root = tmp_path / "sessions"
    with SessionRepo.create(root / "s", "gemm_allgather", {"generations": 5}) as repo:
        family(repo)
        assert repo.ended() == ""
        repo.set_ended("agent exhausted")
    [s] = list_sessions(root)
    assert s.state == "exhausted" and s.ended == "agent exhausted"
    with SessionRepo.open(root / "s") as repo:
        assert len(repo) == 5  # a commit beside the candidates, not one of them
        with pytest.raises(SessionError, match="session's own tags"):
            repo.commit_candidate(make("ended", ("c0000",)))
    with SessionRepo.open(root / "s") as repo:
        repo.set_ended("")  # a search resumed it
    assert list_sessions(root)[0].state == "stopped"


# ---- speed -------------------------------------------------------------------------------


def test_commit_speed(session: SessionRepo):
    n = 300
    session.commit_candidate(make("c0000"))
    start = time.perf_counter()
    for i in range(1, n + 1):
        parents = (f"c{i - 1:04d}",) if i % 7 else (f"c{i - 1:04d}", f"c{i // 2:04d}")
        session.commit_candidate(
            make(f"c{i:04d}", parents, island=i % 4, generation=i, chunks=i, logs={"rank0": f"log {i}\n"})
        )
    mean_ms = (time.perf_counter() - start) / n * 1000
    print(f"\nlineage: {mean_ms:.2f} ms per candidate commit (mean of {n})")
    assert len(session) == n + 1
    assert mean_ms < 100


def test_the_end_is_recorded_after_a_ctrl_c_killed_gits_helper(session: SessionRepo):
    """Ctrl-C reaches the whole process group, GitPython's long-lived `git cat-file` among it: the
    search then recorded why it ended through a dead pipe ("[Errno 32] Broken pipe") and the session
    listed as whatever it said before. A helper that died is started again."""
    import signal

    session.set_ended("")
    assert session.ended() == ""  # the helper is running now
    helper = session._repo.git.cat_file_all.proc
    os.kill(helper.pid, signal.SIGINT)
    helper.wait()
    session.set_ended("stopped")
    assert session.ended() == "stopped"
