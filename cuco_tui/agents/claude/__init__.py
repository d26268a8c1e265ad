"""The Claude agent: candidates proposed by a Claude model through the Messages API, applied as
SEARCH/REPLACE edits or full rewrites of the EVOLVE blocks, with per-call dollar accounting and
a budget cap."""

from cuco_tui.agents.claude.accounting import DEFAULT_PRICE, PRICES, Charge, Ledger, Price, price_for
from cuco_tui.agents.claude.agent import DEFAULT_MODEL, ClaudeAgent
from cuco_tui.agents.claude.edits import EditResult, apply_diffs, apply_full, explanation_of
from cuco_tui.agents.claude.prompts import PROMPTS_DIR, JudgeVerdict, Prompts, parse_judge

__all__ = [
    "ClaudeAgent",
    "DEFAULT_MODEL",
    "EditResult",
    "apply_diffs",
    "apply_full",
    "explanation_of",
    "Prompts",
    "PROMPTS_DIR",
    "JudgeVerdict",
    "parse_judge",
    "Ledger",
    "Charge",
    "Price",
    "PRICES",
    "DEFAULT_PRICE",
    "price_for",
]
