"""The one error the lineage store raises for things a person can cause or fix."""

from __future__ import annotations


class SessionError(Exception):
    """A session folder is missing, is not a session, already holds one, or lacks a candidate.
    The message is a sentence that says which folder or candidate and what to do."""
