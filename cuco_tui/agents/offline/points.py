"""The offline space as a set of points: every (strategy, knobs) a workload's StrategyBook can
render, normalized, valid on the machine's capabilities. The offline agent walks it when its
random draws find nothing new; the random-sampling agent draws from it uniformly. One function
enumerates it, so both agents search exactly the same space."""

from __future__ import annotations

import itertools
import json

from cuco_tui.agents.base import Proposal
from cuco_tui.agents.offline.strategy import Knobs, Strategy, StrategyBook
from cuco_tui.core.records import CandidateRecord
from cuco_tui.design.space import Capabilities


def point_key(name: str, knobs: Knobs) -> str:
    """One point's identity: its strategy and its (normalized) knobs."""
    return name + json.dumps(knobs, sort_keys=True)


def valid_points(book: StrategyBook, caps: Capabilities) -> list[tuple[Strategy, Knobs]]:
    """Every distinct valid point of `book` on `caps`, in the book's order (strategies as listed,
    knob values as each lists them): two settings that normalize to the same knobs (the same
    code) are one point. The seed's own point is among them: an agent leaves it out itself."""
    points, seen = [], set()
    for s in book.strategies:
        names = list(s.knobs)
        for values in itertools.product(*(s.knobs[k] for k in names)):
            knobs = s.normalized(dict(zip(names, values)))
            key = point_key(s.name, knobs)
            if key not in seen and s.valid(knobs, caps):
                seen.add(key)
                points.append((s, knobs))
    return points


def normalized_in(book: StrategyBook, name: str, knobs: Knobs) -> Knobs:
    """`knobs` as strategy `name` normalizes them (as given when the book has no such strategy)."""
    try:
        return book.get(name).normalized(knobs)
    except Exception:
        return knobs


def defaults_in(book: StrategyBook, name: str) -> Knobs:
    """Strategy `name`'s default knobs ({} when the book has no such strategy)."""
    try:
        return book.get(name).default_knobs()
    except Exception:
        return {}


def seed_key(book: StrategyBook) -> str:
    """The seed's own point: its strategy at the defaults, in every session before any proposal."""
    name = book.seed_strategy
    return point_key(name, normalized_in(book, name, defaults_in(book, name)))


def strategy_of(record: CandidateRecord, seed_strategy: str = "host_sequential") -> tuple[str, Knobs]:
    """The strategy and knobs a record was rendered from ("" when it names none: an engineer's
    edit, a Claude candidate); the seed is its own strategy."""
    knobs = dict(record.design.get("knobs", {}))
    name = knobs.pop("strategy", None) or (seed_strategy if record.kind == "seed" else "")
    return name, knobs


def record_key(book: StrategyBook, record: CandidateRecord) -> str | None:
    """The point a record stands at, as point_key names it (None: it names no strategy)."""
    name, knobs = strategy_of(record, book.seed_strategy)
    if not name:
        return None
    if record.kind == "seed" and not knobs:  # the seed is its strategy at the defaults
        knobs = defaults_in(book, name)
    return point_key(name, normalized_in(book, name, knobs))


def proposal_at(book: StrategyBook, strategy: Strategy, knobs: Knobs, *, kind: str, parents: tuple[str, ...],
                why: str, agent: str) -> Proposal:
    """The whole candidate at one point (knobs normalized already), its rationale `why` followed
    by the strategy's description and the design it lands on."""
    point = strategy.point(knobs)
    return Proposal(
        kind=kind,
        parents=parents,
        source=book.render(strategy, knobs),
        design=point.to_dict(),
        rationale=f"{why}\nStrategy {strategy.name}: {strategy.description}.\nDesign: {point.line()[16:]}",
        agent=agent,
    )
