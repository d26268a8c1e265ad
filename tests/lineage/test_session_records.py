"""What a session records beside its candidates: the machine it was created on (GPUs, driver,
CUDA, NCCL) and the bounds the search measured; both travel in a bundle. And an unreviewed
proposal reads as such in `git log`."""

from __future__ import annotations

from pathlib import Path

from cuco_tui.core.bounds import Bounds, ShapeBound, Work
from cuco_tui.core.machine import MachineInfo
from cuco_tui.core.records import CandidateRecord
from cuco_tui.evaluate.machine import nvcc_release, probe_machine
from cuco_tui.lineage import SessionRepo, export_bundle, import_bundle
from cuco_tui.search import outcomes
from cuco_tui.search.config import SearchConfig
from cuco_tui.search.sessions import create_session
from cuco_tui.workload.manifest import load_workload

H200 = MachineInfo(gpus=("NVIDIA H200", "NVIDIA H200"), driver="570.86.15", cuda_driver="12.8",
                   cuda_toolkit="13.0.48", nccl="2.28.9")


def seed(cid: str = "c0000", **kw) -> CandidateRecord:
    fields = dict(id=cid, generation=0, island=0, kind="seed", parents=(), source="// seed\n",
                  design={"backend": "nccl_host"}, rationale="the seed", agent="workload", status="measured")
    return CandidateRecord(**{**fields, **kw})


def test_machine_describes_itself_and_round_trips():
    assert H200.describe() == "2 x NVIDIA H200 · driver 570.86.15 · CUDA 13.0.48 · NCCL 2.28.9"
    assert MachineInfo.from_dict(H200.to_dict()) == H200
    assert MachineInfo().describe() == "no GPU"
    mixed = MachineInfo(gpus=("A", "B"), cuda_driver="12.8")
    assert mixed.describe() == "A, B · CUDA 12.8"
    newer = MachineInfo.from_dict({**H200.to_dict(), "cpu": "Grace"})
    assert newer.extra == {"cpu": "Grace"} and newer.gpus == H200.gpus


def test_nvcc_release():
    text = "Cuda compilation tools, release 13.0, V13.0.48 Build cuda_13.0.r13.0/compiler.36260728_0"
    assert nvcc_release(text) == "13.0.48"
    assert nvcc_release("Cuda compilation tools, release 12.4") == "12.4"
    assert nvcc_release("") == ""


def test_this_machine_without_a_gpu(monkeypatch):
    monkeypatch.setenv("CUCO_NO_GPU", "1")
    m = probe_machine()
    assert m.gpus == () and "CUCO_NO_GPU" in m.problem and m.driver == "" and m.cuda_driver == ""
    assert m.describe().startswith("no GPU")


def test_a_new_session_records_its_machine(tmp_path, monkeypatch):
    monkeypatch.setenv("CUCO_NO_GPU", "1")
    w = load_workload("gemm_allgather")
    with create_session(w, SearchConfig(), tmp_path / "probed") as repo:
        assert repo.machine() == probe_machine()
    with create_session(w, SearchConfig(), tmp_path / "given", machine=H200) as repo:
        assert repo.machine() == H200
        assert repo.session_info()["machine"]["gpus"] == ["NVIDIA H200", "NVIDIA H200"]


def bounds() -> Bounds:
    return Bounds("gemm_allgather", 2, (0, 1), (ShapeBound("square-8k", 2.0, 1.0, 0.9, 1.1, 150.0, Work(5, 7)),),
                  H200, 1700000000.0)


def test_bounds_are_stored_beside_the_candidates_and_travel_in_a_bundle(tmp_path):
    with SessionRepo.create(tmp_path / "s", "gemm_allgather", {}) as repo:  # made before machines were recorded
        assert repo.bounds() is None and repo.machine() is None
        repo.commit_candidate(seed())
        repo.set_bounds(bounds())
        assert repo.bounds() == bounds()
        assert repo.machine() == H200  # from the bounds, when session.json has none
        assert [r.id for r in repo.records()] == ["c0000"] and len(repo) == 1
        repo.commit_candidate(seed("c0001", parents=("c0000",), kind="diff"))
        assert repo.rebuild_index() == 2  # the bounds commit is no candidate
        bundle = export_bundle(repo, tmp_path / "s.bundle")
    with SessionRepo.open(tmp_path / "s") as again:  # another process's view
        assert again.bounds() == bounds() and len(again) == 2
    with import_bundle(bundle, tmp_path / "copy") as copy:
        assert copy.bounds() == bounds() and copy.machine() == H200
        assert [r.id for r in copy.records()] == ["c0000", "c0001"]


def test_an_unreviewed_proposal_says_so_in_git_log(tmp_path):
    with SessionRepo.create(tmp_path / "s", "gemm_allgather", {}) as repo:
        repo.commit_candidate(seed())
        held = seed("c0001", parents=("c0000",), kind="diff", status="pending", rationale="overlap the copy")
        repo.commit_candidate(outcomes.unreviewed(held, "review mode: every proposal waits for the engineer"))
        record = repo.record("c0001")
        assert record.status == "unreviewed" and record.review == "unreviewed"
        assert record.result["status"] == "unreviewed" and "resuming the session" in record.result["reason"]
        log = repo.git_repo.git.log("--format=%s", "c0001", "-1")
        assert log == "c0001 diff unreviewed"
        assert "Status: unreviewed" in repo.git_repo.git.log("--format=%B", "c0001", "-1")
    assert Path(tmp_path / "s" / ".git").is_dir()


def test_records_of_an_older_version_read_as_what_they_are(tmp_path):
    """Recorded before "verified" existed, a candidate verified with nothing timed says "measured":
    it reads back as verified (a timed one stays measured); an exhausted agent's placeholder,
    recorded as rejected, reads as exhausted. An index built by the older version is rebuilt."""
    import sqlite3

    from cuco_tui.core.records import RecordStatus
    from cuco_tui.lineage.index import INDEX_FILE

    untimed = {"candidate": "c0000.cu", "workload": "gemm_allgather", "status": "measured", "level": 2,
               "reason": "verified (every rank on one GPU: nothing timed)", "timings": [], "speedup": None}
    empty = "no candidate: the offline agent has proposed every valid combination of its strategy templates"
    with SessionRepo.create(tmp_path / "s", "gemm_allgather", {}) as repo:  # as the older engine wrote them
        repo.commit_candidate(seed(result=untimed))
        repo.commit_candidate(seed("c0001", parents=("c0000",), kind="diff", speedup=1.2,
                                   result={**untimed, "level": 3, "timings": ["(timed)"], "speedup": 1.2}))
        repo.commit_candidate(seed("c0002", parents=("c0000",), kind="full", status="rejected", source="", design={},
                                   result={"status": "rejected", "level": 0, "reason": empty},
                                   extra={"rejected_by": "agent"}))
    with sqlite3.connect(tmp_path / "s" / ".git" / INDEX_FILE) as db:  # the older version's index
        db.execute("UPDATE meta SET value = '1' WHERE key = 'schema'")
        db.execute("UPDATE candidates SET status = 'measured' WHERE id = 'c0000'")
        db.execute("UPDATE candidates SET status = 'rejected' WHERE id = 'c0002'")
    with SessionRepo.open(tmp_path / "s") as again:
        assert [(r.id, r.status) for r in again.records()] == [
            ("c0000", "verified"), ("c0001", "measured"), ("c0002", RecordStatus.EXHAUSTED)]
        assert again.record("c0000").result["status"] == "verified" and again.record("c0002").placeholder
        assert [(s.id, s.status) for s in again.summaries()] == [
            ("c0000", "verified"), ("c0001", "measured"), ("c0002", RecordStatus.EXHAUSTED)]
        assert again.best_measured() == ("c0001", 1.2)
