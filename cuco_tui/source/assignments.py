"""Assignments in blanked code: every `=`, compound assignment (`+=`, `<<=`, ...) and `++`/`--`,
with its target as written and, for `=`, its value. The sync checks read them as writes; the
analyses that follow a value by name (computed from the rank, holding the world size, pointing
into peer memory) read the plain `=` ones."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable

from cuco_tui.source.lexer import expression_end

# `=` but not `==`, `<=`, `>=`, `!=`; with the operator of a compound assignment; `++` and `--`.
_OPERATOR = re.compile(r"(?<![=!<>+\-*/%&|^])(?:[+\-*/%&|^]|<<|>>)?=(?!=)|\+\+|--")
_OPERAND_AFTER = re.compile(r"\s*([\w.\->\[\]*]+)")
_PLAIN_TARGET = re.compile(r"^(?:[\w\s*&:<>]*?[\s*&])?([A-Za-z_][\w:]*)$")


@dataclass(frozen=True)
class Assignment:
    op: str  # "=", "+=", "<<=", ..., "++", "--"
    target: str  # what is assigned, as written: `x`, `float* p`, `c->rank`, `ptrs.p[i]`
    name: str  # the variable assigned when the target is a plain one (`x`, `p`), else ""
    expr: str  # the value of an `=` or compound assignment (see _value_end)
    at: int  # offset of the operator

    @property
    def plain(self) -> bool:
        return self.op == "="


def target_before(code: str, at: int) -> str:
    """The postfix expression that ends just before offset `at` (`c->flags[i]`, `*p`, `T* x`)."""
    k = at
    while k > 0 and code[k - 1] in " \t":
        k -= 1
    end = k
    while k > 0:
        ch = code[k - 1]
        if ch in "])":
            depth, j = 0, k - 1
            while j >= 0:
                if code[j] in "])":
                    depth += 1
                elif code[j] in "[(":
                    depth -= 1
                    if depth == 0:
                        break
                j -= 1
            k = j
        elif ch.isalnum() or ch in "_.*&:":
            k -= 1
        elif ch == ">" and k >= 2 and code[k - 2] == "-":
            k -= 2
        elif ch in " \t" and k >= 2 and (code[k - 2] in ".*" or code[k - 2:k] == "->"):
            k -= 1
        else:
            break
    return code[k:end]


def read_assignments(code: str) -> list[Assignment]:
    out = []
    for m in _OPERATOR.finditer(code):
        op = m.group(0)
        target = target_before(code, m.start())
        if op in ("++", "--") and not target.strip():  # prefix: the operand follows
            after = _OPERAND_AFTER.match(code, m.end())
            target = after.group(1) if after else ""
        if not target.strip():
            continue
        plain = _PLAIN_TARGET.match(target.strip())
        value = "" if op in ("++", "--") else code[m.end():_value_end(code, m.end())].strip()
        out.append(Assignment(op, target, plain.group(1).split("::")[-1] if plain else "", value, m.start()))
    return out


def derived_names(assignments: Iterable[Assignment], derives: Callable[[Assignment, set[str]], str],
                  passes: int) -> set[str]:
    """The names `derives` gives for assignments, given the names found so far ("" for none),
    in file order and again until nothing new comes or after `passes` rounds: values computed
    from values."""
    found: set[str] = set()
    assignments = list(assignments)
    for _ in range(passes):
        before = len(found)
        for a in assignments:
            name = derives(a, found)
            if name:
                found.add(name)
        if len(found) == before:
            break
    return found


def _value_end(code: str, start: int) -> int:
    """Where the value of an assignment ends: at a ',' or ';' outside brackets, or at any ';'
    (a value holds none: one inside braces ends a statement of a lambda or a broken text)."""
    end = expression_end(code, start, ";,")
    semi = code.find(";", start, end)
    return semi if semi >= 0 else end
