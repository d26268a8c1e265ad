"""Control flow in blanked code: where a statement ends, `for`/`while` loops (header, body,
trip count when the bounds are constants) and `if` statements (condition, then and else branch)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Literal

from cuco_tui.source.constants import Constants
from cuco_tui.source.lexer import closing_bracket, expression_end, parenthesized

_LOOP = re.compile(r"\b(for|while)\s*\(")
_IF = re.compile(r"\bif\s*(?:constexpr\s*)?\(")
_ELSE = re.compile(r"\s*else\b")
# `for (int i = lo; i < hi; ++i)` (or <=, i++, i += 1): a loop whose trip count can be read.
_COUNTED = re.compile(r"\s*(?:[\w:<>]+\s+)*([A-Za-z_]\w*)\s*=\s*([^;]+);\s*\1\s*(<=|<)\s*([^;]+);\s*"
                      r"(?:\+\+\s*\1|\1\s*\+\+|\1\s*\+=\s*1)\s*$")


def statement_end(code: str, at: int) -> int:
    """Offset just past the statement that starts at `at`: past the '}' of a `{...}` block (-1 when
    the block is never closed), past its ';', or at the bracket that closes the enclosing one."""
    k = at
    while k < len(code) and code[k].isspace():
        k += 1
    if k < len(code) and code[k] == "{":
        close = closing_bracket(code, k)
        return -1 if close < 0 else close + 1
    end = expression_end(code, k, ";")
    return end + 1 if end < len(code) and code[end] == ";" else end


@dataclass(frozen=True)
class Loop:
    keyword: Literal["for", "while"]
    header: str  # the text between the parentheses
    start: int  # offset of `for` / `while`
    body_start: int  # first offset after the header's ')'
    body_end: int  # last offset of the body (its '}' or ';')
    bound: str  # the upper bound of a `for` (its condition; the whole header of a `while`)
    count: int | None  # iterations, when the bounds are constants
    first: str = ""  # a counted `for`: its variable's first value, as written ("" for any other loop)
    inclusive: bool = False  # a counted `for` whose bound is reached (`<=`)

    def holds(self, offset: int) -> bool:
        return self.body_start <= offset <= self.body_end

    def count_to(self, bound: int, constants: Constants) -> int | None:
        """The iterations of a counted `for` were its bound `bound`: for a bound the constants do
        not hold (a member set at run time that an analysis knows otherwise); None when the
        loop is not counted or its first value is no constant either."""
        lo = constants.value(self.first) if self.first else None
        return None if lo is None else max(0, bound - lo + (1 if self.inclusive else 0))


def read_loops(code: str, constants: Constants) -> list[Loop]:
    out = []
    for m, open_at, close in parenthesized(code, _LOOP):
        end = statement_end(code, close + 1)
        if end < 0:
            continue
        header = code[open_at + 1:close]
        keyword: Literal["for", "while"] = "for" if m.group(1) == "for" else "while"
        count, bound, first, inclusive = None, header, "", False
        counted = _COUNTED.match(header) if keyword == "for" else None
        if counted:
            first, bound, inclusive = counted.group(2).strip(), counted.group(4), counted.group(3) == "<="
            lo, hi = constants.value(first), constants.value(bound)
            if lo is not None and hi is not None:
                count = max(0, hi - lo + (1 if inclusive else 0))
        elif keyword == "for":
            parts = header.split(";")
            bound = parts[1] if len(parts) > 1 else header
        out.append(Loop(keyword, header, m.start(), close + 1, end - 1, bound, count, first, inclusive))
    return out


def loops_around(loops: Iterable[Loop], offset: int) -> list[Loop]:
    return [lp for lp in loops if lp.holds(offset)]


@dataclass(frozen=True)
class IfStatement:
    at: int  # offset of `if`
    cond_open: int  # offset of the condition's '('
    cond_close: int  # offset of its ')'
    then_end: int  # offset just past the then branch
    else_start: int  # offset of the else branch's first character, -1 without one
    else_end: int  # offset just past the else branch, -1 without one


def read_ifs(code: str) -> list[IfStatement]:
    out = []
    for m, open_at, close in parenthesized(code, _IF):
        then_end = _end_or_eof(code, statement_end(code, close + 1))
        rest = _ELSE.match(code, then_end)
        if rest:
            out.append(IfStatement(m.start(), open_at, close, then_end, rest.end(),
                                   _end_or_eof(code, statement_end(code, rest.end()))))
        else:
            out.append(IfStatement(m.start(), open_at, close, then_end, -1, -1))
    return out


def _end_or_eof(code: str, end: int) -> int:
    return len(code) if end < 0 else end
