"""What a new user's first pass over the command line ran into (items 1, 2, 4, 9-12, 14, 15): a file
given as --dir, options before a positional, a session's candidate against another workload or
read from a bundle, candidate ids spelled as the TUI takes them, an empty --shapes, time limits of 0,
below 0 or NaN, and refusals that named the wrong problem. Each is a sentence and exit 2 (argparse's
own error for a value its type refuses), or the command doing what was meant."""

from __future__ import annotations

import sys

import json
from pathlib import Path

import pytest

from cuco_tui.cli import main, tui_main
from cuco_tui.lineage import import_bundle
from cli_helpers import one_line_error
from repo_paths import REPO

SEED = REPO / "workloads" / "gemm_allgather" / "seed.cu"
KV = REPO / "sessions" / "examples" / "kv_transfer-offline-h200x2.bundle"


@pytest.fixture
def kv_session(tmp_path):
    """The kv_transfer example as a session folder (it searched kv_transfer)."""
    with import_bundle(KV, tmp_path / "kv") as repo:
        path = repo.path
    return path


@pytest.fixture
def nothing_built(tmp_path, monkeypatch):
    """A build cache of the test's own, asserted never made: the refusal came before L1."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("CUCO_CACHE_DIR", str(cache))
    yield
    assert not cache.exists()


def _argparse_error(capsys, argv: list[str], *words: str, entry=main) -> str:
    """argparse's refusal (exit 2) of a value its type rejects: the error line names `words`."""
    with pytest.raises(SystemExit) as out:
        entry(argv)
    err = capsys.readouterr().err
    assert out.value.code == 2, err
    line = err.strip().splitlines()[-1]
    assert "error:" in line and "Traceback" not in err, err
    for w in words:
        assert w in line, err
    return line


# ---------------------------------------------------------------------------- items 1, 2: --dir is a file


@pytest.mark.parametrize("command", [["workload", "new", "myw"],
                                     ["workload", "import", str(SEED), "--world", "2", "--name", "zz"]])
def test_a_dir_that_is_a_file_is_refused_naming_it(tmp_path, capsys, command):
    # (the import is refused before its program is read: SEED stands in for any file)
    afile = tmp_path / "f.cu"
    afile.write_text("// mine\n")
    one_line_error(capsys, main(command + ["--dir", str(afile)]), f"--dir {afile} is a file", "not a folder")
    one_line_error(capsys, main(command + ["--dir", str(afile / "sub")]), str(afile / "sub"),
                   f"lies under {afile}, which is a file")
    assert afile.read_text() == "// mine\n"


# ---------------------------------------------------------------------------- item 4: any order


@pytest.mark.parametrize("order", [
    ["{s}", "--json", "c0011"], ["--json", "{s}", "c0011"], ["{s}", "c0011", "--json"]])
def test_show_takes_its_options_and_positionals_in_any_order(capsys, order):
    assert main(["show"] + [a.format(s=KV) for a in order]) == 0
    assert json.loads(capsys.readouterr().out)["id"] == "c0011"


def test_export_takes_its_options_before_the_session(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["export", "--candidate", "c0000", "--out", str(out), str(KV)]) == 0
    assert (out / "result.json").is_file()


# ---------------------------------------------------------------------------- item 9: --workload vs --session


def test_eval_of_a_sessions_candidate_against_another_workload_is_refused(capsys, kv_session, nothing_built):
    one_line_error(capsys, main(["eval", "c0001", "--session", str(kv_session), "--workload", "gemm_allgather"]),
                   "session kv searches kv_transfer, not gemm_allgather", "drop --workload")


def test_eval_of_a_sessions_candidate_with_its_own_workload_named_is_taken(capsys, kv_session, monkeypatch):
    monkeypatch.setenv("CUCO_NO_GPU", "1")  # compiled only: L0 and L1
    assert main(["eval", "c0001", "--session", str(kv_session), "--workload",
                 str(REPO / "workloads" / "kv_transfer"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["workload"] == "kv_transfer"


# ---------------------------------------------------------------------------- item 10: eval from a bundle


def test_eval_reads_a_candidate_from_a_bundle(capsys, monkeypatch):
    monkeypatch.setenv("CUCO_NO_GPU", "1")
    rc = main(["eval", "c0005", "--session", str(KV), "--json"])
    result = json.loads(capsys.readouterr().out)
    assert (result["workload"], Path(result["candidate"]).name, result["status"]) == \
        ("kv_transfer", "c0005.cu", "no_gpu"), result["reason"]
    assert rc == 0


def test_eval_refuses_to_keep_a_profile_in_a_bundle(capsys, nothing_built):
    one_line_error(capsys, main(["eval", "c0005", "--session", str(KV), "--profile", "long-seq"]),
                   "is a bundle", f"git clone {KV}")


def test_eval_names_a_candidate_a_bundle_lacks(capsys, nothing_built):
    one_line_error(capsys, main(["eval", "c0999", "--session", str(KV)]), f"session {KV} has no candidate 'c0999'")


# ---------------------------------------------------------------------------- item 11: ids as the TUI takes them


@pytest.mark.parametrize("typed", ["11", "c11", "0011", "c0011"])
def test_show_takes_a_candidate_id_spelled_as_the_tui_takes_it(capsys, typed):
    assert main(["show", str(KV), typed, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["id"] == "c0011"


def test_export_and_eval_take_a_short_id(tmp_path, capsys, monkeypatch):
    assert main(["export", str(KV), "--candidate", "11", "--out", str(tmp_path / "out")]) == 0
    assert json.loads((tmp_path / "out" / "result.json").read_text())["candidate"] == "c0011"
    capsys.readouterr()
    monkeypatch.setenv("CUCO_NO_GPU", "1")
    main(["eval", "5", "--session", str(KV), "--json"])
    assert Path(json.loads(capsys.readouterr().out)["candidate"]).name == "c0005.cu"


def test_a_short_id_the_session_lacks_is_named_in_full(capsys):
    one_line_error(capsys, main(["show", str(KV), "99"]), "no candidate 'c0099'", str(KV))


# ---------------------------------------------------------------------------- item 12: an empty --shapes


@pytest.mark.parametrize("shapes", [",", "", " , ", "square-8k,,long-seq"])
def test_an_empty_shape_name_is_refused_not_taken_for_all(capsys, nothing_built, shapes):
    one_line_error(capsys, main(["eval", str(SEED), "--shapes", shapes]), "--shapes", "empty name", "square-8k",
                   "drop --shapes")


# ---------------------------------------------------------------------------- item 14: time limits


@pytest.mark.parametrize("value", ["-3", "0", "nan", "inf", "soon"])
def test_a_launch_timeout_that_is_no_positive_number_is_refused(capsys, value):
    _argparse_error(capsys, ["selftest", "--faults", "--launch-timeout", value], "--launch-timeout", repr(value))


@pytest.mark.parametrize("value", ["0", "-1", "nan"])
def test_an_import_timeout_that_is_no_positive_number_is_refused(capsys, value):
    _argparse_error(capsys, ["workload", "import", str(SEED), "--world", "2", "--timeout", value],
                    "argument --timeout", "seconds above 0")


@pytest.mark.parametrize("value", ["nan", "-1", "inf"])
def test_a_tui_budget_that_is_no_number_of_dollars_is_refused(capsys, monkeypatch, value):
    from cuco_tui.app.app import CucoApp

    def started(self, *args, **kwargs):  # a budget taken would open the app and wait on a terminal
        pytest.fail(f"the app started with --budget {value}")

    monkeypatch.setattr(CucoApp, "run", started)
    _argparse_error(capsys, ["--budget", value], "--budget", "dollars", entry=tui_main)


# ---------------------------------------------------------------------------- item 15: what the refusal names


def test_eval_of_a_folder_says_it_is_a_folder(capsys, nothing_built):
    err = one_line_error(capsys, main(["eval", str(SEED.parent)]), str(SEED.parent), "is a folder", "seed.cu")
    assert "no such" not in err


def test_importing_a_folder_says_it_is_a_folder(tmp_path, capsys):
    rc = main(["workload", "import", str(tmp_path), "--world", "2", "--dir", str(tmp_path / "out")])
    out = capsys.readouterr()
    assert out.out == ""  # no "importing ..." before a refusal that runs nothing
    print(out.err, file=sys.stderr)
    err = one_line_error(capsys, rc, str(tmp_path), "is a folder")
    assert "no such" not in err


def test_a_workload_folder_without_a_manifest_is_said_to_lack_one(tmp_path, capsys, monkeypatch, nothing_built):
    bad = tmp_path / "bad"
    bad.mkdir()
    err = one_line_error(capsys, main(["eval", str(SEED), "--workload", str(bad)]), str(bad),
                         "without a manifest.toml")
    assert "no workload '" not in err  # load_workload's words for a name it does not know
    one_line_error(capsys, main(["eval", str(SEED), "--workload", str(SEED)]), str(SEED), "is a file, not a workload")
    # a shipped workload's name still names it, whatever folder of that name the current one holds
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kv_transfer").mkdir()
    one_line_error(capsys, main(["eval", str(SEED), "--workload", "kv_transfer", "--shapes", "nope"]),
                   "kv_transfer has no bench shape 'nope'")


@pytest.mark.parametrize("entry, argv", [(tui_main, ["--gpus", "0,0"]), (main, ["baseline", "--gpus", "0,0"]),
                                         (main, ["search", "--gpus", "0,0"])])
def test_a_gpu_named_twice_points_where_share_gpu_is_when_the_command_lacks_it(capsys, entry, argv):
    err = one_line_error(capsys, entry(argv), "GPU 0 is named twice", "`cuco eval CANDIDATE --share-gpu`")
    assert "(--share-gpu puts" not in err


@pytest.mark.parametrize("argv", [["eval", str(SEED)], ["selftest", "--faults"]])
def test_a_gpu_named_twice_suggests_share_gpu_where_the_command_has_it(capsys, argv):
    one_line_error(capsys, main(argv + ["--gpus", "0,0"]), "GPU 0 is named twice", "(--share-gpu puts every rank")
