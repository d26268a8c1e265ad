"""A static classifier of candidates: what the code of the EVOLVE blocks shows about each design
dimension, and where that disagrees with the `// cuco-design:` line the candidate declares.

The reading is textual (comments and literals blanked, no preprocessor, no compiler) and
deliberately conservative: `classify` records what it sees, with line numbers, and
`check_declaration` warns only where the code clearly contradicts the declaration. A missing
or unparseable design line is the one error; every contradiction is a warning, since the
lineage can still store and measure the candidate.

What counts as evidence, per dimension:
- backend: the calls that move data. NCCL host collectives and point-to-point (nccl_host);
  LSA pointers and barriers of the NCCL device API (nccl_lsa); `ncclGin` (nccl_gin); kernels
  that store through CUDA-IPC peer pointers (cuda_ipc); `cudaMemcpy*Async` into or out of
  peer memory, `cudaMemcpyPeerAsync` (copy_engine); `nvshmem_*` calls (nvshmem). Allocation
  helpers (`cuco::symmetric_alloc`, `cuco::peer_alloc`) and flag kernels are setup and
  signals: they name a backend but do not make it the one that moves the data.
- streams: 1 (the harness's) + the `cudaStreamCreate*` calls.
- placement: one kernel that both communicates and computes (fused); compute issued on a
  stream other than the communication's (overlap across streams); or neither (sequential).
- chunk: host loops around the transfers: over peers (shard) or over pieces (a count).
- sync: per-peer flag waits (`cuco::wait_geq`, acquire loads, GIN/NVSHMEM signal waits,
  event waits in loops) against barriers and collectives.
- issuer: host API transfers against kernels that move data.
- comm_sms: the grid of the kernels that move data, when it is a literal or a constant.
"""

from __future__ import annotations

import ast
import operator
import re
from dataclasses import dataclass, field
from typing import Iterable

from cuco_tui.design.space import (
    BACKENDS,
    COMM_SMS,
    DEVICE_BACKENDS,
    DIMENSIONS,
    Capabilities,
    DesignError,
    DesignPoint,
    parse_design,
    violations,
)
from cuco_tui.core.result import Diagnostic, Level
from cuco_tui.source.lexer import blank_code
from cuco_tui.source.regions import design_of, split_regions

__all__ = [
    "Site",
    "KernelLaunch",
    "Evidence",
    "classify",
    "check_declaration",
    "comm_sms_for_blocks",
]

_L0 = int(Level.STATIC)
_HOST_ISSUED = ("nccl_host", "copy_engine")


# ---------------------------------------------------------------------------- records


@dataclass(frozen=True)
class Site:
    """One thing seen in the code. `role`: "data" (moves the bytes), "setup" (allocates or
    registers), "signal" (posts a flag to a peer), "wait" (waits for a peer or a piece),
    "barrier" (a team-wide barrier or collective), "compute", "stream"."""

    what: str  # the call or name, e.g. "ncclGetLsaPointer", "cudaMemcpyAsync into peer memory"
    line: int  # 1-based line in the candidate
    role: str
    backend: str = ""  # the backend it belongs to, "" for compute, streams and generic waits
    where: str = "host"  # "host", or the name of the kernel or device function it sits in


@dataclass(frozen=True)
class KernelLaunch:
    """A launch `kernel<<<grid, block, smem, stream>>>(...)` (or cudaLaunch*Kernel) in host code."""

    kernel: str
    line: int
    grid: str  # as written
    block: str
    stream: str  # normalized: the last name of the expression ("stream", "copy_stream"), "default"
    grid_blocks: int | None = None  # the grid's block count when it is a literal or constant
    backend: str = ""  # what the kernel communicates with, "" for a kernel that does not
    moves_data: bool = False  # it stores or loads bulk data through peer memory
    waits: bool = False  # it waits on a flag, signal or barrier
    computes: bool = False  # it does arithmetic of its own (MMA, FMA, accumulations)

    @property
    def communicates(self) -> bool:
        return bool(self.backend) or self.waits


@dataclass(frozen=True)
class Evidence:
    """What the EVOLVE blocks of a candidate show, dimension by dimension."""

    sites: tuple[Site, ...]
    launches: tuple[KernelLaunch, ...]
    backends: tuple[str, ...]  # every backend named anywhere, in BACKENDS order
    data_backends: tuple[str, ...]  # those that move the data
    streams: int  # 1 + the streams the candidate creates
    streams_exact: bool  # False when a stream is created in a loop of unknown count
    compute_streams: tuple[str, ...]
    comm_streams: tuple[str, ...]
    overlap: str  # "kernel" (one kernel communicates and computes) | "streams" | "none"
    chunking: str  # "full" | "shard" | "pieces" | "" (no host-issued transfer seen)
    chunk_count: int | None  # pieces per shard when chunking == "pieces" and the count is known
    flag_waits: int  # per-peer or per-piece waits
    chunk_waits: int  # those of them inside a loop over pieces
    barriers: int  # team barriers and host collectives
    issuer: str  # "host" | "device" | "mixed" | ""
    coop: str  # the finest device cooperation group seen: "thread" | "warp" | "cta" | "multi_cta" | ""
    comm_sms_hint: str  # a COMM_SMS value from the grid of data-moving kernels, "" if unknown
    declared: DesignPoint | None  # None when the line is missing or invalid
    declared_pairs: dict[str, str] | None = field(default=None, compare=False)
    design_error: str = ""  # why the declaration could not be read ("" when it could)

    @property
    def fused(self) -> bool:
        return self.overlap == "kernel"

    def first(self, *, backend: str | None = None, role: str | None = None) -> Site | None:
        for s in self.sites:
            if (backend is None or s.backend == backend) and (role is None or s.role == role):
                return s
        return None

    def inferred(self) -> dict[str, str]:
        """The best guess for each dimension from the code alone ("" where it says nothing)."""
        data = self.data_backends
        backend = data[0] if len(data) == 1 else ""
        if self.overlap == "kernel":
            placement = "fused"
        elif self.overlap == "streams":
            placement = "interleaved"
        else:
            placement = "before" if self.data_backends else ""
        if self.chunk_waits:
            sync = "per_chunk"
        elif self.flag_waits:
            sync = "per_peer"
        elif self.barriers:
            sync = "global"
        else:
            sync = ""
        issuer = {"host": "host", "device": self.coop or "cta"}.get(self.issuer, "")
        if self.chunking == "pieces":
            chunk = str(self.chunk_count) if str(self.chunk_count) in DIMENSIONS["chunk"] else ""
        else:
            chunk = self.chunking
        streams = str(min(self.streams, 4)) if self.streams_exact else ""
        comm_sms = "0" if self.issuer == "host" else self.comm_sms_hint
        return {"backend": backend, "placement": placement, "sync": sync, "issuer": issuer,
                "chunk": chunk, "streams": streams, "comm_sms": comm_sms}

    def summary(self) -> str:
        """A few lines for people and agents: what the code shows."""
        lines = []
        moved = ", ".join(self.data_backends) or "nothing seen"
        named = ", ".join(b for b in self.backends if b not in self.data_backends)
        lines.append(f"data moved by: {moved}" + (f" (also set up or signalled: {named})" if named else ""))
        lines.append(f"streams: {self.streams}{'' if self.streams_exact else ' or more'}; "
                     f"overlap: {_OVERLAP_WORDS[self.overlap]}")
        if self.chunking:
            pieces = f"{self.chunk_count} pieces per shard" if self.chunk_count else "pieces of unknown count"
            lines.append("chunking: " + {"full": "one transfer of everything", "shard": "one transfer per peer",
                                         "pieces": pieces}[self.chunking])
        lines.append(f"sync: {self.flag_waits} flag wait(s) ({self.chunk_waits} per piece), "
                     f"{self.barriers} barrier(s) or collective(s)")
        if self.issuer:
            lines.append(f"issued by: {self.issuer}" + (f" ({self.coop})" if self.coop else ""))
        for k in self.launches:
            if k.moves_data:
                grid = f"{k.grid_blocks} blocks" if k.grid_blocks is not None else f"grid `{k.grid}`"
                lines.append(f"comm kernel {k.kernel} (line {k.line}): {grid}, stream {k.stream}")
        return "\n".join(lines)


_OVERLAP_WORDS = {
    "kernel": "one kernel communicates and computes",
    "streams": "compute and communication on different streams",
    "none": "none (compute and communication on the same stream)",
}


# ---------------------------------------------------------------------------- text


class _Code:
    """The EVOLVE blocks of a candidate as one blanked text (frozen lines emptied), with
    offsets that map to the candidate's own line numbers."""

    def __init__(self, source: str) -> None:
        lines = source.split("\n")
        keep = [False] * len(lines)
        for region in split_regions(source).evolve:
            for no in range(region.start_line, region.end_line + 1):
                keep[no - 1] = True
        masked = "\n".join(line if keep[k] else "" for k, line in enumerate(lines))
        self.text = blank_code(masked)
        self.starts = [0] + [m.end() for m in re.finditer("\n", self.text)]

    def line(self, offset: int) -> int:
        lo, hi = 0, len(self.starts)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.starts[mid] <= offset:
                lo = mid
            else:
                hi = mid
        return lo + 1

    def match(self, open_at: int) -> int:
        """Offset of the bracket closing the one at open_at, or -1."""
        pairs = {"(": ")", "[": "]", "{": "}"}
        want = [pairs[self.text[open_at]]]
        for k in range(open_at + 1, len(self.text)):
            ch = self.text[k]
            if ch in pairs:
                want.append(pairs[ch])
            elif ch in ")]}":
                if not want or ch != want[-1]:
                    return -1
                want.pop()
                if not want:
                    return k
        return -1

    def call_args(self, open_at: int) -> list[str]:
        """The top-level arguments of the call whose '(' is at open_at."""
        close = self.match(open_at)
        if close < 0:
            return []
        return _split_top(self.text[open_at + 1:close])


def _split_top(text: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    tail = "".join(cur).strip()
    if tail or parts:
        parts.append(tail)
    return parts


def _stream_name(expr: str) -> str:
    """A stream argument, normalized: "default" for 0, nullptr or nothing, else its last name."""
    expr = expr.strip()
    return "default" if expr in ("", "0", "nullptr", "NULL", "cudaStreamLegacy") else _last_name(expr)


def _last_name(expr: str) -> str:
    """The name an expression ends with: `c->copy_stream` -> copy_stream, `s[i]` -> s."""
    expr = re.sub(r"\[[^\]]*\]", "", expr)
    names = re.findall(r"[A-Za-z_]\w*", expr)
    names = [n for n in names if n not in ("cudaStream_t", "const", "static_cast", "reinterpret_cast")]
    return names[-1] if names else expr.strip()


# ---------------------------------------------------------------------------- constants


_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.FloorDiv: operator.floordiv, ast.Div: operator.floordiv, ast.Mod: operator.mod,
           ast.LShift: operator.lshift, ast.RShift: operator.rshift}


def _eval_int(expr: str, consts: dict[str, int], depth: int = 0) -> int | None:
    """An integer expression of literals and known constants, or None."""
    if depth > 8:
        return None
    expr = re.sub(r"\b(\d+)(?:[uUlL]+)\b", r"\1", expr.strip())
    expr = re.sub(r"\((?:unsigned\s+)?(?:int|long|size_t|unsigned|int64_t|uint32_t|int32_t)\)", "", expr)
    expr = re.sub(r"\bdim3\s*\(", "(", expr)
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError:
        return None

    def ev(node: ast.AST) -> int | None:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            return consts.get(node.id)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            v = ev(node.operand)
            return None if v is None else -v
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            a, b = ev(node.left), ev(node.right)
            if a is None or b is None or (type(node.op) in (ast.FloorDiv, ast.Div, ast.Mod) and b == 0):
                return None
            return _BINOPS[type(node.op)](a, b)
        if isinstance(node, ast.Tuple):  # dim3(x, y, z): the product
            prod = 1
            for e in node.elts:
                v = ev(e)
                if v is None:
                    return None
                prod *= v
            return prod
        return None

    return ev(tree)


_CONST = re.compile(r"\b(?:static\s+)?(?:constexpr|const)\s+(?:unsigned\s+)?(?:int|long|size_t|int64_t|int32_t|"
                    r"uint32_t|uint64_t|unsigned|auto)\s+([A-Za-z_]\w*)\s*=\s*([^;,{}]+)[;,]")
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+([^\n]+)$", re.M)
_DIM3 = re.compile(r"\bdim3\s+([A-Za-z_]\w*)\s*[({]([^;]*)[)}]\s*;")


def _constants(text: str) -> dict[str, int]:
    raw: dict[str, str] = {}
    for m in _DEFINE.finditer(text):
        raw.setdefault(m.group(1), m.group(2).strip())
    for m in _CONST.finditer(text):
        raw.setdefault(m.group(1), m.group(2).strip())
    for m in _DIM3.finditer(text):
        raw.setdefault(m.group(1), "(" + m.group(2) + ",)" if "," not in m.group(2) else "(" + m.group(2) + ")")
    consts: dict[str, int] = {}
    for _ in range(4):  # constants defined from constants
        for name, expr in raw.items():
            if name not in consts:
                v = _eval_int(expr, consts)
                if v is not None:
                    consts[name] = v
    return consts


# ---------------------------------------------------------------------------- functions and loops


@dataclass(frozen=True)
class _Function:
    name: str
    kind: str  # "global" | "device"
    params: str
    body_start: int  # offset of '{'
    body_end: int  # offset of '}'


_SKIP_PAREN = {"__launch_bounds__", "__attribute__", "alignas", "__align__", "__maxnreg__", "__cluster_dims__"}


def _functions(code: _Code) -> list[_Function]:
    text = code.text
    out: list[_Function] = []
    for m in re.finditer(r"\b__(global|device)__\b", text):
        k = m.end()
        name = ""
        while k < len(text):
            nm = re.compile(r"[A-Za-z_]\w*|\(|;|\{|=").search(text, k)
            if nm is None:
                break
            tok = nm.group(0)
            if tok in (";", "{", "="):
                break
            if tok == "(":
                if name in _SKIP_PAREN:
                    close = code.match(nm.start())
                    if close < 0:
                        break
                    k, name = close + 1, ""
                    continue
                close = code.match(nm.start())
                if close < 0 or not name:
                    break
                after = re.match(r"[\s\w:&*>-]*?\{", text[close + 1:close + 200])
                if after is None:
                    break  # a declaration, or not a function
                body = close + 1 + after.end() - 1
                end = code.match(body)
                if end > 0:
                    out.append(_Function(name, m.group(1), text[nm.start() + 1:close], body, end))
                break
            name = tok
            k = nm.end()
    # __host__ __device__ functions are found twice only if both qualifiers precede them
    seen, unique = set(), []
    for f in out:
        if f.body_start not in seen:
            seen.add(f.body_start)
            unique.append(f)
    return unique


@dataclass(frozen=True)
class _Loop:
    header: str  # the text between the parentheses
    start: int  # offset of `for` / `while`
    body_start: int  # first offset after the header's ')'
    body_end: int
    count: int | None  # iterations when the bounds are known
    over_peers: bool


_PEERISH = re.compile(r"\b(world|lsaSize|nRanks|n_ranks|nranks|npes|n_pes|nvshmem_n_pes|W|num_peers|n_peers|"
                      r"world_size|lsa_size|num_ranks)\b")
_WORLD_WORDS = ("world", "lsaSize", "nRanks", "n_ranks", "nranks", "npes", "n_pes", "world_size", "lsa_size", "W")


def _peer_names(text: str) -> set[str]:
    """Names that hold the world size or a number derived from it by a constant:
    `W = ctx->world`, `n = dc.lsaSize`, `steps = W - 1`."""
    names: set[str] = set()
    assigns = [(m.group(1), m.group(2)) for m in re.finditer(r"\b([A-Za-z_]\w*)\s*=(?!=)\s*([^,;{}]*)", text)]
    for _ in range(3):
        words = "|".join(re.escape(w) for w in (*_WORLD_WORDS, *sorted(names)))
        read = re.compile(rf"^\s*(?:\(\s*\w+\s*\)\s*)?(?:[\w.>\-]*?\b)?(?:{words})(?:\s*\(\s*\))?"
                          rf"\s*(?:[-+]\s*\d+\s*)?$")
        grown = {name for name, rhs in assigns if read.match(rhs)} - names
        if not grown:
            break
        names |= grown
    return names


def _loops(code: _Code, consts: dict[str, int], peer_names: set[str]) -> list[_Loop]:
    text = code.text
    out = []
    for m in re.finditer(r"\b(for|while)\s*\(", text):
        open_at = m.end() - 1
        close = code.match(open_at)
        if close < 0:
            continue
        header = text[open_at + 1:close]
        k = close + 1
        while k < len(text) and text[k].isspace():
            k += 1
        if k < len(text) and text[k] == "{":
            end = code.match(k)
        else:  # one statement: up to its ';' at depth 0
            end, depth = k, 0
            while end < len(text):
                ch = text[end]
                if ch in "([{":
                    depth += 1
                elif ch in ")]}":
                    depth -= 1
                    if depth < 0:
                        break
                elif ch == ";" and depth == 0:
                    break
                end += 1
        if end < 0:
            continue
        count, bound = None, header
        fm = re.match(r"\s*(?:[\w:<>]+\s+)*([A-Za-z_]\w*)\s*=\s*([^;]+);\s*\1\s*(<=|<)\s*([^;]+);\s*"
                      r"(?:\+\+\s*\1|\1\s*\+\+|\1\s*\+=\s*1)\s*$", header)
        if m.group(1) == "for" and fm:
            lo, hi = _eval_int(fm.group(2), consts), _eval_int(fm.group(4), consts)
            bound = fm.group(4)
            if lo is not None and hi is not None:
                count = max(0, hi - lo + (1 if fm.group(3) == "<=" else 0))
        elif m.group(1) == "for":
            parts = header.split(";")
            bound = parts[1] if len(parts) > 1 else header
        over_peers = bool(_PEERISH.search(bound)) or any(re.search(rf"\b{re.escape(n)}\b", bound)
                                                          for n in peer_names)
        out.append(_Loop(header, m.start(), close + 1, end, count, over_peers))
    return out


def _enclosing(loops: list[_Loop], offset: int) -> list[_Loop]:
    return [lp for lp in loops if lp.body_start <= offset <= lp.body_end]


def _is_piece_loop(lp: _Loop) -> bool:
    """A loop over pieces of the data: not over peers, not a single pass, not a spin (`for (;;)`)."""
    spin = re.sub(r"\s", "", lp.header) in ("", ";;", "true", "1")
    return not lp.over_peers and lp.count not in (0, 1) and not spin


# ---------------------------------------------------------------------------- patterns


# (regex, backend, role); matched against the blanked EVOLVE code.
_PATTERNS: list[tuple[re.Pattern[str], str, str]] = [
    (re.compile(r"\bnccl(AllGather|AllReduce|ReduceScatter|Broadcast|Bcast|Reduce|AlltoAll|Gather|Scatter)\s*\("),
     "nccl_host", "data"),
    (re.compile(r"\bnccl(Send|Recv)\s*\("), "nccl_host", "data"),
    (re.compile(r"\bnccl(GetLsaPointer|GetPeerPointer|GetLsaMultimemPointer|GetMultimemPointer|"
                r"GetResourceBufferLsaPointer|GetResourceBufferPeerPointer)\b|\.(lsaPtr|peerPtr|lsaMultimemPtr)\s*\("),
     "nccl_lsa", "data"),
    (re.compile(r"\bncclLsaBarrierSession\b|\blsa_barrier_sync\b"), "nccl_lsa", "barrier"),
    (re.compile(r"\bsymmetric_alloc\b|\blsa_devcomm_create\b|\bncclCommWindowRegister\b|\bncclDevCommCreate\b|"
                r"\bncclMemAlloc\b"), "nccl_lsa", "setup"),
    (re.compile(r"\bncclGin\b|\bncclGin_(?:SignalInc|SignalAdd|CounterInc|BackendMask)\b"), "nccl_gin", "data"),
    (re.compile(r"\bncclGinBarrierSession\b|\bncclBarrierSession\b"), "nccl_gin", "barrier"),
    (re.compile(r"\.(waitSignal|waitCounter|waitSignalMeetShadow|waitSignalFollowShadow)\s*\("), "nccl_gin", "wait"),
    (re.compile(r"\b(ginSignalCount|ginCounterCount|ginContextCount|ginForceEnable|railGinBarrierCount)\b"),
     "nccl_gin", "setup"),
    (re.compile(r"\bpeer_alloc\b|\bcudaIpcOpenMemHandle\b|\bcudaIpcGetMemHandle\b"), "cuda_ipc", "setup"),
    (re.compile(r"\bcudaMemcpyPeer(?:Async)?\s*\("), "copy_engine", "data"),
    (re.compile(r"\bnvshmemx?_\w*(?:put|get)\w*\s*\(|\bnvshmemx?_\w+_[pg]\s*\("), "nvshmem", "data"),
    (re.compile(r"\bnvshmemx?_\w*(?:barrier|sync_all|quiet|fence)\w*\s*\("), "nvshmem", "barrier"),
    (re.compile(r"\bnvshmemx?_\w*(?:wait|test)\w*\s*\("), "nvshmem", "wait"),
    (re.compile(r"\bnvshmemx?_\w*signal_op\w*\s*\("), "nvshmem", "signal"),
    (re.compile(r"\bnvshmemx?_(?:init|malloc|calloc|align|free|finalize|my_pe|n_pes|team)\w*\s*\("),
     "nvshmem", "setup"),
    (re.compile(r"\bwait_geq\b|\bcudaStreamWaitValue(?:32|64)\b|\bcuStreamWaitValue(?:32|64)\b"), "", "wait"),
]
_HOST_COLLECTIVE = re.compile(r"^nccl(AllGather|AllReduce|ReduceScatter|Broadcast|Bcast|Reduce|AlltoAll|Gather|"
                              r"Scatter)")
_ACQUIRE_LOAD = re.compile(r"\.load\s*\(\s*(?:cuda::(?:std::)?)?memory_order_acquire\b|\bld_acquire\w*\s*\(")
_EVENT_WAIT = re.compile(r"\bcudaStreamWaitEvent\s*\(|\bcudaEventSynchronize\s*\(")
_MEMCPY = re.compile(r"\bcudaMemcpy(?:2D|3D)?(?:Async)?\s*\(")
_MEMCPY_ANY = re.compile(r"\bcudaMemcpy\w*\s*\(")
_PEER_TABLE = re.compile(r"\bpeers\b(?!\s*\[)")
_STREAM_CREATE = re.compile(r"\bcudaStreamCreate(?:WithFlags|WithPriority)?\s*\(")
_BLAS_SET_STREAM = re.compile(r"\bcublas(?:Lt)?SetStream\s*\(")
_BLAS_COMPUTE = re.compile(r"\bcublas(?:Lt)?\w*?(?:Gemm|Matmul|gemm)(?!Desc|Preference|Algo)\w*\s*\(")
_DEVICE_COMPUTE = re.compile(r"\b(?:wmma|wgmma|mma_sync|mma|__hfma2?|__hmul2?|__fmaf_rn|fmaf|cute::gemm|"
                             r"cutlass::\w+)\b|\w\s*\[[^\]]+\]\s*\*\s*\w+\s*\[|\b\w+\s*\+=\s*[^;]*\w\s*\[[^\]]+\]\s*\*")
_INDEXED_STORE = re.compile(r"(?:\]|\))(?:\.\w+)*\s*[-+*/|&^]?=(?!=)|\*\s*\(\s*[A-Za-z_][\w>.-]*\s*\+[^;=]*\)\s*=(?!=)|"
                            r"\b__st(?:cg|cs|wt|wb|_global)\s*\(|\bmemcpy\s*\(")
_PEER_EXPR = re.compile(r"\bpeers\s*\[")
_COOPS = [
    ("thread", re.compile(r"\bncclCoopThread\b|\bncclCoopTile\s*<\s*1\s*>")),
    ("warp", re.compile(r"\bncclCoopWarp\b|\bncclCoopTile\s*<\s*32\s*>|\btiled_partition\s*<\s*32\s*>|"
                        r"\bncclCoopLanes\b")),
    ("cta", re.compile(r"\bncclCoopCta\b|\bthread_block\b|\bthis_thread_block\b|\bncclCoopWarpSpan\b")),
    ("multi_cta", re.compile(r"\bgrid_group\b|\bthis_grid\b|\bcluster_group\b")),
]
_COOP_ORDER = ["thread", "warp", "cta", "multi_cta"]


# ---------------------------------------------------------------------------- the classifier


def classify(source: str) -> Evidence:
    """Read a candidate's EVOLVE blocks and record the evidence for each design dimension."""
    code = _Code(source)
    text = code.text
    consts = _constants(text)
    funcs = _functions(code)
    loops = _loops(code, consts, _peer_names(text))
    by_name = {f.name: f for f in funcs}

    def where(offset: int) -> str:
        for f in funcs:
            if f.body_start <= offset <= f.body_end:
                return f.name
        return "host"

    found: list[tuple[int, Site]] = []  # (offset, site)

    def add(what: str, offset: int, role: str, backend: str = "") -> None:
        found.append((offset, Site(what, code.line(offset), role, backend, where(offset))))

    for pattern, backend, role in _PATTERNS:
        for m in pattern.finditer(text):
            name = m.group(0).rstrip("( \t\n").lstrip(".")
            add(name, m.start(), role, backend)

    # Peer pointers: names assigned from `x.peers[...]` or opened with cudaIpcOpenMemHandle.
    tainted = _peer_pointer_names(text)
    # Tables of peer pointers copied to the device (`cudaMemcpy(d_ptrs, buf.peers, ...)`): a
    # kernel given one reaches peer memory, but the copy itself moves no data between GPUs.
    tables: set[str] = set()
    for m in _MEMCPY_ANY.finditer(text):
        args = code.call_args(m.end() - 1)
        if len(args) >= 2 and _PEER_TABLE.search(args[1]):
            tables.add(_last_name(args[0]))

    def mentions(expr: str, names: set[str]) -> bool:
        return any(re.search(rf"\b{re.escape(n)}\b", expr) for n in names)

    def touches_peer(expr: str) -> bool:
        return bool(_PEER_EXPR.search(expr)) or mentions(expr, tainted)

    # Device functions: what each does, closed over the device functions it calls.
    facts = {f.name: _body_facts(text[f.body_start:f.body_end + 1]) for f in funcs}
    for _ in range(len(funcs)):
        for f in funcs:
            body = text[f.body_start:f.body_end + 1]
            for callee in set(re.findall(r"\b([A-Za-z_]\w*)\s*(?:<[^;<>]*>)?\s*\(", body)):
                if callee in facts and callee != f.name:
                    facts[f.name] = facts[f.name].merge(facts[callee])

    # Kernel launches.
    launches: list[KernelLaunch] = []
    launch_offsets: list[int] = []
    for kernel, offset, config, args in _launches(code):
        f = by_name.get(kernel)
        bf = facts.get(kernel, _BodyFacts())
        grid = config[0] if config else ""
        block = config[1] if len(config) > 1 else ""
        stream = _stream_name(config[3] if len(config) > 3 else "")
        backend = bf.api_backend
        moves = bf.api_moves_data
        body = text[f.body_start:f.body_end + 1] if f is not None else ""
        peer_args = (touches_peer(" ".join(args)) or mentions(" ".join(args), tables) or bf.peer_index
                     or (bool(tables) and mentions(body, tables)))
        if not backend and peer_args:
            backend = "cuda_ipc"
            moves = bf.loop_store
        launch = KernelLaunch(kernel, code.line(offset), grid, block, stream, _eval_int(grid, consts) if grid else None,
                              backend, moves, bf.waits, bf.computes)
        launches.append(launch)
        launch_offsets.append(offset)
        if backend == "cuda_ipc" and f is not None:
            add(f"{kernel}<<<>>> stores through peer pointers" if moves else f"{kernel}<<<>>> posts to a peer",
                offset, "data" if moves else "signal", "cuda_ipc")

    # Memory copies into or out of peer memory: the copy engines.
    for m in _MEMCPY.finditer(text):
        args = code.call_args(m.end() - 1)
        if len(args) >= 2 and (touches_peer(args[0]) or touches_peer(args[1])):
            way = "into" if touches_peer(args[0]) else "from"
            add(f"{m.group(0).rstrip('( ')} {way} peer memory", m.start(), "data", "copy_engine")
    # Event waits inside loops are per-piece (or per-peer) waits; outside loops they fork and join.
    for m in _EVENT_WAIT.finditer(text):
        if _enclosing(loops, m.start()):
            add(m.group(0).rstrip("( "), m.start(), "wait")
    # Acquire loads that poll (in a loop, or as a loop condition) are hand-written flag waits.
    for m in _ACQUIRE_LOAD.finditer(text):
        if where(m.start()) != "host" and any(lp.start <= m.start() <= lp.body_end for lp in loops):
            add("acquire load in a loop", m.start(), "wait")
    sites = [site for _, site in found]

    # Backends.
    named = {s.backend for s in sites if s.backend}
    data = {s.backend for s in sites if s.backend and s.role == "data"}
    backends = tuple(b for b in BACKENDS if b in named)
    data_backends = tuple(b for b in BACKENDS if b in data)

    # Streams.
    streams, exact = 1, True
    for m in _STREAM_CREATE.finditer(text):
        add("cudaStreamCreate", m.start(), "stream")
        n = 1
        for lp in _enclosing(loops, m.start()):
            if lp.count is None:
                exact = False
            else:
                n *= lp.count
        streams += n

    # Streams of compute and of communication.
    handle_streams: dict[str, set[str]] = {}
    for m in _BLAS_SET_STREAM.finditer(text):
        args = code.call_args(m.end() - 1)
        if len(args) == 2:
            handle_streams.setdefault(_last_name(args[0]), set()).add(_stream_name(args[1]))
    compute_streams: set[str] = set()
    for m in _BLAS_COMPUTE.finditer(text):
        if where(m.start()) != "host":
            continue
        name = m.group(0).rstrip("( \t\n")
        add(name, m.start(), "compute")
        args = code.call_args(m.end() - 1)
        if name == "cublasLtMatmul" and args:
            compute_streams.add(_stream_name(args[-1]))
        elif args and _last_name(args[0]) in handle_streams:
            compute_streams |= handle_streams[_last_name(args[0])]
        else:  # a handle passed in as a parameter: any stream a handle was bound to
            for bound in handle_streams.values():
                compute_streams |= bound
    comm_streams: set[str] = set()
    for launch in launches:
        if not launch.communicates:
            compute_streams.add(launch.stream)
        elif launch.moves_data:
            comm_streams.add(launch.stream)
    transfers: list[int] = []  # offsets of the host-level transfers: API calls and launches of movers
    for offset, site in found:
        if site.role != "data" or site.where != "host":
            continue
        transfers.append(offset)
        m = re.compile(r"[A-Za-z_]\w*\s*\(").match(text, offset)
        if m is None or site.backend not in _HOST_ISSUED:
            continue
        args = code.call_args(m.end() - 1)
        name = site.what.split()[0]
        if name.startswith("nccl") or name.endswith("Async"):
            comm_streams.add(_stream_name(args[-1]) if args and (name.startswith("nccl") or len(args) >= 5)
                             else "default")
        else:
            comm_streams.add("default")
    for k, launch in zip(launch_offsets, launches):
        if launch.moves_data:
            transfers.append(k)

    # Overlap.
    if any(k.communicates and k.computes for k in launches):
        overlap = "kernel"
    elif compute_streams and comm_streams and compute_streams != comm_streams:
        overlap = "streams"
    else:
        overlap = "none"

    # Chunking: the host loops around the transfers.
    chunking, chunk_count = "", None
    for off in transfers:
        around = [lp for lp in _enclosing(loops, off) if where(lp.start) == "host"]
        pieces = [lp for lp in around if _is_piece_loop(lp)]
        if pieces:
            counts = [lp.count for lp in pieces]
            total = None
            if all(c is not None for c in counts):
                total = 1
                for c in counts:
                    total *= c  # type: ignore[operator]
            if chunking != "pieces":
                chunking, chunk_count = "pieces", total
            elif total is not None and chunk_count is not None:
                chunk_count = max(chunk_count, total)
        elif any(lp.over_peers for lp in around):
            if chunking != "pieces":
                chunking = "shard"
        elif not chunking:
            chunking = "full"

    # Sync.
    waits = [(off, s) for off, s in found if s.role == "wait" or s.what in ("ncclSend", "ncclRecv")]
    wait_launches = [(off, k) for off, k in zip(launch_offsets, launches) if k.waits and not k.backend]
    flag_waits = len(waits) + len(wait_launches)
    chunk_waits = sum(1 for off, _ in waits + wait_launches  # type: ignore[operator]
                      if any(_is_piece_loop(lp) for lp in _enclosing(loops, off)))
    barriers = sum(1 for s in sites if s.role == "barrier" or _HOST_COLLECTIVE.match(s.what))
    sites = [site for _, site in sorted(found, key=lambda f: (f[1].line, f[0]))]

    # Issuer and cooperation.
    host_moves = any(b in _HOST_ISSUED for b in data_backends)
    device_moves = any(k.moves_data for k in launches) or any(b in DEVICE_BACKENDS for b in data_backends)
    issuer = "mixed" if host_moves and device_moves else "host" if host_moves else "device" if device_moves else ""
    coop = ""
    if device_moves:
        movers = {f.name for f in funcs if facts[f.name].api_moves_data}
        movers |= {k.kernel for k in launches if k.moves_data}
        for name in movers:
            f = by_name.get(name)
            if f is None:
                continue
            body = text[f.body_start:f.body_end + 1]
            for level, pattern in _COOPS:
                if pattern.search(body) and (not coop or _COOP_ORDER.index(level) < _COOP_ORDER.index(coop)):
                    coop = level
        if not coop:
            grids = [k.grid_blocks for k in launches if k.moves_data]
            coop = "multi_cta" if any(g is None or g > 1 for g in grids) else "cta" if grids else ""

    # SMs of the kernels that move data.
    grids = [k.grid_blocks for k in launches if k.moves_data]
    known = [g for g in grids if g is not None]
    hint = comm_sms_for_blocks(max(known)) if known and len(known) == len(grids) else ""
    # The declaration.
    pairs = design_of(source)
    declared, error = None, ""
    if pairs is None:
        error = "no `// cuco-design:` line with key=value pairs in the first EVOLVE block"
    else:
        try:
            declared = parse_design(pairs)
        except DesignError as exc:
            error = str(exc)

    return Evidence(
        sites=tuple(sites),
        launches=tuple(launches),
        backends=backends,
        data_backends=data_backends,
        streams=streams,
        streams_exact=exact,
        compute_streams=tuple(sorted(compute_streams)),
        comm_streams=tuple(sorted(comm_streams)),
        overlap=overlap,
        chunking=chunking,
        chunk_count=chunk_count if chunking == "pieces" else None,
        flag_waits=flag_waits,
        chunk_waits=chunk_waits,
        barriers=barriers,
        issuer=issuer,
        coop=coop,
        comm_sms_hint=hint,
        declared=declared,
        declared_pairs=pairs,
        design_error=error,
    )


def comm_sms_for_blocks(blocks: int) -> str:
    """The comm_sms value of a kernel of `blocks` CTAs: the smallest step that holds them."""
    steps = [int(v) for v in COMM_SMS if v.isdigit() and int(v) > 0]
    fitting = [v for v in steps if v >= blocks]
    return str(min(fitting)) if fitting else "all"


_NOT_POINTERS = {"peers", "ctx", "this", "self", "const", "auto", "char", "void", "int", "size_t", "uint4"}


def _peer_pointer_names(text: str) -> set[str]:
    """Names that hold pointers into peer memory: assigned from `x.peers[...]` (cuco::PeerBuffers)
    or from another such name, or opened with cudaIpcOpenMemHandle."""
    names: set[str] = set()
    for m in re.finditer(r"\bcudaIpcOpenMemHandle\s*\(\s*(?:\([^()]*\)\s*)?&\s*([\w.>\-\[\]]+)", text):
        names.add(_last_name(m.group(1)))
    assign = re.compile(r"([A-Za-z_][\w.>\-]*(?:\s*\[[^\]=;]*\])*)\s*=(?!=)\s*([^;]+);")
    for _ in range(4):
        grew = False
        for m in assign.finditer(text):
            lhs, rhs = m.group(1), m.group(2)
            if _PEER_EXPR.search(rhs) or any(re.search(rf"\b{re.escape(n)}\b", rhs) for n in names):
                chain = re.findall(r"[A-Za-z_]\w*", re.sub(r"\[[^\]]*\]", "", lhs))
                # `ptrs.p[i] = ...` taints `ptrs`: a one- or two-letter field name would match too much.
                chain = [n for n in chain if len(n) > 2 and n not in _NOT_POINTERS]
                name = chain[-1] if chain else ""
                if name and name not in names:
                    names.add(name)
                    grew = True
        if not grew:
            break
    return names


@dataclass(frozen=True)
class _BodyFacts:
    api_backend: str = ""  # the device API it uses to communicate (LSA, GIN, NVSHMEM)
    api_moves_data: bool = False
    peer_index: bool = False  # it indexes `peers[...]` itself
    loop_store: bool = False  # a loop and an indexed store: it moves bulk data
    waits: bool = False
    computes: bool = False

    def merge(self, other: "_BodyFacts") -> "_BodyFacts":
        return _BodyFacts(self.api_backend or other.api_backend, self.api_moves_data or other.api_moves_data,
                          self.peer_index or other.peer_index, self.loop_store or other.loop_store,
                          self.waits or other.waits, self.computes or other.computes)


def _body_facts(body: str) -> _BodyFacts:
    """What one function body does on its own (callees are merged in by the caller)."""
    backend, moves = "", False
    for pattern, b, role in _PATTERNS:
        if b in DEVICE_BACKENDS and pattern.search(body):
            backend = backend or b
            moves = moves or role == "data"
    has_loop = re.search(r"\b(for|while)\s*\(", body) is not None
    waits = bool(re.search(r"\bwait_geq\b|\blsa_barrier_sync\b|\bBarrierSession\b|\.(waitSignal|waitCounter)\s*\(|"
                           r"\bnvshmemx?_\w*wait\w*\s*\(", body))
    if has_loop and _ACQUIRE_LOAD.search(body):
        waits = True
    return _BodyFacts(backend, moves, bool(_PEER_EXPR.search(body)),
                      has_loop and _INDEXED_STORE.search(body) is not None, waits,
                      _DEVICE_COMPUTE.search(body) is not None)


def _launches(code: _Code) -> Iterable[tuple[str, int, list[str], list[str]]]:
    """(kernel, offset, [grid, block, smem, stream], args) for each launch in the code."""
    text = code.text
    for m in re.finditer(r"<<<", text):
        k = m.start()
        j = k
        while j > 0 and text[j - 1].isspace():
            j -= 1
        if j > 0 and text[j - 1] == ">":  # template arguments: walk back to their '<'
            depth = 0
            while j > 0:
                j -= 1
                if text[j] == ">":
                    depth += 1
                elif text[j] == "<":
                    depth -= 1
                    if depth == 0:
                        break
            while j > 0 and text[j - 1].isspace():
                j -= 1
        nm = re.search(r"([A-Za-z_][\w:]*)$", text[max(0, j - 200):j])
        if nm is None:
            continue
        end = text.find(">>>", k)
        if end < 0:
            continue
        config = _split_top(text[k + 3:end])
        paren = end + 3
        while paren < len(text) and text[paren].isspace():
            paren += 1
        args = code.call_args(paren) if paren < len(text) and text[paren] == "(" else []
        yield nm.group(1).split("::")[-1], k, config, args
    for m in re.finditer(r"\bcudaLaunch(?:Cooperative)?Kernel\s*\(", text):
        args = code.call_args(m.end() - 1)
        if len(args) >= 3:
            kernel = _last_name(re.sub(r"\([^()]*\)", "", args[0]) or args[0])
            stream = args[5] if len(args) > 5 else "0"
            yield kernel, m.start(), [args[1], args[2], args[4] if len(args) > 4 else "0", stream], [args[3]] if len(
                args) > 3 else []


# ---------------------------------------------------------------------------- the declaration check


def _diag(message: str, file_name: str, line: int, source: str, severity: str = "warning",
          code: str = "design-mismatch") -> Diagnostic:
    lines = source.split("\n")
    text = lines[line - 1].rstrip("\r") if 0 < line <= len(lines) else ""
    return Diagnostic(level=_L0, severity=severity, message=message, file=file_name, line=line,
                      source_line=text, code=code)


def _design_line_no(source: str) -> int:
    for region in split_regions(source).evolve[:1]:
        for off, line in enumerate(region.text.split("\n")):
            if re.match(r"^\s*//\s*cuco-design:", line):
                return region.start_line + off
        return max(region.start_line - 1, 1)
    return 0


def _cite(site: Site | None) -> str:
    """`ncclGetLsaPointer at line 29`."""
    if site is None:
        return ""
    return f"{site.what} at line {site.line}"


def check_declaration(source: str, file_name: str = "", caps: Capabilities | None = None,
                      evidence: Evidence | None = None) -> list[Diagnostic]:
    """Compare the declared design with what the code shows. Errors only for a missing or
    invalid design line; contradictions are warnings (code "design-mismatch"). With `caps`,
    a point that is not valid on this machine is also a warning."""
    ev = evidence or classify(source)
    at = _design_line_no(source)
    example = DesignPoint().line()
    if ev.declared is None:
        if ev.declared_pairs is None:
            msg = (f"the first EVOLVE block has no valid `// cuco-design:` line; add one as its first line, "
                   f"e.g. `{example}`")
        else:
            msg = f"the cuco-design line is invalid: {ev.design_error}"
        return [_diag(msg, file_name, at, source, "error", "design")]
    d = ev.declared
    out: list[Diagnostic] = []

    def warn(message: str, site: Site | None = None) -> None:
        out.append(_diag(message, file_name, site.line if site else at, source))

    # Rules of the space that do not depend on the machine.
    for reason in violations(d, Capabilities(gin=True, nvshmem=True, lsa=True)):
        warn(f"the declared design is not a valid point: {reason}")
    if caps is not None:
        structural = set(violations(d, Capabilities(gin=True, nvshmem=True, lsa=True, world=caps.world)))
        for reason in violations(d, caps):
            if reason not in structural:
                warn(f"the declared design cannot run here: {reason}")

    # backend
    if ev.data_backends and d.backend not in ev.data_backends:
        seen = "; ".join(f"{_cite(ev.first(backend=b, role='data'))} ({b})" for b in ev.data_backends)
        if d.backend in ev.backends:
            used = _cite(ev.first(backend=d.backend))
            warn(f"declares backend={d.backend} but the data moves by {seen}; {d.backend} only appears in "
                 f"setup or signalling ({used})", ev.first(backend=ev.data_backends[0], role="data"))
        else:
            warn(f"declares backend={d.backend} but uses {seen}",
                 ev.first(backend=ev.data_backends[0], role="data"))
    elif not ev.data_backends and ev.backends and d.backend not in ev.backends:
        seen = "; ".join(f"{_cite(ev.first(backend=b))} ({b})" for b in ev.backends)
        warn(f"declares backend={d.backend} but uses {seen}", ev.first(backend=ev.backends[0]))
    elif not ev.backends:
        warn(f"declares backend={d.backend} but no communication call was found in the EVOLVE blocks")

    # streams
    if ev.streams_exact and int(d.streams) != min(ev.streams, 4):
        warn(f"declares streams={d.streams} but the code uses {ev.streams} (the harness's stream plus "
             f"{ev.streams - 1} created with cudaStreamCreate*)", ev.first(role="stream"))
    elif not ev.streams_exact and int(d.streams) < ev.streams:
        warn(f"declares streams={d.streams} but creates at least {ev.streams - 1} stream(s) of its own",
             ev.first(role="stream"))

    # placement
    fused_kernel = next((k for k in ev.launches if k.communicates and k.computes), None)
    if d.placement == "fused" and fused_kernel is None:
        warn("declares placement=fused but no kernel both communicates and computes; the compute runs in "
             "separate kernels or cuBLAS calls")
    elif d.placement in ("before", "after") and fused_kernel is not None:
        warn(f"declares placement={d.placement} but kernel {fused_kernel.kernel} (line {fused_kernel.line}) both "
             f"communicates and computes (placement=fused)")
    elif (d.placement == "interleaved" and ev.overlap == "none" and ev.compute_streams and ev.comm_streams
          and not d.device_initiated):
        warn(f"declares placement=interleaved but compute and communication are issued on the same stream "
             f"({', '.join(ev.comm_streams)}), so they cannot overlap")

    # chunk: only where the transfers are issued by the host, so the loops are visible
    host_issued = ev.issuer == "host"
    if host_issued and ev.chunking == "pieces":
        if d.chunk in ("full", "shard") and ev.chunk_count != 1:
            pieces = f"{ev.chunk_count} pieces" if ev.chunk_count else "pieces"
            warn(f"declares chunk={d.chunk} but the transfers are issued in a loop over {pieces} per shard")
        elif d.chunk.isdigit() and ev.chunk_count is not None and ev.chunk_count != int(d.chunk):
            warn(f"declares chunk={d.chunk} but the transfers are issued in {ev.chunk_count} pieces per shard")
    elif host_issued and ev.chunking in ("full", "shard") and d.chunk.isdigit():
        what = "once" if ev.chunking == "full" else "once per peer"
        warn(f"declares chunk={d.chunk} but every transfer is issued {what}, not in pieces")

    # sync
    if d.sync == "global" and ev.flag_waits and not ev.barriers:
        site = next((s for s in ev.sites if s.role == "wait"), None)
        warn(f"declares sync=global but waits on per-peer flags{' (' + _cite(site) + ')' if site else ''} and has "
             f"no barrier or collective", site)
    elif d.sync in ("per_peer", "per_chunk") and not ev.flag_waits and ev.barriers:
        warn(f"declares sync={d.sync} but synchronizes only through barriers or collectives "
             f"({_cite(ev.first(role='barrier')) or 'a host collective'}); no per-peer wait was found",
             ev.first(role="barrier"))

    # issuer
    if d.issuer == "host" and ev.issuer == "device":
        kernel = next((k for k in ev.launches if k.moves_data), None)
        where = f"kernel {kernel.kernel} (line {kernel.line})" if kernel else "device code"
        warn(f"declares issuer=host but the data is moved by {where}")
    elif d.issuer != "host" and ev.issuer == "host":
        warn(f"declares issuer={d.issuer} but every transfer is a host call "
             f"({_cite(next((s for s in ev.sites if s.role == 'data'), None))})")

    # comm_sms: the grid of the kernels that move data, where it is known
    if d.placement != "fused" and ev.issuer in ("device", "mixed"):
        kernel = next((k for k in ev.launches if k.moves_data), None)
        if d.comm_sms == "0" and kernel is not None:
            warn(f"declares comm_sms=0 but kernel {kernel.kernel} (line {kernel.line}) moves data on the SMs")
        elif ev.comm_sms_hint and d.comm_sms not in ("all", "0") and kernel is not None:
            ladder = [v for v in COMM_SMS if v != "0"]
            if abs(ladder.index(d.comm_sms) - ladder.index(ev.comm_sms_hint)) > 1:
                warn(f"declares comm_sms={d.comm_sms} but the kernels that move data launch "
                     f"{max(k.grid_blocks or 0 for k in ev.launches if k.moves_data)} blocks "
                     f"(comm_sms={ev.comm_sms_hint})", Site(kernel.kernel, kernel.line, "data"))
    return out
