"""benchmarks/cute_dsl_compile.py: its arguments. (The DSL itself is not installed in CI; the
figures it prints are in docs/fused_gemm.md with the command that made them.)"""

from __future__ import annotations

import subprocess
import sys

from repo_paths import REPO

SCRIPT = REPO / "benchmarks" / "cute_dsl_compile.py"


def run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=REPO, timeout=120)


def test_a_malformed_configuration_is_one_line_and_nothing_compiles(tmp_path):
    example = tmp_path / "example.py"
    example.write_text("")
    done = run("--dsl-python", sys.executable, "--example", str(example), "--configs", "128x256-2x1")
    assert done.returncode != 0 and done.stderr.strip().count("\n") == 0
    assert "'128x256-2x1' is not TILExTILE/CLUSTERxCLUSTER" in done.stderr and "| tile" not in done.stdout


def test_a_missing_example_or_interpreter_is_named(tmp_path):
    done = run("--dsl-python", sys.executable, "--example", str(tmp_path / "absent.py"))
    assert done.returncode == 2 and "no DSL example at" in done.stderr
    example = tmp_path / "example.py"
    example.write_text("")
    done = run("--dsl-python", str(tmp_path / "no-python"), "--example", str(example))
    assert done.returncode == 2 and "is not an executable interpreter" in done.stderr


def test_a_compile_that_fails_is_reported_not_counted(tmp_path):
    """A driver that cannot compile (here the interpreter lacks the DSL itself: its import fails
    before the example is read): the row says it failed, the exit is 1."""
    example = tmp_path / "example.py"
    example.write_text("raise SystemExit('no kernel here')\n")
    done = run("--dsl-python", sys.executable, "--example", str(example), "--configs", "128x256/2x1")
    assert done.returncode == 1
    [row] = [ln for ln in done.stdout.splitlines() if ln.startswith("| 128x256 / 2x1 |")]
    assert "failed:" in row
