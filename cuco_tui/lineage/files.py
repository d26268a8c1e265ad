"""The files of one candidate commit, so that `git show <sha>:<file>` answers every question
about a candidate without this package: its source, design, result, rationale, record, logs."""

from __future__ import annotations

import json
import re
from dataclasses import fields
from typing import Any

from cuco_tui.core.records import CandidateRecord, RecordStatus

SOURCE = "candidate.cu"
DESIGN = "design.json"
RESULT = "result.json"
RATIONALE = "rationale.md"
RECORD = "record.json"
LOGS = "logs"

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_RECORD_FIELDS = frozenset(f.name for f in fields(CandidateRecord))


def dump_json(value: Any) -> str:
    # Sorted keys and a fixed indent keep blobs identical for identical data, so git diffs
    # between candidates show what changed and nothing else.
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def record_json(record: CandidateRecord) -> str:
    """The record minus its source (which is candidate.cu): enough to rebuild the index."""
    d = record.to_dict()
    del d["source"]
    return dump_json(d)


def record_from_json(text: str, source: str = "") -> CandidateRecord:
    d = json.loads(text)
    # A record written by a newer version may carry fields this version lacks; keep the rest.
    d = {k: v for k, v in d.items() if k in _RECORD_FIELDS}
    d["source"] = source
    return CandidateRecord.from_dict(d)


def log_paths(logs: dict[str, Any]) -> dict[str, str]:
    """Map each log name to `logs/<name>.txt`, made safe for a path and unique."""
    out: dict[str, str] = {}
    taken: set[str] = set()
    for name in logs:
        stem = _UNSAFE.sub("_", str(name)).strip("._") or "log"
        path, n = f"{LOGS}/{stem}.txt", 2
        while path in taken:
            path, n = f"{LOGS}/{stem}-{n}.txt", n + 1
        taken.add(path)
        out[name] = path
    return out


def candidate_files(record: CandidateRecord) -> dict[str, bytes]:
    """Every file of the candidate's commit tree, by path."""
    result = record.result if record.result is not None else {"status": RecordStatus.PENDING.value}
    rationale = record.rationale
    if rationale and not rationale.endswith("\n"):
        rationale += "\n"
    files = {
        SOURCE: record.source.encode(),
        DESIGN: dump_json(record.design).encode(),
        RESULT: dump_json(result).encode(),
        RATIONALE: rationale.encode(),
        RECORD: record_json(record).encode(),
    }
    logs = result.get("logs") or {}
    if isinstance(logs, dict):
        for name, path in log_paths(logs).items():
            text = logs[name]
            files[path] = (text if isinstance(text, str) else str(text)).encode()
    return files
