"""A candidate's profile kept in its session (lineage/profiles.py): the summary and the trace in a
commit of their own beside the candidate's, read back whole, replaced by a newer profile with the
older kept in the history, carried by a bundle, and never taken for a candidate by the index."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from cuco_tui.core.profile import KERNEL, MEMCPY, Activity, Profile, summarize
from cuco_tui.core.profile_trace import MAX_TRACE_BYTES, chrome_trace
from cuco_tui.lineage import SessionError, SessionRepo, export_bundle, import_bundle
from cuco_tui.lineage.profiles import TRACE, keep_profile, stored_profile
from lineage_records import make


def _profile(tmp_path: Path, shape: str = "long-seq") -> Profile:
    acts = [Activity(KERNEL, "gemm", 0, 100, 0, 7), Activity(MEMCPY, "memcpy dtod", 80, 160, 0, 9, "dtod", 4096)]
    trace = tmp_path / f"{shape}.trace.json"
    trace.write_text(chrome_trace({0: acts}).text)
    return Profile(shape, 5, (summarize(acts, 0),), trace=str(trace))


def _git(path: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(path), *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture
def session(tmp_path: Path):
    repo = SessionRepo.create(tmp_path / "s", "gemm_allgather", {})
    repo.commit_candidate(make("c0000", speedup=1.0))
    repo.commit_candidate(make("c0001", ("c0000",), chunks=2, speedup=1.2))
    yield repo
    repo.close()


def test_a_profile_is_kept_with_its_candidate_and_read_back(session: SessionRepo, tmp_path: Path, monkeypatch):
    assert stored_profile(session, "c0001") is None
    profile = _profile(tmp_path)
    kept = keep_profile(session, "c0001", profile)
    assert kept.trace == TRACE and kept.ranks == profile.ranks
    assert stored_profile(session, "c0001") == kept
    assert stored_profile(session, "c0000") is None
    # git alone answers: the trace to open in ui.perfetto.dev, the profile a child of the candidate.
    trace = _git(session.path, "show", f"refs/profiles/c0001:{TRACE}")
    assert trace == Path(profile.trace).read_text()
    parents = _git(session.path, "log", "-1", "--format=%P", "refs/profiles/c0001").split()
    assert parents == [session.commit_of("c0001")]
    # The index lists the same candidates, and a reopened session does not rebuild it.
    assert [r.id for r in session.records()] == ["c0000", "c0001"]
    path = session.path
    session.close()

    def refuse(*args, **kwargs):
        raise AssertionError("the index was rebuilt")

    monkeypatch.setattr("cuco_tui.lineage.repo.rebuild_index", refuse)
    with SessionRepo.open(path) as again:
        assert stored_profile(again, "c0001") == kept and len(again) == 2


def test_a_newer_profile_replaces_the_older_which_stays_in_the_history(session: SessionRepo, tmp_path: Path):
    keep_profile(session, "c0001", _profile(tmp_path, "long-seq"))
    first = _git(session.path, "rev-parse", "refs/profiles/c0001").strip()
    keep_profile(session, "c0001", _profile(tmp_path, "square-8k"))
    assert stored_profile(session, "c0001").shape == "square-8k"
    assert _git(session.path, "log", "-1", "--format=%P", "refs/profiles/c0001").split()[1] == first


def test_a_profile_without_a_trace_keeps_its_sentence(session: SessionRepo):
    missing = Profile("long-seq", 5, problem="rank 0: CUPTI's Python package is not installed on this host")
    assert keep_profile(session, "c0000", missing) == missing
    assert stored_profile(session, "c0000").problem == missing.problem


def test_an_unknown_candidate_or_an_oversized_trace_is_refused(session: SessionRepo, tmp_path: Path):
    with pytest.raises(SessionError, match="no candidate 'c0042'"):
        keep_profile(session, "c0042", _profile(tmp_path))
    big = tmp_path / "big.json"
    big.write_text(json.dumps({"traceEvents": ["x" * (MAX_TRACE_BYTES + 1)]}))
    with pytest.raises(SessionError, match="over the 5000000 a session keeps"):
        keep_profile(session, "c0001", Profile("long-seq", 5, trace=str(big)))
    assert stored_profile(session, "c0001") is None


def test_a_bundle_carries_the_profile(session: SessionRepo, tmp_path: Path):
    kept = keep_profile(session, "c0001", _profile(tmp_path))
    bundle = export_bundle(session, tmp_path / "s.bundle")
    with import_bundle(bundle, tmp_path / "copy") as copy:
        assert stored_profile(copy, "c0001") == kept
