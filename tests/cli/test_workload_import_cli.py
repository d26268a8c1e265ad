"""`cuco workload import FILE.py --world N` from the command line: what it prints, the folder that
`cuco workload check` then passes, a bad file at each stage of an import refused in one line with
nothing written (program_helpers.BAD_AT_THE_CLI; the rest of BAD in test_program_import), the
offline agent's one-line refusal of a program without a mapped pattern (naming what it saw), and an
offline search of an imported all-gather + linear program compiling fused candidates (slow)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from cuco_tui.toolchain.toolchain import discover
from repo_paths import REPO

pytest.importorskip("torch")

MAIN = "import sys; from cuco_tui.cli import main; sys.exit(main())"
from program_helpers import AG, BAD, BAD_AT_THE_CLI, PROGRAMS, program_variant  # noqa: E402


def cuco(args: list[str], env: dict[str, str] | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    env = dict(env or os.environ, CUCO_NO_GPU="1")
    env.pop("ANTHROPIC_API_KEY", None)
    return subprocess.run([sys.executable, "-c", MAIN, *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=REPO)


def test_import_says_what_it_found_and_check_passes(tmp_path):
    out = cuco(["workload", "import", str(AG), "--world", "2", "--name", "tp_linear", "--dir", str(tmp_path)])
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.split())  # the console wraps long lines
    assert "trace (verify, rank 0): collectives: all_gather x1; ops: addmm x1" in text
    assert "pattern: all-gather → linear + bias: mapped" in text and "given to candidates transposed" in text
    root = tmp_path / "tp_linear"
    assert sorted(p.name for p in root.iterdir()) == ["design", "manifest.toml", "program.json", "program.py",
                                                      "reference.py", "seed.cu", "task.md", "templates"]
    assert (root / "program.py").read_text() == AG.read_text()
    checked = cuco(["workload", "check", str(root), "--json"] + ([] if discover().can_compile else ["--no-compile"]))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    findings = {f["item"]: f for f in json.loads(checked.stdout)}
    assert all(f["level"] == "ok" for f in findings.values()), findings
    assert findings["templates"]["detail"].startswith("5 strategies render")
    if discover().can_compile:
        assert findings["seed L1"]["detail"].startswith("compiles for sm_90a")


@pytest.mark.parametrize("name", BAD_AT_THE_CLI)
def test_a_bad_file_is_refused_in_one_line_and_nothing_is_written(tmp_path, name):
    old, new, said = BAD[name]
    path = program_variant(tmp_path, name, old, new)
    parent = tmp_path / "workloads"
    out = cuco(["workload", "import", str(path), "--world", "2", "--dir", str(parent)])
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], out.stderr
    assert "Traceback" not in out.stderr
    assert not parent.exists()


def test_shapes_that_do_not_divide_by_the_world_size_are_refused(tmp_path):
    parent = tmp_path / "workloads"
    out = cuco(["workload", "import", str(AG), "--world", "3", "--dir", str(parent)])
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "cuco: ag_linear.py: shape verify: M=512 does not divide by the world size 3 (the program splits M across "
        "ranks: input 0 axis 0 is M // world)"]
    assert not parent.exists()


def test_an_existing_folder_and_a_missing_file_are_refused(tmp_path):
    (tmp_path / "ag_linear").mkdir()
    out = cuco(["workload", "import", str(AG), "--world", "2", "--dir", str(tmp_path)])
    assert out.returncode == 2 and "exists already" in out.stderr and len(out.stderr.strip().splitlines()) == 1
    assert list((tmp_path / "ag_linear").iterdir()) == []
    missing = cuco(["workload", "import", str(tmp_path / "nope.py"), "--world", "2", "--dir", str(tmp_path)])
    assert missing.returncode == 2 and "no such file" in missing.stderr


def test_the_offline_agent_refuses_a_program_without_a_mapped_pattern_naming_what_it_saw(tmp_path):
    made = cuco(["workload", "import", str(PROGRAMS / "gelu_mlp.py"), "--world", "2", "--dir", str(tmp_path)])
    assert made.returncode == 0, made.stderr
    sessions = tmp_path / "sessions"
    out = cuco(["search", "--workload", str(tmp_path / "gelu_mlp"), "--agent", "offline", "--root", str(sessions)])
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "collectives: all_gather x1, broadcast x1; ops: gelu x1, mul x1" in out.stderr
    assert "--agent claude" in out.stderr
    assert not sessions.exists() or not list(sessions.iterdir())


@pytest.mark.slow
@pytest.mark.skipif(not discover().can_compile, reason="no CUDA toolchain here: the cascade cannot compile")
def test_an_offline_search_of_an_imported_allgather_program_compiles_fused_candidates(tmp_path):
    """Two generations of the offline agent on the imported program: gemm_allgather's templates,
    rendered into its seed's first block (the bias kernel kept in the second), compile (L1; no GPU
    here), the fused CUTLASS one among them."""
    from cuco_tui.lineage import SessionRepo

    made = cuco(["workload", "import", str(AG), "--world", "2", "--dir", str(tmp_path)])
    assert made.returncode == 0, made.stderr
    session = tmp_path / "s"
    env = dict(os.environ)  # the run's shared build cache: the fused GEMM libraries are built once a run
    out = cuco(["search", "--workload", str(tmp_path / "ag_linear"), "--agent", "offline", "--generations", "2",
                "--seed", "0", "--session", str(session), "--json"], env, timeout=3600)
    assert out.returncode == 0, out.stderr[-3000:]
    repo = SessionRepo.open(session)
    try:
        records = repo.records(with_source=True)
    finally:
        repo.close()
    compiled = [r for r in records if r.status == "no_gpu"]
    strategies = {r.design.get("knobs", {}).get("strategy") for r in compiled}
    assert "fused_tile" in strategies, [(r.id, r.status, r.design.get("knobs")) for r in records]
    fused = next(r for r in compiled if r.design.get("knobs", {}).get("strategy") == "fused_tile")
    assert "cuco_tile_gemm.cuh" in fused.source and "program_epilogue" in fused.source
