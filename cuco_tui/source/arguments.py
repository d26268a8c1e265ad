"""Argument lists in blanked code: the top-level arguments of a call, a launch configuration
or a parameter list, split on the commas that are not inside brackets or template arguments."""

from __future__ import annotations

import re
from dataclasses import dataclass

from cuco_tui.source.lexer import closing_bracket

_NAME_BEFORE = re.compile(r"[A-Za-z_]\w*$")  # `min<int>`; `i < n` (spaced) is a comparison
_TEMPLATE_START = re.compile(r"\s*[A-Za-z_:]")


@dataclass(frozen=True)
class Arg:
    """One argument: its text without the surrounding white space, and where that text starts."""

    text: str
    start: int


@dataclass(frozen=True)
class Call:
    """The argument list of a call whose '(' is at `open_at` and ')' at `close_at`."""

    args: tuple[Arg, ...]
    open_at: int
    close_at: int

    @property
    def texts(self) -> list[str]:
        return [a.text for a in self.args]


def split_args(code: str, a: int, b: int) -> list[Arg]:
    """The top-level arguments of code[a:b]. `f(x, )` has two (the second empty), `f( )` none.
    A '<' that opens template arguments (`std::min<int>(a, b)`, `T<A, B>`: right after a name,
    closed before any ';', '(' or ')') hides its commas; `f(i < n, j > 2)` has two arguments."""
    out: list[Arg] = []
    depth = 0
    angle = 0
    start = a
    for k in range(a, b):
        ch = code[k]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "<" and depth == 0 and _NAME_BEFORE.search(code, start, k) and \
                _TEMPLATE_START.match(code[k + 1:k + 3]) and _looks_template(code, k, b):
            angle += 1
        elif ch == ">" and angle > 0 and code[k - 1] != "-":
            angle -= 1
        elif ch == "," and depth == 0 and angle == 0:
            out.append(_arg(code, start, k))
            start = k + 1
    if code[start:b].strip() or out:
        out.append(_arg(code, start, b))
    return out


def read_call(code: str, open_at: int) -> Call | None:
    """The arguments of the call whose '(' is at `open_at`, or None when it is never closed."""
    close = closing_bracket(code, open_at)
    if close < 0:
        return None
    return Call(tuple(split_args(code, open_at + 1, close)), open_at, close)


def _arg(code: str, a: int, b: int) -> Arg:
    raw = code[a:b]
    lead = len(raw) - len(raw.lstrip())
    return Arg(raw.strip(), a + lead)


def _looks_template(code: str, lt: int, end: int) -> bool:
    """Whether the '<' at `lt` opens a template argument list (a matching '>' before any ';' or ')')."""
    gt = code.find(">", lt)
    return 0 <= gt < end and not re.search(r"[;()]", code[lt:gt]) and code[lt:gt + 1].count("<") == 1
