"""The search engine: islands, parent selection, explore/exploit, novelty, the MAP-Elites
archive, GPU-pool scheduling, the review gate and the budget; it publishes typed events.

`cuco_tui.search.records` is imported by the agents and the lineage, which the engine imports
in turn; so this package imports nothing eagerly, and its public names load on first use."""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "SearchConfig": "config",
    "ConfigError": "config",
    "SearchEngine": "engine",
    "ReviewError": "engine",
    "SearchSummary": "summary",
    "CandidateRecord": "records",
    "Event": "events",
    "EventBus": "events",
    "SearchStarted": "events",
    "GenerationStarted": "events",
    "ProposalReady": "events",
    "AwaitingReview": "events",
    "ReviewDecided": "events",
    "StageStarted": "events",
    "StageFinished": "events",
    "CandidateCommitted": "events",
    "BestImproved": "events",
    "BudgetSpent": "events",
    "HintAdded": "events",
    "Paused": "events",
    "Resumed": "events",
    "SearchFinished": "events",
    "EngineError": "events",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
