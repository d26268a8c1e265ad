"""The offline structured agent: strategy templates x design space, steered by results."""

from cuco_tui.agents.offline.agent import OfflineAgent
from cuco_tui.agents.offline.strategy import Strategy, StrategyBook

__all__ = ["OfflineAgent", "Strategy", "StrategyBook"]
