"""Named integer constants of a candidate: `constexpr`/`const` integers, object-like
`#define`s, and `dim3` variables (their extents, for grid sizes). Scopes are not tracked: a name
defined more than once with different values is unknown, never a guess."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal, Mapping

from cuco_tui.source.arguments import split_args
from cuco_tui.source.expressions import evaluate

_INT_TYPES = r"(?:long\s+long|int|long|short|size_t|int64_t|int32_t|uint32_t|uint64_t|unsigned|auto)"
_CONST = re.compile(
    r"(?<![\w$])(?:static\s+)?(?:inline\s+)?(?:constexpr|const)\s+(?:static\s+)?(?:unsigned\s+|signed\s+)?"
    + _INT_TYPES + r"\s+([A-Za-z_]\w*)\s*(?:=\s*([^;{}]+?)|\{\s*([^;{}]+?)\s*\})\s*[;,]")
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+([^\n]+)$", re.M)
_DIM3 = re.compile(r"\bdim3\s+([A-Za-z_]\w*)\s*[({]([^;]*)[)}]\s*;")
_DIM3_CALL = re.compile(r"^dim3\s*[({](.*)[)}]$", re.S)
_PASSES = 4  # constants defined from constants, this many levels deep


@dataclass(frozen=True)
class Constant:
    """One definition of a named constant: its name, the expression as written, where it is."""

    name: str
    expr: str
    at: int
    kind: Literal["const", "define", "dim3"]


@dataclass(frozen=True)
class Constants:
    """Every definition, the integer value of each name (None where it is defined more than once
    with different values, or its value is not a constant), and the extent (x*y*z) of each
    `dim3` variable whose extent is known."""

    definitions: tuple[Constant, ...] = ()
    values: Mapping[str, int | None] = field(default_factory=dict)
    extents: Mapping[str, int] = field(default_factory=dict)

    def value(self, expr: str) -> int | None:
        """The value of an integer expression over these constants, or None."""
        return evaluate(expr, self.values)

    def blocks(self, expr: str) -> int | None:
        """How many blocks (or threads) a launch dimension holds: `dim3(x, y)` is x*y, a `dim3`
        variable its extent, anything else its integer value; None when unknown."""
        e = expr.strip()
        m = _DIM3_CALL.match(e)
        if m:
            return _product([a.text for a in split_args(m.group(1), 0, len(m.group(1)))], self.values)
        if e in self.extents:
            return self.extents[e]
        return self.value(e)


def read_constants(code: str) -> Constants:
    """The constants of blanked code (comments and literals already blanked)."""
    defs: list[Constant] = []
    for m in _DEFINE.finditer(code):
        defs.append(Constant(m.group(1), m.group(2).strip(), m.start(), "define"))
    for m in _CONST.finditer(code):
        defs.append(Constant(m.group(1), (m.group(2) or m.group(3)).strip(), m.start(1), "const"))
    for m in _DIM3.finditer(code):
        defs.append(Constant(m.group(1), m.group(2).strip(), m.start(1), "dim3"))
    defs.sort(key=lambda d: d.at)
    exprs: dict[str, list[str]] = {}
    for d in defs:
        if d.kind != "dim3":
            exprs.setdefault(d.name, []).append(d.expr)
    values: dict[str, int | None] = {}
    for _ in range(_PASSES):
        for name, texts in exprs.items():
            found = {evaluate(t, values) for t in texts}
            values[name] = found.pop() if len(found) == 1 else None
    dims: dict[str, set[int | None]] = {}
    for d in defs:
        if d.kind == "dim3":
            dims.setdefault(d.name, set()).add(_product([a.text for a in split_args(d.expr, 0, len(d.expr))], values))
    extents = {name: v for name, found in dims.items() if len(found) == 1 for v in found if v is not None}
    return Constants(tuple(defs), values, extents)


def _product(exprs: list[str], values: Mapping[str, int | None]) -> int | None:
    if not exprs:
        return None
    total = 1
    for e in exprs:
        v = evaluate(e, values)
        if v is None:
            return None
        total *= v
    return total
