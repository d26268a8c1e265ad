"""compute-sanitizer as an on-demand level for one candidate (`cuco eval --sanitize TOOL`).

The ranks run the verification launches under NVIDIA's compute-sanitizer (memcheck: out-of-bounds
and misaligned accesses, API errors; initcheck: reads of memory nothing wrote; synccheck: barriers
that not every thread reaches; racecheck: shared-memory hazards inside a block). Each rank writes
its own report; the findings become diagnostics that name the
kernel, the candidate's source line (the candidate is built with -lineinfo for this run), the
thread and block. A launch runs 10-100x slower under the tool, so the launch limits are widened
and nothing is timed; the perturbed schedules stay off (their interposer and the tool would both
stand between the candidate and the CUDA runtime). The tool writes to the process's standard
output, which the launcher keeps per rank (rank<N>.stdout), so each rank's report is its own."""

from __future__ import annotations

import os
import re
import shutil
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from cuco_tui.core.result import CascadeResult, Diagnostic, Level, Status
from cuco_tui.evaluate.levels import EvaluationLevel, LevelUnavailable, Prepared, Setup
from cuco_tui.harness.launcher import GroupRun
from cuco_tui.harness.plan import RunPlan

if TYPE_CHECKING:  # cascade imports this module
    from cuco_tui.evaluate.cascade import EvalOptions

TOOLS = ("memcheck", "initcheck", "synccheck", "racecheck")
SLOWDOWN = 20.0  # how much wider every limit is under the tool (the plan's time_scale)
PADDING = 256  # bytes memcheck puts after every allocation: an overrun lands there, not in the next buffer
PRINT_LIMIT = 50  # findings per rank the tool reports in full
_PREFIX = "========="


class SanitizerUnavailable(RuntimeError):
    """compute-sanitizer was asked for and this machine has none."""


@dataclass(frozen=True)
class Finding:
    rank: int
    what: str  # "Invalid __global__ write of size 4 bytes"
    kernel: str = ""
    file: str = ""
    line: int | None = None
    thread: str = ""  # "(32,0,0) in block (1,0,0)"
    details: tuple[str, ...] = ()  # "Address 0x… is out of bounds", …
    severity: str = "error"  # "warning" for what the tool reports as one (racecheck's warnings)

    def where(self) -> str:
        place = f"{Path(self.file).name}:{self.line}" if self.file and self.line else "no source line"
        kernel = f" in {self.kernel}" if self.kernel else ""
        thread = f", thread {self.thread}" if self.thread else ""
        return f"{place}{kernel}{thread}"

    def describe(self) -> str:
        extra = f"; {self.details[0]}" if self.details else ""
        return f"rank {self.rank}: {self.what} at {self.where()}{extra}"


def options_for(options: EvalOptions) -> EvalOptions:
    """The evaluation options of a run under the tool: verification only, no perturbed schedules."""
    return replace(options, bench=False, shapes=(), perturb=False)


def plan_for(plan: RunPlan, tool: str) -> RunPlan:
    """The ranks' plan under the tool: which tool (the workers turn CuPy's pool off), and how much
    wider every limit is (the ranks' watchdogs, the launcher's grace and backstop)."""
    return replace(plan, sanitize=tool, limits=replace(plan.limits, time_scale=SLOWDOWN))


def find_sanitizer(nvcc: Path | None = None) -> Path:
    """The compute-sanitizer executable: on PATH, else beside nvcc or under $CUDA_HOME or
    /usr/local/cuda (bin/, or the toolkit's compute-sanitizer/ folder)."""
    found = shutil.which("compute-sanitizer")
    if found:
        return Path(found)
    roots = [str(Path(nvcc).resolve().parent.parent) if nvcc else None, os.environ.get("CUDA_HOME"),
             "/usr/local/cuda"]
    for root in filter(None, roots):
        for sub in ("bin", "compute-sanitizer"):
            path = Path(root) / sub / "compute-sanitizer"
            if path.is_file() and os.access(path, os.X_OK):
                return path
    raise SanitizerUnavailable("compute-sanitizer was not found (on PATH, under $CUDA_HOME or /usr/local/cuda); "
                               "it comes with the CUDA toolkit")


def worker_argv(tool: str, executable: Path, python: str) -> list[str]:
    """The rank worker's command under the tool (the launcher adds --plan and --rank).

    An error in a kernel ends that kernel, not the CUDA context (the rank goes on to report and
    its peers are not left waiting); errors returned by CUDA calls are the candidate's to handle
    and the harness's to report (NCCL and CuPy probe for entry points that may be missing, which
    the tool would count); the worker's exit code is the harness's to read."""
    if tool not in TOOLS:
        raise ValueError(f"unknown compute-sanitizer tool {tool!r}: one of {', '.join(TOOLS)}")
    argv = [str(executable), "--tool", tool, "--prefix", _PREFIX, "--print-limit", str(PRINT_LIMIT),
            "--destroy-on-device-error", "kernel", "--report-api-errors", "no", "--check-exit-code", "no"]
    if tool == "memcheck":
        argv += ["--padding", str(PADDING)]
    return argv + [python, "-m", "cuco_tui.harness.worker"]


_OFFSET = r"(?:[+:]0x[0-9a-fA-F]+)?"
_AT_NEW = re.compile(r"^at (?P<kernel>.+?)" + _OFFSET + r" in (?P<file>\S+?):(?P<line>\d+)")
_AT_OLD = re.compile(r"^at 0x[0-9a-fA-F]+ in (?P<file>\S+?):(?P<line>\d+):(?P<kernel>.+)")
_AT_BARE = re.compile(r"^at (?P<kernel>.+?)" + _OFFSET + "$")
_AT_INLINE = re.compile(r" at (?P<kernel>\S.*?)" + _OFFSET + r" in (?P<file>\S+?):(?P<line>\d+)")  # racecheck
_THREAD = re.compile(r"^by thread (\(\d+,\d+,\d+\)) in block (\(\d+,\d+,\d+\))")
_SUMMARY = re.compile(r"^(?:ERROR SUMMARY: (\d+) errors?\s*$|RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?)")
_NOT_FINDINGS = ("COMPUTE-SANITIZER", "LEAK SUMMARY", "ERROR SUMMARY", "Target application returned",
                 "This tool is deprecated", "Error: process didn't terminate successfully")


def parse_report(text: str, rank: int) -> tuple[list[Finding], int | None]:
    """(the findings of one rank's report, the errors its summary counts; None without a summary,
    a report cut off). A finding starts on an unindented line after the tool's prefix; its indented
    lines say where ('at …', 'by thread …') and what else; host backtraces are dropped."""
    findings: list[Finding] = []
    summary: int | None = None
    current: dict | None = None

    def close() -> None:
        if current is not None:
            findings.append(Finding(rank, current["what"], current.get("kernel", ""), current.get("file", ""),
                                    current.get("line"), current.get("thread", ""), tuple(current["details"]),
                                    current["severity"]))

    for raw in text.splitlines():
        if not raw.startswith(_PREFIX):
            continue
        body = raw[len(_PREFIX):]
        stripped = body.strip()
        if not stripped:
            continue
        indent = len(body) - len(body.lstrip(" "))
        if indent <= 1:
            if m := _SUMMARY.match(stripped):
                summary = (summary or 0) + int(m.group(1) or m.group(2))
                continue
            if stripped.startswith(_NOT_FINDINGS):
                continue
            close()
            severity = "warning" if stripped.startswith("Warning: ") else "error"
            current = {"what": stripped.removeprefix("Error: ").removeprefix("Warning: "), "details": [],
                       "in_backtrace": False, "severity": severity}
            if m := _AT_INLINE.search(stripped):  # racecheck names the first access's place on this line
                current.update(kernel=m.group("kernel").strip(), file=m.group("file"), line=int(m.group("line")))
            continue
        if current is None or current["in_backtrace"]:
            continue
        if stripped.startswith("Saved host backtrace"):
            current["in_backtrace"] = True
        elif "file" not in current and (m := _AT_OLD.match(stripped) or _AT_NEW.match(stripped)):
            current.update(kernel=m.group("kernel").strip(), file=m.group("file"), line=int(m.group("line")))
        elif "kernel" not in current and (m := _AT_BARE.match(stripped)):
            current["kernel"] = m.group("kernel").strip()
        elif m := _THREAD.match(stripped):
            current["thread"] = f"{m.group(1)} in block {m.group(2)}"
        elif not stripped.startswith(("Host Frame", "Device Frame")):
            current["details"].append(stripped)
    close()
    return findings, summary


@dataclass(frozen=True)
class Report:
    tool: str
    findings: tuple[Finding, ...]
    errors: int  # as the summaries count them (findings past the print limit included)
    unread: tuple[tuple[int, str], ...] = ()  # (rank, why) for each rank whose report is not whole

    def diagnostics(self, candidate_name: str) -> list[Diagnostic]:
        out = []
        for f in self.findings:
            mine = bool(f.file) and Path(f.file).name == Path(candidate_name).name
            out.append(Diagnostic(level=int(Level.VERIFY), severity=f.severity, code=f"sanitizer-{self.tool}",
                                  file=candidate_name if mine else "", line=f.line if mine else None,
                                  message=f"compute-sanitizer {self.tool}: {f.describe()}"))
        for rank, why in self.unread:
            out.append(Diagnostic(level=int(Level.VERIFY), severity="warning", code=f"sanitizer-{self.tool}",
                                  message=f"compute-sanitizer {self.tool}: rank {rank}'s report {why}"))
        return out

    def summary(self) -> str:
        if self.errors:
            first = next((f.describe() for f in self.findings if f.severity == "error"), "(none printed)")
            return f"compute-sanitizer {self.tool}: {self.errors} error(s); first: {first}"
        if self.unread:
            ranks = ", ".join(str(rank) for rank, _ in self.unread)
            return f"compute-sanitizer {self.tool}: no error in the reports read; rank(s) {ranks} left none whole"
        return f"compute-sanitizer {self.tool}: no errors"


def read_reports(tool: str, rundir: Path, world: int) -> Report:
    """Every rank's report, from what the launcher kept of its standard output and error."""
    findings: list[Finding] = []
    errors, unread = 0, []
    for rank in range(world):
        text = ""
        for stream in ("stdout", "stderr"):
            try:
                text += (rundir / f"rank{rank}.{stream}").read_text(errors="replace") + "\n"
            except OSError:
                pass
        if f"{_PREFIX} COMPUTE-SANITIZER" not in text:
            unread.append((rank, "is missing (the tool did not start there)"))
            continue
        found, counted = parse_report(text, rank)
        findings += found
        if counted is None:
            unread.append((rank, "was cut off (the rank was stopped before the tool's summary)"))
        errors += max(counted or 0, sum(f.severity == "error" for f in found))
    return Report(tool, tuple(findings), errors, tuple(unread))


def with_report(result: CascadeResult, report: Report, candidate_name: str) -> CascadeResult:
    """`result` with the tool's findings as diagnostics; a verified candidate with findings is
    incorrect (the tool saw it touch memory it must not, or hazards its answer hid)."""
    diagnostics = list(result.diagnostics) + report.diagnostics(candidate_name)
    if report.errors and result.status.ok:
        return replace(result, status=Status.INCORRECT, diagnostics=diagnostics,
                       reason=f"{report.summary()} (the output itself verified)")
    return replace(result, diagnostics=diagnostics, reason=f"{result.reason}; {report.summary()}")


class Sanitizer(EvaluationLevel):
    """The level (evaluate/levels.py): verification only, built with -lineinfo, every rank started
    under the tool with the plan's limits widened (in the ranks: harness/rank_steps.py UnderSanitizer),
    the tool's reports read into the result."""

    name = "compute-sanitizer"

    def __init__(self, tool: str) -> None:
        self.tool = tool

    def narrow(self, options: EvalOptions) -> EvalOptions:
        return options_for(options)

    def compile_flags(self) -> tuple[str, ...]:
        return ("-lineinfo",)

    def prepare(self, plan: RunPlan, setup: Setup) -> Prepared:
        try:
            argv = worker_argv(self.tool, find_sanitizer(setup.toolchain.nvcc), sys.executable)
        except SanitizerUnavailable as exc:
            raise LevelUnavailable(f"cannot sanitize: {exc}") from exc
        return Prepared(plan_for(plan, self.tool), argv)

    def finish(self, result: CascadeResult, group: GroupRun) -> CascadeResult:
        report = read_reports(self.tool, group.rundir, len(group.ranks))
        return with_report(result, report, Path(result.candidate).name)
