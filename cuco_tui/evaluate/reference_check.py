"""The workload's reference on GPUs against its own float64 answer (`cuco workload check --gpu`).

Every candidate is verified against the reference as it runs on the GPUs, so a reference that is
wrong there (a program whose collective sums the wrong group, a layout read the wrong way, a
reduction in bf16 that loses too much) would pass wrong candidates and fail right ones. This runs
the reference alone at each verify shape on a GPU group (ranks sharing one GPU with `share_gpu`),
its inputs and outputs saved by each rank (harness/worker.py, `reference` plans), then compares
the outputs with the workload's expected() in float64 on the same inputs, in a process of its own
(workload/saved_check.py), by the test a candidate passes (the workload's rtol and floor)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

from cuco_tui.core.workload import Workload
from cuco_tui.evaluate.baseline import group_failure, run_reference_alone
from cuco_tui.evaluate.cascade import EvalOptions, choose_gpus, reference_messages
from cuco_tui.harness.env import child_env
from cuco_tui.harness.rank_events import ReferenceSaved

COMPARE_TIMEOUT_S = 600.0  # expected() in float64: an imported program runs W gloo processes at each verify shape


@dataclass(frozen=True)
class OutputAgreement:
    """One output of one rank at one verify shape against expected()."""

    shape: str
    rank: int
    output: str
    passed: bool
    max_rel_error: float
    l2_rel_error: float
    unwritten: int = 0
    nonfinite: int = 0
    worst_index: tuple[int, ...] = ()
    worst_got: float = 0.0
    worst_want: float = 0.0

    def sentence(self) -> str:
        if self.unwritten:
            return f"rank {self.rank} left {self.unwritten} elements of {self.output!r} at {self.shape} unwritten"
        if self.nonfinite:
            return f"rank {self.rank} wrote {self.nonfinite} non-finite values into {self.output!r} at {self.shape}"
        return (f"rank {self.rank} {self.output!r} at {self.shape}: max relative error {self.max_rel_error:.3g} "
                f"at {list(self.worst_index)} (got {self.worst_got:.6g}, float64 {self.worst_want:.6g})")


@dataclass(frozen=True)
class ReferenceCheck:
    workload: str
    gpus: tuple[int, ...]
    rtol: float
    rows: tuple[OutputAgreement, ...] = ()
    problem: str = ""  # one line: why the check could not be made or finished
    warnings: tuple[str, ...] = ()  # what the reference said weakens it (as in an evaluation)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problem and bool(self.rows) and all(r.passed for r in self.rows)

    def summary(self) -> str:
        where = f"W={len(self.gpus)} on GPU{'s' if len(set(self.gpus)) > 1 else ''} {','.join(map(str, self.gpus))}"
        if self.problem:
            return f"not verified{f' ({where})' if self.gpus else ''}: {self.problem}"
        failed = [r for r in self.rows if not r.passed]
        if failed:
            return (f"differs from expected() in float64 ({where}, rtol {self.rtol:g}): {failed[0].sentence()}"
                    + (f"; {len(failed) - 1} more output(s) differ" if len(failed) > 1 else ""))
        if not self.rows:
            return f"not verified ({where}): no rank has an output at the verify shapes"
        worst = max(self.rows, key=lambda r: r.max_rel_error)
        shapes = sorted({r.shape for r in self.rows})
        return (f"matches expected() in float64 at {', '.join(shapes)} ({where}): worst max relative error "
                f"{worst.max_rel_error:.3g} (rtol {self.rtol:g}), {len(self.rows)} output(s) of {len(self.gpus)} rank(s)")


def check_reference(workload: Workload, options: EvalOptions, run_root: Path | None = None,
                    compare_timeout_s: float = COMPARE_TIMEOUT_S) -> ReferenceCheck:
    """The reference at every verify shape of `workload` on the group `options` chooses, against
    expected() in float64. Never raises for the reference's own failures: they are the problem."""
    t0 = time.monotonic()
    gpus, why = choose_gpus(workload, options)
    empty = ReferenceCheck(workload.name, tuple(gpus), workload.rtol)
    if not gpus:
        return replace(empty, problem=why.removeprefix("no_gpu: "))
    try:
        workload.check_world(len(gpus))
    except ValueError as exc:
        return replace(empty, problem=str(exc))
    group, _, rundir = run_reference_alone(workload, options, "reference", gpus, run_root)
    done = replace(empty, warnings=tuple(reference_messages(group.ranks)))
    failed = group_failure(group, "it did not finish")
    if failed:
        return replace(done, problem=f"the reference failed on the GPUs: {failed}", seconds=time.monotonic() - t0)
    saved = {e.shape for o in group.ranks for e in o.of(ReferenceSaved)}
    lacking = [s.name for s in workload.verify_shapes if s.name not in saved]
    if lacking:
        return replace(done, problem=f"no rank saved the reference's buffers at {', '.join(lacking)}",
                       seconds=time.monotonic() - t0)
    rows, problem = compare_saved(workload, rundir, len(gpus), compare_timeout_s)
    return replace(done, rows=rows, problem=problem, seconds=time.monotonic() - t0)


def compare_saved(workload: Workload, rundir: Path, world: int,
                  timeout_s: float = COMPARE_TIMEOUT_S) -> tuple[tuple[OutputAgreement, ...], str]:
    """The saved buffers of `rundir` against expected(), in a process of its own: (rows, problem)."""
    argv = [sys.executable, "-m", "cuco_tui.workload.saved_check", str(workload.root), str(rundir), str(world)]
    try:
        run = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=child_env())
    except subprocess.TimeoutExpired:
        return (), f"expected() in float64 took over {timeout_s:.0f} s"
    try:
        report = json.loads(run.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        report = None
    if not isinstance(report, dict):  # nothing, or a line the workload's own code printed last
        tail = (run.stderr.strip().splitlines() or ["no output"])[-1]
        return (), f"comparing with expected() failed: {tail}"
    rows = tuple(OutputAgreement(shape=r["shape"], rank=int(r["rank"]), output=r["output"], passed=bool(r["passed"]),
                                 max_rel_error=float(r["max_rel_error"]), l2_rel_error=float(r["l2_rel_error"]),
                                 unwritten=int(r["unwritten"]), nonfinite=int(r["nonfinite"]),
                                 worst_index=tuple(int(i) for i in r["worst_index"]),
                                 worst_got=float(r["worst_got"]), worst_want=float(r["worst_want"]))
                 for r in report.get("rows", []))
    return rows, "; ".join(report.get("problems", []))
