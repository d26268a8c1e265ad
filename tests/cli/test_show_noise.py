"""`cuco show` and `cuco eval` print every speedup with its spread, and `cuco show` names the best
as the search decides it (faster beyond noise) with the candidates within noise of it: on the
search recorded on 4 x H100 (docs/data) and a result it recorded (tests/data/noise)."""

from __future__ import annotations

from cuco_tui.cli import main
from cuco_tui.cli.common import render_result, stdout_console
from cuco_tui.core.result import CascadeResult
from recorded_noise import records
from repo_paths import REPO

H100X4 = REPO / "docs" / "data" / "2026-11-26-gemm_reducescatter-offline-h100x4.bundle"


def test_cuco_show_names_the_best_with_its_spread_and_the_ties(capsys):
    assert main(["show", str(H100X4)]) == 0
    out = capsys.readouterr().out
    # c0001 (1.245x) was first; nothing measured alone after it was faster beyond noise
    assert "best      c0001: 1.245x ±5% the reference (geometric mean)" in out
    assert "ties      within noise of it: c0017, c0006, c0012, c0007, c0018, c0013" in out
    table = {line.split()[0]: line for line in out.splitlines() if line[:1] == "c" and line[1:5].isdigit()}
    assert "1.338x ±5%" in table["c0017"] and "0.722x ±4%" in table["c0008"]


def test_cuco_eval_prints_the_speedup_and_each_shapes_with_its_spread():
    result = CascadeResult.from_dict(records()["c0017"].result)
    console = stdout_console()
    with console.capture() as captured:
        console.print(render_result(result))
    lines = captured.get().splitlines()
    speedup = next(line for line in lines if line.startswith("speedup"))
    assert speedup.split()[1:4] == ["1.34x", "±5%", "the"] and "30 repetitions" in speedup
    long_seq = next(line for line in lines if "long-seq" in line)
    assert long_seq.strip("│ ").endswith("1.60x ±1%")


def test_show_export_and_the_session_list_name_the_same_best(tmp_path, capsys):
    # The bundle's `best` tag says c0017 (the search that made it ranked by the raw figure); the
    # best as decided now is c0001, and every reader says so, not one of each.
    from cuco_tui.lineage import open_session_or_bundle
    from cuco_tui.lineage.listing import summarize

    assert main(["export", str(H100X4), "--out", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    assert [p.name for p in (tmp_path / "out").glob("*.cu")] == [f"{H100X4.stem}-c0001.cu"]
    with open_session_or_bundle(H100X4) as repo:
        listed = summarize(repo)
        assert (listed.best_id, round(listed.best_speedup, 3)) == ("c0001", 1.245)
        assert repo.best_measured()[0] == "c0001"
