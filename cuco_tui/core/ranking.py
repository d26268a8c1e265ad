"""How candidates rank, one rule for every room: measured ones by speedup, then those verified with
nothing timed, then those only compiled, then failures (tier, rank_key); the best measured
replaced only by one faster beyond noise (is_better, core/noise.py); a finalist's figure, timed
beside other evaluations, ranking only through its confirmation measured alone. The search
decides its best with these, and every reader of a session (`cuco sessions`, `cuco show`,
`cuco export`, the screens) names the same candidate with best_measured."""

from __future__ import annotations

from typing import Iterable

from cuco_tui.core.noise import exceeds, record_speedup
from cuco_tui.core.records import CandidateRecord, id_number
from cuco_tui.core.result import UNTIMED_OK

MEASURED = "measured"
# Verified without timing, or compiled only: a valid parent, ranked after every measured
# candidate, never the best (it has no fitness).
UNMEASURED_OK = UNTIMED_OK
FAILED = 1 + len(UNMEASURED_OK)


def tier(record: CandidateRecord) -> int:
    """0: measured; 1: verified, nothing timed; 2: compiled only (no GPU); 3 (FAILED): the rest."""
    return status_tier(record.status)


def status_tier(status: str, timed: bool = True) -> int:
    """tier() from a status alone, for what shows a candidate without its record (the dashboard's
    leaderboard). `timed` False: a "measured" status without its figure, which has no speed to
    rank by and goes with the failures."""
    if status == MEASURED and timed:
        return 0
    if status in UNMEASURED_OK:
        return 1 + UNMEASURED_OK.index(status)
    return FAILED


def is_failure(record: CandidateRecord) -> bool:
    """A candidate that failed (an exhausted agent's placeholder is no candidate: not a failure)."""
    return tier(record) == FAILED and not record.placeholder


def rank_key(record: CandidateRecord) -> tuple[int, float, int, str]:
    """Sorts best first: measured by speedup, then verified, then compiled only, then failures;
    newer first on ties."""
    speed = record.speedup if record.speedup is not None else 0.0
    return (tier(record), -speed, -record.generation, _neg(record.id))


def _neg(cid: str) -> str:
    # Newer ids first among equals: invert the digits so a plain ascending sort puts them first.
    return "".join(chr(ord("9") - ord(c) + ord("0")) if c.isdigit() else c for c in cid)


def is_better(a: CandidateRecord, b: CandidateRecord | None) -> bool:
    """Whether `a` takes `b`'s place (as the best, as a cell's elite). Two measured candidates:
    only when a is faster beyond noise (core/noise.py), so a tie keeps the one there first;
    otherwise by rank_key."""
    if b is None:
        return True
    sa = record_speedup(a) if tier(a) == 0 else None
    sb = record_speedup(b) if tier(b) == 0 and sa is not None else None
    if sa is not None and sb is not None:
        return exceeds(sa, sb)
    return rank_key(a) < rank_key(b)


def best_of(records: Iterable[CandidateRecord]) -> CandidateRecord | None:
    """The best measured candidate as the search decides it: in id order, each measured one that
    is_better than the best so far takes its place."""
    best: CandidateRecord | None = None
    for r in sorted(records, key=lambda r: id_number(r.id)):
        if r.status == MEASURED and r.speedup is not None and is_better(r, best):
            best = r
    return best


def best_measured(records: Iterable[CandidateRecord]) -> CandidateRecord | None:
    """The session's best as the search decided it: best_of the measured candidates, leaving out
    a finalist's own figure (its confirmation, measured alone, is a record of its own)."""
    return best_of(r for r in records if r.status == MEASURED and r.speedup is not None and not r.finalist)
