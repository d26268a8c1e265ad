"""`cuco eval --sanitize TOOL`: compute-sanitizer's reports read into diagnostics, the ranks started
under the tool by the real launcher (a stand-in executable that writes a report in the tool's format
and exits: this machine has neither the tool nor a GPU; the GPU run is in test_gpu_shared.py), and
what a verified candidate with findings becomes."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from cuco_tui.cli import main
from cuco_tui.core.result import CascadeResult, Level, Status
from cuco_tui.evaluate import sanitizer
from cuco_tui.evaluate.cascade import EvalOptions, make_plan
from cuco_tui.harness.launcher import run_group
from cuco_tui.workload.manifest import load_workload
from repo_paths import REPO

SEED = REPO / "workloads" / "gemm_allgather" / "seed.cu"

# The shapes of compute-sanitizer's reports: memcheck of CUDA 12/13 ("at kernel+offset in file:line"),
# an older memcheck ("at 0x… in file:line:kernel"), an API error, and the summary.
MEMCHECK = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 2 bytes
=========     at gather_rows(unsigned short *, const unsigned short *, int)+0x1f0 in /tmp/build/ab12/candidate.cu:57
=========     by thread (96,0,0) in block (3,0,0)
=========     Address 0x7f3a2c200400 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7f3a2c000000 of size 2097152 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: cuLaunchKernel [0x2f1a5b] in libcuda.so.1
=========         Host Frame: cuco_launch [0x1234] in 878c5a0.so
=========
========= Invalid __global__ write of size 2 bytes
=========     at gather_rows(unsigned short *, const unsigned short *, int)+0x1f0 in /tmp/build/ab12/candidate.cu:57
=========     by thread (97,0,0) in block (3,0,0)
=========     Address 0x7f3a2c200402 is out of bounds
=========
========= Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" on CUDA API call to cudaStreamSynchronize.
=========     Saved host backtrace up to driver entry point at error
=========         Host Frame: cudaStreamSynchronize [0x4a1b] in libcudart.so.13
=========
========= ERROR SUMMARY: 130 errors
========= ERROR SUMMARY: 80 errors were not printed. Use --print-limit option to adjust the number of printed errors
========= Error: process didn't terminate successfully
========= Target application returned an error
"""
OLD_STYLE = """\
========= COMPUTE-SANITIZER
========= Uninitialized __global__ memory read of size 4 bytes
=========     at 0x3a0 in /work/candidate.cu:88:combine_kernel(float*, int)
=========     by thread (0,0,0) in block (0,0,0)
=========
========= ERROR SUMMARY: 1 error
"""
NO_LINE = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 16 bytes
=========     at ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096>)+0x9c0
=========     by thread (0,0,0) in block (0,0,0)
=========     Address 0x10 is out of bounds
=========
========= ERROR SUMMARY: 1 error
"""
CLEAN = "========= COMPUTE-SANITIZER\nsome line of the worker's own\n========= ERROR SUMMARY: 0 errors\n"
RACECHECK = """\
========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at reduce_tile(float *)+0x150 in /tmp/b/candidate.cu:31
=========     and Read access at reduce_tile(float *)+0x1a0 in /tmp/b/candidate.cu:35 [512 hazards]
=========
========= Warning: Race reported between Read access at reduce_tile(float *)+0x200 in /tmp/b/candidate.cu:40
=========     and Write access at reduce_tile(float *)+0x210 in /tmp/b/candidate.cu:41 [32 hazards]
=========
========= RACECHECK SUMMARY: 2 hazards displayed (1 error, 1 warning)
"""
MANUAL_STYLE = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ read of size 4 bytes
=========     at unaligned_kernel():0x160 in memcheck_demo.cu:6
=========     by thread (0,0,0) in block (0,0,0)
"""


def test_a_memcheck_report_becomes_findings_with_kernel_line_thread_and_what():
    findings, counted = sanitizer.parse_report(MEMCHECK, rank=1)
    assert counted == 130
    assert [f.what for f in findings] == ["Invalid __global__ write of size 2 bytes"] * 2 + [
        'Program hit cudaErrorLaunchFailure (error 719) due to "unspecified launch failure" on CUDA API call '
        "to cudaStreamSynchronize."]
    first = findings[0]
    assert (first.kernel, first.file, first.line) == (
        "gather_rows(unsigned short *, const unsigned short *, int)", "/tmp/build/ab12/candidate.cu", 57)
    assert first.thread == "(96,0,0) in block (3,0,0)"
    assert first.details[0] == "Address 0x7f3a2c200400 is out of bounds"
    assert not any("Host Frame" in d for f in findings for d in f.details)  # backtraces dropped
    assert first.describe() == ("rank 1: Invalid __global__ write of size 2 bytes at candidate.cu:57 in gather_rows"
                                "(unsigned short *, const unsigned short *, int), thread (96,0,0) in block "
                                "(3,0,0); Address 0x7f3a2c200400 is out of bounds")


def test_older_reports_lines_without_source_and_racecheck_are_read_too():
    (old,), n = sanitizer.parse_report(OLD_STYLE, rank=0)
    assert (n, old.kernel, old.file, old.line) == (1, "combine_kernel(float*, int)", "/work/candidate.cu", 88)
    (lib,), _ = sanitizer.parse_report(NO_LINE, rank=0)
    assert lib.kernel.startswith("ncclDevKernel_AllGather") and lib.line is None
    assert "no source line in ncclDevKernel_AllGather" in lib.describe()
    (race, warning), n = sanitizer.parse_report(RACECHECK, rank=0)
    assert n == 1 and race.what.startswith("Race reported between Write access") and race.severity == "error"
    assert (race.kernel, race.line) == ("reduce_tile(float *)", 31)
    assert race.details == ("and Read access at reduce_tile(float *)+0x1a0 in /tmp/b/candidate.cu:35 [512 hazards]",)
    assert (warning.severity, warning.line) == ("warning", 40)
    assert sanitizer.parse_report(CLEAN, rank=0) == ([], 0)
    (f,), n = sanitizer.parse_report(MANUAL_STYLE, rank=0)
    assert (f.kernel, f.line, n) == ("unaligned_kernel()", 6, None)  # no summary: cut off


def _rundir(tmp_path: Path, reports: dict[int, str]) -> Path:
    for rank, text in reports.items():
        (tmp_path / f"rank{rank}.stdout").write_text(text)
        (tmp_path / f"rank{rank}.stderr").write_text("")
    return tmp_path


def test_reports_are_read_per_rank_and_a_rank_without_one_is_said(tmp_path):
    rundir = _rundir(tmp_path, {0: CLEAN, 1: MEMCHECK, 2: "a worker that never ran under the tool\n",
                                4: MANUAL_STYLE})
    report = sanitizer.read_reports("memcheck", rundir, world=5)  # rank 3 left no files at all
    assert report.errors == 131 and {f.rank for f in report.findings} == {1, 4}
    assert [rank for rank, _ in report.unread] == [2, 3, 4] and "cut off" in report.unread[2][1]
    diags = report.diagnostics("candidate.cu")
    assert [d.code for d in diags] == ["sanitizer-memcheck"] * 7
    assert (diags[0].file, diags[0].line, diags[0].severity) == ("candidate.cu", 57, "error")
    assert (diags[2].file, diags[2].line) == ("", None)  # the API error has no candidate line
    assert [d.severity for d in diags[-3:]] == ["warning"] * 3
    assert "rank 2's report is missing" in diags[-3].message and "rank 4's report was cut off" in diags[-1].message
    assert report.summary().startswith("compute-sanitizer memcheck: 131 error(s); first: rank 1: Invalid __global__ "
                                       "write of size 2 bytes at candidate.cu:57")


def test_a_verified_candidate_with_findings_is_incorrect_and_a_clean_one_says_so(tmp_path):
    verified = CascadeResult("c.cu", "gemm_allgather", Status.VERIFIED, Level.VERIFY, "verified (no benchmark)")
    (tmp_path / "a").mkdir()
    dirty = sanitizer.read_reports("memcheck", _rundir(tmp_path / "a", {0: CLEAN, 1: MEMCHECK}), world=2)
    r = sanitizer.with_report(verified, dirty, "candidate.cu")
    assert r.status == Status.INCORRECT and r.reason.startswith("compute-sanitizer memcheck: 130 error(s)")
    assert r.reason.endswith("(the output itself verified)")
    assert any(d.code == "sanitizer-memcheck" and d.line == 57 for d in r.diagnostics)
    (tmp_path / "b").mkdir()
    clean = sanitizer.read_reports("memcheck", _rundir(tmp_path / "b", {0: CLEAN, 1: CLEAN}), world=2)
    r = sanitizer.with_report(verified, clean, "candidate.cu")
    assert r.status == Status.VERIFIED and r.reason == "verified (no benchmark); compute-sanitizer memcheck: no errors"
    (tmp_path / "c").mkdir()
    cut = sanitizer.read_reports("memcheck", _rundir(tmp_path / "c", {0: CLEAN, 1: "========= COMPUTE-SANITIZER\n"}),
                                 world=2)
    r = sanitizer.with_report(verified, cut, "candidate.cu")
    assert r.reason.endswith("no error in the reports read; rank(s) 1 left none whole")
    (tmp_path / "d").mkdir()
    race = sanitizer.read_reports("racecheck", _rundir(tmp_path / "d", {0: RACECHECK}), world=1)
    assert race.errors == 1 and [f.severity for f in race.findings] == ["error", "warning"]
    deadlocked = CascadeResult("c.cu", "gemm_allgather", Status.DEADLOCK, Level.VERIFY, "deadlock at launch 1")
    r = sanitizer.with_report(deadlocked, dirty, "candidate.cu")
    assert r.status == Status.DEADLOCK and "130 error(s)" in r.reason  # the first failure keeps its status


def test_the_ranks_run_under_the_tool_through_the_launcher(tmp_path):
    """A stand-in compute-sanitizer: it checks the arguments it is given, writes a report that names
    its rank, and exits as the tool does when the application passed."""
    tool = tmp_path / "bin" / "compute-sanitizer"
    tool.parent.mkdir()
    tool.write_text(f"""#!{sys.executable}
import sys
args = sys.argv[1:]
assert args[:2] == ["--tool", "initcheck"] and "--padding" not in args, args
for option, value in [("--destroy-on-device-error", "kernel"), ("--report-api-errors", "no"),
                      ("--check-exit-code", "no"), ("--print-limit", "{sanitizer.PRINT_LIMIT}")]:
    assert args[args.index(option) + 1] == value, args
worker = args.index({sys.executable!r})
assert args[worker + 1:worker + 4] == ["-m", "cuco_tui.harness.worker", "--plan"], args
rank = int(args[args.index("--rank") + 1])
print("========= COMPUTE-SANITIZER")
if rank == 1:
    print("========= Uninitialized __global__ memory read of size 4 bytes")
    print("=========     at combine(float *)+0x40 in /b/candidate.cu:" + str(40 + rank))
    print("=========     by thread (1,0,0) in block (0,0,0)")
print("========= ERROR SUMMARY: %d error%s" % ((1, "") if rank == 1 else (0, "s")))
""")
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR)
    argv = sanitizer.worker_argv("initcheck", tool, sys.executable)
    group = run_group(make_plan(load_workload("gemm_allgather"), None, EvalOptions(), "evaluate"), [0, 1],
                      tmp_path / "run", 30.0, worker_argv=argv)
    assert [o.exit_code for o in group.ranks] == [0, 0]
    report = sanitizer.read_reports("initcheck", group.rundir, world=2)
    assert report.errors == 1 and report.unread == ()
    (f,) = report.findings
    assert (f.rank, f.line, f.kernel) == (1, 41, "combine(float *)")


def test_under_the_tool_verification_alone_runs_with_every_limit_widened(tmp_path):
    o = sanitizer.options_for(EvalOptions(sanitize="memcheck", shapes=("square-8k",)))
    assert (o.bench, o.perturb, o.shapes) == (False, False, ())
    plan = sanitizer.plan_for(make_plan(load_workload("gemm_allgather"), None, o, "evaluate"), "memcheck")
    assert (plan.sanitize, plan.limits.time_scale) == ("memcheck", sanitizer.SLOWDOWN)
    from cuco_tui.harness.watchdog import Watchdog

    dog = Watchdog(None, tmp_path / "abort", plan.limits.time_scale)  # what the rank worker builds from the plan
    dog.arm(30.0, "the barrier")
    assert dog.limit == 30.0 * sanitizer.SLOWDOWN
    assert "--padding" in sanitizer.worker_argv("memcheck", Path("/x"), sys.executable)
    with pytest.raises(ValueError, match="unknown compute-sanitizer tool 'leakcheck'"):
        sanitizer.worker_argv("leakcheck", Path("/x"), sys.executable)


def test_the_tool_is_found_on_path_or_beside_nvcc_and_its_absence_is_said(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "nowhere"))
    if Path("/usr/local/cuda/bin/compute-sanitizer").exists():
        pytest.skip("this machine has the tool in /usr/local/cuda")
    with pytest.raises(sanitizer.SanitizerUnavailable, match="compute-sanitizer was not found"):
        sanitizer.find_sanitizer(None)
    cuda = tmp_path / "cuda"
    (cuda / "bin").mkdir(parents=True)
    (cuda / "bin" / "nvcc").write_text("")
    tool = cuda / "compute-sanitizer" / "compute-sanitizer"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    assert sanitizer.find_sanitizer(cuda / "bin" / "nvcc") == tool
    monkeypatch.setenv("PATH", f"{tmp_path / 'empty'}{os.pathsep}{cuda / 'compute-sanitizer'}")
    assert sanitizer.find_sanitizer(None) == tool


def test_the_command_line_refuses_what_the_tool_cannot_do(capsys):
    rc = main(["eval", str(SEED), "--sanitize", "memcheck", "--perturb-seed", "3"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "--sanitize verifies under compute-sanitizer" in err
    with pytest.raises(SystemExit) as exc:
        main(["eval", str(SEED), "--sanitize", "leakcheck"])
    assert exc.value.code == 2 and "invalid choice: 'leakcheck'" in capsys.readouterr().err


def test_a_candidate_that_failed_on_the_gpu_is_pointed_at_the_tool(monkeypatch, capsys):
    """`cuco eval` on a wrong answer or a crash says how to look closer: the same command under
    memcheck (with the same ranks); not after compiling only, nor when the tool already ran."""
    from cuco_tui.evaluate import cascade

    answers = iter([(Status.INCORRECT, Level.VERIFY), (Status.RUNTIME_ERROR, Level.VERIFY),
                    (Status.COMPILE_ERROR, Level.COMPILE), (Status.INCORRECT, Level.VERIFY)])

    def evaluate(path, workload, options, progress=None, kept=None):
        status, level = next(answers)
        return CascadeResult(str(path), workload.name, status, level, "wrong output at verify #1")

    monkeypatch.setattr(cascade, "evaluate", evaluate)
    assert main(["eval", str(SEED), "--share-gpu", "--world", "4"]) == 1
    assert (f"hint: cuco eval {SEED} --workload gemm_allgather --share-gpu --world 4 --sanitize memcheck "
            "(compute-sanitizer names the line") in capsys.readouterr().err
    assert main(["eval", str(SEED), "--share-gpu"]) == 1
    assert f"{SEED} --workload gemm_allgather --share-gpu --sanitize memcheck (" in capsys.readouterr().err
    assert main(["eval", str(SEED)]) == 1
    assert "--sanitize" not in capsys.readouterr().err
    assert main(["eval", str(SEED), "--sanitize", "initcheck"]) == 1
    assert "hint:" not in capsys.readouterr().err
