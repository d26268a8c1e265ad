"""What `cuco workload import` recorded about a program (`program.json` in the workload's folder),
read by the tools that talk about it: the offline agent's refusal names the collectives and ops of
a program it has nothing to search on, `cuco workload check` names the placeholder seed. No torch."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RECORD = "program.json"
NO_SEED_MARK = "cuco-import: no seed"  # the placeholder seed's line (no pattern was mapped)


def program_record(root: Path) -> dict[str, Any] | None:
    """The workload's program record, or None for a workload that was not imported from a program."""
    path = Path(root) / RECORD
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except ValueError:
        return None


def unmapped_message(root: Path, name: str) -> str | None:
    """Why the offline agent has nothing to search on an imported program: what its trace holds and
    which patterns were seen but not mapped; None when `root` holds no program record."""
    record = program_record(root)
    if record is None:
        return None
    seen = [f"{p['description']} ({p['problem']})" for p in record.get("patterns", []) if p.get("problem")]
    found = f"; it saw {'; '.join(seen)}" if seen else "; no pattern the tool knows"
    return (f"the offline agent has nothing to search on {name}: its program ({record.get('program', 'program.py')}) "
            f"has {record.get('summary', 'no recorded trace')}{found}; search it with --agent claude and "
            f"ANTHROPIC_API_KEY set, or write a seed with knobs (docs/workloads.md)")
