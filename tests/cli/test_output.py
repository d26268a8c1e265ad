"""What the command line prints where programs read it (a pipe, a file): no trailing spaces, and
the width COLUMNS asks for."""

from __future__ import annotations

import pytest

from cuco_tui.cli import main
from repo_paths import REPO

EXAMPLE = REPO / "sessions" / "examples" / "gemm_allgather-failures-shared-gpu.bundle"
SEED = REPO / "workloads" / "gemm_allgather" / "seed.cu"


def _rich_part(out: str) -> list[str]:
    """The lines rich laid out (a `cuco show` diff that follows is printed raw, as it is)."""
    return out.split("\ndiff against", 1)[0].splitlines()


@pytest.mark.parametrize("columns", [None, "60"])
def test_piped_output_has_no_trailing_spaces_and_takes_columns(capsys, monkeypatch, tmp_path, columns):
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    width = int(columns or 200)
    broken = tmp_path / "frozen.cu"  # L0 rejects it at once: a result with a diagnostics panel
    broken.write_text(SEED.read_text().replace("#include", "#include  ", 1))
    assert main(["doctor"]) == 0
    assert main(["eval", str(broken)]) == 1
    assert main(["show", str(EXAMPLE), "c0003"]) == 0  # last: its diff is printed raw
    lines = _rich_part(capsys.readouterr().out)
    assert any(line.startswith("status") and "rejected" in line for line in lines)
    assert any("nvcc" in line for line in lines)
    padded = [line for line in lines if line != line.rstrip()]
    assert padded == [], padded[:3]
    assert max(len(line) for line in lines) <= width
    if columns:  # the doctor's table folds into 60 columns instead of running to 200
        assert max(len(line) for line in lines) > 40

