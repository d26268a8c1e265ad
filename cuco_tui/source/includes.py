"""The `#include` lines of a C source, read one way for every reader: L0's check of what a
candidate may include (evaluate/static_checks.py), the headers `cuco export` copies beside it
(cli/export.py), and whether a candidate needs CUTLASS, the prebuilt fused GEMM or the attention
library (toolchain/). A line inside a comment includes nothing."""

from __future__ import annotations

import re
from dataclasses import dataclass

from cuco_tui.source.lexer import INCLUDE_LINE, SourceText

_NAMED = re.compile(r'<([^>]*)>|"([^"]*)"')


@dataclass(frozen=True)
class Include:
    """One `#include` (or `#include_next`) line."""

    offset: int  # where the line's directive starts, in the source
    argument_offset: int  # where what follows `include` starts
    argument: str  # what follows `include`, stripped: `<cuda.h>`, `"cuco_runtime.cuh"`, or a macro
    named: str  # the argument up to its closing `>` or `"`; "" when the line names no header (a macro)
    header: str  # the name between them, stripped: `cuda.h`

    @property
    def through_macro(self) -> bool:
        return not self.named


def includes(source: str | SourceText) -> tuple[Include, ...]:
    """Every include line of `source`, in order (comments blanked first, so none of theirs)."""
    text = source if isinstance(source, SourceText) else SourceText(source)
    out = []
    for m in INCLUDE_LINE.finditer(text.nocomment):
        argument = m.group(1).strip()
        named = _NAMED.match(argument)
        header = "" if named is None else (named.group(1) if named.group(1) is not None else named.group(2)).strip()
        out.append(Include(m.start(), m.start(1), argument, named.group(0) if named else "", header))
    return tuple(out)


def included(source: str | SourceText) -> tuple[str, ...]:
    """The headers `source` includes by name, in order."""
    return tuple(i.header for i in includes(source) if not i.through_macro)
