"""Calls in blanked code: every `name(...)` that is not a statement keyword, with the namespaces
or class written before the name (`tg` in `tg::ce_copy(...)`), the object a member function is
called on (`c->gemm` in `c->gemm.launch(stream, e)`), its template arguments and its argument
list. Kernel launches (`k<<<...>>>(...)`) are not calls here: `launches` reads them."""

from __future__ import annotations

import re
from dataclasses import dataclass

from cuco_tui.source.arguments import Arg, Call, read_call
from cuco_tui.source.assignments import target_before
from cuco_tui.source.functions import NOT_FUNCTIONS
from cuco_tui.source.lexer import closing_bracket

# A name, template arguments (one level of nesting, no parentheses) and the '(' of its arguments.
_CALL = re.compile(r"\b([A-Za-z_]\w*)\s*(?:<((?:[^;{}()<>]|<[^;{}()<>]*>)*)>)?\s*\(")


@dataclass(frozen=True)
class CallSite:
    """One call. `qualifier` is what stands before the name's last `::` (`cuco::tile_gemm`, "" for
    none, "::" for the global namespace alone); `receiver` the object expression of a member
    call as written (`c->gemm`), "" for a free function."""

    name: str
    qualifier: str
    receiver: str
    template: str  # the template arguments as written, without the angle brackets; "" for none
    at: int  # offset of the name
    call: Call

    @property
    def args(self) -> tuple[Arg, ...]:
        return self.call.args

    @property
    def texts(self) -> list[str]:
        return self.call.texts

    @property
    def qualified(self) -> str:
        """`tg::ce_copy`; the bare name without a qualifier."""
        return f"{self.qualifier}::{self.name}" if self.qualifier not in ("", "::") else self.name


def read_calls(code: str) -> list[CallSite]:
    """Every call in blanked code, in file order (a function's definition reads as a call too:
    `CodeView.calls` leaves those out)."""
    out = []
    for m in _CALL.finditer(code):
        if m.group(1) in NOT_FUNCTIONS:
            continue
        call = read_call(code, m.end() - 1)
        if call is None:
            continue
        qualifier, before = _qualifier(code, m.start())
        member = _member_access(code, before) if not qualifier else -1
        receiver = _object(target_before(code, member)) if member >= 0 else ""
        out.append(CallSite(m.group(1), qualifier, receiver, (m.group(2) or "").strip(), m.start(), call))
    return out


def _object(expr: str) -> str:
    """The object of a member call without what binds looser than the call: `c->layout` for
    `(size_t)c->layout` or `*c->layout` (the cast or dereference applies to the call's result)."""
    e = expr.strip()
    while e:
        if e[0] in "*&":
            e = e[1:].lstrip()
        elif e[0] == "(" and 0 <= (close := closing_bracket(e, 0)) < len(e) - 1:
            e = e[close + 1:].lstrip()
        else:
            break
    return e


def _qualifier(code: str, name_at: int) -> tuple[str, int]:
    """The qualifier written before the name at `name_at` (`a::b` of `a::b::f`) and where it starts."""
    parts: list[str] = []
    k = name_at
    while True:
        j = _skip_space_back(code, k)
        if code[max(0, j - 2):j] != "::":
            break
        j = _skip_space_back(code, j - 2)
        i = j
        while i > 0 and (code[i - 1].isalnum() or code[i - 1] == "_"):
            i -= 1
        parts.insert(0, code[i:j])
        k = i
        if i == j:  # `::f`: the global namespace, nothing more before it
            k = _skip_space_back(code, k)
            break
    if not parts:
        return "", name_at
    if parts == [""]:
        return "::", k
    return "::".join(parts), k


def _member_access(code: str, at: int) -> int:
    """Offset of the `.` or `->` just before `at` (white space between allowed), or -1."""
    j = _skip_space_back(code, at)
    if j >= 1 and code[j - 1] == ".":
        return j - 1
    if j >= 2 and code[j - 2:j] == "->":
        return j - 2
    return -1


def _skip_space_back(code: str, k: int) -> int:
    while k > 0 and code[k - 1].isspace():
        k -= 1
    return k
