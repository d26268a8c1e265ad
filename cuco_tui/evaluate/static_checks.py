"""L0 of the cascade: static checks of a candidate's source, before a compiler sees it.

A candidate is one `.cu` file. Only the code between a line `// EVOLVE-BLOCK-START` and a
line `// EVOLVE-BLOCK-END` may change; everything else (the "frozen" text) must equal the
workload seed's. On top of that a candidate may not start processes, open files or sockets
(it talks to other ranks through NCCL, LSA or CUDA-IPC from cuco_runtime.cuh), must export
the three functions of the C ABI (cuco_abi.h), and should declare its design in a line
`// cuco-design: key=value ...` inside its first EVOLVE block.

Everything here is plain text processing: no compiler, no GPU. Findings are `Diagnostic`s
at level 0; `check_static` returns all of them and an empty list means the candidate passed.
"""

from __future__ import annotations

import bisect
import hashlib
import re
from dataclasses import dataclass
from typing import Iterable, Literal

from cuco_tui.evaluate.result import Diagnostic, Level

__all__ = [
    "Region",
    "Regions",
    "split_regions",
    "frozen_hash",
    "check_static",
    "is_rejected",
    "design_of",
]

START = "EVOLVE-BLOCK-START"
END = "EVOLVE-BLOCK-END"
_MARKER = re.compile(r"^\s*//\s*EVOLVE-BLOCK-(START|END)\b")

_L0 = int(Level.STATIC)


# ---------------------------------------------------------------------------- regions


@dataclass(frozen=True)
class Region:
    """A run of lines of one kind. Marker lines belong to no region. Lines are 1-based and
    inclusive; an empty region (two markers on consecutive lines, or a marker on the first
    or last line) has end_line == start_line - 1 and text ""."""

    kind: Literal["frozen", "evolve"]
    start_line: int
    end_line: int
    text: str


class Regions(list[Region]):
    """What `split_regions` returns: the regions in file order (frozen, evolve, frozen, ...,
    frozen), plus `diagnostics`, the marker errors found on the way (code "markers")."""

    def __init__(self, regions: Iterable[Region] = (), diagnostics: Iterable[Diagnostic] = ()) -> None:
        super().__init__(regions)
        self.diagnostics: list[Diagnostic] = list(diagnostics)
        self.markers: list[tuple[int, str]] = []  # (line, "START"|"END") of well-placed markers

    @property
    def ok(self) -> bool:
        return not self.diagnostics

    @property
    def evolve(self) -> list[Region]:
        return [r for r in self if r.kind == "evolve"]

    @property
    def frozen(self) -> list[Region]:
        return [r for r in self if r.kind == "frozen"]


def _lines(text: str) -> list[str]:
    """Split like a compiler counts lines: on '\\n' only (a '\\r' before it stays on the line)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _marker(line: str) -> str | None:
    m = _MARKER.match(line)
    return m.group(1) if m else None


def split_regions(text: str, file_name: str = "") -> Regions:
    """Split a candidate into frozen and evolve regions.

    Never raises on bad markers: an END without a START, a START inside an open block, or a
    block left open at the end of the file each become a Diagnostic (code "markers") in
    `.diagnostics`, and the regions are a best effort (a stray END stays frozen text, a
    nested START stays evolve text, an open block runs to the end of the file)."""
    lines = _lines(text)
    regions = Regions()
    kind: Literal["frozen", "evolve"] = "frozen"
    start = 1  # first line of the region being collected
    open_at = 0  # line of the START that opened the current block
    body: list[str] = []

    def close(end_line: int) -> None:
        regions.append(Region(kind, start, end_line, "\n".join(body)))

    for no, line in enumerate(lines, start=1):
        which = _marker(line)
        if which == "START":
            if kind == "evolve":
                regions.diagnostics.append(_diag(
                    f"nested {START} at line {no}: the block opened at line {open_at} is not closed; "
                    f"put `// {END}` before this line (blocks may not nest)",
                    file_name, no, line, code="markers"))
                body.append(line)
                continue
            close(no - 1)
            regions.markers.append((no, "START"))
            kind, start, open_at, body = "evolve", no + 1, no, []
        elif which == "END":
            if kind == "frozen":
                regions.diagnostics.append(_diag(
                    f"{END} at line {no} has no matching {START} before it",
                    file_name, no, line, code="markers"))
                body.append(line)
                continue
            close(no - 1)
            regions.markers.append((no, "END"))
            kind, start, body = "frozen", no + 1, []
        else:
            body.append(line)
    if kind == "evolve":
        regions.diagnostics.append(_diag(
            f"the {START} at line {open_at} is never closed: add a line `// {END}` after the block",
            file_name, open_at, lines[open_at - 1], code="markers"))
    close(len(lines))
    return regions


def _frozen_lines(text: str) -> list[tuple[int, str]]:
    """The frozen lines and the marker lines of `text`, as (1-based line, normalized text):
    trailing whitespace of each line and blank lines at the end of the file removed."""
    out: list[tuple[int, str]] = []
    inside = False
    for no, line in enumerate(_lines(text), start=1):
        which = _marker(line)
        if which == "START" and not inside:
            inside = True
            out.append((no, line.rstrip()))
        elif which == "END" and inside:
            inside = False
            out.append((no, line.rstrip()))
        elif not inside:
            out.append((no, line.rstrip()))
    while out and out[-1][1] == "":
        out.pop()
    return out


def frozen_hash(text: str) -> str:
    """sha256 (hex) of the frozen text: the frozen regions joined with the marker lines kept as
    separators, each line's trailing whitespace and the file's trailing blank lines dropped.
    Editor noise (trailing spaces, CRLF, a final newline) does not change it; anything else does."""
    joined = "\n".join(t for _, t in _frozen_lines(text))
    return hashlib.sha256(joined.encode("utf-8")).hexdigest()


# ---------------------------------------------------------------------------- stripping


_ATTRS = re.compile(r"\b(?:alignas|__align__|__declspec)\s*\([^()]*\)"
                    r"|__attribute__\s*\(\([^()]*(?:\([^()]*\))*[^()]*\)\)")
_CLASS_HEAD = re.compile(r"^\s*(?:template\s*<[^>]*>\s*)?(?:typedef\s+)?(?:struct|class|union)\b[^()]*$")
_IDENT_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_$")
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
        while j > 0 and (text[j - 1] in _IDENT_CHARS or text[j - 1] == "."):
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


def closing_bracket(code: str, open_at: int) -> int:
    """Offset of the bracket that closes the one at `open_at` ('(', '[' or '{') in blanked
    code (comments and literals already blanked), or -1 when it is never closed."""
    depth = 0
    for k in range(open_at, len(code)):
        ch = code[k]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return k
    return -1


def blank_code(text: str) -> str:
    """`text` with comments and the contents of string and char literals replaced by spaces,
    newlines kept, so offsets, lines and columns still match the original."""
    return _blank(text)[1]


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


_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include(?:_next)?\b[ \t]*(.*)$", re.M)


class _Source:
    """A candidate's text with line/column lookup and the two blanked copies."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.nocomment, code = _blank(text)
        # `#include <fstream>` names a header, not a type: the include check looks at those lines.
        self.code = _INCLUDE.sub(lambda m: " " * len(m.group(0)), code)
        self._scopes: list[tuple[int, bool]] | None = None
        self.starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.lines = _lines(text)

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


# ---------------------------------------------------------------------------- checks


def _diag(message: str, file: str, line: int = 0, source_line: str = "", *, column: int = 0,
          code: str, severity: str = "error") -> Diagnostic:
    return Diagnostic(level=_L0, severity=severity, message=message, file=file, line=line, column=column,
                      source_line=source_line.rstrip("\r\n"), code=code)


def _check_markers(cand: Regions, seed: Regions, src: _Source, file_name: str) -> list[Diagnostic]:
    out = list(cand.diagnostics)
    if seed.diagnostics:
        out.append(_diag("the workload seed's EVOLVE-BLOCK markers are malformed "
                         f"({seed.diagnostics[0].message}); fix the seed before evaluating candidates",
                         file_name, code="markers"))
        return out
    if cand.diagnostics:
        return out
    n_cand, n_seed = len(cand.evolve), len(seed.evolve)
    if n_cand != n_seed:
        starts = [no for no, w in cand.markers if w == "START"]
        line = starts[n_seed] if n_cand > n_seed else (cand.markers[-1][0] if cand.markers else 0)
        plural = "block" if n_seed == 1 else "blocks"
        out.append(_diag(
            f"the candidate has {n_cand} EVOLVE blocks but the seed has {n_seed} {plural}; keep the seed's "
            f"{START}/{END} markers as they are and change only the code between them",
            file_name, line, src.line(line), code="markers"))
    return out


def _describe(text: str) -> str:
    return f"`{text.strip()}`" if text.strip() else "a blank line"


def _check_frozen(source: str, seed: str, src: _Source, file_name: str) -> list[Diagnostic]:
    if frozen_hash(source) == frozen_hash(seed):
        return []
    tail = "; only code between EVOLVE-BLOCK markers may change"
    a, b = _frozen_lines(source), _frozen_lines(seed)
    for (cno, ctext), (sno, stext) in zip(a, b):
        if ctext != stext:
            col = next((k for k, (x, y) in enumerate(zip(ctext, stext)) if x != y), min(len(ctext), len(stext)))
            return [_diag(f"frozen region changed: line {cno} differs from the seed "
                          f"(seed line {sno} is {_describe(stext)}){tail}",
                          file_name, cno, src.line(cno), column=col + 1, code="frozen-region")]
    if len(a) > len(b):
        cno, ctext = a[len(b)]
        last = b[-1][0] if b else 0
        return [_diag(f"frozen region changed: line {cno} is not in the seed (the seed's frozen text ends "
                      f"at seed line {last}){tail}",
                      file_name, cno, src.line(cno), column=1, code="frozen-region")]
    # the candidate stops short of the seed
    sno, stext = b[len(a)]
    shown = next(((no, t) for no, t in b[len(a):] if t.strip()), (sno, stext))
    last = a[-1][0] if a else 0
    return [_diag(f"frozen region changed: the candidate ends after line {last}, but the seed goes on "
                  f"(seed line {shown[0]} is {_describe(shown[1])}){tail}",
                  file_name, last, src.line(last), code="frozen-region")]


# Calls a candidate may not make, by what they are for.
_PROCESS = (
    "system popen fork vfork execl execle execlp execv execve execvp execvpe posix_spawn posix_spawnp "
    "kill raise exit _exit _Exit quick_exit abort atexit at_quick_exit signal sigaction dlopen dlsym ptrace "
    "setenv putenv unsetenv syscall"
).split()
_SOCKETS = "socket connect bind listen accept send recv sendto recvfrom getaddrinfo gethostbyname".split()
_FILES = (
    "fopen freopen fdopen open openat creat unlink remove rename mkdir rmdir chmod truncate mmap ioctl"
).split()
FORBIDDEN_CALLS: frozenset[str] = frozenset(_PROCESS + _SOCKETS + _FILES)
FORBIDDEN_TYPES: frozenset[str] = frozenset(
    "ifstream ofstream fstream basic_ifstream basic_ofstream basic_fstream basic_filebuf filebuf".split())

_CALL = re.compile(r"(?<![\w$])(" + "|".join(sorted(FORBIDDEN_CALLS, key=len, reverse=True)) + r")\s*\(")
_TYPE = re.compile(r"(?<![\w$])(" + "|".join(sorted(FORBIDDEN_TYPES, key=len, reverse=True)) + r")(?![\w$])")
_ASM = re.compile(r"(?<![\w$])(asm|__asm__|__asm)(?![\w$])")
_ASM_QUALIFIER = re.compile(r"\s*(?:volatile|__volatile__|__volatile|goto|inline)\b")
_ASM_BAD = re.compile(r"\bsyscall\b|\bsysenter\b|\bint\s*\$?0x80\b")
_QUALIFIED = frozenset({"", "::", "std", "filesystem"})  # `::exit`, `std::exit`: still the libc call

_WHY = ("is not allowed in a candidate: candidates may not start processes, open files or sockets; "
        "talk to other ranks through NCCL, LSA or CUDA-IPC from cuco_runtime.cuh")


def _qualifier(code: str, at: int) -> str | None:
    """What stands before the name at `at`: None for a member access (`x.f`, `p->f`), "" for no
    qualifier, "::" for the global `::f`, else the innermost qualifier (`std` for `std::f`)."""
    j = at
    while j > 0 and code[j - 1].isspace():
        j -= 1
    if code[j - 1:j] == ".":
        return None
    if code[j - 2:j] == "->":
        return None
    if code[j - 2:j] != "::":
        return ""
    j -= 2
    while j > 0 and code[j - 1].isspace():
        j -= 1
    k = j
    while k > 0 and code[k - 1] in _IDENT_CHARS:
        k -= 1
    name = code[k:j]
    if not name:
        return "::" if code[j - 1:j] != ">" else "<template>"  # `::f` (global) or `T<x>::f`
    return name


def _spell(qual: str, name: str) -> str:
    return name if not qual else f"::{name}" if qual == "::" else f"{qual}::{name}"


def _top_level_args(code: str, open_at: int, close_at: int) -> int:
    inner = code[open_at + 1:close_at]
    if not inner.strip():
        return 0
    depth, count = 0, 1
    for ch in inner:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            count += 1
    return count


def _check_forbidden_calls(src: _Source, file_name: str) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    code = src.code
    for m in _CALL.finditer(code):
        name = m.group(1)
        qual = _qualifier(code, m.start(1))
        if qual is None or qual not in _QUALIFIED:
            continue  # a member call (x.send(...)) or another namespace's function (cuco::open)
        if qual == "" and src.in_class_body(m.start(1)):
            before = code[:m.start(1)].rstrip()
            if before and (before[-1] in _IDENT_CHARS or before[-1] in "*&>~"):
                continue  # declares or defines a member function of that name, e.g. Chan::send
        if name == "bind" and qual == "std":
            continue  # std::bind from <functional>
        open_at = m.end() - 1
        close_at = src.match_paren(open_at)
        if name == "remove" and close_at > 0 and _top_level_args(code, open_at, close_at) >= 3:
            continue  # std::remove(first, last, value) from <algorithm>
        shown = _spell(qual, name)
        message = f"`{shown}` {_WHY}"
        rest = code[close_at + 1:close_at + 40].lstrip() if close_at > 0 else ""
        if rest.startswith("{") or re.match(r"(const|noexcept|override)\b", rest):
            message = (f"a function named `{name}` is not allowed in a candidate (the name is reserved for the "
                       f"C library call); rename it. Candidates may not start processes, open files or sockets; "
                       f"talk to other ranks through NCCL, LSA or CUDA-IPC from cuco_runtime.cuh")
        line, col = src.pos(m.start(1))
        out.append(_diag(message, file_name, line, src.line(line), column=col, code="forbidden-call"))
    for m in _TYPE.finditer(code):
        qual = _qualifier(code, m.start(1))
        if qual is None or qual not in _QUALIFIED:
            continue
        line, col = src.pos(m.start(1))
        shown = _spell(qual or "std", m.group(1))
        out.append(_diag(f"`{shown}` {_WHY}", file_name, line, src.line(line), column=col, code="forbidden-call"))
    for m in _ASM.finditer(code):
        j = m.end()
        while q := _ASM_QUALIFIER.match(code, j):
            j = q.end()
        p = re.compile(r"\s*\(").match(code, j)
        if not p:
            continue
        open_at = p.end() - 1
        close_at = src.match_paren(open_at)
        body = src.nocomment[open_at:close_at if close_at > 0 else len(code)]
        body = re.sub(r'"\s*"', "", body)  # "sys" "call" is one string to the assembler
        body = re.sub(r"\\[ntrvf]", " ", body)  # escapes such as \n\t are separators
        bad = _ASM_BAD.search(body)
        if bad:
            line, col = src.pos(m.start(1))
            what = re.sub(r"\s+", " ", bad.group(0))
            out.append(_diag(f"inline assembly with `{what}` {_WHY}", file_name, line, src.line(line),
                             column=col, code="forbidden-call"))
    return out


_BAD_HEADERS = frozenset(
    "unistd.h fstream filesystem dlfcn.h spawn.h signal.h csignal netdb.h fcntl.h".split())
_BAD_HEADER_DIRS = ("sys/", "netinet/", "arpa/")


def _check_includes(src: _Source, file_name: str) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    for m in _INCLUDE.finditer(src.nocomment):
        arg = m.group(1).strip()
        line, _ = src.pos(m.start())
        col = src.pos(m.start(1))[1]
        hm = re.match(r'<([^>]*)>|"([^"]*)"', arg)
        if not hm:
            if arg:
                out.append(_diag(f"`#include {arg}` is not allowed in a candidate: include a header by its "
                                 f"name in <...> or \"...\", not through a macro",
                                 file_name, line, src.line(line), column=col, code="forbidden-include"))
            continue
        path = (hm.group(1) if hm.group(1) is not None else hm.group(2)).strip()
        spelled = arg[:hm.end()]
        norm = path.replace("\\", "/")
        parts = norm.split("/")
        if norm.startswith(("/", "~")) or re.match(r"^[A-Za-z]:/", norm) or ".." in parts:
            out.append(_diag(f"`#include {spelled}` is not allowed in a candidate: include headers by name "
                             f"from the include path, never by an absolute path or one with `..`",
                             file_name, line, src.line(line), column=col, code="forbidden-include"))
        elif norm in _BAD_HEADERS or norm.startswith(_BAD_HEADER_DIRS):
            out.append(_diag(f"`#include {spelled}` is not allowed in a candidate: its calls start processes, "
                             f"open files or sockets, or handle signals; talk to other ranks through NCCL, "
                             f"LSA or CUDA-IPC from cuco_runtime.cuh",
                             file_name, line, src.line(line), column=col, code="forbidden-include"))
    return out


# The C ABI of cuco_abi.h: name -> (accepted parameter types after normalization, how to write it).
_ABI: dict[str, tuple[tuple[tuple[str, ...], ...], str]] = {
    "cuco_init": ((("cuco_ctx*", "void**"),), "CUCO_EXPORT int cuco_init(cuco_ctx* ctx, void** state)"),
    "cuco_launch": ((("void*", "cudaStream_t"), ("void*", "CUstream_st*"), ("void*", "CUstream")),
                    "CUCO_EXPORT int cuco_launch(void* state, cudaStream_t stream)"),
    "cuco_teardown": ((("void*",),), "CUCO_EXPORT int cuco_teardown(void* state)"),
}
_ABI_ROLE = {
    "cuco_init": "the harness calls it once per rank and shape to set the candidate up",
    "cuco_launch": "the harness calls it to enqueue one iteration",
    "cuco_teardown": "the harness calls it to free what cuco_init created",
}


def _param_type(param: str) -> str:
    p = re.sub(r"\s+", " ", param).strip()
    p = re.sub(r"^struct ", "", p)
    m = re.match(r"^(.*?[\s*&])([A-Za-z_]\w*)$", p)
    if m and m.group(1).strip():
        p = m.group(1)
    return p.replace(" ", "")


def _extern_c_blocks(text: str) -> list[tuple[int, int]]:
    spans = []
    for m in re.finditer(r'\bextern\s*"C"\s*\{', text):
        depth = 0
        for k in range(m.end() - 1, len(text)):
            if text[k] == "{":
                depth += 1
            elif text[k] == "}":
                depth -= 1
                if depth == 0:
                    spans.append((m.end(), k))
                    break
    return spans


def _check_abi(src: _Source, file_name: str) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    # Comments gone, strings kept (for `extern "C"`); a literal's contents cannot fake a
    # definition because matches are taken from the fully blanked code.
    text, code = src.nocomment, src.code
    blocks = _extern_c_blocks(text)
    for name, (signatures, spelled) in _ABI.items():
        defs = []
        for m in re.finditer(r"(?<![\w$])" + name + r"\s*\(", code):
            open_at = m.end() - 1
            close_at = src.match_paren(open_at)
            if close_at < 0:
                continue
            after = code[close_at + 1:close_at + 60].lstrip()
            if not after.startswith("{") and not re.match(r"noexcept\b[^;{]*\{", after):
                continue  # a declaration or a call
            if _qualifier(code, m.start()) is None:
                continue
            defs.append((m, open_at, close_at))
        if not defs:
            out.append(_diag(f"`{name}` is not defined: {_ABI_ROLE[name]}; the candidate must define "
                             f"`{spelled} {{ ... }}` (see cuco_abi.h)", file_name, code="abi"))
            continue
        if len(defs) > 1:
            line, col = src.pos(defs[1][0].start())
            first = src.pos(defs[0][0].start())[0]
            out.append(_diag(f"`{name}` is defined {len(defs)} times (first at line {first}); define it exactly once",
                             file_name, line, src.line(line), column=col, code="abi"))
        m, open_at, close_at = defs[0]
        line, col = src.pos(m.start())
        # Everything from the end of the previous statement, block or directive to the name.
        k = m.start()
        while k > 0 and code[k - 1] not in ";{}" and not (code[k - 1] == "\n" and _directive_line(text, k - 1)):
            k -= 1
        head = re.sub(r"\s+", " ", text[k:m.start()]).strip()
        in_block = any(a <= m.start() < b for a, b in blocks)
        linkage = re.search(r'\bCUCO_EXPORT\b|\bextern\s*"C"', head) is not None or in_block
        returns_int = re.search(r"(?:^|\s|\))int$", head) is not None
        if not linkage:
            out.append(_diag(f"`{name}` is defined without C linkage: the harness looks it up by its C name, "
                             f"so declare it `{spelled}` (CUCO_EXPORT is extern \"C\" with default visibility)",
                             file_name, line, src.line(line), column=col, code="abi"))
        if not returns_int:
            out.append(_diag(f"`{name}` must return int (0 on success): declare it `{spelled}`",
                             file_name, line, src.line(line), column=col, code="abi"))
        params = code[open_at + 1:close_at]
        types = tuple(_param_type(p) for p in params.split(",")) if params.strip() else ()
        if types not in signatures:
            got = ", ".join(types) if types else "no parameters"
            out.append(_diag(f"`{name}` has the wrong parameters ({got}): the harness calls `{spelled}`",
                             file_name, line, src.line(line), column=col, code="abi"))
    return out


def _directive_line(code: str, newline_at: int) -> bool:
    """Whether the line that ends at `newline_at` is a preprocessor directive."""
    start = code.rfind("\n", 0, newline_at) + 1
    return code[start:newline_at].lstrip().startswith("#")


_DESIGN = re.compile(r"^\s*//\s*cuco-design:(.*)$")
_PAIR = re.compile(r"^[A-Za-z_][\w.-]*=\S+$")


def design_of(source: str) -> dict[str, str] | None:
    """The key=value pairs of the `// cuco-design:` line in the first EVOLVE block, or None
    when there is none (or it holds no well-formed pair)."""
    evolve = split_regions(source).evolve
    if not evolve:
        return None
    for line in evolve[0].text.split("\n"):
        m = _DESIGN.match(line)
        if m:
            pairs = [t for t in m.group(1).split() if _PAIR.match(t)]
            return dict(t.split("=", 1) for t in pairs) if pairs else None
    return None


def _check_design(regions: Regions, src: _Source, file_name: str) -> list[Diagnostic]:
    evolve = regions.evolve
    if not evolve:
        return []
    first = evolve[0]
    example = "`// cuco-design: backend=nccl_lsa placement=before sync=global issuer=cta chunk=full`"
    for off, line in enumerate(first.text.split("\n") if first.text else []):
        m = _DESIGN.match(line)
        if not m:
            continue
        tokens = m.group(1).split()
        bad = [t for t in tokens if not _PAIR.match(t)]
        if tokens and not bad:
            return []
        no = first.start_line + off
        what = f"`{bad[0]}` is not a key=value pair" if bad else "it names no key=value pairs"
        return [_diag(f"the cuco-design line is malformed: {what}; write it like {example}",
                      file_name, no, line, code="design", severity="warning")]
    for r in evolve[1:]:
        for off, line in enumerate(r.text.split("\n")):
            if _DESIGN.match(line):
                no = r.start_line + off
                return [_diag(f"the cuco-design line belongs in the first EVOLVE block (line {first.start_line}), "
                              f"not at line {no}", file_name, no, line, code="design", severity="warning")]
    return [_diag(f"the first EVOLVE block has no `// cuco-design: key=value ...` line; add one "
                  f"(e.g. {example}) so the lineage can tell designs apart", file_name, max(first.start_line - 1, 1),
                  src.line(first.start_line - 1), code="design", severity="warning")]


def check_static(source: str, seed: str, file_name: str) -> list[Diagnostic]:
    """Every L0 check of `source` against the workload's `seed`; an empty list is a pass.
    Errors (severity "error") reject the candidate; warnings do not (see `is_rejected`)."""
    src = _Source(source)
    cand_regions = split_regions(source, file_name)
    seed_regions = split_regions(seed, "seed")
    diags = _check_markers(cand_regions, seed_regions, src, file_name)
    if cand_regions.ok and seed_regions.ok:
        diags += _check_frozen(source, seed, src, file_name)
    diags += sorted(_check_includes(src, file_name) + _check_forbidden_calls(src, file_name),
                    key=lambda d: (d.line, d.column))
    diags += _check_abi(src, file_name)
    if cand_regions.ok:
        diags += _check_design(cand_regions, src, file_name)
    return diags


def is_rejected(diags: list[Diagnostic]) -> bool:
    return any(d.severity == "error" for d in diags)
