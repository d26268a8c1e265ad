"""The GPU columns of docs/parallelkernelbench.md from the folder of a device call of
benchmarks/runs/pkb_gemm.sh: `cuco eval` of the seed (seed_ID.txt) and `cuco show` of the search
(show_ID.txt) read back, excerpts recorded from a W=2 call on H200 (2026-11-27) and edited where a
case needs it; the table written from them beside the CPU results kept. CPU only, no torch."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from repo_paths import REPO

SCRIPT = REPO / "benchmarks" / "parallelkernelbench.py"

SEED_VERIFIED = """L0 static checks
L1 compiling with nvcc
L2 running on GPUs 0,1
L3 bench bench
candidate  /tmp/cuco-pkb/workloads/pkb11_w2/seed.cu
status     measured
level      L3 (benchmark)
reason     verified and measured on 1 shapes: 6.37x ±24% the reference (geometric mean)
build      2.6 s
GPUs       0,1 (world 2), run 8.9 s
speedup    6.37x ±24% the reference, geometric mean over 1 shape(s) (±: half the band of noise of 30 repetitions a shape)
╭──────────────────────────────── diagnostics ─────────────────────────────────╮
│ note: verified under 4 perturbed schedule(s) (seeds 14639552-14639555: copies_late, rank_late, compute_late, │
│ scatter) in 0.16 s; calls seen: event 176, kernel 16, nccl 16, gemm 16                                      │
╰──────────────────────────────────────────────────────────────────────────────╯
verification
┏━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━┳━━━━━━━━━━━━━┳━━━━━━━━━━━━━┳━━━━━━━━━━━┳━━━━━━━━━━━━┳━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┓
┃ shape                                ┃ ok  ┃ max rel err ┃ rel fro err ┃ unwritten ┃ non-finite ┃ worst element                                  ┃
┡━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━╇━━━━━━━━━━━━━╇━━━━━━━━━━━━━╇━━━━━━━━━━━╇━━━━━━━━━━━━╇━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┩
│ verify #1                            │ yes │ 0           │ 0           │ 0         │ 0          │ rank 0, y[0, 0]: got -30.25, want -30.25       │
│ verify back to back, 2nd             │ yes │ 0           │ 0           │ 0         │ 0          │ rank 0, y[0, 0]: got 34.5, want 34.5           │
│ verify perturbed, seed 14639552, 2nd │ yes │ 0           │ 0           │ 0         │ 0          │ rank 0, y[0, 0]: got -10.6875, want -10.6875   │
│ bench #1                             │ yes │ 0           │ 0           │ 0         │ 0          │ rank 0, y[0, 0]: got -10.25, want -10.25       │
└──────────────────────────────────────┴─────┴─────────────┴─────────────┴───────────┴────────────┴────────────────────────────────────────────────┘
timings (ms, median of the slowest rank per repetition)
┏━━━━━━━┳━━━━━━━━━━━━━━━┳━━━━━━━━━━━┳━━━━━━━━━━━┳━━━━━━━┳━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━┓
┃ shape ┃         M,K,N ┃ reference ┃ candidate ┃ IQR % ┃ per-rank medians ┃    speedup ┃
┡━━━━━━━╇━━━━━━━━━━━━━━━╇━━━━━━━━━━━╇━━━━━━━━━━━╇━━━━━━━╇━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━┩
│ bench │ 1024,1024,512 │     0.684 │     0.107 │  40.9 │      0.095 0.087 │ 6.37x ±24% │
└───────┴───────────────┴───────────┴───────────┴───────┴──────────────────┴────────────┘
"""

# The same evaluation where the seed's answer differs from the program's at the second check.
SEED_FAILED = (SEED_VERIFIED.split("timings (ms")[0]
               .replace("status     measured", "status     incorrect")
               .replace("level      L3 (benchmark)", "level      L2 (verify)")
               .replace("reason     verified and measured on 1 shapes: 6.37x ±24% the reference (geometric mean)",
                        "reason     verify back to back, 2nd: rank 0, y[3, 7]: got 1.5, want 34.5 (rel err 0.96)")
               .replace("speedup    6.37x ±24% the reference, geometric mean over 1 shape(s) (±: half the band of "
                        "noise of 30 repetitions a shape)\n", "")
               .replace("│ verify back to back, 2nd             │ yes │",
                        "│ verify back to back, 2nd             │ NO  │"))

SHOW_TIES = """session   /tmp/sess/pkb12-w2
workload  /tmp/cuco-pkb/workloads/pkb12_w2   agent offline
searched  8 candidates over 2 generations
statuses  measured 8
spent     $0.00
best      c0000: 5.589x ±40% the reference (geometric mean)
ties      within noise of it: c0001, c0006, c0003, c0004, c0005, c0007, c0002
design    backend=nccl_host chunk=full comm_sms=0 issuer=host placement=before streams=3 sync=global
per shape shape  reference ms  candidate ms  speedup
          bench         0.482         0.086    5.59x ±40%
machine   4 x NVIDIA H200 · driver 580.159.04 · CUDA 13.0.88 · NCCL 2.28.9
islands   0: c0001

id     gen  isl  kind       parents      status    speedup      backend    reason
c0000  0    0    seed       -            measured  5.589x ±40%  nccl_host  
c0001  0    0    fast_path  c0000        measured  6.430x ±23%  nccl_host  
c0002  0    0    fast_path  c0000        measured  4.732x ±45%  nccl_host  
c0003  1    0    crossover  c0000,c0001  measured  6.243x ±36%  nccl_host  
c0004  1    1    crossover  c0000,c0001  measured  6.167x ±42%  nccl_host  
c0005  1    2    full       c0001        measured  5.898x ±36%  nccl_host  
c0006  2    0    full       c0001        measured  6.390x ±33%  nccl_host  
c0007  2    1    crossover  c0002,c0000  measured  4.983x ±21%  nccl_host  
"""


def _show(best: str, best_fig: str, seed_fig: str, ties: str = "") -> str:
    """A show whose best is `best` (not the seed): the seed c0000 and the best in its listing."""
    text = (SHOW_TIES.replace("best      c0000: 5.589x ±40%", f"best      {best}: {best_fig}")
            .replace("c0000  0    0    seed       -            measured  5.589x ±40%",
                     f"c0000  0    0    seed       -            measured  {seed_fig}")
            .replace("c0003  1    0    crossover  c0000,c0001  measured  6.243x ±36%",
                     f"c0003  1    0    crossover  c0000,c0001  measured  {best_fig}"))
    return text.replace("ties      within noise of it: c0001, c0006, c0003, c0004, c0005, c0007, c0002\n",
                        f"ties      within noise of it: {ties}\n" if ties else "")


LOG_CUT = """NVIDIA H200, 580.159.04
== import (13:19:25)
== import rc=0 in 99 s
== seed_14 (13:26:09)
== seed_14 rc=0 in 13 s
== search_14 (13:26:22)
"""
IMPORTS = ("14_gemm_allgather W=2: yes; check passed; pattern matmul → all-gather along dim 1 (mapped) (19 s)\n"
           "16_gemm_reducescatter W=2: yes; check passed; pattern matmul → reduce-scatter (mapped) (18 s)\n")


def _module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gpu():
    return _module("pkb_gpu", REPO / "benchmarks" / "pkb_gpu.py")


def test_a_verified_seed_reads_as_verified_with_its_speedup_and_times(tmp_path, gpu):
    (tmp_path / "seed_11.txt").write_text(SEED_VERIFIED)
    seed = gpu.read_seed(tmp_path / "seed_11.txt")
    assert (seed.state, seed.checks, seed.speedup) == ("verified", 4, gpu.Figure(6.37, 0.24))
    assert seed.shapes == (gpu.ShapeTime("bench", 0.684, 0.107),)
    p = gpu.GpuProblem(11, 2, "H200", seed)
    assert gpu.verified_cell([p]) == "yes (W=2: the seed matched it in 4 checks)"
    # no show: the seed's own speedup, marked as such; nothing over the pattern's reference
    assert gpu.program_cell(p).startswith("6.37x ±24% (the seed alone, from its evaluation; no search result")
    assert gpu.pattern_cell(p).startswith("not measured (the seed alone;")


def test_a_failed_seed_says_no_with_its_status_and_reason_and_gives_no_speedup(tmp_path, gpu):
    (tmp_path / "seed_13.txt").write_text(SEED_FAILED)
    seed = gpu.read_seed(tmp_path / "seed_13.txt")
    assert seed.state == "failed" and seed.speedup is None
    p = gpu.GpuProblem(13, 2, "H200", seed)
    assert gpu.verified_cell([p]) == ("no (W=2: the seed's evaluation: incorrect: verify back to back, 2nd: rank 0, "
                                      "y[3, 7]: got 1.5, want 34.5 (rel err 0.96))")
    assert gpu.program_cell(p) == gpu.pattern_cell(p) == "not run (the seed was not verified)"
    # a status that says ok over a table with a failed row is not taken as verified either
    (tmp_path / "seed_12.txt").write_text(SEED_FAILED.replace("status     incorrect", "status     measured"))
    assert gpu.read_seed(tmp_path / "seed_12.txt").state == "failed"


def test_a_show_whose_best_is_the_seed_reads_1x_and_names_the_ties(tmp_path, gpu):
    (tmp_path / "show_12.txt").write_text(SHOW_TIES)
    show = gpu.read_show(tmp_path / "show_12.txt")
    assert (show.best, show.best_speedup, show.searched, show.ties_total) == ("c0000", gpu.Figure(5.589, 0.40), 8, 7)
    assert show.shapes == (gpu.ShapeTime("bench", 0.482, 0.086),)
    p = gpu.GpuProblem(12, 2, "H200", gpu.SeedEval("verified", "", 13, gpu.Figure(6.87, 0.27)), show)
    assert gpu.program_cell(p) == "5.59x ±40% (c0000, the seed; best of 8 candidates)"
    assert gpu.pattern_cell(p) == ("1.00x (the best is the seed itself; 7 others within noise of it, the fastest "
                                   "c0001 at 6.43x ±23%)")
    # ties printed up to 8 and "and N more": counted whole; the rest are slower beyond noise
    (tmp_path / "show_13.txt").write_text(SHOW_TIES.replace(
        "c0001, c0006, c0003, c0004, c0005, c0007, c0002", "c0001, c0006 and 1 more"))
    p = gpu.GpuProblem(13, 2, "H200", p.seed, gpu.read_show(tmp_path / "show_13.txt"))
    assert gpu.pattern_cell(p).endswith("3 others within noise of it, the fastest c0001 at 6.43x ±23%; 4 slower "
                                        "beyond noise)")


def test_a_best_other_than_the_seed_is_its_ratio_with_the_noise_said(tmp_path, gpu):
    seed = gpu.SeedEval("verified", "", 13, gpu.Figure(5.0, 0.10))
    (tmp_path / "show_1.txt").write_text(_show("c0003", "6.000x ±10%", "5.000x ±10%", "c0000"))
    near = gpu.GpuProblem(1, 2, "H200", seed, gpu.read_show(tmp_path / "show_1.txt"))
    # 1.2 = 6 / 5; ±: e^hypot(ln 1.1, ln 1.1) - 1 = 14%; bands [5.45, 6.6] and [4.55, 5.5] overlap
    assert gpu.pattern_cell(near) == "1.20x ±14% (c0003 at 6.00x ±10% over the seed c0000 at 5.00x ±10%; within " \
                                     "noise: the two bands overlap)"
    (tmp_path / "show_2.txt").write_text(_show("c0003", "8.000x ±5%", "5.000x ±5%"))
    far = gpu.GpuProblem(2, 2, "H200", seed, gpu.read_show(tmp_path / "show_2.txt"))
    assert gpu.pattern_cell(far) == "1.60x ±7% (c0003 at 8.00x ±5% over the seed c0000 at 5.00x ±5%; faster beyond " \
                                    "noise)"
    assert gpu.program_cell(far) == "8.00x ±5% (c0003; best of 8 candidates)"
    assert (near.search.beats_seed(), far.search.beats_seed()) == (False, True)


def test_missing_or_unreadable_files_give_not_run_with_the_reason(tmp_path, gpu):
    (tmp_path / "import.txt").write_text(IMPORTS)
    (tmp_path / "pkb.log").write_text(LOG_CUT)
    (tmp_path / "seed_14.txt").write_text(SEED_VERIFIED)
    run = {p.id: p for p in gpu.read_run(tmp_path, 2, "4 x H200, 2026-11-27")}
    assert sorted(run) == [14, 16]
    cut, never = run[14], run[16]
    assert cut.seed.state == "verified" and cut.device == "4 x H200, 2026-11-27"
    assert gpu.program_cell(cut) == ("6.37x ±24% (the seed alone, from its evaluation; no search result: the call "
                                     "ended during search_14)")
    assert gpu.gpu_cells({2: never}, [2, 4]) == [
        "not run (W=2: the call ended during search_14, before it)",
        "not run (the call ended during search_14, before it)", "not run (the call ended during search_14, before it)",
        "not run", "not run"]
    # a show that is an error, a seed file that holds no evaluation: not run, with their last line
    (tmp_path / "show_14.txt").write_text("cuco: no session at /tmp/sess/pkb14-w2\n")
    (tmp_path / "seed_16.txt").write_text("L0 static checks\nTraceback (most recent call last):\nKeyError: 'M'\n")
    run = {p.id: p for p in gpu.read_run(tmp_path, 2)}
    assert run[14].search.detail == "show_14.txt has no `best` line: cuco: no session at /tmp/sess/pkb14-w2"
    assert gpu.verified_cell([run[16]]) == "not run (W=2: seed_16.txt holds no evaluation: KeyError: 'M')"
    # the world size is the folder's; another one is refused in one line, as is a folder of nothing
    assert {p.world for p in gpu.read_run(tmp_path)} == {2}
    with pytest.raises(ValueError, match=r"--world 4: .* is a call at W=2"):
        gpu.read_run(tmp_path, 4)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no seed_ID.txt, show_ID.txt"):
        gpu.read_run(tmp_path / "empty", 2)
    # run.txt, as benchmarks/runs/pkb_gemm.sh writes it: the machine, and a problem skipped for time
    (tmp_path / "seed_16.txt").unlink()
    (tmp_path / "run.txt").write_text("world: 2\ngpus: 0,1\ndevice: 4 x NVIDIA H200 (GPUs 0,1), 2026-11-27\n"
                                      "problems: 14 16 17\nskipped 16: 40 s of the call's budget left (BUDGET_S=570), "
                                      "about 135 s needed\n")
    run = {p.id: p for p in gpu.read_run(tmp_path)}
    assert run[14].device == "4 x NVIDIA H200 (GPUs 0,1), 2026-11-27"
    assert gpu.program_cell(run[16]) == "not run (skipped: 40 s of the call's budget left (BUDGET_S=570), about " \
                                        "135 s needed)"
    assert run[17].seed.detail == "the call ended during search_14, before it"  # planned, never reached


# -- the table ------------------------------------------------------------------------------------

def _clone(root: Path) -> Path:
    """A clone of PKB's shape for --table-only: discover() needs reference/ and the input builder."""
    (root / "reference").mkdir(parents=True)
    (root / "utils").mkdir()
    (root / "utils" / "input_output_tensors.py").write_text("")
    for stem in ("1_allreduce", "12_allgather_gemm", "14_gemm_allgather", "16_gemm_reducescatter"):
        (root / "reference" / f"{stem}.py").write_text("")
    return root


def _cpu(pid: int, stem: str, pattern: str) -> dict:
    return {"id": pid, "stem": stem, "inputs": "2 tensors", "worlds": {
        "2": {"imported": "yes", "check": "passed", "pattern": pattern, "seconds": 18.0},
        "4": {"imported": "yes", "check": "", "pattern": pattern, "seconds": 18.0}}}


def _folder(root: Path) -> Path:
    root.mkdir()
    (root / "import.txt").write_text("12_allgather_gemm W=2: yes; check passed; pattern x (mapped) (17 s)\n" + IMPORTS)
    (root / "pkb.log").write_text(LOG_CUT)
    (root / "seed_12.txt").write_text(SEED_VERIFIED)
    (root / "show_12.txt").write_text(SHOW_TIES)
    (root / "seed_14.txt").write_text(SEED_VERIFIED)
    return root


def _table_only(tmp_path: Path, name: str):
    """The script loaded as `name`, a clone, a scratch folder holding problem 12's CPU results, and
    the arguments of a `--table-only` run writing tmp_path/table.md: (script, scratch, table, cpu
    results, arguments)."""
    script = _module(name, SCRIPT)
    pkb, scratch, table = _clone(tmp_path / "pkb"), tmp_path / "scratch", tmp_path / "table.md"
    scratch.mkdir()
    cpu = {"pkb_commit": "abc", "problems": {"12": _cpu(12, "12_allgather_gemm", "all-gather along K → matmul "
                                                                                  "(mapped)")}}
    (scratch / "results.json").write_text(json.dumps(cpu))
    common = [str(pkb), "--table-only", "--worlds", "2,4", "--scratch", str(scratch), "--table", str(table)]
    return script, scratch, table, cpu, common


def _rows(text: str) -> dict[int, list[str]]:
    return {int(line.split(" | ")[0][2:]): line.strip("| ").split(" | ") for line in text.splitlines()
            if line.startswith("| ") and line[2].isdigit()}


def test_the_table_takes_the_gpu_columns_from_a_calls_folder_and_keeps_the_cpu_ones(tmp_path):
    script, scratch, table, cpu, common = _table_only(tmp_path, "pkb_script_gpu")
    assert script.main(common + ["--gpu-results", str(_folder(tmp_path / "out")), "--world", "2",
                                 "--device", "4 x H200 (nvidia-h100-x4), 2026-11-27"]) == 0
    text = table.read_text()
    rows = _rows(text)
    assert rows[12][2:5] == ["yes, yes", "passed (W=2)", "all-gather along K → matmul (mapped)"]
    assert rows[12][5:] == ["yes (W=2: the seed matched it in 4 checks)",
                            "5.59x ±40% (c0000, the seed; best of 8 candidates)",
                            ("1.00x (the best is the seed itself; 7 others within noise of it, the fastest c0001 at "
                             "6.43x ±23%)"), "not run", "not run", "not run (needs a GPU host)"]
    assert rows[14][2] == "not run" and rows[14][6].startswith("6.37x ±24% (the seed alone")
    assert rows[16][5] == "not run (W=2: the call ended during search_14, before it)"
    assert rows[1][5:] == ["not run"] * 5 + ["not run (needs a GPU host)"]
    assert "W=2: 4 x H200 (nvidia-h100-x4), 2026-11-27, problems 12, 14, 16; W=4: not run." in text
    assert "none found a candidate faster than the seed beyond noise; the best is the seed itself in 1." in text
    assert "the program's time is mostly its own Python and torch.distributed launch overhead" in text
    assert "`abc`" in text  # the results' commit: this clone is no git repository
    # the GPU results are kept with the CPU ones: the next --table-only writes the same columns
    assert json.loads((scratch / "results.json").read_text())["problems"] == cpu["problems"]
    table.unlink()
    assert script.main(common) == 0
    assert _rows(table.read_text()) == rows


def test_the_table_refuses_bad_flags_and_to_lose_cpu_results_writing_nothing(tmp_path):
    script = _module("pkb_script_gpu2", SCRIPT)
    pkb, scratch, table = _clone(tmp_path / "pkb"), tmp_path / "scratch", tmp_path / "table.md"
    scratch.mkdir()
    full = {"pkb_commit": "abc", "problems": {str(i): _cpu(i, s, "none") for i, s in
                                              ((1, "1_allreduce"), (12, "12_allgather_gemm"))}}
    (scratch / "results.json").write_text(json.dumps(full))
    common = [str(pkb), "--table-only", "--worlds", "2,4", "--scratch", str(scratch), "--table", str(table)]
    assert script.main(common) == 0
    before, kept = table.read_text(), (scratch / "results.json").read_text()
    out = _folder(tmp_path / "out")
    for flags, words in ((["--gpu-results", str(tmp_path / "nowhere")], "nowhere: no such folder"),
                         (["--gpu-results", str(out), "--world", "8"], "--world 8 is not among --worlds 2,4"),
                         (["--gpu-results", str(out), "--worlds", "4"], "is a call at W=2, not among --worlds 4"),
                         (["--world", "2"], "--world and --device go with --gpu-results")):
        with pytest.raises(SystemExit, match=words):
            script.main(common + flags)
        assert (table.read_text(), (scratch / "results.json").read_text()) == (before, kept)
    # results that lack a problem the table shows: refused, the table as it was
    (scratch / "results.json").write_text(json.dumps({"problems": {"12": full["problems"]["12"]}}))
    with pytest.raises(SystemExit, match=r"shows 1 problem\(s\) run on the CPU \(1\) that .*results.json lacks: "
                                         r"writing it would lose them"):
        script.main(common + ["--gpu-results", str(out)])
    assert table.read_text() == before
    # and results that lack the GPU results the table shows
    (scratch / "results.json").write_text(kept)
    assert script.main(common + ["--gpu-results", str(out)]) == 0
    with_gpu = table.read_text()
    (scratch / "results.json").write_text(kept)
    with pytest.raises(SystemExit, match=r"shows 2 problem\(s\) run on a GPU \(12, 14\) that"):
        script.main(common)
    assert table.read_text() == with_gpu


def test_a_clone_copied_without_git_inside_another_repository_gives_no_commit_of_that_one(tmp_path):
    script = _module("pkb_script_gpu3", SCRIPT)
    outer = tmp_path / "repo"
    pkb = _clone(outer / ".whl" / "pkb")
    git = ["git", "-C", str(outer), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    subprocess.run(git + ["commit", "-q", "--allow-empty", "-m", "outer"], check=True)
    assert script.pkb_commit(pkb) == ""
    (pkb / "COMMIT").write_text("3cc0f9b435010b4957ccf7b4b85791480c7c69a6\n")
    assert script.pkb_commit(pkb) == "3cc0f9b435010b4957ccf7b4b85791480c7c69a6"


# -- the column "reference against float64 on GPU" (benchmarks/runs/pkb_refcheck.sh) ----------------

def _finding(level: str, detail: str) -> list[dict]:
    """`cuco workload check --gpu --json`'s findings, the GPU one with `level` and `detail`."""
    return [{"item": "manifest", "level": "ok", "detail": "pkb12_w2: dims M, N"},
            {"item": "reference", "level": "ok", "detail": "reference probed on verify at world 2"},
            {"item": "reference on GPU", "level": level, "detail": detail}]


MATCHES = ("matches expected() in float64 at verify (W=2 on GPU 0,0): worst max relative error 0.00391 (rtol "
           "0.02), 2 output(s) of 2 rank(s)")
DIFFERS = ("differs from expected() in float64 (W=4 on GPU 0,0,0,0, rtol 0.02): rank 3 'y' at verify: max relative "
           "error 0.5 at [1, 2] (got 3, float64 2)")


def test_the_reference_column_reads_each_folders_findings_and_says_why_one_is_missing(tmp_path):
    ref = _module("pkb_reference", REPO / "benchmarks" / "pkb_reference.py")
    out = tmp_path / "out"
    out.mkdir()
    (out / "run.txt").write_text("device: 1 x NVIDIA H100 80GB HBM3 (every rank on GPU 0), 2026-12-07\n")
    (out / "reference_12_w2.json").write_text(json.dumps(_finding("ok", MATCHES)))
    (out / "reference_12_w4.json").write_text(json.dumps(_finding("error", DIFFERS)))
    (out / "reference_14_w2.json").write_text("")  # killed by the step's timeout before printing
    (out / "reference_14_w2.err").write_text("Traceback ...\nRuntimeError: NCCL error: unhandled system error\n")
    (out / "refcheck.log").write_text("pkb12_w2 rc=0\npkb12_w4 rc=1\npkb14_w2 rc=124\npkb16_w2 rc=124\n")
    rows = {(r.id, r.world): r for r in ref.read_reference_run(out)}
    assert rows[(12, 2)].state == "verified" and rows[(12, 2)].cell() == f"yes (W=2: {MATCHES})"
    assert rows[(12, 4)].state == "differs" and rows[(12, 4)].cell().startswith("no (W=4: differs from expected()")
    assert rows[(14, 2)].cell() == "not run (W=2: no findings (RuntimeError: NCCL error: unhandled system error))"
    assert rows[(16, 2)].cell() == "not run (W=2: no findings (exit status 124))"
    assert rows[(12, 2)].device == "1 x NVIDIA H100 80GB HBM3 (every rank on GPU 0), 2026-12-07"
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no reference_ID_wW.json or refcheck.log"):
        ref.read_reference_run(tmp_path / "empty")


def test_the_table_takes_the_reference_column_and_keeps_it_for_the_next_table(tmp_path):
    script, scratch, table, cpu, common = _table_only(tmp_path, "pkb_script_ref")
    out = tmp_path / "out"
    out.mkdir()
    (out / "reference_12_w2.json").write_text(json.dumps(_finding("ok", MATCHES)))
    (out / "reference_12_w4.json").write_text(json.dumps(_finding("error", DIFFERS)))
    assert script.main(common + ["--reference-results", str(out)]) == 0
    text = table.read_text()
    rows = _rows(text)
    assert rows[12][-1] == f"yes (W=2: {MATCHES}); no (W=4: {DIFFERS})"
    assert rows[12][5] == "not run (needs a GPU host)"  # the seed's columns: no pkb_gemm.sh call read
    assert rows[14][-1] == "not run"
    assert "Of 2 folders: differs: 1 (12 (W=4)); verified: 1." in text
    table.unlink()
    assert script.main(common) == 0
    assert _rows(table.read_text()) == rows
    with pytest.raises(SystemExit, match="no reference_ID_wW.json or refcheck.log"):
        script.main(common + ["--reference-results", str(scratch)])
