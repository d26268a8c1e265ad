"""A workload the engineer brings, from the command line: `cuco workload new` and `check`, a
search on a workload that ships only seed knobs (tp_attn_out), and the refusals that leave no
session behind (no knobs and no templates; the Claude agent without a key)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cuco_tui.lineage import SessionRepo
from cuco_tui.toolchain.toolchain import discover
from repo_paths import REPO

MAIN = "import sys; from cuco_tui.cli import main; sys.exit(main())"


def cuco(args: list[str], env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", MAIN, *args], env=env or dict(os.environ), capture_output=True,
                          text=True, timeout=timeout, cwd=REPO)


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ, CUCO_NO_GPU="1", **extra)
    env.pop("ANTHROPIC_API_KEY", None)
    return env


def test_new_then_check(tmp_path):
    made = cuco(["workload", "new", "my_allreduce", "--dir", str(tmp_path)])
    assert made.returncode == 0, made.stderr
    root = tmp_path / "my_allreduce"
    assert sorted(p.name for p in root.iterdir()) == ["design", "manifest.toml", "reference.py", "seed.cu", "task.md"]
    checked = cuco(["workload", "check", str(root), "--json"])
    assert checked.returncode == 0, checked.stdout + checked.stderr
    findings = json.loads(checked.stdout)
    assert {f["item"] for f in findings if f["level"] == "ok"} >= {"manifest", "reference", "seed L0", "seed knobs"}
    assert {f["item"] for f in findings if f["level"] == "warning"} == {"task", "notes"}  # the scaffold's words
    again = cuco(["workload", "new", "my_allreduce", "--dir", str(tmp_path)])
    assert again.returncode == 2 and "exists already" in again.stderr and len(again.stderr.splitlines()) == 1


def test_check_names_what_is_wrong_and_fails(tmp_path):
    cuco(["workload", "new", "broken", "--dir", str(tmp_path)])
    root = tmp_path / "broken"
    (root / "reference.py").write_text((root / "reference.py").read_text().replace("def expected(", "def expect("))
    seed = root / "seed.cu"
    seed.write_text(seed.read_text().replace("// EVOLVE-BLOCK-END\n", "", 1))
    out = cuco(["workload", "check", str(root), "--no-compile", "--json"])
    assert out.returncode == 1
    errors = {f["item"]: f["detail"] for f in json.loads(out.stdout) if f["level"] == "error"}
    assert "lacks expected" in errors["reference"]
    assert "EVOLVE-BLOCK-START" in errors["seed L0"]
    bad = cuco(["workload", "check", str(tmp_path)])
    assert bad.returncode == 2 and "holds no manifest.toml" in bad.stderr


def test_what_check_prints_keeps_its_brackets(tmp_path):
    """Findings quote TOML tables and C indexing (`[tolerance]`, `c[i]`): printed as they are, not
    taken for the terminal's style markup (where `[tolerance]` vanished, and `[/x]` would crash)."""
    cuco(["workload", "new", "typo", "--dir", str(tmp_path)])
    manifest = tmp_path / "typo" / "manifest.toml"
    manifest.write_text(manifest.read_text().replace("rtol = 0.02", "rtol = 0.02\natol = 0.001"))
    out = cuco(["workload", "check", str(tmp_path / "typo"), "--no-compile"])
    assert out.returncode == 1
    assert "unknown field `atol` in [tolerance]; did you mean `rtol`?" in out.stdout, out.stdout


def test_a_search_that_runs_out_of_knob_settings_is_listed_as_exhausted_not_resumable(tmp_path):
    """The scaffold's seed has one knob of three values: the offline search runs out after the
    seed's generation. `cuco sessions` says "exhausted" and offers no --resume for it."""
    cuco(["workload", "new", "small", "--dir", str(tmp_path)])
    root, env = tmp_path / "sessions", _env(tmp_path)
    out = cuco(["search", "--workload", str(tmp_path / "small"), "--agent", "offline", "--generations", "3",
                "--root", str(root)], env)
    assert out.returncode == 0, out.stderr
    assert "ended     exhausted" in out.stdout
    listed = cuco(["sessions", "--root", str(root), "--json"], env)
    [session] = json.loads(listed.stdout)
    assert session["state"] == "exhausted", session
    text = cuco(["sessions", "--root", str(root)], env)
    assert "exhausted" in text.stdout and "--resume" not in text.stdout


def _sessions(root: Path) -> list[Path]:
    return sorted(root.iterdir()) if root.exists() else []


def test_no_knobs_and_no_templates_is_refused_before_a_session_exists(tmp_path):
    cuco(["workload", "new", "bare", "--dir", str(tmp_path)])
    seed = tmp_path / "bare" / "seed.cu"
    seed.write_text(seed.read_text().replace("  // cuco-knob: 1 2 4", ""))
    root = tmp_path / "sessions"
    out = cuco(["search", "--workload", str(tmp_path / "bare"), "--agent", "offline", "--root", str(root)],
               _env(tmp_path))
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "declares no knobs" in out.stderr and "--agent claude" in out.stderr and "cuco-knob" in out.stderr
    assert _sessions(root) == []


def test_claude_without_a_key_is_refused_before_a_session_exists(tmp_path):
    root = tmp_path / "sessions"
    out = cuco(["search", "--workload", "tp_attn_out", "--agent", "claude", "--root", str(root)], _env(tmp_path))
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "ANTHROPIC_API_KEY" in out.stderr
    assert _sessions(root) == []
    tui = subprocess.run([sys.executable, "-c", "import sys; from cuco_tui.cli import tui_main; sys.exit(tui_main())",
                          "--workload", "tp_attn_out", "--agent", "claude"], env=_env(tmp_path), capture_output=True,
                         text=True, timeout=120, cwd=REPO)
    assert tui.returncode == 2 and "ANTHROPIC_API_KEY" in tui.stderr


@pytest.mark.skipif(not discover().can_compile, reason="no CUDA toolchain here: the cascade cannot compile")
def test_an_offline_search_of_seed_knobs_commits_knob_varied_candidates(tmp_path):
    session = tmp_path / "s"
    out = cuco(["search", "--workload", "tp_attn_out", "--agent", "offline", "--generations", "2", "--islands", "2",
                "--session", str(session), "--json"], _env(tmp_path), timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    repo = SessionRepo.open(session)
    try:
        records = repo.records(with_source=True)
    finally:
        repo.close()
    varied = [r for r in records if r.kind != "seed" and r.status == "no_gpu"]
    assert len(varied) >= 2, [(r.id, r.status) for r in records]
    settings = {json.dumps(r.design["knobs"], sort_keys=True) for r in varied}
    assert len(settings) == len(varied)  # every committed candidate is another knob setting
    assert all(r.design["knobs"]["strategy"] == "seed" for r in varied)
    seed = next(r for r in records if r.kind == "seed")
    assert all(r.source != seed.source for r in varied)
