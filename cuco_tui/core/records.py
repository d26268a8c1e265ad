"""The record of one candidate as the search, the lineage and the TUI share it."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

_ID = re.compile(r"^c(\d+)$")

# A record status beside the cascade's (cuco_tui.core.result.Status), "pending" and "unreviewed":
# a placeholder an older engine committed when the offline agent had nothing new to propose ("no
# candidate: ... every valid combination ..."). No code was proposed and nothing was evaluated:
# it is a note that the agent ran out, not a candidate, and no view counts or ranks it as one.
# The engine no longer writes them (the agent raises AgentExhausted and the search ends).
EXHAUSTED = "exhausted"
_EXHAUSTED_REASON = "proposed every valid combination"


class ReviewDecision(StrEnum):
    """The engineer's decision on a proposal the review gate held: launch it, commit it as
    rejected (with a reason), or launch the engineer's edit of it instead."""

    ACCEPT = "accept"
    REJECT = "reject"
    EDIT = "edit"


class ReviewOutcome(StrEnum):
    """What the review gate did with a candidate, as its record says: nothing ("", it was not
    held), or the decision's outcome, or "unreviewed" (still held when the search stopped)."""

    NONE = ""
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    EDITED = "edited"
    UNREVIEWED = "unreviewed"


@dataclass(frozen=True)
class Review:
    """A record's `review` field, typed: the outcome, and for a rejection the engineer's reason.
    Stored as one string ("rejected: <reason>"), as every session on disk has it."""

    outcome: ReviewOutcome = ReviewOutcome.NONE
    reason: str = ""

    def __str__(self) -> str:
        if self.outcome is ReviewOutcome.REJECTED:
            return f"rejected: {self.reason}"
        return self.outcome.value

    @classmethod
    def parse(cls, text: str) -> "Review":
        """The stored string read back (an unknown word reads as no review)."""
        head, colon, reason = text.partition(":")
        if colon and head == ReviewOutcome.REJECTED:
            return cls(ReviewOutcome.REJECTED, reason.strip())
        try:
            return cls(ReviewOutcome(text))
        except ValueError:
            return cls()

    @property
    def rejected(self) -> bool:
        return self.outcome is ReviewOutcome.REJECTED


@dataclass(frozen=True)
class CandidateRecord:
    id: str  # "c0007": unique in a session, sortable
    generation: int
    island: int
    kind: str  # "seed" | "fast_path" | "template" | "diff" | "full" | "crossover" | "manual"
    parents: tuple[str, ...]  # candidate ids; () for the seed; 2-3 for a crossover
    source: str  # the candidate .cu, whole
    design: dict[str, Any]  # design coordinates and knobs, e.g. {"backend": "nccl_lsa", ..., "knobs": {...}}
    rationale: str  # why the agent proposed it, in its words
    agent: str  # "offline" | "claude:<model>" | "engineer"
    status: str  # a cuco_tui.core.result.Status value, or "pending"
    result: dict[str, Any] | None = None  # CascadeResult.to_dict(), None while pending
    speedup: float | None = None  # geometric mean over bench shapes, when measured
    latency_ms: float | None = None  # median of the candidate's time summed over bench shapes
    cost_usd: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0
    review: str = ""  # str(Review): "", "accepted", "rejected: <reason>", "edited", "unreviewed"
    created: float = 0.0  # unix time
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["parents"] = list(self.parents)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CandidateRecord":
        d = _as_read_now(dict(d))
        d["parents"] = tuple(d.get("parents", ()))
        return cls(**d)

    @property
    def reviewed(self) -> Review:
        """The `review` field, typed."""
        return Review.parse(self.review)

    @property
    def placeholder(self) -> bool:
        """An exhausted agent's placeholder (EXHAUSTED), not a candidate."""
        return self.status == EXHAUSTED


def _as_read_now(d: dict[str, Any]) -> dict[str, Any]:
    """A stored record in this version's terms. Recorded before the status "verified" existed, a
    candidate verified and never timed (ranks sharing one GPU) says "measured" with no speedup
    and no timings: it reads as verified. An exhausted agent's placeholder, recorded as a
    rejected candidate, reads as EXHAUSTED."""
    result = d.get("result")
    if not isinstance(result, dict):
        return d
    if d.get("status") == "measured" and d.get("speedup") is None and not result.get("timings"):
        d["status"] = "verified"
        d["result"] = {**result, "status": "verified"}
    elif (d.get("status") == "rejected" and (d.get("extra") or {}).get("rejected_by") == "agent"
          and _EXHAUSTED_REASON in str(result.get("reason", ""))):
        d["status"] = EXHAUSTED
    return d


def candidate_id(n: int) -> str:
    """The id of a session's n-th candidate: "c0007"."""
    return f"c{n:04d}"


def id_number(cid: str) -> int:
    """The number in a candidate id ("c0007" -> 7); -1 for anything else."""
    m = _ID.match(cid)
    return int(m.group(1)) if m else -1
