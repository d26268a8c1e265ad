"""`cuco workload import`: an empty SHAPES said to be empty, and a program that never returns stopped
at --timeout, the steps before it said as each starts so the user sees what is being waited on."""

from __future__ import annotations

import pytest

from cuco_tui.cli import main
from cli_helpers import one_line_error

pytest.importorskip("torch")

from program_helpers import program_variant  # noqa: E402

LIMIT = 5  # seconds: a step of ag_linear takes about 2 here; past the limit the step's line is the last one


def test_an_empty_shapes_is_said_to_be_empty(tmp_path, capsys):
    path = program_variant(tmp_path, "empty", "SHAPES = {", "SHAPES = {}\nUNUSED = {")
    err = one_line_error(capsys, main(["workload", "import", str(path), "--world", "2", "--dir",
                                       str(tmp_path / "out")]), "empty.py: SHAPES is empty", "verify")
    assert "not dict" not in err
    assert not (tmp_path / "out").exists()


def test_a_program_that_never_returns_is_stopped_at_the_timeout_naming_it(tmp_path, capsys):
    # It waits on an event nothing sets, on the CPU only: sized on the meta device, it hangs in
    # the float64 run. Loading it (torch's import in each rank) may take past LIMIT on a loaded
    # machine: then that step is stopped instead, and said the same way.
    path = program_variant(tmp_path, "hangs", "    dist.all_gather_into_tensor(full, x)\n",
                           "    if x.device.type == 'cpu':\n        import threading\n        threading.Event().wait()\n"
                           "    dist.all_gather_into_tensor(full, x)\n")
    rc = main(["workload", "import", str(path), "--world", "2", "--dir", str(tmp_path / "out"),
               "--timeout", str(LIMIT)])
    out = capsys.readouterr()
    assert rc == 2, out.err
    err = out.err.strip()
    assert len(err.splitlines()) == 1 and f"{LIMIT} s" in err and "--timeout SECONDS" in err, err
    said = out.out.strip().splitlines()
    assert f"each step at most {LIMIT} s (--timeout)" in said[0], said
    assert said[-1].endswith("...") and said[-1].split()[0] in ("loading", "running"), said
    if "did not finish" in err:  # stopped in the run: the line before it said that the run had started
        assert said[-1] == "running solution on 2 CPU processes in float64 under gloo at verify, verify-wide ...", said
    assert not (tmp_path / "out").exists()
