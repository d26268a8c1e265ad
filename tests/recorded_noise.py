"""Measured candidates of a recorded search, with the spreads they were measured with, for the
tests of the noise test (cuco_tui/core/noise.py) in every room that uses it.

tests/data/noise/gemm_reducescatter-h100x4.json holds twelve record.json of
docs/data/2026-11-26-gemm_reducescatter-offline-h100x4.bundle (4 x H100, 30 repetitions a shape)
and the session's bounds. What they show: c0006, c0007, c0012 and c0017 re-measured alone the
sources of c0004, c0005, c0010 and c0015 (timed beside another evaluation): the same code twice.
c0013 and c0019 at mlp-down-70b: 24 and 22 GB/s with overlapping interquartile ranges;
c0004 and c0000 there: 24 and 22 GB/s with narrow ones."""

from __future__ import annotations

import json
from functools import lru_cache

from cuco_tui.core.bounds import Bounds
from cuco_tui.core.records import CandidateRecord
from repo_paths import DATA

RECORDED = DATA / "noise" / "gemm_reducescatter-h100x4.json"
SAME_SOURCE = (("c0004", "c0006"), ("c0005", "c0007"), ("c0010", "c0012"), ("c0015", "c0017"))


@lru_cache(maxsize=1)
def _data() -> dict:
    return json.loads(RECORDED.read_text())


def records() -> dict[str, CandidateRecord]:
    """The recorded candidates by id, in id order."""
    return {d["id"]: CandidateRecord.from_dict(d) for d in _data()["records"]}


def bounds() -> Bounds:
    return Bounds.from_dict(_data()["bounds"])
