"""How wide a rich renderable is when nothing constrains it: a table or code given that width
scrolls sideways in a narrow pane instead of squeezing its columns or wrapping a token a line."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console
from rich.measure import Measurement

MEASURE_WIDTH = 1000  # wider than any table or line of code we draw


def natural_width(renderable: Any) -> int | None:
    """The cells a rich renderable takes unconstrained (None for text Textual lays out itself)."""
    if isinstance(renderable, str) or not hasattr(renderable, "__rich_console__"):
        return None
    console = Console(width=MEASURE_WIDTH, file=io.StringIO(), color_system=None)
    return Measurement.get(console, console.options, renderable).maximum
