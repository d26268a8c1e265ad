"""nvcc's output, turned into `Diagnostic` records a person can act on.

nvcc runs several tools and each speaks its own dialect; all of them are recognized here:

- the EDG front end (cudafe++): ``file.cu(29): error: identifier "X" is undefined``, then
  optional continuation lines, the echoed source line, a caret line and "detected during"
  template-instantiation context. The echoed line is the *preprocessed* line (macros expanded,
  ``__global__`` spelled ``__attribute__((global))``, tabs and runs of blanks squeezed), so the
  caret's position is mapped back onto the real source line by whitespace-insensitive alignment
  or, failing that, by finding the token under the caret;
- the host compiler (gcc): ``file.cu:12:5: error: ...`` (columns are display columns, tabs
  expanded to 8), with its "In function" context and its own echo lines;
- the assembler (``file.cu:13: Error: ...``), ptxas, nvlink, ld/collect2 and nvcc itself.

Notes that follow an error (e.g. "function X does not match because ...") and instantiation
context are folded into the message of the error they explain, so one mistake gives one record.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from cuco_tui.harness.env import child_env
from cuco_tui.core.result import Diagnostic, Level

LEVEL = int(Level.COMPILE)
TAIL_LINES = 20

_EDG_HEAD = re.compile(
    r"^(?P<file>\S.*?)\((?P<line>\d+)\): "
    r"(?P<sev>catastrophic error|fatal error|internal error|error|warning|remark|note)"
    r"(?: #(?P<num>\d+(?:-[A-Z])?))?: (?P<msg>.*)$"
)
_GCC_HEAD = re.compile(
    r"^(?P<file>[^\s:][^:]*?):(?P<line>\d+):(?:(?P<col>\d+):)? "
    r"(?P<sev>fatal error|error|warning|note): (?P<msg>.*)$"
)
_GAS_HEAD = re.compile(r"^(?P<file>[^\s:][^:]*?):(?P<line>\d+): (?P<sev>Error|Warning): (?P<msg>.*)$")
_PTXAS = re.compile(
    r"^ptxas(?:\s+(?P<ptx>\S.*?), line (?P<pline>\d+);)?\s*(?P<sev>error|fatal|warning|info)\s*: (?P<msg>.*)$"
)
_NVLINK = re.compile(r"^nvlink (?P<sev>error|fatal|warning|info)\s*: (?P<msg>.*)$")
_NVCC = re.compile(r"^nvcc (?P<sev>error|fatal|warning)\s*: (?P<msg>.*)$")
_TOOL = re.compile(
    r"^(?P<tool>gcc|g\+\+|c\+\+|cc1plus|cc1|clang\+\+|clang|cicc|cudafe\+\+|fatbinary|nvlink|ptxas)"
    r"(?:-\d+)?: (?P<sev>fatal error|error|warning): (?P<msg>.*)$"
)
_COLLECT2 = re.compile(r"^collect2: (?:fatal )?error: (?P<msg>.*)$")
_LD = re.compile(r"^(?:\S*/)?ld(?:\.\w+)?: (?:(?P<sev>error|warning): )?(?P<msg>.*)$")
_LD_FUNC = re.compile(r"(?:^|: )in function [`'‘](?P<fn>.+?)['’]:$")
_LD_UNDEF = re.compile(r"undefined reference to [`'‘](?P<sym>.+?)['’]")
_GCC_CONTEXT = re.compile(
    r"^(?:\S.*?: )?(?:In (?:static |member |)function|In constructor|In destructor|In lambda function|"
    r"In instantiation of|In substitution of|At global scope|In file included from|\s+from |\s+inlined from |"
    r"\s+required from )"
)
_GCC_ECHO = re.compile(r"^\s*(?:\d+\s*|\+\+\+\s*)?\|")
_SUMMARY = re.compile(r"^\d+ errors? detected in the compilation of ")
_SKIP = re.compile(
    r"^(?:Remark: The warnings can be suppressed|Error limit reached\.|Compilation terminated\.|"
    r"compilation terminated\.|\S.*?: Assembler messages:$)"
)
_CARET = re.compile(r"^\s*\^\s*$")
_ERROR_WORD = re.compile(r"\b(?:error|fatal|abort(?:ed)?|killed|segmentation fault|died)\b", re.I)
_MANGLED = re.compile(r"\b_Z[A-Za-z0-9_]+")


class _Msg:
    """A diagnostic under construction (Diagnostic is frozen)."""

    def __init__(self, severity: str, message: str, code: str, file: str = "", line: int = 0,
                 column: int = 0, source_line: str = ""):
        self.severity = severity
        self.message = message
        self.code = code
        self.file = file
        self.line = line
        self.column = column
        self.source_line = source_line

    def add(self, text: str) -> None:
        text = text.rstrip()
        if text:
            self.message += "\n" + text

    def freeze(self) -> Diagnostic:
        return Diagnostic(level=LEVEL, severity=self.severity, message=self.message, file=self.file,
                          line=self.line, column=self.column, source_line=self.source_line, code=self.code)


class _Sources:
    """Lines of the files messages point at, read once each."""

    def __init__(self, source: Path, display_name: str):
        self.source = source
        self.display_name = display_name
        try:
            self._resolved = source.resolve()
        except OSError:
            self._resolved = source
        self._cache: dict[Path, list[str] | None] = {}

    def is_candidate(self, name: str) -> bool:
        # nvcc names the file as it was given on its command line: a path or a bare name.
        return name in (str(self.source), self.display_name) or Path(name).name == self.source.name

    def display(self, name: str) -> str:
        return self.display_name if self.is_candidate(name) else Path(name).name or name

    def line(self, name: str, number: int) -> str | None:
        if number <= 0:
            return None
        lines = self._lines(self.source if self.is_candidate(name) else self._locate(name))
        if lines is None or number > len(lines):
            return None
        return lines[number - 1]

    def _locate(self, name: str) -> Path | None:
        p = Path(name)
        for cand in ([p] if p.is_absolute() else [self.source.parent / p, p]):
            try:
                if cand.is_file():
                    return cand
            except OSError:
                continue
        return None

    def _lines(self, path: Path | None) -> list[str] | None:
        if path is None:
            return None
        if path not in self._cache:
            try:
                if path.stat().st_size > 16 * 1024 * 1024:
                    raise OSError("too large")
                text = path.read_bytes().decode("utf-8", errors="replace")
                self._cache[path] = [ln.rstrip("\r") for ln in text.split("\n")]
            except OSError:
                self._cache[path] = None
        return self._cache[path]


# ---------------------------------------------------------------- columns


def _squeeze(text: str) -> str:
    return "".join(text.split())


def _nonspace_index(text: str, k: int) -> int | None:
    """The index in `text` of its k-th (0-based) non-whitespace character."""
    seen = 0
    for i, ch in enumerate(text):
        if ch.isspace():
            continue
        if seen == k:
            return i
        seen += 1
    return None


def _token_at(text: str, i: int) -> str:
    if i >= len(text):
        return ""
    ch = text[i]
    if ch.isalnum() or ch == "_":
        j = i
        while j < len(text) and (text[j].isalnum() or text[j] == "_"):
            j += 1
        return text[i:j]
    if ch in "\"'":
        j = text.find(ch, i + 1)
        return text[i:j + 1] if j > 0 else ch
    return ch


def _common_suffix(a: str, b: str) -> int:
    n = 0
    while n < len(a) and n < len(b) and a[-1 - n] == b[-1 - n]:
        n += 1
    return n


def _common_prefix(a: str, b: str) -> int:
    n = 0
    while n < len(a) and n < len(b) and a[n] == b[n]:
        n += 1
    return n


def map_caret(echoed: str, caret: int, real: str | None) -> int:
    """The 1-based column in `real` of the character the caret points at in `echoed`.

    `echoed` and `caret` are relative to the echoed text without nvcc's 2-space indent. With no
    real line, the caret's own position is the answer. 0 when the token is not on the real line
    (e.g. it came from a macro's body)."""
    if real is None or real.rstrip() == echoed.rstrip():
        return caret + 1
    if caret >= len(echoed):
        return 0
    if _squeeze(real) == _squeeze(echoed):
        idx = _nonspace_index(real, len(_squeeze(echoed[:caret])))
        return idx + 1 if idx is not None else 0
    token = _token_at(echoed, caret)
    if not token or token.isspace():
        return 0
    word = token[0].isalnum() or token[0] == "_"
    pattern = re.compile((r"(?<![\w])" + re.escape(token) + r"(?![\w])") if word else re.escape(token))
    before_e = _squeeze(echoed[:caret])
    after_e = _squeeze(echoed[caret + len(token):])
    best, best_score = 0, -1
    for m in pattern.finditer(real):
        score = (_common_suffix(before_e, _squeeze(real[:m.start()]))
                 + _common_prefix(after_e, _squeeze(real[m.end():])))
        if score > best_score:
            best, best_score = m.start() + 1, score
    return best


def _display_to_char(real: str | None, col: int, tab: int = 8) -> int:
    """gcc counts display columns (tabs expanded to 8); the 1-based character column instead."""
    if real is None or "\t" not in real or col <= 0:
        return col
    disp = 0
    for i, ch in enumerate(real):
        width = tab - disp % tab if ch == "\t" else 1
        if disp + 1 <= col <= disp + width:
            return i + 1
        disp += width
    return col - disp + len(real)


# ---------------------------------------------------------------- symbols


def _demangle_all(text: str) -> str:
    """Appends the readable form of C++ mangled names (ptxas and nvlink print them raw)."""
    names = sorted(set(_MANGLED.findall(text)))
    filt = shutil.which("c++filt")
    if not names or filt is None:
        return text
    try:
        out = subprocess.run([filt], input="\n".join(names), capture_output=True, text=True, timeout=10,
                             env=child_env()).stdout
    except (OSError, subprocess.SubprocessError):
        return text
    readable = dict(zip(names, out.splitlines()))
    for name in names:
        nice = readable.get(name, name)
        if nice and nice != name:
            pattern = rf"(['`‘]?){re.escape(name)}(['’]?)"
            text = re.sub(pattern, lambda m, n=name, r=nice: f"{m.group(1)}{n}{m.group(2)} ({r})", text, count=1)
    return text


# ---------------------------------------------------------------- parser


def _severity(word: str) -> str:
    word = word.lower()
    if word in ("warning",):
        return "warning"
    if word in ("note", "remark", "info"):
        return "note"
    return "error"


def _dedent(lines: list[str], indent: str = "  ") -> list[str]:
    rows = [ln.rstrip() for ln in lines if ln.strip()]
    if not rows:
        return []
    cut = min(len(r) - len(r.lstrip()) for r in rows)
    return [indent + r[cut:] for r in rows]


def parse_nvcc_output(text: str, source: Path, display_name: str | None = None, *,
                      failed: bool | None = None) -> list[Diagnostic]:
    """Diagnostics from the combined stdout/stderr of one nvcc run on `source`.

    Messages about the candidate (its path or basename) get file=`display_name` (default
    `source.name`) and the real line of `source` as `source_line`; messages in other files keep
    that file's basename and get their line when the file can be read. `failed` is whether nvcc
    failed (None: guessed from the text); a failed run always yields at least one error, carrying
    the output's last lines when no message was recognized."""
    source = Path(source)
    display = display_name or source.name
    srcs = _Sources(source, display)
    lines = text.replace("\r\n", "\n").split("\n")
    out: list[_Msg] = []
    primary: _Msg | None = None  # the last error/warning: notes and context attach to it
    gcc_context: list[str] = []  # "In function ..." lines gcc prints before a message
    ld_function = ""  # "in function `f':" ld prints before undefined references

    def emit(msg: _Msg) -> None:
        nonlocal primary
        if msg.severity == "note" and primary is not None:
            loc = f"{msg.file}:{msg.line}: " if msg.line else ""
            primary.add(f"  note: {loc}{msg.message}".replace("\n", "\n  "))
            return
        out.append(msg)
        primary = msg if msg.severity != "note" else primary

    i = 0
    n = len(lines)
    while i < n:
        raw = lines[i].rstrip()
        i += 1
        if not raw.strip():
            continue
        if _SUMMARY.match(raw) or _SKIP.match(raw):
            continue

        m = _EDG_HEAD.match(raw)
        if m:
            block: list[str] = []
            while i < n and lines[i].strip() and (lines[i][:1].isspace() or _CARET.match(lines[i])):
                block.append(lines[i].rstrip())
                i += 1
            caret_at = next((k for k, ln in enumerate(block) if _CARET.match(ln)), None)
            echoed, caret = None, 0
            if caret_at is not None and caret_at >= 1:
                echoed_raw = block[caret_at - 1]
                caret = block[caret_at].index("^")
                echoed = echoed_raw[2:] if echoed_raw.startswith("  ") else echoed_raw
                caret = caret - 2 if caret >= 2 else caret
                continuation, context = block[:caret_at - 1], block[caret_at + 1:]
            else:
                continuation, context = [], block
                # Lines before the first instantiation-context line continue the message.
                for k, ln in enumerate(block):
                    if ln.strip().startswith("detected during"):
                        continuation, context = block[:k], block[k:]
                        break
                else:
                    continuation, context = block, []
            file, number = m.group("file"), int(m.group("line"))
            real = srcs.line(file, number)
            message = m.group("msg").strip()
            for ln in continuation:
                message += "\n  " + ln.strip()
            if m.group("num") and m.group("sev") in ("warning", "remark"):
                message += f" [#{m.group('num')}]"
            msg = _Msg(_severity(m.group("sev").split()[-1]), message, "nvcc", srcs.display(file), number,
                       map_caret(echoed, caret, real) if echoed is not None else 0,
                       real if real is not None else (echoed or ""))
            emit(msg)
            target = primary if primary is not None else msg
            for ln in _dedent(context):
                target.add(ln)
            continue

        if _GCC_CONTEXT.match(raw):
            gcc_context.append(raw.strip())
            continue

        if _LD_UNDEF.search(raw):
            sym = _LD_UNDEF.search(raw).group("sym")
            where = f" (in function `{ld_function}')" if ld_function else ""
            emit(_Msg("error", f"undefined reference to `{sym}'{where}", "link", display))
            continue
        m = _LD_FUNC.search(raw)
        if m and ("ld" in raw.split(":", 1)[0] or raw.split(":", 1)[0].endswith(".o")):
            ld_function = m.group("fn")
            continue

        m = _GCC_HEAD.match(raw)
        if m:
            file, number = m.group("file"), int(m.group("line"))
            real = srcs.line(file, number)
            col = _display_to_char(real, int(m.group("col") or 0))
            message = m.group("msg").strip()
            if gcc_context and m.group("sev") != "note":
                message += "\n" + "\n".join("  " + c for c in gcc_context)
            gcc_context = []
            emit(_Msg(_severity(m.group("sev").split()[-1]), message, "host-compiler", srcs.display(file),
                      number, col, real or ""))
            while i < n and _GCC_ECHO.match(lines[i]):  # gcc's own echo of the line: we have the real one
                i += 1
            continue

        m = _GAS_HEAD.match(raw)
        if m:
            file, number = m.group("file"), int(m.group("line"))
            real = srcs.line(file, number)
            emit(_Msg(_severity(m.group("sev")), f"assembler: {m.group('msg').strip()}", "host-compiler",
                      srcs.display(file), number, 0, real or ""))
            continue

        m = _PTXAS.match(raw)
        if m:
            sev = m.group("sev")
            if sev == "info":
                continue
            message = m.group("msg").strip()
            if sev == "fatal" and message.startswith("Ptx assembly aborted due to errors") and any(
                    d.code == "ptxas" and d.severity == "error" for d in out):
                continue
            if m.group("pline"):
                message += f" (generated PTX, line {m.group('pline')})"
            emit(_Msg(_severity(sev), "ptxas: " + _demangle_all(message), "ptxas", display))
            continue

        m = _NVLINK.match(raw)
        if m:
            if m.group("sev") != "info":
                emit(_Msg(_severity(m.group("sev")), "nvlink: " + _demangle_all(m.group("msg").strip()), "link",
                          display))
            continue

        m = _NVCC.match(raw)
        if m:
            emit(_Msg(_severity(m.group("sev")), m.group("msg").strip(), "nvcc"))
            continue

        m = _COLLECT2.match(raw)
        if m:
            if not any(d.code == "link" and d.severity == "error" for d in out):
                emit(_Msg("error", f"the linker failed: {m.group('msg').strip()}", "link"))
            continue

        m = _LD.match(raw)
        if m:
            sev = m.group("sev") or ("warning" if "warning" in m.group("msg").lower()[:10] else "error")
            emit(_Msg(sev, m.group("msg").strip(), "link"))
            continue

        m = _TOOL.match(raw)
        if m:
            tool = m.group("tool")
            code = "nvcc" if tool in ("cicc", "cudafe++", "fatbinary") else (
                "link" if tool == "nvlink" else "ptxas" if tool == "ptxas" else "host-compiler")
            emit(_Msg(_severity(m.group("sev").split()[-1]), f"{tool}: {m.group('msg').strip()}", code))
            continue
        # Anything else (echo lines of unrecognized tools, progress) is left in the log.

    # One record per distinct message (ld reports an undefined symbol at every call site).
    seen: set[tuple] = set()
    result: list[Diagnostic] = []
    for msg in out:
        d = msg.freeze()
        key = (d.severity, d.code, d.file, d.line, d.column, d.message)
        if key not in seen:
            seen.add(key)
            result.append(d)

    if failed is None:
        failed = any(d.severity == "error" for d in result) or any(
            _ERROR_WORD.search(ln) for ln in lines if ln.strip())
    if failed and not any(d.severity == "error" for d in result):
        tail = [ln.rstrip() for ln in lines if ln.strip()][-TAIL_LINES:]
        body = "\n".join(tail) if tail else "(nvcc printed nothing)"
        result.append(Diagnostic(level=LEVEL, severity="error", file=display, code="nvcc",
                                 message=f"nvcc failed without a message this tool recognizes; its last lines:\n{body}"))
    return result
