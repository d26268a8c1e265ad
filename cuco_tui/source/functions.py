"""Function definitions in blanked code: name, kind (`__global__` kernel, `__device__` function
or host function), parameter names and the body's braces; and which function holds an offset."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Literal

from cuco_tui.source.arguments import split_args
from cuco_tui.source.lexer import closing_bracket, parenthesized

_ID = re.compile(r"[A-Za-z_]\w*")
# Names followed by '(' that are not a function being defined: statements, operators and the
# attributes that may stand in a function's head.
NOT_FUNCTIONS = frozenset({
    "if", "for", "while", "switch", "return", "sizeof", "catch", "decltype", "defined", "alignas", "alignof",
    "__launch_bounds__", "__attribute__", "__align__", "__maxnreg__", "__cluster_dims__", "__declspec",
})
_NAME_PAREN = re.compile(r"\b(?!(?:" + "|".join(sorted(NOT_FUNCTIONS)) + r")\b)([A-Za-z_]\w*)\s*\(")
# What may stand between a parameter list's ')' and the body's '{': `const`, `noexcept`,
# `override`, a trailing return type `-> T`, `__restrict__`.
_BEFORE_BODY = re.compile(r"[\s\w:&*>-]*?\{")
_LOOKAHEAD = 200
_TEMPLATE_HEAD = re.compile(r"\btemplate\s*<")


@dataclass(frozen=True)
class Function:
    """A function definition. Offsets index the blanked code; the body is code[body_start:body_end + 1]."""

    name: str
    kind: Literal["global", "device", "host"]  # __global__, __device__ (or __host__ __device__), host
    at: int  # offset of the name
    params_open: int  # offset of the parameter list's '('
    params_close: int  # offset of its ')'
    params: tuple[str, ...]  # parameter names, in order ("" for an unnamed one)
    body_start: int  # offset of '{'
    body_end: int  # offset of '}'

    @property
    def is_kernel(self) -> bool:
        return self.kind == "global"

    def contains(self, offset: int) -> bool:
        return self.body_start <= offset <= self.body_end


def read_functions(code: str) -> list[Function]:
    """Every function definition `head name(params) ... {body}` in blanked code, in file order.
    The head is what stands after the previous statement, block or directive: it must name a
    type (a bare call has none) and hold no `=` outside template parameters (`x = f(y) {`)."""
    out: list[Function] = []
    for m, open_at, close in parenthesized(code, _NAME_PAREN):
        name = m.group(1)
        after = _BEFORE_BODY.match(code, close + 1, min(len(code), close + 1 + _LOOKAHEAD))
        if after is None:
            continue
        head = _head(code, m.start())
        if "=" in _without_templates(head) or not re.search(r"[A-Za-z_]", head):
            continue
        brace = after.end() - 1
        end = closing_bracket(code, brace)
        if end < 0:
            continue
        out.append(Function(name, _kind(head), m.start(), open_at, close,
                            tuple(_param_name(a.text) for a in split_args(code, open_at + 1, close)), brace, end))
    return out


def enclosing(functions: Iterable[Function], offset: int) -> Function | None:
    """The innermost function whose body holds `offset`, or None (file scope)."""
    inner = [f for f in functions if f.contains(offset)]
    return min(inner, key=lambda f: f.body_end - f.body_start) if inner else None


def _head(code: str, name_at: int) -> str:
    """The text before a function's name back to the end of the previous statement or block."""
    start = max(code.rfind(";", 0, name_at), code.rfind("}", 0, name_at), code.rfind("{", 0, name_at)) + 1
    return code[start:name_at]


def _without_templates(head: str) -> str:
    """`head` without its `template <...>` parameter lists (their defaults hold '=')."""
    out, k = [], 0
    for m in _TEMPLATE_HEAD.finditer(head):
        if m.start() < k:
            continue
        out.append(head[k:m.start()])
        depth, j = 0, m.end() - 1
        while j < len(head):
            depth += {"<": 1, ">": -1}.get(head[j], 0)
            if depth == 0:
                break
            j += 1
        k = j + 1
    out.append(head[k:])
    return "".join(out)


def _kind(head: str) -> Literal["global", "device", "host"]:
    words = set(_ID.findall(head))
    return "global" if "__global__" in words else "device" if "__device__" in words else "host"


def _param_name(param: str) -> str:
    """`const float* __restrict__ x = nullptr` -> x; `int[4]` -> int; `void` -> void."""
    ids = _ID.findall(re.sub(r"\[[^\]]*\]", "", param.split("=")[0]))
    return ids[-1] if ids else ""
