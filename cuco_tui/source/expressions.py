"""Integer constant expressions of C, as the static analyses need them: a grid size, a barrier
count, a loop bound. Literals (decimal or hex, with or without u/l suffixes), names of known
constants, casts to integer types, unary + and -, + - * / % << >> and parentheses. Anything
else (a call, a comparison, an unknown name) makes the value unknown (None)."""

from __future__ import annotations

import ast
import re
from typing import Callable, Mapping

_SUFFIX = re.compile(r"(?<![\w.])(0[xX][0-9a-fA-F]+|\d+)[uUlL]+\b")
_INT_TYPE = r"(?:unsigned|signed|int|long|short|size_t|u?int(?:8|16|32|64)_t)"
_CAST = re.compile(r"\bstatic_cast\s*<\s*[\w:\s]+>|\(\s*" + _INT_TYPE + r"(?:\s+" + _INT_TYPE + r")*\s*\)")
_MAX_SHIFT = 64  # wider shifts are not constants a kernel launch or a barrier count would use


def _c_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q  # C truncates toward zero


def _c_mod(a: int, b: int) -> int:
    return a - b * _c_div(a, b)


def _shift(op: Callable[[int, int], int]) -> Callable[[int, int], int | None]:
    return lambda a, b: op(a, b) if 0 <= b < _MAX_SHIFT else None


_BINOPS: dict[type, Callable[[int, int], int | None]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: _c_div(a, b) if b else None,
    ast.Mod: lambda a, b: _c_mod(a, b) if b else None,
    ast.LShift: _shift(lambda a, b: a << b),
    ast.RShift: _shift(lambda a, b: a >> b),
}


def evaluate(expr: str, constants: Mapping[str, int | None]) -> int | None:
    """The value of the integer expression `expr` (already blanked of comments), or None."""
    e = _CAST.sub(" ", _SUFFIX.sub(r"\1", " ".join(expr.split()))).strip()
    if not e or "//" in e or "**" in e:  # not C operators; Python would read them as its own
        return None
    try:
        tree = ast.parse(e, mode="eval")
        return _value(tree.body, constants)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _value(node: ast.AST, constants: Mapping[str, int | None]) -> int | None:
    if isinstance(node, ast.Constant):
        v = node.value
        return v if isinstance(v, int) and not isinstance(v, bool) else None
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _value(node.operand, constants)
        return None if v is None else -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        a = _value(node.left, constants)
        b = _value(node.right, constants) if a is not None else None
        return None if a is None or b is None else _BINOPS[type(node.op)](a, b)
    return None


def last_name(expr: str) -> str:
    """The name an expression ends with: `c->copy_stream` -> copy_stream, `s[i]` -> s,
    `(cudaStream_t)x` -> x; the expression itself when it holds no name."""
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    names = [n for n in re.findall(r"[A-Za-z_]\w*", expr)
             if n not in ("cudaStream_t", "const", "static_cast", "reinterpret_cast")]
    return names[-1] if names else expr.strip()
