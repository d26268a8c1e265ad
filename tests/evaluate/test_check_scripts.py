"""benchmarks/shared_gpu_check.py's choice of GPUs: every rank on one GPU, or (`--real`) a GPU
per rank, which a machine without GPUs refuses in one line before anything is built."""

from __future__ import annotations

import subprocess
import sys

import pytest

from repo_paths import REPO

from cuco_tui.harness.gpus import inventory

sys.path.insert(0, str(REPO / "benchmarks"))
from shared_gpu_check import real_gpus  # noqa: E402


def test_gpus_are_named_as_ranges_or_lists():
    assert real_gpus("0-3") == [0, 1, 2, 3]
    assert real_gpus("0,1,4-5") == [0, 1, 4, 5]
    for bad, words in (("0", "names 1"), ("x-1", "is not a GPU list")):
        with pytest.raises(SystemExit, match=words):
            real_gpus(bad)


@pytest.mark.skipif(inventory().count >= 2, reason="this machine has GPUs for --real")
def test_real_without_gpus_is_one_line_and_builds_nothing(tmp_path):
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "shared_gpu_check.py"), "--real", "--out",
                           str(tmp_path / "out"), "gemm_allgather"], capture_output=True, text=True, cwd=REPO,
                          timeout=120)
    assert done.returncode != 0 and done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert "--real needs a GPU per rank" in done.stderr and not (tmp_path / "out" / "rendered").exists()
