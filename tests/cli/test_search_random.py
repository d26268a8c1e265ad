"""`cuco search --agent random` end to end on CPU: the real random-sampling agent, the real
lineage, the real cascade (static checks and nvcc; CUCO_NO_GPU=1 stops it at no_gpu), on a
workload of three points (the scaffold's seed, one knob of 1, 2 or 4 chunks), so the search
samples every point and ends because the agent has nothing left."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from build_cache import shared_build_cache
from repo_paths import REPO

from cuco_tui.lineage import SessionRepo
from cuco_tui.toolchain.toolchain import discover
from cuco_tui.workload.scaffold import new_workload

if not discover().can_compile:
    pytest.skip("no CUDA toolchain here (nvcc, NCCL and cuBLAS headers): the cascade cannot compile",
                allow_module_level=True)

MAIN = "import sys; from cuco_tui.cli import main; sys.exit(main())"
BACKSTOP_S = 1800  # a hang's backstop, not a budget: a busy 2-core machine is slow


def test_a_random_search_samples_every_point_then_ends_exhausted(tmp_path_factory, tmp_path):
    workload = new_workload("threepoints", tmp_path).root
    session = tmp_path / "session"
    env = {**os.environ, "CUCO_NO_GPU": "1", "CUCO_CACHE_DIR": str(shared_build_cache(tmp_path_factory))}
    env.pop("ANTHROPIC_API_KEY", None)
    proc = subprocess.run([sys.executable, "-c", MAIN, "search", "--workload", str(workload), "--agent", "random",
                           "--generations", "3", "--islands", "1", "--seed", "7", "--session", str(session),
                           "--json"], env=env, capture_output=True, text=True, timeout=BACKSTOP_S, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert summary["reason"] == "agent exhausted" and summary["agent"] == "random"
    assert "agent random" in proc.stderr
    with SessionRepo.open(Path(session)) as repo:
        records = sorted(repo.records(), key=lambda r: r.id)
        assert repo.ended() == "agent exhausted"
    seed, *sampled = records
    assert seed.kind == "seed"
    assert len(sampled) == 2  # the two points beside the seed's own, each once
    assert sorted(r.design["knobs"]["kChunks"] for r in sampled) == [2, 4]
    for r in sampled:
        assert r.agent == "random" and r.rationale.startswith("Random sample: seed, knobs kChunks=")
        assert "drawn uniformly at random" in r.rationale
        assert r.status == "no_gpu" and r.result["build_seconds"] > 0  # really compiled
