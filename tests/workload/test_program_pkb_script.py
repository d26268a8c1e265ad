"""benchmarks/parallelkernelbench.py without ParallelKernelBench: a clone of the same shape written
here (reference/<id>_<name>.py with solution, utils/input_output_tensors.py with
create_input_tensor), its problems adapted to the program convention, imported and checked, and the
table written with a row for every problem; the table's words from results alone."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from repo_paths import REPO

SCRIPT = REPO / "benchmarks" / "parallelkernelbench.py"
TABLE = REPO / "benchmarks" / "pkb_table.py"

INPUTS = '''import torch
import torch.distributed as dist


def create_input_tensor(rank, world_size, problem_id, base_shape, dtype, trial=0, device=None):
    torch.manual_seed(1000 * problem_id + rank + 7 * trial)
    M, N = base_shape
    if problem_id == 1:  # a constant between two tensors
        return (torch.randn(base_shape, dtype=dtype, device=device), 0.5,
                torch.randn((N,), dtype=dtype, device=device))
    if problem_id == 2:  # the world's process group: given at call time
        return (torch.randn(base_shape, dtype=dtype, device=device), dist.group.WORLD)
    if problem_id == 3:  # plain values that follow the world size and shape: held per (world, rank, shape)
        return (torch.randn(base_shape, dtype=dtype, device=device), [M // world_size] * world_size)
    if problem_id == 6:  # a list of tensors of one length at every call: each an input
        return ([torch.randn(base_shape, dtype=dtype, device=device) for _ in range(3)],)
    if problem_id == 4:  # an nn.Linear: its weight and bias become inputs
        return (torch.randn(base_shape, dtype=dtype, device=device),
                torch.nn.Linear(N, 8, dtype=dtype, device=device))
    # a plain value drawn at random: what it is at a call cannot be known beforehand
    return (torch.randn(base_shape, dtype=dtype, device=device), int(torch.randint(1, 9, ()).item()))
'''
SCALED_SUM = '''import torch
import torch.distributed as dist


@torch.no_grad()
def solution(x, scale, shift):
    y = x * scale + shift
    dist.all_reduce(y)
    return y
'''
IN_GROUP = '''import torch.distributed as dist


def solution(x, group):
    dist.all_reduce(x, group=group)
    return x
'''


SPLIT_SIZES = '''import torch
import torch.distributed as dist


@torch.no_grad()
def solution(x, sizes):
    dist.all_reduce(x)
    return x[: sizes[dist.get_rank()]].clone()
'''
LINEAR = '''import torch
import torch.distributed as dist


@torch.no_grad()
def solution(x, proj):
    y = proj(x)
    dist.all_reduce(y)
    return y
'''


LIST_SUM = '''import torch
import torch.distributed as dist


@torch.no_grad()
def solution(parts):
    total = sum(parts)
    dist.all_reduce(total)
    return total
'''


def _module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _clone(root: Path) -> Path:
    (root / "reference").mkdir(parents=True)
    (root / "utils").mkdir()
    (root / "utils" / "input_output_tensors.py").write_text(INPUTS)
    (root / "reference" / "1_scaled_sum.py").write_text(SCALED_SUM)
    (root / "reference" / "2_in_group.py").write_text(IN_GROUP)
    (root / "reference" / "3_split_sizes.py").write_text(SPLIT_SIZES)
    (root / "reference" / "4_linear.py").write_text(LINEAR)
    (root / "reference" / "5_random_count.py").write_text(SPLIT_SIZES.replace("sizes[dist.get_rank()]", "sizes"))
    (root / "reference" / "6_list_sum.py").write_text(LIST_SUM)
    (root / "reference" / "7_untouched.py").write_text(SCALED_SUM)
    git = ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git[:3] + ["init", "-q"], check=True)
    subprocess.run(git + ["add", "."], check=True)
    subprocess.run(git + ["commit", "-qm", "clone"], check=True)
    return root


def test_a_pkb_shaped_clone_is_adapted_imported_checked_and_tabled(tmp_path):
    pytest.importorskip("torch")
    pkb = _clone(tmp_path / "pkb")
    scratch, table = tmp_path / "scratch", tmp_path / "table.md"
    script = _module("pkb_script", SCRIPT)
    rc = script.main([str(pkb), "--problems", "1-6", "--worlds", "2", "--scratch", str(scratch), "--table", str(table),
                      "--timeout", "600"])
    assert rc == 0
    adapter = (scratch / "adapters" / "pkb1.py").read_text()
    assert "CONSTANTS = {1: 0.5}" in adapter and "def solution(x, shift):" in adapter
    assert "no_grad" not in adapter  # the reference sets its own grad mode
    assert "_reference.solution(x, dist.group.WORLD)" in (scratch / "adapters" / "pkb2.py").read_text()
    sizes = (scratch / "adapters" / "pkb3.py").read_text()
    assert "def solution(x, *, M, N):" in sizes and "'2/1/256x256': [128, 128]" in sizes
    linear = (scratch / "adapters" / "pkb4.py").read_text()
    assert "def solution(x, proj_weight, proj_bias):" in linear and "_Linear(proj_weight, proj_bias)" in linear
    results = json.loads((scratch / "results.json").read_text())
    commit = subprocess.run(["git", "-C", str(pkb), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout
    assert results["pkb_commit"] == commit.strip()
    assert "return _reference.solution([parts_0, parts_1, parts_2])" in (scratch / "adapters" / "pkb6.py").read_text()
    for pid in ("1", "2", "3", "4", "6"):  # a constant, the world group, plain values by world, a module, a list
        one = results["problems"][pid]["worlds"]["2"]
        assert (one["imported"], one["check"]) == ("yes", "passed"), (pid, one)
    five = results["problems"]["5"]["worlds"]["2"]
    assert five["imported"] == ("refused: pkb5.py: make_inputs must return a tensor or a tuple of tensors, not a "
                                "tuple of Tensor, int")
    assert "7" not in results["problems"]
    text = table.read_text()
    assert f"at commit `{commit.strip()}`" in text
    rows = {line.split(" | ")[1]: line for line in text.splitlines() if line.startswith("| ") and " | " in line}
    assert "| yes | passed (W=2) | none | not run (needs a GPU host) |" in rows["1_scaled_sum"]
    assert " refused | - |" in rows["5_random_count"] and "not run |" in rows["7_untouched"]
    assert "- 5 W=2 import: refused: pkb5.py: make_inputs must return a tensor" in text


def _outcome(imported: str, check: str = "", pattern: str = "") -> dict:
    return {"imported": imported, "check": check, "pattern": pattern, "seconds": 1.0}


def test_the_table_groups_refusals_by_reason_and_names_patterns():
    table = _module("pkb_table", TABLE)
    problems = [SimpleNamespace(id=i, stem=f"{i}_p") for i in (1, 2, 3, 4)]
    refusal = "refused: pkb2.py: make_inputs must return a tensor or a tuple of tensors, not a tuple of int, Tensor"
    results = {"pkb_commit": "abc", "problems": {
        "1": {"id": 1, "stem": "1_p", "inputs": "", "worlds": {
            "2": _outcome("yes", "failed: reference: fill_inputs leaves 'x' constant",
                          "all-gather → matmul (mapped)"),
            "4": _outcome("yes", "", "all-gather → matmul (mapped)")}},
        "2": {"id": 2, "stem": "2_p", "inputs": "", "worlds": {"2": _outcome(refusal), "4": _outcome(refusal)}},
        "3": {"id": 3, "stem": "3_p", "inputs": "", "worlds": {
            "2": _outcome("refused: pkb3.py: solution at verify (rank 0 of 2, float64 on the CPU under gloo) failed: "
                          "RuntimeError: x | y"), "4": _outcome("timed out after 9 s")}}}}
    text = table.render_table(problems, results, [2, 4], "python3 benchmarks/parallelkernelbench.py PKB",
                              "2026-01-02")
    assert "Made 2026-01-02 by `python3 benchmarks/parallelkernelbench.py PKB`" in text and "`abc`" in text
    assert "3 were run here: 1 import at W=2, 1 import at W=4; of the 1 checked, 0 pass" in text
    assert "The checks that fail, by reason (problem ids): an input PKB makes constant" in text
    assert "values that change with the shape or world size): 2;" in text
    assert "solution fails on the CPU under gloo" in text and "longer than the timeout: 3" in text
    assert "Patterns the importer names: all-gather → matmul (mapped): 1." in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [r.split(" | ")[2:5] for r in rows] == [
        ["yes, yes", "failed (W=2)", "all-gather → matmul (mapped)"], ["refused, refused", "-", "-"],
        ["refused, timed out after 9 s", "-", "-"], ["not run", "-", "-"]]
    assert all(r.count("not run (needs a GPU host)") == 6 for r in rows)  # 5 of the seed and search, 1 the reference
    assert ("- 3 W=2 import: refused: pkb3.py: solution at verify (rank 0 of 2, float64 on the CPU under gloo) "
            "failed: RuntimeError: x | y") in text
    assert "- 1 W=2 check: failed: reference: fill_inputs leaves 'x' constant" in text
