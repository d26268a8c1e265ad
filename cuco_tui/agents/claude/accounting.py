"""What Claude calls cost: a price table, a ledger of calls, and the session's dollar cap.

Prices are list prices in USD per million tokens (input, output) for the Messages API. A model
name matches the longest table entry it starts with (so dated names such as
`claude-sonnet-4-5-20250929` and provider spellings such as `anthropic.claude-opus-4-1@...`
find their family); a name that matches nothing is charged `DEFAULT_PRICE`, the most expensive
row, so an unknown model can only make the budget run out early, never late. Prompt-cache
writes cost 1.25x the input price and cache reads 0.1x.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Mapping

from cuco_tui.agents.base import BudgetExhausted

__all__ = [
    "Price",
    "PRICES",
    "DEFAULT_PRICE",
    "price_for",
    "Charge",
    "Ledger",
    "usage_tokens",
]


@dataclass(frozen=True)
class Price:
    input: float  # USD per million input tokens
    output: float  # USD per million output tokens
    cache_write: float | None = None  # USD per million; None: 1.25 x input
    cache_read: float | None = None  # USD per million; None: 0.1 x input

    @property
    def write(self) -> float:
        return self.cache_write if self.cache_write is not None else 1.25 * self.input

    @property
    def read(self) -> float:
        return self.cache_read if self.cache_read is not None else 0.1 * self.input


# Family prefix -> price. Longest matching prefix wins.
PRICES: dict[str, Price] = {
    # Opus 4.5 and 4.6 dropped to $5 / $25; Opus 4 and 4.1 are $15 / $75. Other Opus 4.x names
    # fall back to the "claude-opus-4" row, the higher price (conservative).
    "claude-opus-4-6": Price(5.0, 25.0),
    "claude-opus-4-5": Price(5.0, 25.0),
    "claude-opus-4-1": Price(15.0, 75.0),
    "claude-opus-4-0": Price(15.0, 75.0),
    "claude-opus-4": Price(15.0, 75.0),
    "claude-sonnet-4-6": Price(3.0, 15.0),
    "claude-sonnet-4-5": Price(3.0, 15.0),
    "claude-sonnet-4-0": Price(3.0, 15.0),
    "claude-sonnet-4": Price(3.0, 15.0),
    "claude-haiku-4-5": Price(1.0, 5.0),
    "claude-haiku-4": Price(1.0, 5.0),
    "claude-3-7-sonnet": Price(3.0, 15.0),
    "claude-3-5-sonnet": Price(3.0, 15.0),
    "claude-3-5-haiku": Price(0.8, 4.0),
    "claude-3-opus": Price(15.0, 75.0),
    "claude-3-haiku": Price(0.25, 1.25),
}

# Unknown models: the most expensive row, so the cap errs on the safe side.
DEFAULT_PRICE = Price(15.0, 75.0)


def _normalize(model: str) -> str:
    name = model.strip().lower()
    for prefix in ("anthropic.", "us.anthropic.", "eu.anthropic.", "apac.anthropic."):
        if name.startswith(prefix):
            name = name[len(prefix):]
    return name.replace("@", "-")


def price_for(model: str, prices: Mapping[str, Price] | None = None) -> tuple[Price, bool]:
    """The price of `model` and whether the table knows it (False: the conservative default)."""
    table = PRICES if prices is None else prices
    name = _normalize(model)
    best: str | None = None
    for key in table:
        k = _normalize(key)
        if (name == k or name.startswith(k + "-")) and (best is None or len(k) > len(_normalize(best))):
            best = key
    if best is None:
        return DEFAULT_PRICE, False
    return table[best], True


def _get(usage: Any, name: str) -> int:
    if usage is None:
        return 0
    value = usage.get(name) if isinstance(usage, Mapping) else getattr(usage, name, None)
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def usage_tokens(usage: Any) -> tuple[int, int, int, int]:
    """(input, output, cache_write, cache_read) tokens of an SDK `Usage` object or a dict."""
    return (_get(usage, "input_tokens"), _get(usage, "output_tokens"),
            _get(usage, "cache_creation_input_tokens"), _get(usage, "cache_read_input_tokens"))


@dataclass(frozen=True)
class Charge:
    """One call as the ledger recorded it. `tokens_in` counts every prompt token (plain, cache
    write and cache read); `usd` is what they and the output tokens cost."""

    model: str
    purpose: str
    tokens_in: int
    tokens_out: int
    usd: float
    cache_write: int = 0
    cache_read: int = 0
    priced: bool = True  # False: the model was not in the table and DEFAULT_PRICE was used


@dataclass
class Ledger:
    """Every call of a session and its cost, with an optional dollar cap.

    `ensure_budget()` is called before each call: it raises `BudgetExhausted` once the money
    spent has reached the cap (a call in flight may overrun it by its own cost; no call starts
    after that). `cap_usd=None` means no cap."""

    model: str = "claude-sonnet-4-6"
    cap_usd: float | None = None
    prices: Mapping[str, Price] | None = None
    calls: list[Charge] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ pricing

    def cost(self, usage: Any, model: str | None = None) -> float:
        tin, tout, cw, cr = usage_tokens(usage)
        price, _ = price_for(model or self.model, self.prices)
        return (tin * price.input + tout * price.output + cw * price.write + cr * price.read) / 1e6

    def charge(self, usage: Any, model: str | None = None, purpose: str = "") -> Charge:
        """Record one call's usage; return what it cost."""
        name = model or self.model
        tin, tout, cw, cr = usage_tokens(usage)
        _, known = price_for(name, self.prices)
        c = Charge(model=name, purpose=purpose, tokens_in=tin + cw + cr, tokens_out=tout,
                   usd=self.cost(usage, name), cache_write=cw, cache_read=cr, priced=known)
        with self._lock:
            self.calls.append(c)
        return c

    # ------------------------------------------------------------------ totals

    @property
    def spent_usd(self) -> float:
        return sum(c.usd for c in self.calls)

    @property
    def tokens_in(self) -> int:
        return sum(c.tokens_in for c in self.calls)

    @property
    def tokens_out(self) -> int:
        return sum(c.tokens_out for c in self.calls)

    @property
    def exhausted(self) -> bool:
        return self.cap_usd is not None and self.spent_usd >= self.cap_usd

    def ensure_budget(self) -> None:
        if self.exhausted:
            raise BudgetExhausted(
                f"the Claude budget is spent: ${self.spent_usd:.4f} of ${self.cap_usd:.2f} over "
                f"{len(self.calls)} call{'s' if len(self.calls) != 1 else ''}; raise the budget to go on")

    def summary(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "calls": len(self.calls),
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
            "spent_usd": round(self.spent_usd, 6),
            "cap_usd": self.cap_usd,
        }
