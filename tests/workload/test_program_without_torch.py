"""torch is an optional extra: nothing of the tool imports it but the program import and the
references it writes, and where it is missing those say so in one line. A `torch` package that
fails to import, first on PYTHONPATH, stands in for a Python without torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from repo_paths import REPO

PROGRAMS = Path(__file__).parent / "programs"


def _without_torch(tmp_path: Path) -> dict[str, str]:
    shim = tmp_path / "no_torch"
    (shim / "torch").mkdir(parents=True)
    (shim / "torch" / "__init__.py").write_text("raise ImportError(\"No module named 'torch'\")\n")
    env = dict(os.environ, CUCO_NO_GPU="1")
    env["PYTHONPATH"] = os.pathsep.join([str(shim), str(REPO), env.get("PYTHONPATH", "")])
    return env


def test_the_tool_imports_no_torch():
    code = ("import sys\n"
            "import cuco_tui.cli.cuco, cuco_tui.cli.workload, cuco_tui.cli.workload_check, cuco_tui.cli.search\n"
            "import cuco_tui.agents.factory, cuco_tui.agents.offline.strategy, cuco_tui.evaluate.cascade\n"
            "import cuco_tui.workload.program.importer, cuco_tui.workload.program.adapter\n"
            "import cuco_tui.harness.worker, cuco_tui.app.app\n"
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300,
                         env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_import_without_torch_says_so_in_one_line(tmp_path):
    out = subprocess.run([sys.executable, "-m", "cuco_tui.cli", "workload", "import", str(PROGRAMS / "ag_linear.py"),
                          "--world", "2", "--dir", str(tmp_path / "w")], capture_output=True, text=True, cwd=REPO,
                         timeout=300, env=_without_torch(tmp_path))
    assert out.returncode == 2
    [line] = out.stderr.strip().splitlines()
    assert "needs torch" in line and "pip install -e '.[torch]'" in line
    assert not (tmp_path / "w").exists()


def test_an_imported_reference_without_torch_says_so_in_one_line(tmp_path):
    pytest.importorskip("torch")
    from cuco_tui.workload.program.importer import import_program

    root = import_program(PROGRAMS / "linear_ar.py", 2, parent=tmp_path / "w").root
    probe = subprocess.run([sys.executable, "-m", "cuco_tui.workload.probe", str(root)], capture_output=True,
                           text=True, cwd=REPO, timeout=300, env=_without_torch(tmp_path))
    problems = json.loads(probe.stdout.strip().splitlines()[-1])["problems"]
    assert len(problems) == 1 and "torch is not installed" in problems[0], problems
    assert "pip install -e '.[torch]'" in problems[0]
