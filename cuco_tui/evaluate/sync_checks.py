"""L0 synchronization checks: cheap text checks for common causes of hangs, before a GPU is touched.

`check_sync(source, file_name)` returns level-0 `Diagnostic`s (code "sync"):

1. LSA barrier count (error): a kernel that opens `ncclLsaBarrierSession<...>(..., blockIdx.x)` is
   launched with a compile-time constant grid of G blocks, but the device communicator was created
   with a constant N < G barriers (`cuco::lsa_devcomm_create(ctx, comm, N, ...)` or
   `reqs.lsaBarrierCount = N`). Anything not a compile-time constant is left alone.
2. A wait with no possible signaller: `cuco::wait_geq(...)` on a flag that nothing in the file
   stores to or atomically updates (directly, through a local alias, or through a kernel launched
   with a pointer derived from it). An error when the flag's name appears nowhere but in the wait
   (and declarations); a warning when the buffer is at least allocated, cleared or passed around.
3. A rank-dependent skip of a collective sync (warning): an `if` on the rank (`rank`, `lsaRank`,
   `ctx->rank`, or a local computed from one) whose branch calls an LSA barrier sync, an NCCL
   collective or a collective cuco setup call, with no `else` that does the same.

Everything is conservative: when a check is not sure, it says nothing.
"""

from __future__ import annotations

import bisect
import re

from cuco_tui.core.result import Diagnostic, Level
from cuco_tui.source.lexer import blank_code, closing_bracket

__all__ = ["check_sync"]

_L0 = int(Level.STATIC)
_ID = re.compile(r"[A-Za-z_]\w*")
_KEYWORDS = frozenset("""
    const volatile unsigned signed int long short char bool float double void auto size_t int64_t uint64_t
    int32_t uint32_t uint8_t uint16_t uint4 return if else for while do sizeof static_cast reinterpret_cast
    const_cast nullptr true false this struct class new delete static constexpr __restrict__ restrict
    cuda std cuco kMaxPeers
""".split())
# Members of the runtime's buffer structs (cuco::PeerBuffers, cuco::SymmetricBuffer): a flag is
# named by the field that holds the buffer, not by these.
_GENERIC_MEMBERS = frozenset({"local", "peers", "ptr", "window", "data", "get"})

_COLLECTIVE_CALLS = re.compile(
    r"\b(?:lsa_barrier_sync|ncclAllGather|ncclAllReduce|ncclReduceScatter|ncclBroadcast|ncclBcast|ncclReduce|"
    r"ncclAlltoAll|ncclCommSplit|ncclCommWindowRegister|ncclDevCommCreate|comm_init|symmetric_alloc|"
    r"symmetric_free|lsa_devcomm_create|lsa_devcomm_destroy|peer_alloc)\s*\(")
_RANK = re.compile(r"\b(?:rank|lsaRank|teamRank|worldRank|myRank|my_rank)\b|\bncclCommUserRank\s*\(")


class _Code:
    def __init__(self, source: str) -> None:
        self.text = source
        self.code = blank_code(source)
        self.starts = [0] + [m.end() for m in re.finditer("\n", source)]
        self.lines = source.split("\n")

    def line(self, offset: int) -> int:
        return bisect.bisect_right(self.starts, offset)

    def source_line(self, no: int) -> str:
        return self.lines[no - 1].rstrip("\r") if 0 < no <= len(self.lines) else ""

    def match(self, open_at: int) -> int:
        """Offset of the bracket closing the one at `open_at` ('(', '[' or '{'), or -1."""
        return closing_bracket(self.code, open_at)

    def call_args(self, open_at: int) -> tuple[list[tuple[str, int]], int] | None:
        """The top-level arguments (text, offset) of the call whose '(' is at open_at, and the ')'."""
        close = self.match(open_at)
        if close < 0:
            return None
        return _split_args(self.code, open_at + 1, close), close

    def statement_end(self, at: int) -> int:
        """Offset just past the statement starting at `at`: a `{...}` block or up to its ';'."""
        code = self.code
        k = at
        while k < len(code) and code[k].isspace():
            k += 1
        if k < len(code) and code[k] == "{":
            close = self.match(k)
            return len(code) if close < 0 else close + 1
        depth = 0
        while k < len(code):
            ch = code[k]
            if ch in "([{":
                depth += 1
            elif ch in ")]}":
                depth -= 1
                if depth < 0:
                    return k
            elif ch == ";" and depth == 0:
                return k + 1
            k += 1
        return len(code)


def _split_args(code: str, a: int, b: int) -> list[tuple[str, int]]:
    out: list[tuple[str, int]] = []
    depth = 0
    angle = 0
    start = a
    for k in range(a, b):
        ch = code[k]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "<" and depth == 0 and re.search(r"[A-Za-z_]\w*\s*$", code[start:k]) and \
                re.match(r"\s*[A-Za-z_:]", code[k + 1:k + 3]) and _looks_template(code, k, b):
            angle += 1
        elif ch == ">" and angle > 0 and code[k - 1] != "-":
            angle -= 1
        elif ch == "," and depth == 0 and angle == 0:
            out.append((code[start:k], start))
            start = k + 1
    if code[start:b].strip() or out:
        out.append((code[start:b], start))
    return out


def _looks_template(code: str, lt: int, end: int) -> bool:
    """Whether the '<' at `lt` opens a template argument list (a matching '>' before any ';' or ')')."""
    gt = code.find(">", lt)
    return 0 <= gt < end and not re.search(r"[;()]", code[lt:gt]) and code[lt:gt + 1].count("<") == 1


def _diag(code: _Code, file_name: str, offset: int, message: str, severity: str) -> Diagnostic:
    line = code.line(offset)
    return Diagnostic(level=_L0, severity=severity, message=message, file=file_name, line=line,
                      source_line=code.source_line(line), code="sync")


# ---------------------------------------------------------------------------- functions and kernels


class _Function:
    def __init__(self, name: str, start: int, params: list[str], body: tuple[int, int], is_kernel: bool) -> None:
        self.name, self.start, self.params, self.body, self.is_kernel = name, start, params, body, is_kernel

    def contains(self, offset: int) -> bool:
        return self.body[0] <= offset < self.body[1]


_FUNC_HEAD = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
_NOT_FUNCS = frozenset({"if", "for", "while", "switch", "return", "sizeof", "catch", "__launch_bounds__",
                        "__align__", "alignas", "decltype", "defined"})


def _functions(c: _Code) -> list[_Function]:
    """Function definitions: `name(params) ... {` at namespace scope (or in a struct)."""
    out: list[_Function] = []
    code = c.code
    for m in _FUNC_HEAD.finditer(code):
        name = m.group(1)
        if name in _NOT_FUNCS:
            continue
        open_at = m.end() - 1
        close = c.match(open_at)
        if close < 0:
            continue
        after = re.match(r"\s*(?:const\s*)?(?:noexcept\s*)?\{", code[close + 1:])
        if not after:
            continue
        head_start = max(code.rfind(";", 0, m.start()), code.rfind("}", 0, m.start()), code.rfind("{", 0, m.start()))
        head = code[head_start + 1:m.start()]
        if re.search(r"[=]", head) or not re.search(r"[A-Za-z_]", head):
            continue  # `x = f(...) {` is not a definition; a bare call has no return type
        brace = close + 1 + after.end() - 1
        end = c.match(brace)
        if end < 0:
            continue
        params = []
        for text, _ in _split_args(code, open_at + 1, close):
            ids = _ID.findall(re.sub(r"\[[^\]]*\]", "", text.split("=")[0]))
            if ids:
                params.append(ids[-1])
        out.append(_Function(name, m.start(), params, (brace, end + 1), "__global__" in head))
    return out


def _enclosing(funcs: list[_Function], offset: int) -> _Function | None:
    inner = [f for f in funcs if f.contains(offset)]
    return min(inner, key=lambda f: f.body[1] - f.body[0]) if inner else None


_LAUNCH = re.compile(r"\b([A-Za-z_]\w*)\s*(?:<[^<>;()]*>\s*)?<<<")


def _launches(c: _Code) -> list[tuple[str, int, list[tuple[str, int]], list[tuple[str, int]]]]:
    """Kernel launches: (kernel, offset, launch configuration args, call args)."""
    out = []
    code = c.code
    for m in _LAUNCH.finditer(code):
        cfg_start = m.end()
        cfg_end = code.find(">>>", cfg_start)
        if cfg_end < 0:
            continue
        cfg = _split_args(code, cfg_start, cfg_end)
        k = cfg_end + 3
        while k < len(code) and code[k].isspace():
            k += 1
        if k >= len(code) or code[k] != "(":
            continue
        got = c.call_args(k)
        if got is None:
            continue
        out.append((m.group(1), m.start(), cfg, got[0]))
    return out


# ---------------------------------------------------------------------------- 1. LSA barrier count


_CONST = re.compile(
    r"(?:^|[;{}\s])(?:static\s+)?(?:inline\s+)?(?:constexpr|const)\s+(?:static\s+)?"
    r"(?:unsigned\s+|signed\s+)?(?:int|long|long\s+long|size_t|int64_t|int32_t|uint32_t|uint64_t|unsigned|auto)\s+"
    r"([A-Za-z_]\w*)\s*(?:=\s*([^;{}]+?)|\{\s*([^;{}]+?)\s*\})\s*;")
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+([^\n]+)$", re.M)


def _constants(c: _Code) -> dict[str, int | None]:
    """Named integer constants; a name defined twice with different values maps to None."""
    raw: dict[str, list[str]] = {}
    for m in _CONST.finditer(c.code):
        raw.setdefault(m.group(1), []).append(m.group(2) or m.group(3))
    for m in _DEFINE.finditer(c.code):
        raw.setdefault(m.group(1), []).append(m.group(2))
    out: dict[str, int | None] = {}
    for _ in range(4):  # constants defined from constants
        for name, exprs in raw.items():
            values = {_eval(e, out) for e in exprs}
            out[name] = values.pop() if len(values) == 1 else None
    return out


def _eval(expr: str, consts: dict[str, int | None]) -> int | None:
    """The value of a constant integer expression (literals, known constants, + - * / % and
    parentheses), or None."""
    e = expr.strip()
    e = re.sub(r"\b(?:static_cast<\s*\w+\s*>|\(\s*(?:int|unsigned|size_t|unsigned\s+int)\s*\))", "", e)
    e = re.sub(r"(?<![\w.])(\d+)(?:[uU][lL]{0,2}|[lL]{1,2}[uU]?)\b", r"\1", e)

    def sub(m: re.Match[str]) -> str:
        v = consts.get(m.group(0))
        if v is None:
            raise KeyError(m.group(0))
        return str(v)

    try:
        e = re.sub(r"[A-Za-z_]\w*", sub, e)
    except KeyError:
        return None
    if not e or not re.fullmatch(r"[\d\s+\-*/%()]+", e) or "**" in e or "//" in e:
        return None
    try:
        value = eval(e.replace("/", "//"), {"__builtins__": {}}, {})  # digits and operators only
    except Exception:
        return None
    return value if isinstance(value, int) else None


_SESSION = re.compile(r"\bncclLsaBarrierSession\s*<")
_BARRIER_COUNT = re.compile(r"\blsa_devcomm_create\s*\(|\blsaBarrierCount\s*=(?!=)\s*")


def _check_barrier_count(c: _Code, file_name: str, funcs: list[_Function],
                         launches: list, consts: dict[str, int | None]) -> list[Diagnostic]:
    code = c.code
    # Kernels whose LSA barrier session index is blockIdx.x.
    kernels: dict[str, int] = {}
    for m in _SESSION.finditer(code):
        lt = m.end() - 1
        depth, k = 0, lt
        while k < len(code):
            if code[k] == "<":
                depth += 1
            elif code[k] == ">":
                depth -= 1
                if depth == 0:
                    break
            elif code[k] in ";{}":
                k = -1
                break
            k += 1
        if k < 0 or k >= len(code):
            continue
        rest = re.match(r"\s*(?:[A-Za-z_]\w*\s*)?[({]", code[k + 1:])
        if not rest:
            continue
        open_at = k + 1 + rest.end() - 1
        close = c.match(open_at)
        if close < 0:
            continue
        args = _split_args(code, open_at + 1, close)
        if not args or re.sub(r"\s+", "", args[-1][0]) not in ("blockIdx.x", "(int)blockIdx.x", "(uint32_t)blockIdx.x"):
            continue
        f = _enclosing(funcs, m.start())
        if f is not None and f.is_kernel:
            kernels.setdefault(f.name, m.start())
    if not kernels:
        return []
    # Barrier counts: all must be constants, else say nothing.
    counts: list[tuple[int, int]] = []
    for m in _BARRIER_COUNT.finditer(code):
        if m.group(0).startswith("lsa_devcomm_create"):
            got = c.call_args(m.end() - 1)
            if got is None or len(got[0]) < 3:
                return []
            value = _eval(got[0][2][0], consts)
        else:
            end = c.statement_end(m.end())
            value = _eval(code[m.end():end].rstrip().rstrip(";"), consts)
        if value is None:
            return []
        counts.append((value, m.start()))
    if not counts:
        return []
    n, n_at = max(counts)
    out: list[Diagnostic] = []
    for name, at, cfg, _args in launches:
        if name not in kernels or not cfg:
            continue
        g = _eval(cfg[0][0], consts)
        if g is None or g <= n:
            continue
        out.append(_diag(c, file_name, at,
                         f"kernel `{name}` launched with {g} blocks at line {c.line(at)} syncs LSA barrier index "
                         f"blockIdx.x, but the device communicator has {n} barriers (line {c.line(n_at)}): "
                         f"blocks {n}..{g - 1} use barriers that do not exist", "error"))
    return out


# ---------------------------------------------------------------------------- 2. never-signalled waits


_WAIT = re.compile(r"\bwait_geq\s*(?:<[^<>;()]*>)?\s*\(")
_DECL_ALIAS = re.compile(r"(?:^|[;{}(])\s*(?:const\s+)?(?:volatile\s+)?[A-Za-z_][\w:<>, ]*?[\s*&]+"
                         r"([A-Za-z_]\w*)\s*=(?!=)\s*([^;]+);")


def _aliases(c: _Code, f: _Function | None) -> dict[str, str]:
    """Local `T* name = expr;` declarations in a function body: name -> expr."""
    if f is None:
        return {}
    body = c.code[f.body[0] + 1:f.body[1] - 1]
    return {m.group(1): m.group(2) for m in _DECL_ALIAS.finditer(body)}


def _names(expr: str, aliases: dict[str, str], depth: int = 0) -> tuple[set[str], set[str]]:
    """(member names, bare identifiers) an expression refers to, through local aliases."""
    members: set[str] = set()
    bare: set[str] = set()
    for m in re.finditer(r"(\.|->)?\s*\b([A-Za-z_]\w*)\b(?!\s*(?:::|\())", expr):
        name = m.group(2)
        if name in _KEYWORDS or re.fullmatch(r"k[A-Z]\w*", name):
            continue
        if m.group(1):
            if name not in _GENERIC_MEMBERS:
                members.add(name)
        elif name in aliases and depth < 4:
            mm, bb = _names(aliases[name], aliases, depth + 1)
            members |= mm
            bare |= bb
        else:
            bare.add(name)
    return members, bare


_ATOMIC_REF = re.compile(r"\batomic_ref\s*<[^;{}]*?>\s*[A-Za-z_]\w*\s*[({]|\batomic_ref\s*<[^;{}]*?>\s*[({]")
_ATOMIC_CALL = re.compile(r"\b(?:atomic(?:Add|Sub|Exch|CAS|Max|Min|Inc|Dec|And|Or|Xor)\w*|__nv_atomic\w*|"
                          r"st_release\w*|store_release\w*|__st\w*|cudaMemcpy\w*|cuMemcpy\w*|"
                          r"cuStreamWriteValue\w*|cuStreamWrite\w*)\s*\(")
_ASSIGN = re.compile(r"(?<![=!<>+\-*/%&|^])(?:[+\-*/%&|^]|<<|>>)?=(?!=)|\+\+|--")
_STORE_METHOD = re.compile(r"\.\s*(?:store|fetch_\w+|exchange|compare_exchange\w*)\s*\(")


def _lhs(code: str, at: int) -> str:
    """The postfix expression that ends just before offset `at` (target of an assignment)."""
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


def _written(c: _Code, funcs: list[_Function], launches: list) -> set[str]:
    """Names (members and identifiers) that some code stores to or updates atomically."""
    code = c.code
    targets: list[tuple[str, int]] = []
    for m in _ATOMIC_REF.finditer(code):
        got = c.call_args(m.end() - 1) if code[m.end() - 1] == "(" else None
        if got is not None and got[0]:
            targets.append((got[0][0][0], m.start()))
        elif code[m.end() - 1] == "{":
            close = c.match(m.end() - 1)
            if close > 0:
                targets.append((code[m.end():close], m.start()))
    for m in _ATOMIC_CALL.finditer(code):
        got = c.call_args(m.end() - 1)
        if got is not None and got[0]:
            targets.append((got[0][0][0], m.start()))
    for m in _STORE_METHOD.finditer(code):
        targets.append((_lhs(code, m.start()), m.start()))
    for m in _ASSIGN.finditer(code):
        if m.group(0) in ("++", "--"):
            before = _lhs(code, m.start())
            if before.strip():
                targets.append((before, m.start()))
            else:
                end = m.end()
                nxt = re.match(r"\s*([\w.\->\[\]*]+)", code[end:])
                if nxt:
                    targets.append((nxt.group(1), m.start()))
            continue
        lhs = _lhs(code, m.start())
        if lhs.strip():
            targets.append((lhs, m.start()))

    per_function: dict[int, set[str]] = {}
    written: set[str] = set()
    for expr, at in targets:
        f = _enclosing(funcs, at)
        members, bare = _names(expr, _aliases(c, f))
        names = members | bare
        written |= names
        if f is not None:
            per_function.setdefault(id(f), set()).update(names)
    # A kernel that writes through a parameter: the arguments it is launched with are written.
    by_name = {f.name: f for f in funcs}
    for _ in range(3):
        grew = False
        for kernel, at, _cfg, args in launches:
            f = by_name.get(kernel)
            if f is None:
                continue
            wrote = per_function.get(id(f), set())
            caller = _enclosing(funcs, at)
            for param, (arg, _) in zip(f.params, args):
                if param in wrote:
                    members, bare = _names(arg, _aliases(c, caller))
                    names = (members or bare) - written
                    if names:
                        grew = True
                        written |= names
                        if caller is not None:
                            per_function.setdefault(id(caller), set()).update(names)
        if not grew:
            break
    return written


def _wait_names(c: _Code, funcs: list[_Function], launches: list, at: int, flag: str) -> set[str] | None:
    """The names that identify the flag a wait reads; None when unsure."""
    f = _enclosing(funcs, at)
    members, bare = _names(flag, _aliases(c, f))
    if members:
        return members
    if f is None or not bare:
        return None
    # A bare kernel parameter: the flag is whatever every launch passes for it.
    params = [p for p in bare if p in f.params]
    if len(params) != 1 or len(bare) != 1:
        return None
    index = f.params.index(params[0])
    names: set[str] = set()
    seen = False
    for kernel, lat, _cfg, args in launches:
        if kernel != f.name:
            continue
        if index >= len(args):
            return None
        am, ab = _names(args[index][0], _aliases(c, _enclosing(funcs, lat)))
        if not am:
            return None
        names |= am
        seen = True
    return names if seen else None


def _mentioned_elsewhere(c: _Code, funcs: list[_Function], name: str, waits: list[tuple[int, int]]) -> bool:
    """Whether `name` occurs outside the waits, outside plain declarations (struct members,
    parameters) and outside the local aliases the waits read."""
    code = c.code
    params = []
    for f in funcs:
        open_at = code.find("(", f.start)
        params.append((open_at, c.match(open_at)))
    for m in re.finditer(r"\b" + re.escape(name) + r"\b", code):
        k = m.start()
        if any(a <= k < b for a, b in waits) or any(a <= k <= b for a, b in params):
            continue
        stmt_start = max(code.rfind(";", 0, k), code.rfind("{", 0, k), code.rfind("}", 0, k)) + 1
        stmt_end = code.find(";", k)
        stmt = code[stmt_start:stmt_end if stmt_end >= 0 else len(code)]
        if re.fullmatch(r"\s*(?:const\s+|volatile\s+|static\s+|unsigned\s+|signed\s+)*[A-Za-z_][\w:<>]*"
                        r"(?:\s+[A-Za-z_]\w*)*[\s*&]+" + re.escape(name) + r"\s*(?:\[[^\]]*\]\s*)*", stmt):
            continue  # a declaration without an initializer
        alias = re.fullmatch(r"\s*(?:const\s+)?[A-Za-z_][\w:<> ]*?[\s*&]+([A-Za-z_]\w*)\s*=([^;]*)", stmt)
        if alias and alias.group(1) != name:
            target = alias.group(1)
            others = [o.start() for o in re.finditer(r"\b" + re.escape(target) + r"\b", code)
                      if not (stmt_start <= o.start() < stmt_start + len(stmt))]
            if others and all(any(a <= o < b for a, b in waits) for o in others):
                continue  # a local alias only the waits read
        return True
    return False


def _check_waits(c: _Code, file_name: str, funcs: list[_Function], launches: list) -> list[Diagnostic]:
    code = c.code
    calls = []
    for m in _WAIT.finditer(code):
        got = c.call_args(m.end() - 1)
        if got is None:
            continue
        calls.append((m, got[0], got[1]))
    if not calls:
        return []
    spans = [(m.start(), close + 1) for m, _, close in calls]
    written = _written(c, funcs, launches)
    out: list[Diagnostic] = []
    for m, args, _close in calls:
        if len(args) != 6:
            continue
        names = _wait_names(c, funcs, launches, m.start(), args[4][0])
        if not names or names & written:
            continue
        shown = ", ".join(f"`{n}`" for n in sorted(names))
        line = c.line(m.start())
        if any(_mentioned_elsewhere(c, funcs, n, spans) for n in names):
            out.append(_diag(c, file_name, m.start(),
                             f"the wait at line {line} reads flag {shown}, which is allocated or passed around but "
                             f"never stored to or atomically updated anywhere in the candidate: nothing can "
                             f"signal it, so the wait may never finish", "warning"))
        else:
            out.append(_diag(c, file_name, m.start(),
                             f"the wait at line {line} reads flag {shown}, which nothing in the candidate ever "
                             f"writes (no store, atomic update or kernel that writes it): the wait can never "
                             f"finish", "error"))
    return out


# ---------------------------------------------------------------------------- 3. rank-dependent skips


_IF = re.compile(r"\bif\s*(?:constexpr\s*)?\(")


def _rank_names(c: _Code) -> set[str]:
    """Local names computed from the rank (`const bool last = dc.lsaRank == W - 1;`)."""
    names: set[str] = set()
    pattern = re.compile(r"\b([A-Za-z_]\w*)\s*=(?!=)([^;]*)")
    for _ in range(4):
        grew = False
        for m in pattern.finditer(c.code):
            if c.code[m.start() - 2:m.start()].strip() in ("->", ".") or c.code[m.start() - 1:m.start()] in ".>":
                continue  # a member assignment: `c->rank = ...`
            name, expr = m.group(1), m.group(2)
            if name in names or name in _KEYWORDS:
                continue
            if _mentions_rank(expr, names):
                names.add(name)
                grew = True
        if not grew:
            break
    return names


def _mentions_rank(expr: str, names: set[str]) -> bool:
    return bool(_RANK.search(expr)) or any(re.search(r"(?<![.>\w])" + re.escape(n) + r"\b", expr) for n in names)


def _syncs(c: _Code, a: int, b: int, sync_kernels: set[str], sessions: set[str]) -> list[int]:
    """Offsets of collective syncs between a and b."""
    code = c.code
    found = [m.start() for m in _COLLECTIVE_CALLS.finditer(code, a, b)]
    if sessions:
        pattern = re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(sessions))) + r")\s*\.\s*sync\s*\(")
        found += [m.start() for m in pattern.finditer(code, a, b)]
    if sync_kernels:
        found += [m.start() for m in _LAUNCH.finditer(code, a, b) if m.group(1) in sync_kernels]
    return sorted(found)


def _check_rank_skips(c: _Code, file_name: str, funcs: list[_Function]) -> list[Diagnostic]:
    code = c.code
    sessions = {m.group(1) for m in re.finditer(r"\bnccl\w*BarrierSession\s*<[^;{}]*?>\s*([A-Za-z_]\w*)\s*[({]", code)}
    # Kernels that sync a barrier unconditionally count as syncs where they are launched.
    sync_kernels = {f.name for f in funcs if f.is_kernel and _syncs(c, f.body[0], f.body[1], set(), sessions)}
    ranks = _rank_names(c)
    out: list[Diagnostic] = []
    for m in _IF.finditer(code):
        open_at = m.end() - 1
        close = c.match(open_at)
        if close < 0:
            continue
        if not _mentions_rank(code[open_at + 1:close], ranks):
            continue
        then_end = c.statement_end(close + 1)
        then_syncs = _syncs(c, close + 1, then_end, sync_kernels, sessions)
        rest = re.match(r"\s*else\b", code[then_end:])
        else_syncs: list[int] = []
        if rest:
            else_end = c.statement_end(then_end + rest.end())
            else_syncs = _syncs(c, then_end + rest.end(), else_end, sync_kernels, sessions)
        if then_syncs and not else_syncs:
            at = then_syncs[0]
            out.append(_diag(c, file_name, at,
                             f"only some ranks reach the barrier at line {c.line(at)} (condition on the rank at line "
                             f"{c.line(m.start())}): the others will wait for ever", "warning"))
        elif else_syncs and not then_syncs:
            at = else_syncs[0]
            out.append(_diag(c, file_name, at,
                             f"only some ranks reach the barrier at line {c.line(at)} (condition on the rank at line "
                             f"{c.line(m.start())}, else branch): the others will wait for ever", "warning"))
    return out


# ---------------------------------------------------------------------------- entry point


def check_sync(source: str, file_name: str) -> list[Diagnostic]:
    """Every L0 synchronization check of `source`; errors reject, warnings do not."""
    c = _Code(source)
    funcs = _functions(c)
    launches = _launches(c)
    consts = _constants(c)
    diags: list[Diagnostic] = []
    for check in (lambda: _check_barrier_count(c, file_name, funcs, launches, consts),
                  lambda: _check_waits(c, file_name, funcs, launches),
                  lambda: _check_rank_skips(c, file_name, funcs)):
        try:
            diags += check()
        except (RecursionError, ValueError, IndexError):  # a heuristic that fails says nothing
            continue
    return sorted(diags, key=lambda d: d.line)
