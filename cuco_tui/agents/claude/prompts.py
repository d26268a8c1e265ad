"""The prompts of the Claude agent: Jinja2 templates under `assets/prompts/`, filled from a
`ProposalRequest` (task, parent code, design coordinates, inspirations, last failure's
diagnostics, meta-summary, hints, design context) and the rules of the candidate contract.

Templates:
    system.md.j2        the role (author, judge or summarizer), the task, the contract, the design space
    full.md.j2          rewrite the parent's EVOLVE blocks (one fenced code block back)
    diff.md.j2          SEARCH/REPLACE edits of the parent
    crossover.md.j2     2-3 parents combined into one full rewrite
    fast_path.md.j2     host-driven seed -> device-initiated rewrite, with the last attempt's objections
    judge.md.j2         is a rewrite device-initiated and plausibly correct (a fixed answer format)
    meta_summary.md.j2  what the search has learned, from recent candidates
    _context.md.j2      macros the others share
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

import jinja2

from cuco_tui.agents.base import ProposalRequest
from cuco_tui.design.space import DIMENSIONS
from cuco_tui.source.regions import split_regions
from cuco_tui.core.records import CandidateRecord
from cuco_tui.core.workload import Workload

__all__ = [
    "PROMPTS_DIR",
    "Prompts",
    "JudgeVerdict",
    "parse_judge",
    "record_view",
    "evolve_blocks",
    "feedback_of",
    "design_line_of",
]

PROMPTS_DIR = Path(__file__).resolve().parents[3] / "assets" / "prompts"

_FAILED = ("rejected", "compile_error", "runtime_error", "deadlock", "incorrect")
_DESIGN_LINE = re.compile(r"^\s*//\s*cuco-design:.*$", re.M)


# ---------------------------------------------------------------------------- views of records


def evolve_blocks(source: str) -> str:
    """The EVOLVE blocks of a candidate with their marker lines, frozen text between blocks
    replaced by one `// ... (frozen code) ...` line."""
    lines = source.split("\n")
    regions = split_regions(source)
    if not regions.evolve:
        return source.rstrip("\n")
    parts = []
    for r in regions.evolve:
        parts.append("\n".join(lines[r.start_line - 2:r.end_line + 1]))
    return "\n// ... (frozen code) ...\n".join(parts)


def design_line_of(record: CandidateRecord) -> str:
    m = _DESIGN_LINE.search(record.source or "")
    if m:
        return m.group(0).strip()
    coords = {k: v for k, v in (record.design or {}).items() if k in DIMENSIONS}
    return "// cuco-design: " + " ".join(f"{k}={v}" for k, v in coords.items()) if coords else ""


def _fmt_speedup(rec: CandidateRecord) -> str:
    return f"{rec.speedup:.3f}x" if rec.speedup else ""


def _result(rec: CandidateRecord) -> dict[str, Any]:
    return rec.result if isinstance(rec.result, dict) else {}


def _render_diag(d: dict[str, Any]) -> str:
    loc = d.get("file", "")
    if d.get("line"):
        loc += f":{d['line']}" + (f":{d['column']}" if d.get("column") else "")
    who = f"[rank {d['rank']}] " if d.get("rank") is not None else ""
    text = f"{who}{loc + ': ' if loc else ''}{d.get('severity', 'error')}: {d.get('message', '')}"
    if d.get("source_line"):
        text += f"\n    {str(d['source_line']).rstrip()}"
        if d.get("column"):
            text += "\n    " + " " * (int(d["column"]) - 1) + "^"
    return text


def feedback_of(record: CandidateRecord, max_diagnostics: int = 8, max_report_lines: int = 40) -> str:
    """The failure diagnostics of an evaluated record, as text for a prompt: the reason, the
    error diagnostics with their source lines, the deadlock report, the failed verifications'
    error norms. "" when the record did not fail."""
    if record.status not in _FAILED:
        return ""
    res = _result(record)
    out = [f"{record.id}: {record.status}" + (f": {res['reason']}" if res.get("reason") else "")]
    diags = [d for d in res.get("diagnostics", []) if isinstance(d, dict)]
    errors = [d for d in diags if d.get("severity") == "error"] or diags
    for d in errors[:max_diagnostics]:
        out.append(_render_diag(d))
    if len(errors) > max_diagnostics:
        out.append(f"... and {len(errors) - max_diagnostics} more diagnostics")
    report = str(res.get("deadlock_report") or "").strip()
    if report:
        lines = report.split("\n")
        out.append("deadlock report:\n" + "\n".join(lines[:max_report_lines])
                   + (f"\n... ({len(lines) - max_report_lines} more lines)" if len(lines) > max_report_lines else ""))
    for v in res.get("verifications", []):
        if isinstance(v, dict) and not v.get("ok", True):
            out.append(f"verification {v.get('shape')}: max relative error {v.get('max_rel_error')}, "
                       f"relative Frobenius error {v.get('rel_fro_error')}, unwritten {v.get('unwritten')}, "
                       f"non-finite {v.get('nonfinite')} of {v.get('elements')} (tolerance {v.get('tolerance')})"
                       + (f"; worst: {v['worst']}" if v.get("worst") else ""))
    return "\n".join(out)


def record_view(record: CandidateRecord, max_rationale: int = 1200) -> dict[str, Any]:
    """What templates show of a record."""
    res = _result(record)
    rationale = (record.rationale or "").strip()
    if len(rationale) > max_rationale:
        rationale = rationale[:max_rationale - 3] + "..."
    latency = f"{record.latency_ms:.3f} ms summed over the bench shapes" if record.latency_ms else ""
    diags = [d for d in res.get("diagnostics", []) if isinstance(d, dict) and d.get("severity") == "error"]
    return {
        "id": record.id,
        "kind": record.kind,
        "parents": list(record.parents),
        "agent": record.agent,
        "status": record.status,
        "speedup": _fmt_speedup(record),
        "latency": latency,
        "design_line": design_line_of(record),
        "rationale": rationale,
        "rationale_head": rationale.split("\n", 1)[0][:240] if rationale else "",
        "reason": str(res.get("reason", "")),
        "source": (record.source or "").rstrip("\n"),
        "blocks": evolve_blocks(record.source or ""),
        "diagnostics": [_render_diag(d).split("\n")[0][:300] for d in diags[:3]],
    }


# ---------------------------------------------------------------------------- judge answers


@dataclass(frozen=True)
class JudgeVerdict:
    accept: bool
    device_initiated: bool | None
    correct: str  # "yes" | "no" | "unsure" | ""
    reasons: tuple[str, ...] = ()
    well_formed: bool = True
    raw: str = field(default="", repr=False)

    @property
    def objections(self) -> tuple[str, ...]:
        if self.reasons:
            return self.reasons
        if not self.well_formed:
            return (f"the review was not in the expected format: {self.raw.strip()[:400]}",)
        return ()


def parse_judge(text: str) -> JudgeVerdict:
    """Read a judge reply in judge.md.j2's format. A reply without a VERDICT line is not an
    acceptance. An ACCEPT that also says DEVICE_INITIATED: NO or CORRECT: NO is not one either."""
    verdict = re.search(r"^\W*VERDICT\W*:?\s*\**\s*(ACCEPT|REJECT)", text, re.I | re.M)
    dev = re.search(r"^\W*DEVICE[_ ]INITIATED\W*:?\s*\**\s*(YES|NO)", text, re.I | re.M)
    cor = re.search(r"^\W*CORRECT\W*:?\s*\**\s*(YES|NO|UNSURE)", text, re.I | re.M)
    reasons: list[str] = []
    m = re.search(r"^\W*REASONS\W*:?\s*$(.*)", text, re.I | re.M | re.S)
    if m:
        for line in m.group(1).split("\n"):
            item = re.sub(r"^\s*(?:[-*\u2022]|\d+[.)])\s*", "", line).strip()
            if item:
                reasons.append(item)
    device = None if dev is None else dev.group(1).upper() == "YES"
    correct = "" if cor is None else cor.group(1).lower()
    accept = (verdict is not None and verdict.group(1).upper() == "ACCEPT"
              and device is not False and correct != "no")
    return JudgeVerdict(accept, device, correct, tuple(reasons), well_formed=verdict is not None, raw=text)


# ---------------------------------------------------------------------------- the renderer


class Prompts:
    """Renders the agent's prompts from the templates in `directory`."""

    def __init__(self, directory: Path = PROMPTS_DIR) -> None:
        self.directory = Path(directory)
        if not (self.directory / "system.md.j2").is_file():
            raise FileNotFoundError(f"no prompt templates in {self.directory} (system.md.j2 is missing)")
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(self.directory)),
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=False,
            autoescape=False,
        )
        self._task_cache: dict[Path, str] = {}

    def render(self, name: str, **context: Any) -> str:
        text = self.env.get_template(name).render(**context)
        return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"

    def _task(self, workload: Workload) -> str:
        path = Path(workload.task)
        if path not in self._task_cache:
            try:
                self._task_cache[path] = path.read_text().strip()
            except OSError:
                self._task_cache[path] = f"(the task description {path} could not be read)"
        return self._task_cache[path]

    # ------------------------------------------------------------------ system

    def system(self, workload: Workload, role: str = "author") -> str:
        return self.render("system.md.j2", role=role, workload=workload, task=self._task(workload),
                           dimensions=DIMENSIONS)

    # ------------------------------------------------------------------ proposals

    def _common(self, request: ProposalRequest) -> dict[str, Any]:
        parent = request.parents[0]
        feedback = request.feedback.strip() or feedback_of(parent)
        view_request = _RequestView(request, feedback)
        return {
            "request": view_request,
            "parent": record_view(parent),
            "parents": [record_view(p) for p in request.parents],
            "inspirations": [record_view(r) for r in request.inspirations],
            "n_blocks": max(1, len(split_regions(parent.source).evolve)),
        }

    def proposal(self, request: ProposalRequest) -> str:
        """The user prompt for a `diff`, `full` or `crossover` request."""
        kind = request.kind if request.kind in ("diff", "full", "crossover") else "full"
        if kind == "crossover" and len(request.parents) < 2:
            kind = "full"
        return self.render(f"{kind}.md.j2", **self._common(request))

    def fast_path(self, request: ProposalRequest, attempt: int = 1, previous_source: str = "",
                  objections: Sequence[str] = (), previous_error: str = "") -> str:
        return self.render("fast_path.md.j2", **self._common(request), attempt=attempt,
                           previous_blocks=evolve_blocks(previous_source) if previous_source else "",
                           objections=list(objections), previous_error=previous_error)

    def judge(self, request: ProposalRequest, candidate_source: str, rationale: str = "") -> str:
        return self.render("judge.md.j2", original_blocks=evolve_blocks(request.parents[0].source),
                           candidate_blocks=evolve_blocks(candidate_source), rationale=rationale.strip())

    def meta_summary(self, history: Iterable[CandidateRecord], previous: str = "") -> str:
        return self.render("meta_summary.md.j2", records=[record_view(r) for r in history], previous=previous)


class _RequestView:
    """A ProposalRequest as templates see it, with the feedback filled in from the parent's
    result when the request carries none."""

    def __init__(self, request: ProposalRequest, feedback: str) -> None:
        self._r = request
        self.feedback = feedback
        self.hints = [h.strip() for h in request.hints if h and h.strip()]
        self.meta_summary = request.meta_summary.strip()
        self.design_context = request.design_context.strip()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._r, name)
