"""Commit messages that tell a candidate's story in `git log` alone: a subject line, the first
paragraph of the rationale, and trailers that `git interpret-trailers --parse` reads back."""

from __future__ import annotations

import re

from cuco_tui.core.records import CandidateRecord

BODY_LINES = 15
TRAILER_KEYS = (
    "Candidate-Id",
    "Generation",
    "Island",
    "Kind",
    "Status",
    "Speedup",
    "Latency-Ms",
    "Agent",
    "Cost-Usd",
    "Parents",
)
_TRAILER = re.compile(r"^([A-Za-z0-9-]+):\s?(.*)$")


def _one_line(value: object) -> str:
    # A trailer value must stay on its line, or git would read the rest as a new paragraph.
    return " ".join(str(value).split()) or "-"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def subject(record: CandidateRecord) -> str:
    line = f"{record.id} {_one_line(record.kind)} {_one_line(record.status)}"
    if record.speedup is not None:
        line += f" {record.speedup:.2f}x"
    return line


def first_paragraph(text: str, max_lines: int = BODY_LINES) -> str:
    lines: list[str] = []
    for raw in text.strip().splitlines():
        line = raw.rstrip()
        if not line.strip():
            break
        # git treats a line starting with "---" as the start of a patch and stops looking
        # for trailers there; indent such lines so the trailers below still parse.
        if line.startswith("---"):
            line = "  " + line
        lines.append(line)
    if len(lines) > max_lines:
        lines = lines[:max_lines] + ["[...]"]
    return "\n".join(lines)


def trailers(record: CandidateRecord) -> list[tuple[str, str]]:
    return [
        ("Candidate-Id", record.id),
        ("Generation", str(record.generation)),
        ("Island", str(record.island)),
        ("Kind", _one_line(record.kind)),
        ("Status", _one_line(record.status)),
        ("Speedup", _num(record.speedup)),
        ("Latency-Ms", _num(record.latency_ms)),
        ("Agent", _one_line(record.agent)),
        ("Cost-Usd", f"{record.cost_usd:.4f}"),
        ("Parents", ", ".join(record.parents) or "-"),
    ]


def commit_message(record: CandidateRecord) -> str:
    parts = [subject(record)]
    body = first_paragraph(record.rationale)
    if body:
        parts.append(body)
    parts.append("\n".join(f"{k}: {v}" for k, v in trailers(record)))
    return "\n\n".join(parts) + "\n"


def parse_trailers(message: str) -> dict[str, str]:
    """The trailers of a message this module wrote (the last paragraph), by key."""
    last = message.strip().split("\n\n")[-1]
    out: dict[str, str] = {}
    for line in last.splitlines():
        m = _TRAILER.match(line)
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out
