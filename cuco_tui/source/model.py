"""`CandidateSource`: a candidate's text read once, for every static analysis.

It holds the lexed text (`lexed`: comments and literals blanked, offsets kept), the EVOLVE
regions, and two views of the blanked code, each with its functions, kernel launches, calls,
declarations, namespaces, constants, loops and `if` statements, computed on first use: `whole` (the whole file) and `evolve` (the
EVOLVE blocks only, every other line blanked too, offsets still those of the file). The L0 sync
checks read the whole file; the design classifier reads only what a candidate may change."""

from __future__ import annotations

from functools import cached_property

from cuco_tui.source.arguments import Call, read_call
from cuco_tui.source.assignments import Assignment, read_assignments
from cuco_tui.source.calls import CallSite, read_calls
from cuco_tui.source.constants import Constants, read_constants
from cuco_tui.source.declarations import Declaration, Namespaces, read_declarations, read_namespaces
from cuco_tui.source.functions import Function, enclosing, read_functions
from cuco_tui.source.launches import Launch, read_launches
from cuco_tui.source.lexer import SourceText, closing_bracket
from cuco_tui.source.regions import Regions, design_in, split_regions
from cuco_tui.source.statements import IfStatement, Loop, read_ifs, read_loops, statement_end


class CodeView:
    """Blanked code whose offsets are the candidate's, and what the analyses read from it."""

    def __init__(self, code: str, lexed: SourceText) -> None:
        self.code = code
        self._lexed = lexed

    def line(self, offset: int) -> int:
        """1-based line of an offset."""
        return self._lexed.pos(offset)[0]

    @property
    def line_starts(self) -> list[int]:
        """The offset where each line starts (line 1 at index 0)."""
        return self._lexed.starts

    def closing(self, open_at: int) -> int:
        return closing_bracket(self.code, open_at)

    def call(self, open_at: int) -> Call | None:
        return read_call(self.code, open_at)

    def statement_end(self, at: int) -> int:
        return statement_end(self.code, at)

    @cached_property
    def functions(self) -> tuple[Function, ...]:
        return tuple(read_functions(self.code))

    @cached_property
    def launches(self) -> tuple[Launch, ...]:
        return tuple(read_launches(self.code))

    @cached_property
    def calls(self) -> tuple[CallSite, ...]:
        """The calls, without the functions' own definitions."""
        defined = {f.at for f in self.functions}
        return tuple(c for c in read_calls(self.code) if c.at not in defined)

    @cached_property
    def declarations(self) -> tuple[Declaration, ...]:
        return tuple(read_declarations(self.code))

    @cached_property
    def namespaces(self) -> Namespaces:
        return read_namespaces(self.code)

    @cached_property
    def constants(self) -> Constants:
        return read_constants(self.code)

    @cached_property
    def loops(self) -> tuple[Loop, ...]:
        return tuple(read_loops(self.code, self.constants))

    @cached_property
    def ifs(self) -> tuple[IfStatement, ...]:
        return tuple(read_ifs(self.code))

    @cached_property
    def assignments(self) -> tuple[Assignment, ...]:
        return tuple(read_assignments(self.code))

    def enclosing(self, offset: int) -> Function | None:
        return enclosing(self.functions, offset)


class CandidateSource:
    """One candidate's C source, parsed once and shared by the analyses that read it."""

    def __init__(self, text: str, file_name: str = "") -> None:
        self.text = text
        self.file_name = file_name

    @classmethod
    def of(cls, source: "str | CandidateSource", file_name: str | None = None) -> "CandidateSource":
        """`source` itself when it is already parsed (for `file_name`, when one is given: the
        regions' diagnostics name the file), else a new one."""
        if isinstance(source, CandidateSource):
            if file_name is None or source.file_name == file_name:
                return source
            return cls(source.text, file_name)
        return cls(source, file_name or "")

    @cached_property
    def lexed(self) -> SourceText:
        return SourceText(self.text)

    @cached_property
    def regions(self) -> Regions:
        return split_regions(self.text, self.file_name)

    @cached_property
    def design(self) -> dict[str, str] | None:
        """The key=value pairs of the `// cuco-design:` line (see regions.design_of)."""
        return design_in(self.regions)

    @cached_property
    def whole(self) -> CodeView:
        return CodeView(self.lexed.code, self.lexed)

    @cached_property
    def evolve(self) -> CodeView:
        code = list(self.lexed.code)
        starts = self.lexed.starts
        keep = [False] * len(starts)
        for region in self.regions.evolve:
            for no in range(region.start_line, region.end_line + 1):
                keep[no - 1] = True
        for k, start in enumerate(starts):
            if not keep[k]:
                end = starts[k + 1] - 1 if k + 1 < len(starts) else len(code)
                code[start:end] = " " * (end - start)
        return CodeView("".join(code), self.lexed)

    def line(self, no: int) -> str:
        """The text of 1-based line `no` ("" outside the file)."""
        return self.lexed.line(no)
