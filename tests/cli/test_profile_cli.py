"""`cuco eval --profile SHAPE` and `--session` (cli/profile.py): every way a profile cannot be taken
is one sentence and exit 2 before anything is compiled; a session's candidate is evaluated by its
id with the session's workload; the profile is printed with where its trace is."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cuco_tui.cli import main
from cuco_tui.cli.profile import SessionCandidate, profile_lines
from cuco_tui.core.profile import KERNEL, MEMCPY, Activity, Profile, summarize
from cuco_tui.harness import gpus as gpus_module
from cuco_tui.harness.gpus import GpuInfo, GpuInventory
from cuco_tui.lineage import import_bundle
from cli_helpers import one_line_error
from repo_paths import REPO

SEED = REPO / "workloads" / "gemm_allgather" / "seed.cu"
EXAMPLE = REPO / "sessions" / "examples" / "kv_transfer-offline-h200x2.bundle"
TWO = GpuInventory((GpuInfo(0, "NVIDIA H100", 81559, 132), GpuInfo(1, "NVIDIA H100", 81559, 132)))


@pytest.fixture
def nothing_built():
    """The build cache (tests/conftest.py) holds the same files after the command as before."""
    cache = Path(os.environ["CUCO_CACHE_DIR"])
    before = sorted(cache.rglob("*")) if cache.exists() else []
    yield
    assert (sorted(cache.rglob("*")) if cache.exists() else []) == before


def test_a_shape_the_workload_lacks_is_refused_naming_its_bench_shapes(capsys, nothing_built):
    one_line_error(capsys, main(["eval", str(SEED), "--profile", "huge"]), "--profile", "no bench shape 'huge'",
                    "long-seq", "short-seq")


@pytest.mark.parametrize("flags, words", [
    (["--share-gpu"], ("--share-gpu", "take turns on one GPU")),
    (["--no-bench"], ("--no-bench times none",)),
    (["--sanitize", "memcheck"], ("--sanitize only verifies",)),
    (["--shapes", "square-8k"], ("--profile long-seq is not among --shapes square-8k",)),
])
def test_a_profile_with_a_flag_that_rules_it_out_is_refused_with_the_reason(capsys, monkeypatch, nothing_built,
                                                                            flags, words):
    monkeypatch.setattr(gpus_module, "inventory", lambda: TWO)
    one_line_error(capsys, main(["eval", str(SEED), "--profile", "long-seq", *flags]), *words)


def test_without_a_gpu_a_profile_is_refused_with_the_reason(capsys, monkeypatch, nothing_built):
    monkeypatch.setattr(gpus_module, "inventory", lambda: GpuInventory((), problem="no NVIDIA driver answered"))
    one_line_error(capsys, main(["eval", str(SEED), "--profile", "long-seq"]), "this machine has none",
                    "no NVIDIA driver answered")


@pytest.fixture
def session(tmp_path):
    with import_bundle(EXAMPLE, tmp_path / "kv") as repo:
        path = repo.path
    return path


def test_a_candidate_the_session_lacks_is_refused(capsys, session, nothing_built):
    one_line_error(capsys, main(["eval", "c0999", "--session", str(session)]), "has no candidate 'c0999'",
                    "with --session, FILE is a candidate id")
    one_line_error(capsys, main(["eval", "c0001", "--session", str(session.parent / "none")]), "no session")


def test_a_sessions_candidate_is_evaluated_by_its_id_with_the_sessions_workload(capsys, session, monkeypatch):
    monkeypatch.setenv("CUCO_NO_GPU", "1")  # compiled only: L0 and L1
    rc = main(["eval", "c0005", "--session", str(session), "--json"])
    result = json.loads(capsys.readouterr().out)
    assert result["workload"] == "kv_transfer"
    assert Path(result["candidate"]).name == "c0005.cu"
    assert result["status"] == "no_gpu", result["reason"]
    assert rc == 0


def _profile(trace: str = "/runs/x/profile.trace.json") -> Profile:
    acts = [Activity(KERNEL, "gemm", 0, 2_000_000, 0, 7), Activity(MEMCPY, "memcpy dtod", 1_000_000, 3_000_000, 0, 9,
                                                                   "dtod", 1 << 20)]
    return Profile("long-seq", 5, (summarize(acts, 0), summarize(acts, 1)), trace=trace)


def test_the_profile_is_printed_per_rank_with_where_its_trace_is():
    lines = profile_lines(_profile())
    assert lines[0] == "profile of 5 launches at long-seq:"
    assert lines[1].startswith("  rank 0: exposed communication 1.000 ms (33.3% of 3.000 ms)")
    assert "50% of it overlapped" in lines[1]
    assert lines[-1] == "trace: /runs/x/profile.trace.json (open it in https://ui.perfetto.dev)"
    kept = SessionCandidate(Path("/s/kv"), "c0005", "kv_transfer", Path("/tmp/c0005.cu"))
    assert profile_lines(_profile("profile.trace.json"), kept)[-1] == (
        "kept with c0005 in /s/kv: git -C /s/kv show refs/profiles/c0005:profile.trace.json > trace.json, then open "
        "it in https://ui.perfetto.dev")
    none = Profile("long-seq", 5, problem="rank 0: CUPTI's Python package is not installed on this host")
    assert profile_lines(none) == ["profile of 5 launches at long-seq: none taken: rank 0: CUPTI's Python package is "
                                   "not installed on this host"]
