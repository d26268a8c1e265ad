"""The offline structured agent: strategy templates x design space, steered by results; and the
random-sampling agent over the same space, its yardstick."""

from cuco_tui.agents.offline.agent import OfflineAgent
from cuco_tui.agents.offline.random_sample import RandomSampleAgent
from cuco_tui.agents.offline.strategy import Strategy, StrategyBook

__all__ = ["OfflineAgent", "RandomSampleAgent", "Strategy", "StrategyBook"]
