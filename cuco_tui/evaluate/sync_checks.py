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

import re

from cuco_tui.core.result import Diagnostic, Level
from cuco_tui.source.assignments import Assignment, derived_names, target_before
from cuco_tui.source.functions import Function
from cuco_tui.source.lexer import matching_angle
from cuco_tui.source.launches import Launch
from cuco_tui.source.model import CandidateSource, CodeView

__all__ = ["check_sync"]

_L0 = int(Level.STATIC)
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


def _diag(src: CandidateSource, file_name: str, offset: int, message: str, severity: str) -> Diagnostic:
    line = src.whole.line(offset)
    return Diagnostic(level=_L0, severity=severity, message=message, file=file_name, line=line,
                      source_line=src.line(line), code="sync")


def _kernel_launches(c: CodeView) -> list[Launch]:
    """The `kernel<<<...>>>(args)` launches: their arguments map onto the kernel's parameters."""
    return [launch for launch in c.launches if launch.via == "chevrons" and launch.args is not None]


# ---------------------------------------------------------------------------- 1. LSA barrier count


_SESSION = re.compile(r"\bncclLsaBarrierSession\s*<")
_BARRIER_COUNT = re.compile(r"\blsa_devcomm_create\s*\(|\blsaBarrierCount\s*=(?!=)\s*")
_BLOCK_INDEX = ("blockIdx.x", "(int)blockIdx.x", "(uint32_t)blockIdx.x")


def _block_indexed_kernels(c: CodeView) -> dict[str, int]:
    """Kernels that open an LSA barrier session indexed by blockIdx.x: name -> offset."""
    code = c.code
    kernels: dict[str, int] = {}
    for m in _SESSION.finditer(code):
        k = matching_angle(code, m.end() - 1)
        if k < 0:
            continue
        rest = re.match(r"\s*(?:[A-Za-z_]\w*\s*)?[({]", code[k + 1:])
        if not rest:
            continue
        call = c.call(k + 1 + rest.end() - 1)
        if call is None or not call.args or re.sub(r"\s+", "", call.args[-1].text) not in _BLOCK_INDEX:
            continue
        f = c.enclosing(m.start())
        if f is not None and f.is_kernel:
            kernels.setdefault(f.name, m.start())
    return kernels


def _barrier_counts(c: CodeView) -> list[tuple[int, int]] | None:
    """(count, offset) of every LSA barrier count the file sets; None when one is not a constant."""
    code = c.code
    counts: list[tuple[int, int]] = []
    for m in _BARRIER_COUNT.finditer(code):
        if m.group(0).startswith("lsa_devcomm_create"):
            call = c.call(m.end() - 1)
            if call is None or len(call.args) < 3:
                return None
            value = c.constants.value(call.args[2].text)
        else:
            end = c.statement_end(m.end())
            value = c.constants.value(code[m.end():end].rstrip().rstrip(";"))
        if value is None:
            return None
        counts.append((value, m.start()))
    return counts


def _check_barrier_count(src: CandidateSource, file_name: str) -> list[Diagnostic]:
    c = src.whole
    kernels = _block_indexed_kernels(c)
    counts = _barrier_counts(c) if kernels else None
    if not counts:
        return []
    n, n_at = max(counts)
    out: list[Diagnostic] = []
    for launch in _kernel_launches(c):
        if launch.kernel not in kernels or not launch.config:
            continue
        g = c.constants.value(launch.grid)
        if g is None or g <= n:
            continue
        at = launch.at
        out.append(_diag(src, file_name, at,
                         f"kernel `{launch.kernel}` launched with {g} blocks at line {c.line(at)} syncs LSA barrier "
                         f"index blockIdx.x, but the device communicator has {n} barriers (line {c.line(n_at)}): "
                         f"blocks {n}..{g - 1} use barriers that do not exist", "error"))
    return out


# ---------------------------------------------------------------------------- 2. never-signalled waits


_WAIT = re.compile(r"\bwait_geq\s*(?:<[^<>;()]*>)?\s*\(")
_DECL_ALIAS = re.compile(r"(?:^|[;{}(])\s*(?:const\s+)?(?:volatile\s+)?[A-Za-z_][\w:<>, ]*?[\s*&]+"
                         r"([A-Za-z_]\w*)\s*=(?!=)\s*([^;]+);")


class _Aliases:
    """Local `T* name = expr;` declarations per function body (name -> expr), read once each."""

    def __init__(self, c: CodeView) -> None:
        self._c = c
        self._read: dict[int, dict[str, str]] = {}

    def of(self, f: Function | None) -> dict[str, str]:
        if f is None:
            return {}
        if f.body_start not in self._read:
            body = self._c.code[f.body_start + 1:f.body_end]
            self._read[f.body_start] = {m.group(1): m.group(2) for m in _DECL_ALIAS.finditer(body)}
        return self._read[f.body_start]


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
                          r"st_release\w*|store_release\w*|atomic_add\w*|__st\w*|cudaMemcpy\w*|cuMemcpy\w*|"
                          r"cuStreamWriteValue\w*|cuStreamWrite\w*)\s*\(")
_STORE_METHOD = re.compile(r"\.\s*(?:store|fetch_\w+|exchange|compare_exchange\w*)\s*\(")


def _write_targets(c: CodeView) -> list[tuple[str, int]]:
    """(expression written, offset) for every store, atomic update, copy, assignment or increment."""
    code = c.code
    targets: list[tuple[str, int]] = []
    for m in _ATOMIC_REF.finditer(code):
        if code[m.end() - 1] == "(":
            call = c.call(m.end() - 1)
            if call is not None and call.args:
                targets.append((call.args[0].text, m.start()))
        else:
            close = c.closing(m.end() - 1)
            if close > 0:
                targets.append((code[m.end():close], m.start()))
    for m in _ATOMIC_CALL.finditer(code):
        call = c.call(m.end() - 1)
        if call is not None and call.args:
            targets.append((call.args[0].text, m.start()))
    for m in _STORE_METHOD.finditer(code):
        targets.append((target_before(code, m.start()), m.start()))
    targets += [(a.target, a.at) for a in c.assignments]
    return targets


def _written(c: CodeView, aliases: _Aliases) -> set[str]:
    """Names (members and identifiers) that some code stores to or updates atomically."""
    per_function: dict[int, set[str]] = {}
    written: set[str] = set()
    for expr, at in _write_targets(c):
        f = c.enclosing(at)
        members, bare = _names(expr, aliases.of(f))
        names = members | bare
        written |= names
        if f is not None:
            per_function.setdefault(f.body_start, set()).update(names)
    # A kernel that writes through a parameter: the arguments it is launched with are written.
    by_name = {f.name: f for f in c.functions}
    for _ in range(3):
        grew = False
        for launch in _kernel_launches(c):
            f = by_name.get(launch.kernel)
            if f is None or launch.args is None:
                continue
            wrote = per_function.get(f.body_start, set())
            caller = c.enclosing(launch.at)
            for param, arg in zip(f.params, launch.args):
                if param in wrote:
                    members, bare = _names(arg.text, aliases.of(caller))
                    names = (members or bare) - written
                    if names:
                        grew = True
                        written |= names
                        if caller is not None:
                            per_function.setdefault(caller.body_start, set()).update(names)
        if not grew:
            break
    return written


def _wait_names(c: CodeView, aliases: _Aliases, at: int, flag: str) -> set[str] | None:
    """The names that identify the flag a wait reads; None when unsure."""
    f = c.enclosing(at)
    members, bare = _names(flag, aliases.of(f))
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
    for launch in _kernel_launches(c):
        if launch.kernel != f.name or launch.args is None:
            continue
        if index >= len(launch.args):
            return None
        am, _ab = _names(launch.args[index].text, aliases.of(c.enclosing(launch.at)))
        if not am:
            return None
        names |= am
        seen = True
    return names if seen else None


def _mentioned_elsewhere(c: CodeView, name: str, waits: list[tuple[int, int]]) -> bool:
    """Whether `name` occurs outside the waits, outside plain declarations (struct members,
    parameters) and outside the local aliases the waits read."""
    code = c.code
    params = [(f.params_open, f.params_close) for f in c.functions]
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


def _check_waits(src: CandidateSource, file_name: str) -> list[Diagnostic]:
    c = src.whole
    calls = [(m.start(), call) for m in _WAIT.finditer(c.code) if (call := c.call(m.end() - 1)) is not None]
    if not calls:
        return []
    spans = [(at, call.close_at + 1) for at, call in calls]
    aliases = _Aliases(c)
    written = _written(c, aliases)
    out: list[Diagnostic] = []
    for at, call in calls:
        if len(call.args) != 6:
            continue
        names = _wait_names(c, aliases, at, call.args[4].text)
        if not names or names & written:
            continue
        shown = ", ".join(f"`{n}`" for n in sorted(names))
        line = c.line(at)
        if any(_mentioned_elsewhere(c, n, spans) for n in names):
            out.append(_diag(src, file_name, at,
                             f"the wait at line {line} reads flag {shown}, which is allocated or passed around but "
                             f"never stored to or atomically updated anywhere in the candidate: nothing can "
                             f"signal it, so the wait may never finish", "warning"))
        else:
            out.append(_diag(src, file_name, at,
                             f"the wait at line {line} reads flag {shown}, which nothing in the candidate ever "
                             f"writes (no store, atomic update or kernel that writes it): the wait can never "
                             f"finish", "error"))
    return out


# ---------------------------------------------------------------------------- 3. rank-dependent skips


def _rank_names(c: CodeView) -> set[str]:
    """Local names computed from the rank (`const bool last = dc.lsaRank == W - 1;`)."""
    def derives(a: Assignment, names: set[str]) -> str:
        ok = a.plain and a.name and a.name not in _KEYWORDS and _mentions_rank(a.expr, names)
        return a.name if ok else ""

    return derived_names(c.assignments, derives, passes=4)


def _mentions_rank(expr: str, names: set[str]) -> bool:
    return bool(_RANK.search(expr)) or any(re.search(r"(?<![.>\w])" + re.escape(n) + r"\b", expr) for n in names)


def _syncs(c: CodeView, a: int, b: int, sync_kernels: set[str], sessions: set[str]) -> list[int]:
    """Offsets of collective syncs between a and b."""
    code = c.code
    found = [m.start() for m in _COLLECTIVE_CALLS.finditer(code, a, b)]
    if sessions:
        pattern = re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(sessions))) + r")\s*\.\s*sync\s*\(")
        found += [m.start() for m in pattern.finditer(code, a, b)]
    found += [launch.at for launch in c.launches if a <= launch.at < b and launch.kernel in sync_kernels]
    return sorted(found)


def _check_rank_skips(src: CandidateSource, file_name: str) -> list[Diagnostic]:
    c = src.whole
    sessions = {m.group(1) for m in re.finditer(r"\bnccl\w*BarrierSession\s*<[^;{}]*?>\s*([A-Za-z_]\w*)\s*[({]",
                                                c.code)}
    # Kernels that sync a barrier unconditionally count as syncs where they are launched.
    sync_kernels = {f.name for f in c.functions
                    if f.is_kernel and _syncs(c, f.body_start, f.body_end + 1, set(), sessions)}
    ranks = _rank_names(c)
    out: list[Diagnostic] = []
    for s in c.ifs:
        if not _mentions_rank(c.code[s.cond_open + 1:s.cond_close], ranks):
            continue
        then_syncs = _syncs(c, s.cond_close + 1, s.then_end, sync_kernels, sessions)
        else_syncs = _syncs(c, s.else_start, s.else_end, sync_kernels, sessions) if s.else_start >= 0 else []
        if then_syncs and not else_syncs:
            at, branch = then_syncs[0], ""
        elif else_syncs and not then_syncs:
            at, branch = else_syncs[0], ", else branch"
        else:
            continue
        out.append(_diag(src, file_name, at,
                         f"only some ranks reach the barrier at line {c.line(at)} (condition on the rank at line "
                         f"{c.line(s.at)}{branch}): the others will wait for ever", "warning"))
    return out


# ---------------------------------------------------------------------------- entry point


def check_sync(source: str | CandidateSource, file_name: str) -> list[Diagnostic]:
    """Every L0 synchronization check of `source`; errors reject, warnings do not."""
    src = CandidateSource.of(source)
    diags: list[Diagnostic] = []
    for check in (_check_barrier_count, _check_waits, _check_rank_skips):
        try:
            diags += check(src, file_name)
        except (RecursionError, ValueError, IndexError):  # a heuristic that fails says nothing
            continue
    return sorted(diags, key=lambda d: d.line)
