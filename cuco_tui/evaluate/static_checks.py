"""The static checks of a candidate's source, the first part of L0 (evaluate/l0.py's check_l0,
which adds the sync checks and the design declaration check), before a compiler sees it.

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

import re

from cuco_tui.core.result import Diagnostic, Level, StaticVerdict
from cuco_tui.source.arguments import split_args
from cuco_tui.source.includes import includes
from cuco_tui.source.lexer import IDENT_CHARS, SourceText, closing_bracket
from cuco_tui.source.model import CandidateSource
from cuco_tui.source.regions import (DESIGN_LINE, DESIGN_PAIR, END, START, Regions, design_line, frozen_hash,
                                     frozen_lines, split_regions)

__all__ = ["MAX_SOURCE_BYTES", "check_static", "is_rejected", "size_diagnostic", "source_too_large"]

_L0 = int(Level.STATIC)

# The largest candidate a search or `cuco eval` takes. A kernel's source is tens of kB (the
# largest of the workloads' seeds and templates is under 30 kB); 1 MiB leaves room for any real
# one. Past it is a runaway (a reply repeated, a generated table) that the checks would lex
# whole: a 180 MB file took 258 s and 3.3 GB before L0 rejected it. So it is the first check.
MAX_SOURCE_BYTES = 1 << 20


def source_too_large(size: int, file_name: str) -> str:
    """Why a candidate of `size` bytes is refused, or "" when it is within MAX_SOURCE_BYTES."""
    if size <= MAX_SOURCE_BYTES:
        return ""
    return (f"{file_name} is {size / 2**20:.1f} MiB; a candidate may be at most {MAX_SOURCE_BYTES // 2**20} MiB "
            f"(a kernel's source is tens of kB)")


def size_diagnostic(size: int, file_name: str) -> Diagnostic | None:
    """The L0 error of a candidate of `size` bytes past MAX_SOURCE_BYTES, or None."""
    too_large = source_too_large(size, file_name)
    return _diag(too_large, file_name, code="size") if too_large else None


def _text_size(text: str) -> int:
    # a character is at least one byte: a text of more characters than the limit is never encoded
    return len(text) if len(text) > MAX_SOURCE_BYTES else len(text.encode("utf-8", "replace"))


# ---------------------------------------------------------------------------- checks


def _diag(message: str, file: str, line: int = 0, source_line: str = "", *, column: int = 0,
          code: str, severity: str = "error") -> Diagnostic:
    return Diagnostic(level=_L0, severity=severity, message=message, file=file, line=line, column=column,
                      source_line=source_line.rstrip("\r\n"), code=code)


def _check_markers(cand: Regions, seed: Regions, src: SourceText, file_name: str) -> list[Diagnostic]:
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


def _check_frozen(source: str, seed: str, src: SourceText, file_name: str) -> list[Diagnostic]:
    if frozen_hash(source) == frozen_hash(seed):
        return []
    tail = "; only code between EVOLVE-BLOCK markers may change"
    a, b = frozen_lines(source), frozen_lines(seed)
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
    while k > 0 and code[k - 1] in IDENT_CHARS:
        k -= 1
    name = code[k:j]
    if not name:
        return "::" if code[j - 1:j] != ">" else "<template>"  # `::f` (global) or `T<x>::f`
    return name


def _spell(qual: str, name: str) -> str:
    return name if not qual else f"::{name}" if qual == "::" else f"{qual}::{name}"


def _check_forbidden_calls(src: SourceText, file_name: str) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    code = src.code
    for m in _CALL.finditer(code):
        name = m.group(1)
        qual = _qualifier(code, m.start(1))
        if qual is None or qual not in _QUALIFIED:
            continue  # a member call (x.send(...)) or another namespace's function (cuco::open)
        if qual == "" and src.in_class_body(m.start(1)):
            before = code[:m.start(1)].rstrip()
            if before and (before[-1] in IDENT_CHARS or before[-1] in "*&>~"):
                continue  # declares or defines a member function of that name, e.g. Chan::send
        if name == "bind" and qual == "std":
            continue  # std::bind from <functional>
        open_at = m.end() - 1
        close_at = src.match_paren(open_at)
        if name == "remove" and close_at > 0 and len(split_args(code, open_at + 1, close_at)) >= 3:
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


def _check_includes(src: SourceText, file_name: str) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    for inc in includes(src):
        line, _ = src.pos(inc.offset)
        col = src.pos(inc.argument_offset)[1]
        if inc.through_macro:
            if inc.argument:
                out.append(_diag(f"`#include {inc.argument}` is not allowed in a candidate: include a header by its "
                                 f"name in <...> or \"...\", not through a macro",
                                 file_name, line, src.line(line), column=col, code="forbidden-include"))
            continue
        spelled = inc.named
        norm = inc.header.replace("\\", "/")
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


def _extern_c_blocks(src: SourceText) -> list[tuple[int, int]]:
    """The bodies of the `extern "C" { ... }` blocks (found where the literal is kept, matched
    where literals are blanked: both texts have the same offsets)."""
    spans = []
    for m in re.finditer(r'\bextern\s*"C"\s*\{', src.nocomment):
        close = closing_bracket(src.code, m.end() - 1)
        if close >= 0:
            spans.append((m.end(), close))
    return spans


def _check_abi(src: SourceText, file_name: str) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    # Comments gone, strings kept (for `extern "C"`); a literal's contents cannot fake a
    # definition because matches are taken from the fully blanked code.
    text, code = src.nocomment, src.code
    blocks = _extern_c_blocks(src)
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
        types = tuple(_param_type(p.text) for p in split_args(code, open_at + 1, close_at))
        if types not in signatures:
            got = ", ".join(types) if types else "no parameters"
            out.append(_diag(f"`{name}` has the wrong parameters ({got}): the harness calls `{spelled}`",
                             file_name, line, src.line(line), column=col, code="abi"))
    return out


def _directive_line(code: str, newline_at: int) -> bool:
    """Whether the line that ends at `newline_at` is a preprocessor directive."""
    start = code.rfind("\n", 0, newline_at) + 1
    return code[start:newline_at].lstrip().startswith("#")


def _check_design(regions: Regions, src: SourceText, file_name: str) -> list[Diagnostic]:
    evolve = regions.evolve
    if not evolve:
        return []
    first = evolve[0]
    example = "`// cuco-design: backend=nccl_lsa placement=before sync=global issuer=cta chunk=full`"
    found = design_line(regions)
    m = DESIGN_LINE.match(found[1]) if found else None
    if found and m:
        no, line = found
        tokens = m.group(1).split()
        bad = [t for t in tokens if not DESIGN_PAIR.match(t)]
        if tokens and not bad:
            return []
        what = f"`{bad[0]}` is not a key=value pair" if bad else "it names no key=value pairs"
        return [_diag(f"the cuco-design line is malformed: {what}; write it like {example}",
                      file_name, no, line, code="design", severity="warning")]
    for r in evolve[1:]:
        for off, line in enumerate(r.text.split("\n")):
            if DESIGN_LINE.match(line):
                no = r.start_line + off
                return [_diag(f"the cuco-design line belongs in the first EVOLVE block (line {first.start_line}), "
                              f"not at line {no}", file_name, no, line, code="design", severity="warning")]
    return [_diag(f"the first EVOLVE block has no `// cuco-design: key=value ...` line; add one "
                  f"(e.g. {example}) so the lineage can tell designs apart", file_name, max(first.start_line - 1, 1),
                  src.line(first.start_line - 1), code="design", severity="warning")]


def check_static(source: str | CandidateSource, seed: str, file_name: str) -> list[Diagnostic]:
    """Every L0 check of `source` against the workload's `seed`; an empty list is a pass.
    Errors (severity "error") reject the candidate; warnings do not (see `is_rejected`). A source
    past MAX_SOURCE_BYTES gets that one finding, before anything reads it further."""
    too_large = size_diagnostic(_text_size(source.text if isinstance(source, CandidateSource) else source), file_name)
    if too_large:
        return [too_large]
    cand = CandidateSource.of(source, file_name)
    src = cand.lexed
    cand_regions = cand.regions
    seed_regions = split_regions(seed, "seed")
    diags = _check_markers(cand_regions, seed_regions, src, file_name)
    if cand_regions.ok and seed_regions.ok:
        diags += _check_frozen(cand.text, seed, src, file_name)
    diags += sorted(_check_includes(src, file_name) + _check_forbidden_calls(src, file_name),
                    key=lambda d: (d.line, d.column))
    diags += _check_abi(src, file_name)
    if cand_regions.ok:
        diags += _check_design(cand_regions, src, file_name)
    return diags


def is_rejected(diags: list[Diagnostic]) -> bool:
    """Whether findings reject a source, by L0's one rule (StaticVerdict: an error rejects)."""
    return StaticVerdict(tuple(diags)).rejected
