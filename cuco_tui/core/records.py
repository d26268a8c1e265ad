"""The record of one candidate as the search, the lineage and the TUI share it."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from cuco_tui.core.result import Status

_ID = re.compile(r"^c(\d+)$")
_EXHAUSTED_REASON = "proposed every valid combination"


class RecordStatus(StrEnum):
    """A record's status: every cascade Status (cuco_tui.core.result), and three of the record's
    own. A StrEnum, so a member equals and hashes as its value ("measured" == MEASURED) and is
    stored as it (record.json, the index, events): sessions on disk read and write the same."""

    REJECTED = Status.REJECTED.value
    COMPILE_ERROR = Status.COMPILE_ERROR.value
    NO_GPU = Status.NO_GPU.value
    RUNTIME_ERROR = Status.RUNTIME_ERROR.value
    DEADLOCK = Status.DEADLOCK.value
    INCORRECT = Status.INCORRECT.value
    VERIFIED = Status.VERIFIED.value
    MEASURED = Status.MEASURED.value
    # Drafted, not yet committed: proposed (or held for review) and not evaluated yet.
    PENDING = "pending"
    # Held for review when the search stopped: neither accepted nor rejected; a resumed search
    # holds it for review again (search/outcomes.py unreviewed).
    UNREVIEWED = "unreviewed"
    # A placeholder an older engine committed when the offline agent had nothing new to propose
    # ("no candidate: ... every valid combination ..."). No code was proposed and nothing was
    # evaluated: it is a note that the agent ran out, not a candidate, and no view counts or ranks
    # it as one. The engine no longer writes them (the agent raises AgentExhausted, the search ends).
    EXHAUSTED = "exhausted"


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
    status: RecordStatus  # given as a RecordStatus, a Status or their value string; stored as the value
    result: dict[str, Any] | None = None  # CascadeResult.to_dict(), None while pending
    speedup: float | None = None  # geometric mean over bench shapes, when measured
    latency_ms: float | None = None  # median of the candidate's time summed over bench shapes
    cost_usd: float = 0.0
    tokens_in: int = 0
    tokens_out: int = 0
    review: str = ""  # str(Review): "", "accepted", "rejected: <reason>", "edited", "unreviewed"
    created: float = 0.0  # unix time
    # What the engine's control flow reads back (a session recorded before these were fields
    # holds them in `extra`: from_dict moves them here).
    finalist: bool = False  # timed beside others at or near the best: its figure does not rank until confirmed
    concurrent: int = 0  # how many other evaluations held GPU groups while this one was timed
    concurrent_with: tuple[str, ...] = ()  # their ids
    confirm_of: str = ""  # a confirmation (kind "confirm"): the finalist it re-measures alone
    review_of: str = ""  # the unreviewed proposal of an earlier run that this one reviews again
    held_because: str = ""  # an unreviewed proposal: why the review gate held it
    rejected_by: str = ""  # turned away before evaluation: "review", "novelty", "agent" or "engine"
    hints: tuple[str, ...] = ()  # the engineer's hints the proposal was asked with (steering reads them on resume)
    meta_cost_usd: float = 0.0  # the agent's meta-summary refreshed just before this record, in dollars
    # The rest: notes for people and the agents (phase, asked, inspirations, duplicate_of,
    # rebenchmark_of, ...). `job` and `lost_jobs` stay here: the Slurm jobs that ran the
    # evaluation, a record for display that nothing reads back to steer the search.
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        try:
            status = RecordStatus(self.status)
        except ValueError:
            known = ", ".join(s.value for s in RecordStatus)
            raise ValueError(f"candidate {self.id} has the status {self.status!r}, which this cuco-tui does not "
                             f"know (it knows {known})") from None
        object.__setattr__(self, "status", status)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = self.status.value
        d["parents"] = list(self.parents)
        d["concurrent_with"] = list(self.concurrent_with)
        d["hints"] = list(self.hints)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CandidateRecord":
        d = _as_read_now(dict(d))
        d["parents"] = tuple(d.get("parents", ()))
        d["concurrent_with"] = tuple(d.get("concurrent_with", ()))
        d["hints"] = tuple(d.get("hints", ()))
        return cls(**d)

    @property
    def reviewed(self) -> Review:
        """The `review` field, typed."""
        return Review.parse(self.review)

    @property
    def placeholder(self) -> bool:
        """An exhausted agent's placeholder (RecordStatus.EXHAUSTED), not a candidate."""
        return self.status is RecordStatus.EXHAUSTED


# The fields an older version kept in `extra`, with the type each is read as.
_FROM_EXTRA = {"finalist": bool, "concurrent": int, "concurrent_with": tuple, "confirm_of": str, "review_of": str,
               "held_because": str, "rejected_by": str, "hints": tuple, "meta_cost_usd": float}


def _as_read_now(d: dict[str, Any]) -> dict[str, Any]:
    """A stored record in this version's terms. The keys of `_FROM_EXTRA` that an older version
    kept in `extra` become fields. Recorded before the status "verified" existed, a candidate
    verified and never timed (ranks sharing one GPU) says "measured" with no speedup and no
    timings: it reads as verified. An exhausted agent's placeholder, recorded as a rejected
    candidate, reads as EXHAUSTED."""
    extra = d.get("extra")
    if isinstance(extra, dict) and any(k in extra for k in _FROM_EXTRA):
        d["extra"] = {k: v for k, v in extra.items() if k not in _FROM_EXTRA}
        for key, kind in _FROM_EXTRA.items():
            if key in extra and not d.get(key):  # absent, or at its default beside an older extra
                d[key] = kind(extra[key])
    result = d.get("result")
    if not isinstance(result, dict):
        return d
    if d.get("status") == "measured" and d.get("speedup") is None and not result.get("timings"):
        d["status"] = "verified"
        d["result"] = {**result, "status": "verified"}
    elif (d.get("status") == "rejected" and d.get("rejected_by") == "agent"
          and _EXHAUSTED_REASON in str(result.get("reason", ""))):
        d["status"] = RecordStatus.EXHAUSTED
    return d


def candidate_id(n: int) -> str:
    """The id of a session's n-th candidate: "c0007"."""
    return f"c{n:04d}"


_TYPED_ID = re.compile(r"[cC]?(\d+)")


def candidate_id_of(typed: str) -> str | None:
    """The candidate id a person means: "c0030", "c30", "0030" and "30" are all c0030; None
    for text that names no candidate."""
    m = _TYPED_ID.fullmatch(typed.strip())
    return candidate_id(int(m.group(1))) if m else None


def id_number(cid: str) -> int:
    """The number in a candidate id ("c0007" -> 7); -1 for anything else."""
    m = _ID.match(cid)
    return int(m.group(1)) if m else -1
