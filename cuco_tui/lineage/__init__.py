"""The session store: one git commit per candidate (tagged with its id), refs per island, a
`best` tag, and an SQLite index rebuilt from git (see repo.py)."""

from cuco_tui.lineage.bundle import export_bundle, import_bundle, open_session_or_bundle
from cuco_tui.lineage.errors import SessionError
from cuco_tui.lineage.index import CandidateSummary
from cuco_tui.lineage.repo import SessionRepo
from cuco_tui.lineage.listing import SessionSummary, list_sessions, new_session_path

__all__ = [
    "CandidateSummary",
    "SessionError",
    "SessionRepo",
    "SessionSummary",
    "export_bundle",
    "import_bundle",
    "list_sessions",
    "open_session_or_bundle",
    "new_session_path",
]
