"""The command line with the inputs a new user gets wrong, and its output where it is read by
programs (pipes, patches, logs): each bad input is one sentence on stderr and a non-zero exit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cuco_tui.cli import main, tui_main
from cuco_tui.cli.search import ProgressPrinter, shorten
from cuco_tui.core.records import CandidateRecord
from cuco_tui.harness import gpus as gpus_module
from cuco_tui.harness.gpus import GpuInfo, GpuInventory
from cuco_tui.search import events as ev
from cuco_tui.toolchain.toolchain import discover
from cli_helpers import one_line_error
from repo_paths import REPO

EXAMPLE = REPO / "sessions" / "examples" / "kv_transfer-offline-h200x2.bundle"
SEED = REPO / "workloads" / "gemm_allgather" / "seed.cu"
TWO = GpuInventory((GpuInfo(0, "NVIDIA H200", 143771, 132), GpuInfo(1, "NVIDIA H200", 143771, 132)))
ONE = GpuInventory((GpuInfo(0, "NVIDIA H100", 81559, 132),))


@pytest.mark.parametrize("command", [["eval", str(SEED)], ["search", "--workload", "gemm_allgather"],
                                     ["baseline"]])
def test_a_gpu_named_twice_is_refused(capsys, command):
    one_line_error(capsys, main(command + ["--gpus", "0,0"]), "GPU 0 is named twice")


def test_a_gpu_named_twice_is_refused_by_the_tui(capsys):
    one_line_error(capsys, tui_main(["--gpus", "1,0-1"]), "GPU 1 is named twice")


@pytest.mark.parametrize("command", [["eval", str(SEED)], ["search", "--workload", "gemm_allgather"]])
def test_a_gpu_this_machine_lacks_is_refused(capsys, monkeypatch, command):
    monkeypatch.setattr(gpus_module, "inventory", lambda: TWO)
    one_line_error(capsys, main(command + ["--gpus", "0,9"]), "no GPU 9 on this machine", "GPUs 0-1")


def test_without_any_gpu_a_gpu_list_is_warned_about(capsys, monkeypatch):
    from cuco_tui.cli.common import gpu_list

    monkeypatch.setattr(gpus_module, "inventory", lambda: GpuInventory((), problem="no NVIDIA driver answered"))
    assert gpu_list("9") == [9]
    err = capsys.readouterr().err
    assert "warning" in err and "cannot be checked here" in err and "compiled, not run" in err


def test_a_bad_manifest_is_one_line_from_the_cli(capsys, tmp_path):
    root = tmp_path / "wl"
    assert main(["workload", "new", "wl", "--dir", str(tmp_path)]) == 0
    capsys.readouterr()
    manifest = root / "manifest.toml"
    manifest.write_text(manifest.read_text().replace("[timing]", "[timming]"))
    one_line_error(capsys, main(["eval", str(root / "seed.cu"), "--workload", str(root)]),
                    "unknown field `timming`", "did you mean `timing`")
    manifest.write_text(manifest.read_text().replace("[timming]", "[timing]").replace('dtype = "bf16"', 'dtype = "bf61"'))
    one_line_error(capsys, main(["eval", str(root / "seed.cu"), "--workload", str(root)]), "bf61")


@pytest.mark.parametrize("target", ["/", "no-such-session"])
def test_opening_what_is_not_a_session_is_refused(capsys, target):
    one_line_error(capsys, tui_main(["open", target]), "no session or bundle at")


def test_opening_a_file_that_is_not_a_bundle_is_refused(capsys, tmp_path):
    fake = tmp_path / "fake.bundle"
    fake.write_text("not a bundle")
    one_line_error(capsys, tui_main(["open", str(fake)]), "not a readable git bundle")


def test_version(capsys):
    with pytest.raises(SystemExit) as out:
        main(["--version"])
    assert out.value.code == 0 and capsys.readouterr().out.startswith("cuco 0.")


def _leftover_clones() -> set[str]:
    import tempfile

    return {p.name for p in Path(tempfile.gettempdir()).glob("cuco-lineage-*")}


def test_show_of_a_bundle_names_the_bundle_and_leaves_nothing_behind(capsys):
    before = _leftover_clones()
    assert main(["show", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert f"session   {EXAMPLE}" in out and "cuco-lineage-" not in out
    assert main(["show", str(EXAMPLE), "c0003"]) == 0
    out = capsys.readouterr().out
    assert "candidate  c0003.cu" in out and "cuco-lineage-" not in out and "/work/" not in out.replace(str(REPO), "")
    assert _leftover_clones() == before


def test_the_diff_of_cuco_show_piped_is_a_patch_git_applies(tmp_path):
    """Piped, `cuco show S C` does not wrap: its diff applies to the parent's source."""
    out = subprocess.run([sys.executable, "-c", "import sys; from cuco_tui.cli import main; sys.exit(main())", "show",
                          str(EXAMPLE), "c0003"], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr
    patch = out.stdout[out.stdout.index("--- "):]
    assert max(len(line) for line in patch.splitlines()) > 80  # long lines stay whole
    parent = subprocess.run([sys.executable, "-c", "import sys; from cuco_tui.cli import main; sys.exit(main())",
                             "export", str(EXAMPLE), "--candidate", "c0000", "--out", str(tmp_path)],
                            capture_output=True, text=True, cwd=REPO, timeout=120)
    assert parent.returncode == 0, parent.stderr
    work = tmp_path / "work"
    work.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=work, check=True)
    (work / "candidate.cu").write_text(next(tmp_path.glob("*-c0000.cu")).read_text())
    header = patch.splitlines()[0]
    fixed = patch.replace(header, "--- a/candidate.cu", 1)
    fixed = fixed.replace(fixed.splitlines()[1], "+++ b/candidate.cu", 1)
    (tmp_path / "c.patch").write_text(fixed)
    applied = subprocess.run(["git", "apply", "--check", str(tmp_path / "c.patch")], cwd=work, capture_output=True,
                             text=True)
    assert applied.returncode == 0, applied.stderr


def test_export_of_one_candidate_needs_no_best(tmp_path, capsys):
    assert main(["export", str(EXAMPLE), "--candidate", "c0002", "--out", str(tmp_path / "o")]) == 0
    assert (tmp_path / "o" / "result.json").exists() and list((tmp_path / "o").glob("*-c0002.cu"))
    assert main(["export", str(EXAMPLE), "--best", str(tmp_path / "a"), "--out", str(tmp_path / "b")]) == 2


def test_sessions_lists_whole_names_and_their_state(tmp_path, capsys):
    from cuco_tui.lineage import import_bundle

    import_bundle(EXAMPLE, tmp_path / "kv_transfer-offline-h200x2-with-a-long-name").close()
    assert main(["sessions", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "kv_transfer-offline-h200x2-with-a-long-name" in out and "…" not in out
    assert "finished" in out or "stopped" in out


def test_progress_lines_say_the_no_gpu_reason_once_and_cut_at_words():
    lines = []

    class Out:
        def write(self, s):
            lines.append(s)

        def flush(self):
            pass

    printer = ProgressPrinter(Out(), started=time.monotonic())
    why = "no_gpu: no NVIDIA driver answered (NVML Shared Library Not Found): this machine has no usable GPU; compiled only"
    for i in range(3):
        rec = CandidateRecord(id=f"c000{i}", generation=0, island=0, kind="full", parents=(), source="", design={},
                              rationale="", agent="offline", status="no_gpu", result={"reason": why})
        printer(ev.CandidateCommitted(record=rec, sha="abc"))
    assert sum(why in line for line in lines) == 1 and "compiled only" in lines[-1]
    cut = shorten("Explore: peer_pipeline (untested so far), knobs mover=copy_engine chosen at random", 40)
    assert cut.endswith("…") and len(cut) <= 40 and not cut[:-1].endswith(("copy_engin", "chos"))


def test_a_machine_with_too_few_gpus_is_told_what_it_can_do(capsys, monkeypatch):
    monkeypatch.setattr(gpus_module, "inventory", lambda: ONE)
    from cuco_tui.executors import local

    monkeypatch.setattr(local, "inventory", lambda: ONE, raising=False)
    rc = main(["search", "--workload", "gemm_allgather", "--generations", "1", "--root", str(Path("/tmp/cuco-none"))])
    err = capsys.readouterr().err
    assert rc == 2 and "--share-gpu" in err and "1 GPU" in err, err


@pytest.mark.skipif(not discover().can_compile, reason="no CUDA toolchain: the search cannot compile")
def test_two_interrupts_leave_at_once_without_a_commit_error_and_say_how_to_resume(tmp_path):
    env = dict(os.environ, CUCO_NO_GPU="1")
    env.pop("ANTHROPIC_API_KEY", None)
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from cuco_tui.cli import main; sys.exit(main())",
                             "search", "--workload", "gemm_allgather", "--agent", "offline", "--generations", "6",
                             "--session", str(tmp_path / "s")], env=env, stderr=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, cwd=REPO)
    seen = []
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        seen.append(line)
        if "generation 1" in "".join(seen) and "proposed" in line:  # an evaluation is in flight now
            break
    proc.send_signal(signal.SIGINT)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    err = "".join(seen) + err
    assert proc.returncode == 130, err[-2000:]
    assert "could not commit" not in err and "closed database" not in err, err[-2000:]
    # The first interrupt may already have stopped the search when the second lands: then the summary
    # on stdout says how to resume rather than the one-line leave on stderr.
    assert f"--resume {tmp_path / 's'}" in out + err, (out + err)[-2000:]
    from cuco_tui.lineage import SessionRepo

    with SessionRepo.open(tmp_path / "s") as repo:  # what was committed stayed committed
        assert {"c0000", "c0001"} <= {r.id for r in repo.records()}


@pytest.mark.parametrize("bundle", sorted((REPO / "sessions" / "examples").glob("*.bundle")), ids=lambda p: p.stem)
def test_every_example_bundle_names_its_machine(capsys, bundle):
    assert main(["show", str(bundle)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("machine"))
    assert "NVIDIA H" in line and "driver 580" in line and "NCCL 2.28.9" in line, line


def test_a_session_older_than_the_machine_record_can_be_given_one(tmp_path):
    from cuco_tui.core.machine import MachineInfo
    from cuco_tui.lineage import SessionRepo

    repo = SessionRepo.create(tmp_path / "s", "gemm_allgather", {"generations": 1})
    try:
        assert repo.machine() is None or repo.machine().gpus == () or True  # this machine may or may not probe
        info = MachineInfo(gpus=("NVIDIA H200",), driver="580.159.04", nccl="2.28.9")
        if repo.session_info().get("machine"):
            from cuco_tui.lineage import SessionError

            with pytest.raises(SessionError, match="records its machine already"):
                repo.set_machine(info, "a test")
            return
        repo.set_machine(info, "a test")
        assert repo.machine().describe() == "NVIDIA H200 · driver 580.159.04 · NCCL 2.28.9"
        assert repo.records() == []  # the machine's commit is no candidate
    finally:
        repo.close()
