"""Flags and paths the command line used to accept in silence or answer with a traceback (issue 36,
items 2-6): each is now one sentence on stderr and a non-zero exit, before anything is compiled,
written or listed."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from cuco_tui.cli import main, tui_main
from cli_helpers import one_line_error
from repo_paths import REPO

EXAMPLE = REPO / "sessions" / "examples" / "kv_transfer-offline-h200x2.bundle"
SEED = REPO / "workloads" / "gemm_allgather" / "seed.cu"


# ---------------------------------------------------------------------------- item 2: export --out


def test_export_into_an_existing_file_is_refused_and_the_file_kept(tmp_path, capsys):
    target = tmp_path / "notes.txt"
    target.write_text("my notes\n")
    one_line_error(capsys, main(["export", str(EXAMPLE), "--out", str(target)]), str(target), "not a folder")
    assert target.read_text() == "my notes\n"


def test_export_where_no_folder_can_be_made_is_one_line(capsys):
    one_line_error(capsys, main(["export", str(EXAMPLE), "--out", "/proc/cuco-export-test"]),
                    "/proc/cuco-export-test")


def test_export_does_not_overwrite_a_readme_of_yours(tmp_path, capsys):
    (tmp_path / "README.md").write_text("# my project\n")
    one_line_error(capsys, main(["export", str(EXAMPLE), "--out", str(tmp_path)]), "README.md")
    assert (tmp_path / "README.md").read_text() == "# my project\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["README.md"]


# ---------------------------------------------------------------------------- item 3: --world, --shapes


@pytest.mark.parametrize("flags, words", [
    (["--world", "0"], ["--world 0", "2, 4, 8"]),
    (["--world", "3"], ["--world 3", "2, 4, 8"]),
    (["--shapes", "nope"], ["'nope'", "mlp-up-70b", "long-seq"]),
    (["--shapes", "square-8k,nope"], ["'nope'", "square-8k"]),
    (["--shapes", "square-8k", "--no-bench"], ["--no-bench"]),
    (["--gpus", "0,1,2"], ["3 GPUs", "2, 4, 8"]),
    (["--align", "host", "--no-bench"], ["--align", "--no-bench times nothing"]),
    (["--align", "device", "--share-gpu", "--gpus", "0"], ["--align", "--share-gpu times nothing"]),
    (["--align", "host", "--sanitize", "memcheck"], ["--align", "--sanitize times nothing"]),
])
def test_eval_refuses_a_world_or_shape_the_workload_lacks_before_compiling(capsys, monkeypatch, tmp_path, flags,
                                                                           words):
    from cuco_tui.harness import gpus as gpus_module
    from cuco_tui.harness.gpus import GpuInventory

    monkeypatch.setattr(gpus_module, "inventory", lambda: GpuInventory((), problem="no NVIDIA driver answered"))
    monkeypatch.setenv("CUCO_CACHE_DIR", str(tmp_path / "cache"))
    rc = main(["eval", str(SEED), "--workload", "gemm_allgather", *flags])
    one_line_error(capsys, rc, *words)
    assert not (tmp_path / "cache").exists()  # nothing was compiled


@pytest.mark.parametrize("command", [["baseline"], ["selftest", "--faults"]])
@pytest.mark.parametrize("flags", [["--world", "3"], ["--world", "0"]])
def test_baseline_and_selftest_refuse_a_world_the_workload_lacks(capsys, command, flags):
    one_line_error(capsys, main(command + ["--workload", "gemm_allgather"] + flags), f"--world {flags[1]}", "2, 4, 8")


def test_selftest_refuses_a_fault_the_workload_lacks(capsys):
    one_line_error(capsys, main(["selftest", "--faults", "--only", "hang,nope"]), "'nope'", "missing_signal")


def test_selftest_of_a_workload_without_faults_is_one_line(capsys):
    one_line_error(capsys, main(["selftest", "--faults", "--workload", "kv_transfer"]), "kv_transfer",
                    "faults/expected.toml")


# ---------------------------------------------------------------------------- item 4: sessions --root


@pytest.mark.parametrize("kind", ["missing", "file"])
def test_sessions_under_a_root_that_is_no_folder_is_refused(tmp_path, capsys, kind):
    root = tmp_path / "nowhere"
    if kind == "file":
        root.write_text("")
    one_line_error(capsys, main(["sessions", "--root", str(root)]), str(root))
    one_line_error(capsys, main(["sessions", "--root", str(root), "--json"]), str(root))


def test_the_resume_command_sessions_suggests_works_from_another_root(tmp_path, capsys):
    from cuco_tui.lineage import import_bundle
    from cuco_tui.search.sessions import resolve_session

    root = tmp_path / "my sessions"
    import_bundle(EXAMPLE, root / "kv one").close()  # a bundle's session records no end: it lists as stopped
    assert main(["sessions", "--root", str(root)]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if "--resume" in x)
    command = shlex.split(line[line.index("`") + 1:line.rindex("`")])
    assert command[:2] == ["cuco", "search"], line
    args = dict(zip(command[2::2], command[3::2]))
    assert args == {"--resume": "kv one", "--root": str(root)}, line
    assert resolve_session(args["--resume"], Path(args["--root"])) == root / "kv one"


# ---------------------------------------------------------------------------- item 5: the size of a candidate


def test_eval_of_a_file_in_a_workload_folder_takes_that_workload(capsys, monkeypatch, tmp_path):
    # `cuco eval workloads/moe_dispatch_combine/seed.cu` evaluated it as gemm_allgather's and
    # rejected its first line as a frozen region changed; the folder says which workload it is.
    monkeypatch.setenv("CUCO_CACHE_DIR", str(tmp_path / "cache"))
    moe = REPO / "workloads" / "moe_dispatch_combine" / "seed.cu"
    rc = main(["eval", str(moe), "--shapes", "nope"])
    err = capsys.readouterr().err
    assert rc == 2 and "moe_dispatch_combine" in err and "prefill-4k" in err, err
    assert not (tmp_path / "cache").exists()
    outside = tmp_path / "c.cu"  # a file in no workload's folder: the default workload, said in the refusal
    outside.write_text(SEED.read_text())
    assert main(["eval", str(outside), "--shapes", "nope"]) == 2
    assert "mlp-up-70b" in capsys.readouterr().err


def test_eval_refuses_a_candidate_past_the_size_limit_before_reading_it(tmp_path, capsys, monkeypatch):
    from cuco_tui.evaluate.static_checks import MAX_SOURCE_BYTES

    monkeypatch.setenv("CUCO_CACHE_DIR", str(tmp_path / "cache"))
    just_over = tmp_path / "big.cu"
    text = SEED.read_text()
    just_over.write_text(text + "//" + "x" * (MAX_SOURCE_BYTES - len(text.encode())) + "\n")
    one_line_error(capsys, main(["eval", str(just_over)]), str(just_over), "1 MiB")
    huge = tmp_path / "huge.cu"  # sparse: 4 GiB that take no disk; read whole, they would take the memory
    with huge.open("wb") as f:
        f.truncate(4 << 30)
    one_line_error(capsys, main(["eval", str(huge)]), str(huge), "4096.0 MiB", "1 MiB")
    assert not (tmp_path / "cache").exists()


# ---------------------------------------------------------------------------- item 6: cuco-tui open FILE


def test_opening_a_regular_file_says_it_is_a_file(tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("hello\n")
    err = one_line_error(capsys, tui_main(["open", str(notes)]), str(notes), "is a file")
    assert "is a folder" not in err, err
