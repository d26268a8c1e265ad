"""One candidate as the classifier reads it: the EVOLVE view of its source, the kernels and
device functions there and what each does, its loops, the names that reach peer memory, what it
uses of the fused GEMM's runtime, and the sites each dimension's reader records on the way."""

from __future__ import annotations

from cuco_tui.design.classify.evidence import Site
from cuco_tui.design.classify.facts import BodyFacts, device_facts
from cuco_tui.design.classify.patterns import PEER_EXPR
from cuco_tui.design.classify.tile_gemm import TileGemm
from cuco_tui.design.classify.peers import (is_piece_loop, mentions, over_peers, peer_count_names,
                                            peer_pointer_names, peer_tables)
from cuco_tui.source.functions import Function, enclosing
from cuco_tui.source.model import CandidateSource
from cuco_tui.source.statements import Loop, loops_around


class Reading:
    """The classifier's working state for one candidate; `found` collects (offset, Site)."""

    def __init__(self, src: CandidateSource) -> None:
        self.src = src
        self.view = src.evolve
        self.text = self.view.code
        self.functions: tuple[Function, ...] = tuple(f for f in self.view.functions if f.kind != "host")
        self.by_name = {f.name: f for f in self.functions}
        self.facts: dict[str, BodyFacts] = device_facts(self.text, self.functions)
        self.peer_pointers = peer_pointer_names(self.view)
        self.peer_tables = peer_tables(self.view)
        self._peer_counts = peer_count_names(self.view)
        self.tile_gemm = TileGemm(self.view)
        self.found: list[tuple[int, Site]] = []

    def where(self, offset: int) -> str:
        """The kernel or device function holding `offset`, or "host"."""
        f = enclosing(self.functions, offset)
        return f.name if f is not None else "host"

    def add(self, what: str, offset: int, role: str, backend: str = "") -> None:
        self.found.append((offset, Site(what, self.view.line(offset), role, backend, self.where(offset))))

    def body(self, f: Function | None) -> str:
        return self.text[f.body_start:f.body_end + 1] if f is not None else ""

    def args(self, open_at: int) -> list[str]:
        """The arguments of the call whose '(' is at `open_at` ([] when it is never closed)."""
        call = self.view.call(open_at)
        return call.texts if call is not None else []

    def loops_around(self, offset: int) -> list[Loop]:
        return loops_around(self.view.loops, offset)

    def in_loop(self, offset: int) -> bool:
        """Whether `offset` is in a loop's header or body."""
        return any(lp.start <= offset <= lp.body_end for lp in self.view.loops)

    def over_peers(self, loop: Loop) -> bool:
        return over_peers(loop, self._peer_counts)

    def loop_count(self, loop: Loop) -> int | None:
        """The loop's trip count, where the constants or the fused GEMM's row layout give it."""
        return self.tile_gemm.loop_count(loop)

    def is_piece_loop(self, loop: Loop) -> bool:
        return is_piece_loop(loop, self._peer_counts, self.loop_count(loop))

    def touches_peer(self, expr: str) -> bool:
        return bool(PEER_EXPR.search(expr)) or mentions(expr, self.peer_pointers)

    def sites(self) -> tuple[Site, ...]:
        return tuple(site for _, site in sorted(self.found, key=lambda f: (f[1].line, f[0])))
