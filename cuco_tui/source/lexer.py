"""The lexical view of a candidate's C source: comments and literals blanked out with every
offset kept, brackets matched, offsets turned into lines and columns."""

from __future__ import annotations

import bisect
import re
from typing import Iterator

from cuco_tui.source.regions import split_lines

_ATTRS = re.compile(r"\b(?:alignas|__align__|__declspec)\s*\([^()]*\)"
                    r"|__attribute__\s*\(\([^()]*(?:\([^()]*\))*[^()]*\)\)")
_CLASS_HEAD = re.compile(r"^\s*(?:template\s*<[^>]*>\s*)?(?:typedef\s+)?(?:struct|class|union)\b[^()]*$")
IDENT_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_$")
_RAW_PREFIXES = ("R", "u8R", "uR", "UR", "LR")


def _blank(text: str) -> tuple[str, str]:
    """Two copies of `text`, each exactly as long with every newline in place (so offsets,
    lines and columns still match the original): comments blanked out; and comments plus the
    contents of string and char literals blanked out (their quotes stay)."""
    n = len(text)
    nocomment = list(text)
    nolit = list(text)

    def wipe(buf: list[str], a: int, b: int) -> None:
        for k in range(a, min(b, n)):
            if buf[k] not in "\n\r":
                buf[k] = " "

    def token_before(i: int) -> str:
        j = i
        while j > 0 and (text[j - 1] in IDENT_CHARS or text[j - 1] == "."):
            j -= 1
        return text[j:i]

    i = 0
    while i < n:
        c = text[i]
        nxt = text[i + 1] if i + 1 < n else ""
        if c == "/" and nxt == "/":
            j = i + 2
            while j < n:
                if text[j] == "\n":
                    # a backslash at the end of a // comment continues it on the next line
                    k = j - 1
                    if k >= 0 and text[k] == "\r":
                        k -= 1
                    if k > i + 1 and text[k] == "\\":
                        j += 1
                        continue
                    break
                j += 1
            wipe(nocomment, i, j)
            wipe(nolit, i, j)
            i = j
        elif c == "/" and nxt == "*":
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            wipe(nocomment, i, j)
            wipe(nolit, i, j)
            i = j
        elif c == '"':
            if token_before(i) in _RAW_PREFIXES:
                paren = text.find("(", i + 1)
                delim = text[i + 1:paren] if paren >= 0 else ""
                if paren < 0 or len(delim) > 16 or any(ch in delim for ch in ' ()\\\t\n"'):
                    j = _scan_quoted(text, i, '"')  # not a well-formed raw string: an ordinary one
                else:
                    close = text.find(")" + delim + '"', paren + 1)
                    j = n if close < 0 else close + len(delim) + 2
            else:
                j = _scan_quoted(text, i, '"')
            wipe(nolit, i + 1, j - 1 if j <= n and text[j - 1:j] == '"' else j)
            i = j
        elif c == "'":
            before = token_before(i)
            if before and before[0].isdigit() or (before.startswith(".") and before[1:2].isdigit()):
                i += 1  # a digit separator, as in 1'000'000
                continue
            j = _scan_quoted(text, i, "'")
            wipe(nolit, i + 1, j - 1 if text[j - 1:j] == "'" and j - 1 > i else j)
            i = j
        else:
            i += 1
    return "".join(nocomment), "".join(nolit)


_CLOSER = {"(": ")", "[": "]", "{": "}"}


def closing_bracket(code: str, open_at: int) -> int:
    """Offset of the bracket that closes the one at `open_at` ('(', '[' or '{') in blanked
    code (comments and literals already blanked), or -1 when it is never closed or a bracket of
    the wrong kind closes first (`( ]`: the text is not what it seems)."""
    if open_at >= len(code) or code[open_at] not in _CLOSER:
        return -1
    want = [_CLOSER[code[open_at]]]
    for k in range(open_at + 1, len(code)):
        ch = code[k]
        if ch in _CLOSER:
            want.append(_CLOSER[ch])
        elif ch in ")]}":
            if ch != want[-1]:
                return -1
            want.pop()
            if not want:
                return k
    return -1


def expression_end(code: str, start: int, stops: str = ";") -> int:
    """Offset of the first character of `stops` at bracket depth 0 from `start` in blanked code,
    or of the bracket that closes an enclosing one, or len(code): where an expression ends."""
    depth = 0
    for k in range(start, len(code)):
        ch = code[k]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth < 0:
                return k
        elif ch in stops and depth == 0:
            return k
    return len(code)


def parenthesized(code: str, pattern: re.Pattern[str]) -> Iterator[tuple[re.Match[str], int, int]]:
    """(match, offset of its '(', offset of the matching ')') for each match of `pattern` (which
    ends with the '(') in blanked code whose parentheses close."""
    for m in pattern.finditer(code):
        close = closing_bracket(code, m.end() - 1)
        if close >= 0:
            yield m, m.end() - 1, close


def matching_angle(code: str, at: int) -> int:
    """Offset of the '>' that closes the template arguments opening with the '<' at `at`, or of
    the '<' that opens those closing with the '>' at `at`; -1 when there is none before a ';',
    '{' or '}' (so `a < b` is no template)."""
    step = 1 if code[at:at + 1] == "<" else -1 if code[at:at + 1] == ">" else 0
    if step == 0:
        return -1
    depth, k = 0, at
    while 0 <= k < len(code):
        ch = code[k]
        if ch in "<>":
            depth += 1 if (ch == "<") == (step == 1) else -1
            if depth == 0:
                return k
        elif ch in ";{}":
            return -1
        k += step
    return -1


def _scan_quoted(text: str, i: int, quote: str) -> int:
    """Offset just past the literal that opens at text[i] (a quote): past its closing quote,
    or at the end of its line when it is not closed there."""
    n = len(text)
    j = i + 1
    while j < n:
        ch = text[j]
        if ch == "\\":
            j += 2
            continue
        if ch == quote:
            return j + 1
        if ch == "\n":
            return j
        j += 1
    return n


INCLUDE_LINE = re.compile(r"^[ \t]*#[ \t]*include(?:_next)?\b[ \t]*(.*)$", re.M)


class SourceText:
    """A candidate's text with line/column lookup and the two blanked copies."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.nocomment, code = _blank(text)
        # `#include <fstream>` names a header, not a type: the include check looks at those lines.
        self.code = INCLUDE_LINE.sub(lambda m: " " * len(m.group(0)), code)
        self._scopes: list[tuple[int, bool]] | None = None
        self.starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.lines = split_lines(text)

    def pos(self, offset: int) -> tuple[int, int]:
        """1-based (line, column) of an offset."""
        k = bisect.bisect_right(self.starts, offset) - 1
        return k + 1, offset - self.starts[k] + 1

    def line(self, no: int) -> str:
        return self.lines[no - 1].rstrip("\r") if 0 < no <= len(self.lines) else ""

    def in_class_body(self, offset: int) -> bool:
        """Whether the innermost braces around `offset` are a struct, class or union body."""
        if self._scopes is None:
            self._scopes = [(0, False)]
            stack: list[bool] = []
            code = self.code
            for k, ch in enumerate(code):
                if ch == "{":
                    j = k
                    while j > 0 and code[j - 1] not in ";{}":
                        j -= 1
                    head = _ATTRS.sub(" ", code[j:k])
                    stack.append(_CLASS_HEAD.search(head) is not None)
                elif ch == "}":
                    if stack:
                        stack.pop()
                else:
                    continue
                self._scopes.append((k + 1, bool(stack) and stack[-1]))
        k = bisect.bisect_right(self._scopes, (offset, True)) - 1
        return self._scopes[k][1]

    def match_paren(self, open_at: int) -> int:
        """Offset of the ')' matching the '(' at open_at in the blanked code, or -1."""
        k = closing_bracket(self.code, open_at)
        return k if k >= 0 and self.code[k] == ")" else -1
