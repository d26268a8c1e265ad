"""What `cuco show`, `cuco sessions` and `cuco eval` say of the recorded example sessions
(issue 36): a candidate verified with its ranks sharing one GPU is `verified`, not `measured`
(the failures bundle, recorded before the status existed), and an exhausted agent's placeholders
in the kv example are named as such, not listed as rejected candidates."""

from __future__ import annotations

from cuco_tui.cli import main
from cuco_tui.cli.common import render_result, stdout_console
from cuco_tui.core.result import CascadeResult, Level, Status
from cuco_tui.lineage import import_bundle, list_sessions
from repo_paths import REPO

EXAMPLES = REPO / "sessions" / "examples"
FAILURES = EXAMPLES / "gemm_allgather-failures-shared-gpu.bundle"
KV = EXAMPLES / "kv_transfer-offline-h200x2.bundle"
PLACEHOLDERS = ("c0027", "c0028", "c0029", "c0030")


def rows(out: str) -> dict[str, list[str]]:
    """The candidate table's rows by id."""
    return {line.split()[0]: line.split() for line in out.splitlines() if line[:1] == "c" and line[1:5].isdigit()}


def test_a_candidate_verified_on_a_shared_gpu_shows_as_verified(capsys):
    assert main(["show", str(FAILURES)]) == 0
    out = capsys.readouterr().out
    assert "statuses  verified 5, incorrect 3, deadlock 3, runtime_error 1, compile_error 1\n" in out
    assert "best      none measured yet (the verified ones were not timed)" in out
    c0000 = rows(out)["c0000"]
    assert c0000[5:7] == ["verified", "-"] and "nothing timed" in " ".join(c0000)
    assert main(["show", str(FAILURES), "c0000"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.split() == ["status", "verified"] for line in lines)


def test_cuco_eval_renders_a_verified_result():
    result = CascadeResult("seed.cu", "gemm_allgather", Status.VERIFIED, Level.VERIFY,
                           "verified (every rank on one GPU: nothing timed)", world=2, gpus=[0, 0])
    console = stdout_console()
    with console.capture() as captured:
        console.print(render_result(result))
    assert "verified" in captured.get() and "nothing timed" in captured.get()


def test_an_exhausted_agents_placeholders_are_no_rejected_candidates(capsys):
    assert main(["show", str(KV)]) == 0
    out = capsys.readouterr().out
    assert "searched  27 candidates over 9 generations" in out
    assert "statuses  measured 25, rejected 2" in out  # two real duplicates turned away
    assert "agent     ran out of new proposals: 4 placeholder record(s)" in out
    assert not set(PLACEHOLDERS) & set(rows(out))
    assert "agent exhausted: c0027, c0028, c0029, c0030 are placeholders" in out
    assert main(["show", str(KV), "c0028"]) == 0
    assert "not a candidate: c0028 is a placeholder" in capsys.readouterr().out


def test_cuco_sessions_does_not_count_the_placeholders(tmp_path, capsys):
    import_bundle(KV, tmp_path / "kv").close()
    (listed,) = list_sessions(tmp_path)
    # c0005, as `cuco show` says: c0006's figure is higher but within noise of it
    assert listed.candidates == 27 and listed.best_id == "c0005"
    assert main(["sessions", "--root", str(tmp_path)]) == 0
    assert " 27 " in capsys.readouterr().out
