"""What reaches other GPUs, by name: pointers into peer memory, tables of peer pointers copied to
the device, the world size and counts derived from it, and so the loops that run over peers
(against the loops over pieces of the data)."""

from __future__ import annotations

import re

from cuco_tui.design.classify.patterns import MEMCPY_ANY, PEER_EXPR, PEER_TABLE
from cuco_tui.source.assignments import Assignment, derived_names
from cuco_tui.source.expressions import last_name
from cuco_tui.source.model import CodeView
from cuco_tui.source.statements import Loop

_PEERISH = re.compile(r"\b(world|lsaSize|nRanks|n_ranks|nranks|npes|n_pes|nvshmem_n_pes|W|num_peers|n_peers|"
                      r"world_size|lsa_size|num_ranks)\b")
_WORLD_WORDS = ("world", "lsaSize", "nRanks", "n_ranks", "nranks", "npes", "n_pes", "world_size", "lsa_size", "W")
_NOT_POINTERS = {"peers", "ctx", "this", "self", "const", "auto", "char", "void", "int", "size_t", "uint4"}
_IPC_OPEN = re.compile(r"\bcudaIpcOpenMemHandle\s*\(\s*(?:\([^()]*\)\s*)?&\s*([\w.>\-\[\]]+)")


def mentions(expr: str, names: set[str]) -> bool:
    return any(re.search(rf"\b{re.escape(n)}\b", expr) for n in names)


def peer_pointer_names(view: CodeView) -> set[str]:
    """Names that hold pointers into peer memory: assigned from `x.peers[...]` (cuco::PeerBuffers)
    or from another such name, or opened with cudaIpcOpenMemHandle."""
    opened = {last_name(m.group(1)) for m in _IPC_OPEN.finditer(view.code)}

    def derives(a: Assignment, names: set[str]) -> str:
        if not a.plain or not (PEER_EXPR.search(a.expr) or mentions(a.expr, names | opened)):
            return ""
        chain = re.findall(r"[A-Za-z_]\w*", re.sub(r"\[[^\]]*\]", "", a.target))
        # `ptrs.p[i] = ...` taints `ptrs`: a one- or two-letter field name would match too much.
        chain = [n for n in chain if len(n) > 2 and n not in _NOT_POINTERS]
        return chain[-1] if chain else ""

    return opened | derived_names(view.assignments, derives, passes=4)


def peer_tables(view: CodeView) -> set[str]:
    """Tables of peer pointers copied to the device (`cudaMemcpy(d_ptrs, buf.peers, ...)`): a
    kernel given one reaches peer memory, but the copy itself moves no data between GPUs."""
    tables: set[str] = set()
    for m in MEMCPY_ANY.finditer(view.code):
        call = view.call(m.end() - 1)
        if call is not None and len(call.args) >= 2 and PEER_TABLE.search(call.args[1].text):
            tables.add(last_name(call.args[0].text))
    return tables


def peer_count_names(view: CodeView) -> set[str]:
    """Names that hold the world size or a number derived from it by a constant:
    `W = ctx->world`, `n = dc.lsaSize`, `steps = W - 1`."""
    readers: dict[int, re.Pattern[str]] = {}  # by how many names are known: the set only grows

    def derives(a: Assignment, names: set[str]) -> str:
        if len(names) not in readers:
            words = "|".join(re.escape(w) for w in (*_WORLD_WORDS, *sorted(names)))
            readers[len(names)] = re.compile(rf"^\s*(?:\(\s*\w+\s*\)\s*)?(?:[\w.>\-]*?\b)?(?:{words})"
                                             rf"(?:\s*\(\s*\))?\s*(?:[-+]\s*\d+\s*)?$")
        return a.name if a.plain and a.name and readers[len(names)].match(a.expr) else ""

    return derived_names(view.assignments, derives, passes=3)


def over_peers(loop: Loop, count_names: set[str]) -> bool:
    return bool(_PEERISH.search(loop.bound)) or mentions(loop.bound, count_names)


def is_piece_loop(loop: Loop, count_names: set[str], count: int | None) -> bool:
    """A loop over pieces of the data: not over peers, not a single pass (`count`, its trip count
    as far as known), not a spin (`for (;;)`)."""
    spin = re.sub(r"\s", "", loop.header) in ("", ";;", "true", "1")
    return not over_peers(loop, count_names) and count not in (0, 1) and not spin
