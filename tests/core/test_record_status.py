"""A candidate record's status is typed (core/records.py RecordStatus) and the fields the engine
steers by are fields, not `extra` keys; sessions on disk, older ones included, read and rank as
they did."""

from __future__ import annotations

import json

import pytest

from cuco_tui.core.ranking import best_measured
from cuco_tui.core.records import CandidateRecord, RecordStatus
from cuco_tui.core.result import Status
from cuco_tui.lineage import SessionError, SessionRepo, import_bundle
from cuco_tui.lineage.files import record_from_json, record_json
from cuco_tui.search.scheduling import ranking_view
from repo_paths import REPO

H100X4 = REPO / "docs" / "data" / "2026-11-26-gemm_reducescatter-offline-h100x4.bundle"


def record(status: object, **fields) -> CandidateRecord:
    return CandidateRecord("c0003", 1, 0, "diff", ("c0000",), "", {}, "", "offline", status, **fields)  # type: ignore[arg-type]


def test_a_record_status_is_every_cascade_status_and_the_records_own_three():
    assert {s.value for s in RecordStatus} == {s.value for s in Status} | {"pending", "unreviewed", "exhausted"}


@pytest.mark.parametrize("value", [s.value for s in RecordStatus])
def test_a_status_reads_typed_and_is_stored_as_its_value(value):
    for given in (value, RecordStatus(value)) + ((Status(value),) if value in {s.value for s in Status} else ()):
        r = record(given)
        assert r.status is RecordStatus(value)
        # equal and hashed as the string: stored sessions, dict lookups and counts keep working
        assert r.status == value and {value: 1}[r.status] == 1 and {r.status: 1}[value] == 1
        text = record_json(r)
        assert f'"status": "{value}"' in text
        assert json.loads(text)["status"] == value and type(r.to_dict()["status"]) is str
        assert record_from_json(text).status is RecordStatus(value)


def test_an_unknown_status_names_the_record_and_what_is_known():
    with pytest.raises(ValueError, match=r"candidate c0003 has the status 'finished'.*measured.*pending"):
        record("finished")
    text = record_json(record("measured")).replace('"measured"', '"finished"')
    with pytest.raises(ValueError, match="candidate c0003"):
        record_from_json(text)


def test_a_session_holding_a_record_with_an_unknown_status_says_which_commit_and_candidate(tmp_path):
    with SessionRepo.create(tmp_path / "s", "gemm_allgather", {}) as repo:
        repo.commit_candidate(CandidateRecord("c0000", 0, 0, "seed", (), "", {}, "", "workload", "measured", speedup=1.0))
        repo.commit_candidate(record("measured", speedup=1.1))
        sha = repo.commit_of("c0003")
    git = repo.git_repo.git
    # a record.json this version cannot read, as a newer or hand-edited session could hold
    blob = git.show(f"{sha}:record.json").replace('"measured"', '"finished"')
    (tmp_path / "record.json").write_text(blob)
    git.read_tree(sha)
    git.update_index("--add", "--cacheinfo", f"100644,{git.hash_object('-w', str(tmp_path / 'record.json'))},record.json")
    tree = git.write_tree()
    edited = git.commit_tree(tree, "-p", sha, "-m", "c0003 edited")
    git.update_ref("refs/heads/edited", edited)
    with pytest.raises(SessionError, match=r"record\.json this cuco-tui cannot read: candidate c0003 has the status 'finished'"):
        SessionRepo.open(tmp_path / "s").close()


def test_an_older_record_reads_its_control_fields_out_of_extra():
    """Recorded before they were fields, finalist, concurrent, concurrent_with, confirm_of,
    review_of, held_because, rejected_by, hints and meta_cost_usd sat in `extra`: they read into
    the fields, and the rest of `extra` (the Slurm job among it) stays."""
    job = {"id": "123", "state": "finished"}
    old = record("measured", speedup=1.3).to_dict()
    for key in ("finalist", "concurrent", "concurrent_with", "confirm_of", "review_of", "held_because",
                "rejected_by", "hints", "meta_cost_usd"):
        del old[key]
    old["extra"] = {"finalist": True, "concurrent": 1, "concurrent_with": ["c0004"], "confirm_of": "c0001",
                    "review_of": "c0002", "held_because": "risky: raw atomics", "phase": "explore", "job": job,
                    "rejected_by": "review", "hints": ["try copy engines"], "meta_cost_usd": 0.0125}
    r = CandidateRecord.from_dict(old)
    assert (r.finalist, r.concurrent, r.concurrent_with, r.confirm_of, r.review_of, r.held_because) == (
        True, 1, ("c0004",), "c0001", "c0002", "risky: raw atomics")
    assert (r.rejected_by, r.hints, r.meta_cost_usd) == ("review", ("try copy engines",), 0.0125)
    assert r.extra == {"phase": "explore", "job": job}
    # written back as fields, and read back the same
    d = json.loads(record_json(r))
    assert d["finalist"] is True and d["concurrent_with"] == ["c0004"] and "finalist" not in d["extra"]
    assert record_from_json(record_json(r)) == r
    # a finalist ranks without its figure, as it did when the key was in extra
    assert best_measured([r]) is None and ranking_view(r).speedup is None


def test_a_recorded_session_with_finalists_in_extra_reads_and_ranks_as_before(tmp_path):
    """docs/data's 4 x H100 search, recorded with finalist, concurrent and confirm_of in extra:
    c0004, c0005, c0010 and c0015 were timed beside another evaluation and re-measured alone
    (c0006, c0007, c0012, c0017); the best is c0001, measured alone."""
    with import_bundle(H100X4, tmp_path / "s") as repo:
        records = {r.id: r for r in repo.records()}
    finalists = sorted(r.id for r in records.values() if r.finalist)
    assert finalists == ["c0004", "c0005", "c0010", "c0015"]
    confirms = {r.confirm_of: r.id for r in records.values() if r.kind == "confirm"}
    assert confirms == {"c0004": "c0006", "c0005": "c0007", "c0010": "c0012", "c0015": "c0017"}
    assert records["c0004"].concurrent == 1 and records["c0004"].concurrent_with == ("c0005",)
    assert not any(k in r.extra for r in records.values() for k in ("finalist", "concurrent", "confirm_of"))
    assert best_measured(records.values()).id == "c0001"
