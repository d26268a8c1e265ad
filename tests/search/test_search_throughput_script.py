"""benchmarks/search_throughput.py: evaluations per minute of a search and where its seconds went,
read from a recorded session (a bundle of docs/data)."""

from __future__ import annotations

import json
import subprocess
import sys

from repo_paths import REPO

SCRIPT = REPO / "benchmarks" / "search_throughput.py"
BUNDLE = REPO / "docs" / "data" / "2026-11-26-gemm_reducescatter-offline-h100x2.bundle"


def test_a_recorded_search_reads_as_evaluations_per_minute_with_build_and_run_seconds(tmp_path):
    out = tmp_path / "t.json"
    run = subprocess.run([sys.executable, str(SCRIPT), f"rs=210={BUNDLE}", "--json", str(out)],
                         capture_output=True, text=True, cwd=REPO, timeout=300)
    assert run.returncode == 0, run.stderr
    [row] = [line for line in run.stdout.splitlines() if line.startswith("| rs |")]
    assert "| 210 | 15 (15 measured) | 4.29 |" in row
    [data] = json.loads(out.read_text())
    assert data["evaluations"] == 15 and data["statuses"] == {"measured": 15}
    assert data["build_s_sum"] > 0 and data["run_s_sum"] > 0


def test_a_bad_argument_is_one_line_and_exit_2(tmp_path):
    for spec in ("no-equals-sign", f"x=1={tmp_path}"):
        run = subprocess.run([sys.executable, str(SCRIPT), spec], capture_output=True, text=True, cwd=REPO, timeout=120)
        assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1, run.stderr
