"""A candidate's profile kept in its session (core/profile.py: the summary per rank; the Chrome
trace): profile.json and profile.trace.json in a commit under refs/profiles/<id> (repo.py
set_profile), so `git show refs/profiles/c0042:profile.trace.json > trace.json` gives the trace
to open in ui.perfetto.dev. A candidate's files are committed once; a profile asked for later
lives beside them, and a newer one replaces it (the older stays in the ref's history)."""

from __future__ import annotations

import json
from pathlib import Path

from cuco_tui.core.profile import Profile
from cuco_tui.core.profile_trace import MAX_TRACE_BYTES
from cuco_tui.lineage.errors import SessionError
from cuco_tui.lineage.files import dump_json
from cuco_tui.lineage.repo import SessionRepo

SUMMARY = "profile.json"
TRACE = "profile.trace.json"


def keep_profile(repo: SessionRepo, candidate_id: str, profile: Profile) -> Profile:
    """Store `profile` (its trace read from the file it names, which the cascade kept under
    MAX_TRACE_BYTES) with the candidate; the profile as stored, its trace naming the session's file."""
    if candidate_id not in repo:
        raise SessionError(f"no candidate {candidate_id!r} in session {repo.path}")
    files: dict[str, bytes] = {}
    if profile.trace:
        trace = Path(profile.trace).read_bytes()
        if len(trace) > MAX_TRACE_BYTES:  # the cascade caps it; a file of another origin is refused
            raise SessionError(f"the trace {profile.trace} is {len(trace)} bytes, over the "
                               f"{MAX_TRACE_BYTES} a session keeps")
        files[TRACE] = trace
    stored = Profile(profile.shape, profile.launches, profile.ranks, profile.problem,
                     trace=TRACE if files else "", notes=profile.notes)
    files[SUMMARY] = dump_json(stored.to_dict()).encode()
    head = stored.lines()[0].rstrip(":")
    repo.set_profile(candidate_id, files, f"profile {candidate_id}\n\n{head}.\n")
    return stored


def stored_profile(repo: SessionRepo, candidate_id: str) -> Profile | None:
    """The candidate's newest profile, None when it has none."""
    data = repo.profile_file(candidate_id, SUMMARY)
    if data is None:
        return None
    try:
        return Profile.from_dict(json.loads(data))
    except (ValueError, KeyError, TypeError) as e:
        raise SessionError(f"{repo.path}: the profile of {candidate_id} cannot be read ({e})") from e
