"""Export of one candidate: its source, result and rationale (and design) as plain files in a
folder, by default ./export/<session>-<id>/, the same bytes the session's commit holds."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cuco_tui.lineage.files import dump_json
from cuco_tui.core.records import CandidateRecord

DEFAULT_ROOT = Path("export")


@dataclass(frozen=True)
class Exported:
    folder: Path
    files: tuple[Path, ...]


def default_folder(session: str, candidate_id: str, root: Path = DEFAULT_ROOT) -> Path:
    return Path(root) / f"{session}-{candidate_id}"


def export_candidate(record: CandidateRecord, folder: Path) -> Exported:
    """Write <id>.cu, result.json, rationale.md and design.json into `folder` (made if missing;
    files there of the same names are replaced). Raises OSError with the path on failure."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rationale = record.rationale if record.rationale.endswith("\n") or not record.rationale else record.rationale + "\n"
    contents = {
        f"{record.id}.cu": record.source,
        "result.json": dump_json(record.result if record.result is not None else {"status": record.status}),
        "rationale.md": rationale,
        "design.json": dump_json(record.design),
    }
    written = []
    for name, text in contents.items():
        path = folder / name
        path.write_text(text)
        written.append(path)
    return Exported(folder, tuple(written))
