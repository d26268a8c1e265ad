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
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from cuco_tui.core.result import CascadeResult, Diagnostic, Level, Status

if TYPE_CHECKING:  # cascade imports this module
    from cuco_tui.evaluate.cascade import EvalOptions

TOOLS = ("memcheck", "initcheck", "synccheck", "racecheck")
SLOWDOWN = 20.0  # how much wider each launch's limit is under the tool
DEADLINE_FACTOR = 5.0  # ... and the whole run's backstop
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

    def where(self) -> str:
        place = f"{Path(self.file).name}:{self.line}" if self.file and self.line else "no source line"
        kernel = f" in {self.kernel}" if self.kernel else ""
        thread = f", thread {self.thread}" if self.thread else ""
        return f"{place}{kernel}{thread}"

    def describe(self) -> str:
        extra = f"; {self.details[0]}" if self.details else ""
        return f"rank {self.rank}: {self.what} at {self.where()}{extra}"


def options_for(options: EvalOptions) -> EvalOptions:
    """The evaluation options of a run under the tool: verification only, no perturbed schedules,
    launch limits widened."""
    return replace(options, bench=False, shapes=(), perturb=False,
                   timeout_floor_s=options.timeout_floor_s * SLOWDOWN,
                   timeout_factor=options.timeout_factor * SLOWDOWN,
                   first_launch_timeout_s=options.first_launch_timeout_s * SLOWDOWN)


def plan_entries(tool: str) -> dict:
    """What the ranks' plan says under the tool: which tool (the workers turn CuPy's pool off), and
    wider limits for joining the group and the candidate's init (every module loaded is instrumented)."""
    return {"sanitize": tool, "setup_timeout_s": 120.0 * DEADLINE_FACTOR, "init_timeout_s": 120.0 * DEADLINE_FACTOR}


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
    """The rank worker's command under the tool (the launcher adds --plan and --rank)."""
    if tool not in TOOLS:
        raise ValueError(f"unknown compute-sanitizer tool {tool!r}: one of {', '.join(TOOLS)}")
    return [str(executable), "--tool", tool, "--print-limit", str(PRINT_LIMIT), python, "-m",
            "cuco_tui.harness.worker"]


_AT_NEW = re.compile(r"^at (?P<kernel>.+?)(?:\+0x[0-9a-fA-F]+)? in (?P<file>\S+?):(?P<line>\d+)")
_AT_OLD = re.compile(r"^at 0x[0-9a-fA-F]+ in (?P<file>\S+?):(?P<line>\d+):(?P<kernel>.+)")
_AT_BARE = re.compile(r"^at (?P<kernel>.+?)(?:\+0x[0-9a-fA-F]+)?$")
_THREAD = re.compile(r"^by thread (\(\d+,\d+,\d+\)) in block (\(\d+,\d+,\d+\))")
_SUMMARY = re.compile(r"^(?:ERROR|RACECHECK) SUMMARY: (\d+) (?:error|hazard)")
_NOT_FINDINGS = ("COMPUTE-SANITIZER", "LEAK SUMMARY", "Target application returned", "This tool is deprecated")


def parse_report(text: str, rank: int) -> tuple[list[Finding], int | None]:
    """(the findings of one rank's report, the count its summary gives, None without one).
    A finding starts on an unindented line after the tool's prefix; its indented lines say
    where ('at …', 'by thread …') and what else; host backtraces are dropped."""
    findings: list[Finding] = []
    summary: int | None = None
    current: dict | None = None

    def close() -> None:
        if current is not None:
            findings.append(Finding(rank, current["what"], current.get("kernel", ""), current.get("file", ""),
                                    current.get("line"), current.get("thread", ""), tuple(current["details"])))

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
                summary = int(m.group(1))
                continue
            if stripped.startswith(_NOT_FINDINGS):
                continue
            close()
            current = {"what": stripped.removeprefix("Error: "), "details": [], "in_backtrace": False}
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
    missing: tuple[int, ...]  # ranks that left no report (killed before the tool wrote it)

    def diagnostics(self, candidate_name: str) -> list[Diagnostic]:
        out = []
        for f in self.findings:
            mine = bool(f.file) and Path(f.file).name == Path(candidate_name).name
            out.append(Diagnostic(level=int(Level.VERIFY), severity="error", code=f"sanitizer-{self.tool}",
                                  file=candidate_name if mine else "", line=f.line if mine else None,
                                  message=f"compute-sanitizer {self.tool}: {f.describe()}"))
        if self.missing:
            out.append(Diagnostic(level=int(Level.VERIFY), severity="warning", code=f"sanitizer-{self.tool}",
                                  message=f"compute-sanitizer {self.tool}: no report from rank(s) "
                                          f"{', '.join(map(str, self.missing))} (the tool did not start there, "
                                          f"or the rank was stopped first)"))
        return out

    def summary(self) -> str:
        if not self.errors:
            unread = f" (no report from rank(s) {', '.join(map(str, self.missing))})" if self.missing else ""
            return f"compute-sanitizer {self.tool}: no errors{unread}"
        first = self.findings[0].describe() if self.findings else "(no finding printed)"
        return f"compute-sanitizer {self.tool}: {self.errors} error(s); first: {first}"


def read_reports(tool: str, rundir: Path, world: int) -> Report:
    """Every rank's report, from what the launcher kept of its standard output and error."""
    findings: list[Finding] = []
    errors, missing = 0, []
    for rank in range(world):
        text = ""
        for stream in ("stdout", "stderr"):
            try:
                text += (rundir / f"rank{rank}.{stream}").read_text(errors="replace") + "\n"
            except OSError:
                pass
        if f"{_PREFIX} COMPUTE-SANITIZER" not in text:
            missing.append(rank)  # the tool never started, or its output is gone
            continue
        found, counted = parse_report(text, rank)
        findings += found
        errors += max(counted or 0, len(found))
    return Report(tool, tuple(findings), errors, tuple(missing))


def with_report(result: CascadeResult, report: Report, candidate_name: str) -> CascadeResult:
    """`result` with the tool's findings as diagnostics; a verified candidate with findings is
    incorrect (the tool saw it touch memory it must not, or hazards its answer hid)."""
    diagnostics = list(result.diagnostics) + report.diagnostics(candidate_name)
    if report.errors and result.status.ok:
        return replace(result, status=Status.INCORRECT, diagnostics=diagnostics,
                       reason=f"{report.summary()} (the output itself verified)")
    return replace(result, diagnostics=diagnostics, reason=f"{result.reason}; {report.summary()}")
