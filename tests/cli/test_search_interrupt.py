"""Ctrl-C on a headless `cuco search` (a subprocess) while a compile runs: the first stops the
search once the evaluation in flight is committed, the second leaves at once, killing the
compile; either way what was committed stays, and the exit status is 130 (128 + SIGINT).

The compile is made slow on purpose: `CUCO_NVCC` names a stand-in that answers `--version` as
the real nvcc does and, for a compile, writes its pid into a file and waits (for ever, or until
the test lets it run the real nvcc). The tests wait on that file and on cuco's own lines, never
on the clock; a search that does not leave at once would wait for ever and fail the timeout."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from build_cache import shared_build_cache
from repo_paths import REPO

from cuco_tui.lineage import SessionRepo, list_sessions
from cuco_tui.toolchain.toolchain import discover

TOOLS = discover()
if not TOOLS.can_compile:
    pytest.skip("no CUDA toolchain here (nvcc, NCCL and cuBLAS headers): the search cannot compile",
                allow_module_level=True)

MAIN = "import sys; from cuco_tui.cli import main; sys.exit(main())"
PATIENCE = 300  # a bound on waiting for something that should come: only a broken search reaches it

STANDIN = """#!/bin/bash
if [ "$1" = "--version" ]; then exec {real} "$@"; fi
echo $$ >> {dir}/started
while [ ! -e {dir}/release ]; do sleep 0.05; done
exec {real} "$@"
"""


def env_with(standin: Path | None, cache: Path) -> dict[str, str]:
    env = dict(os.environ, CUCO_NO_GPU="1", CUCO_CACHE_DIR=str(cache))
    env.pop("ANTHROPIC_API_KEY", None)
    if standin is not None:
        env["CUCO_NVCC"] = str(standin)
    return env


@pytest.fixture(scope="module")
def searched(tmp_path_factory) -> Path:
    """A session of one finished generation, made with the real nvcc (the tests' shared cache). Of
    kv_transfer: what Ctrl-C does is the same for every workload, and the resumed search compiles in
    an empty cache, where a gemm_allgather proposal may need a CUTLASS library built first (a
    minute of nvcc on 2 cores, where kv_transfer's compile takes seconds)."""
    session = tmp_path_factory.mktemp("interrupt") / "s"
    cache = shared_build_cache(tmp_path_factory)
    done = subprocess.run([sys.executable, "-c", MAIN, "search", "--workload", "kv_transfer", "--agent", "offline",
                           "--generations", "1", "--islands", "1", "--session", str(session)],
                          env=env_with(None, cache), capture_output=True, text=True, cwd=REPO, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    return session


def resume_with_a_slow_compile(searched: Path, tmp_path: Path) -> tuple[subprocess.Popen, Path, dict]:
    """The session copied, resumed for two more generations with the stand-in nvcc and an empty
    build cache (every compile reaches it); returns once a compile waits in it."""
    session = tmp_path / "s"
    shutil.copytree(searched, session, symlinks=True)
    with SessionRepo.open(session) as repo:
        before = {r.id: r for r in repo.records()}
    standin = tmp_path / "nvcc"
    standin.write_text(STANDIN.format(real=TOOLS.nvcc, dir=tmp_path))
    standin.chmod(0o755)
    proc = subprocess.Popen([sys.executable, "-c", MAIN, "search", "--resume", str(session), "--generations", "3"],
                            env=env_with(standin, tmp_path / "cache"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO, start_new_session=True)
    started = tmp_path / "started"
    deadline = time.monotonic() + PATIENCE
    while not started.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)  # polling for the file the stand-in writes: the event, not a duration
    assert started.exists(), f"no compile started: {proc.poll()}"
    return proc, session, before


def read_until(proc: subprocess.Popen, words: str, seen: list[str]) -> None:
    for line in proc.stderr:
        seen.append(line)
        if words in line:
            return
    raise AssertionError("".join(seen)[-3000:])


def clean_up(proc: subprocess.Popen, tmp_path: Path) -> None:
    """After a failed test: nothing of it runs on (the search, and stand-ins it left waiting)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    started = tmp_path / "started"
    for pid in (int(p) for p in (started.read_text().split() if started.exists() else [])):
        if not gone(pid):
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass


def gone(pid: int) -> bool:
    """Killed: no such process, or a zombie its new parent has not reaped yet."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def test_a_second_ctrl_c_leaves_at_once_killing_the_compile(searched, tmp_path):
    proc, session, before = resume_with_a_slow_compile(searched, tmp_path)
    seen: list[str] = []
    try:
        proc.send_signal(signal.SIGINT)
        read_until(proc, "Ctrl-C again to leave at once", seen)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=PATIENCE)  # the stand-in never returns by itself
    finally:
        clean_up(proc, tmp_path)
    err = "".join(seen) + err
    assert proc.returncode == 130, err[-3000:]
    assert f"--resume {session}" in err and "Traceback" not in err
    compiles = [int(p) for p in (tmp_path / "started").read_text().split()]
    assert compiles and all(gone(pid) for pid in compiles)  # nvcc killed, not left to run on
    with SessionRepo.open(session) as repo:
        after = {r.id: r for r in repo.records()}
    assert after == before  # what was committed is kept; the evaluation cut short is not committed
    assert not list((tmp_path / "cache").glob("*.json"))  # and no verdict on it was cached


def test_one_ctrl_c_commits_what_runs_then_exits_130(searched, tmp_path):
    proc, session, before = resume_with_a_slow_compile(searched, tmp_path)
    seen: list[str] = []
    try:
        proc.send_signal(signal.SIGINT)
        read_until(proc, "stopping after the evaluations in flight", seen)
        (tmp_path / "release").touch()  # the compile goes on: the real nvcc
        out, err = proc.communicate(timeout=PATIENCE * 2)
    finally:
        clean_up(proc, tmp_path)
    err = "".join(seen) + err
    assert proc.returncode == 130, err[-3000:]
    assert "ended: stopped" in err and "continue with `cuco search --resume" in out
    with SessionRepo.open(session) as repo:
        after = {r.id: r for r in repo.records()}
    assert {cid: after[cid] for cid in before} == before
    new = [r for cid, r in after.items() if cid not in before]
    # The evaluation in flight, compiled and committed; with the look-ahead, also the next
    # generation's first proposal when it was launched before the signal.
    assert 1 <= len(new) <= 2 and all(r.status == "no_gpu" for r in new), [(r.id, r.status) for r in new]
    assert list_sessions(session.parent)[0].state == "stopped"


WATCHED = """
import os, signal, sys, time
import cuco_tui.cli.search as search
search.LEAVE_S, search.LEAVE_MARGIN_S = 0.2, 0.2
said = []
interrupts = search.Interrupts(lambda: said.append("stop"), sys.stderr, jobs=False,
                               leaving="cuco: interrupted: continue with `cuco search --resume S`\\n")
signal.signal(signal.SIGINT, interrupts)
os.kill(os.getpid(), signal.SIGINT)
try:
    os.kill(os.getpid(), signal.SIGINT)
except KeyboardInterrupt:
    pass  # lost, as seen
while True:  # a main thread whose KeyboardInterrupt is lost, as seen once in 10-20 loaded runs
    try:
        time.sleep(0.05)
    except KeyboardInterrupt:
        pass
"""


def test_a_second_ctrl_c_whose_interrupt_is_lost_still_leaves_with_130_and_the_resume_line():
    done = subprocess.run([sys.executable, "-c", WATCHED], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode == 130, done.stderr
    assert done.stderr.count("continue with `cuco search --resume S`") == 1, done.stderr
    assert "Ctrl-C again to leave at once" in done.stderr
