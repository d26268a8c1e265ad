"""The fused GEMM's runtime (`cuco_tile_gemm.cuh`, its prebuilt form `cuco_tile_gemm_lib.h`,
`cuco_arrival.cuh`; namespace cuco::tile_gemm, usually aliased `tg`) as the classifier reads it.
Its kernels, launcher and movers are defined outside the EVOLVE blocks, so what each of them does
is known here rather than read from a body:

- compute that waits: `<g>.launch(stream, e)` on a `FusedGemm<...>` or a `FusedGemmLib` (the same
  kernel from its library), or a launch of `fused_gemm_kernel<...>`, is one kernel that waits on
  peers' arrival flags, row chunk by row chunk, and computes (placement fused);
- chunks: the chunk count given to `make_row_layout(M, N, K, world, rank, chunks, block_m)`;
  a loop bounded by a layout's `.chunks` runs that many times;
- movers: `ce_copy(dst, src, bytes, stream)` and `ce_copy_2d(dst, dpitch, src, spitch, width, rows,
  stream)` (a K slice of a row chunk) are host-issued copies on the copy engines;
  `push_chunks<...><<<G, ...>>>(plan, src, chunk_vecs, shard_vecs, chunks)` a store kernel
  that writes the shard to every peer of its plan (`plan.dst[...]`) in `chunks` pieces;
- signals: `<w>.post(stream, &flag, v)` on a `FlagWriter` is a stream-ordered flag write: a
  signal into peer memory when the flag is a peer's, never a transfer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable

from cuco_tui.design.classify.facts import BodyFacts
from cuco_tui.source.assignments import Assignment, derived_names
from cuco_tui.source.calls import CallSite
from cuco_tui.source.expressions import last_name
from cuco_tui.source.launches import Launch
from cuco_tui.source.model import CodeView
from cuco_tui.source.statements import Loop

NAMESPACE = "cuco::tile_gemm"
# The launchers of the fused kernel: the template over a Config, and the prebuilt one whose
# configuration is a value (cuco_tile_gemm_lib.h); both launch `fused_gemm_kernel`.
GEMM_TYPES = ("FusedGemm", "FusedGemmLib")
_NAMESPACE_WORD = NAMESPACE.split("::")[-1]
FUSED_KERNEL = "fused_gemm_kernel"
MOVER_KERNEL = "push_chunks"
# Host copies of the runtime on the copy engines, by name: (index of dst, of src, of the stream; arguments).
COPIES = {"ce_copy": (0, 1, 3, 4),               # (dst, src, bytes, stream)
          "ce_copy_2d": (0, 2, 6, 7)}            # (dst, dpitch, src, spitch, width, rows, stream)
_CHUNKS_ARG = 5  # make_row_layout's `chunks_wanted`
_MEMBER_CHUNKS = re.compile(r"^\s*(.+?)\s*(?:\.|->)\s*chunks\s*$", re.S)


@dataclass(frozen=True)
class RuntimeKernel:
    """What a launch of one of the runtime's kernels does."""

    facts: BodyFacts
    reaches_peer: bool = False  # its arguments carry peer pointers (a plan filled from `.peers[...]`)
    pieces: int | None = None  # pieces per shard it moves or waits on one at a time, when known


class TileGemm:
    """What one candidate's EVOLVE view uses of the runtime: its fused GEMMs, `FlagWriter`s and
    row layouts (by the names that hold them) and the layouts' chunk count."""

    def __init__(self, view: CodeView) -> None:
        self.view = view
        # The runtime can only be named through its namespace (a qualifier, an alias's target or
        # a using-directive): blocks that never write it use none of it, and are not read further.
        self.used = _NAMESPACE_WORD in view.code
        typed: dict[str, set[str]] = {}
        for d in view.declarations if self.used else ():
            if d.type_name in (*GEMM_TYPES, "FlagWriter", "RowLayout") and self._ours(d.type_qualifier):
                typed.setdefault(d.type_name, set()).add(d.name)
        self.gemms = frozenset(name for t in GEMM_TYPES for name in typed.get(t, ()))
        self.writers = frozenset(typed.get("FlagWriter", ()))
        made = self.free_calls("make_row_layout")
        self.layouts = frozenset(self._layout_names(typed.get("RowLayout", set()), made) if self.used else ())
        counts = {view.constants.value(c.texts[_CHUNKS_ARG]) for c in made if len(c.args) > _CHUNKS_ARG}
        # One count, known: else the chunks are unknown (never a guess between two layouts).
        self.chunks: int | None = counts.pop() if len(counts) == 1 else None

    def _ours(self, qualifier: str) -> bool:
        return self.used and self.view.namespaces.names(qualifier, NAMESPACE)

    def free_calls(self, name: str) -> list[CallSite]:
        """Calls of the runtime's free function `name` (`tg::ce_copy(...)`)."""
        if not self.used:
            return []
        return [c for c in self.view.calls if c.name == name and not c.receiver and self._ours(c.qualifier)]

    def member_calls(self, name: str, objects: Iterable[str]) -> list[CallSite]:
        """Calls `x.name(...)` of a member function on one of `objects` (`c->gemm.launch(...)`)."""
        names = set(objects)
        if not names:
            return []
        return [c for c in self.view.calls if c.name == name and c.receiver and last_name(c.receiver) in names]

    def _layout_names(self, declared: set[str], made: list[CallSite]) -> set[str]:
        """Names declared as a RowLayout, assigned from make_row_layout, or from such a name."""
        at = [c.at for c in made]

        def derives(a: Assignment, names: set[str]) -> str:
            if not a.plain:
                return ""
            end = self.view.statement_end(a.at)
            from_call = any(a.at < k < end for k in at)
            return last_name(a.target) if from_call or last_name(a.expr) in names | declared else ""

        return declared | derived_names(self.view.assignments, derives, passes=3)

    def count_of(self, expr: str) -> int | None:
        """An integer constant, or a layout's chunk count (`l.chunks`); None otherwise."""
        value = self.view.constants.value(expr)
        if value is not None:
            return value
        m = _MEMBER_CHUNKS.match(expr)
        return self.chunks if m and last_name(m.group(1)) in self.layouts else None

    def loop_count(self, loop: Loop) -> int | None:
        """The loop's trip count, with a bound of a layout's `.chunks` read as the chunk count."""
        if loop.count is not None or self.chunks is None or not _MEMBER_CHUNKS.match(loop.bound):
            return loop.count
        bound = self.count_of(loop.bound)
        return None if bound is None else loop.count_to(bound, self.view.constants)

    def kernel(self, launch: Launch, touches_peer: Callable[[str], bool]) -> RuntimeKernel | None:
        """What a launch of one of the runtime's kernels does; None for any other kernel."""
        if not self._ours(launch.qualifier):
            return None
        if launch.kernel == FUSED_KERNEL:
            return RuntimeKernel(BodyFacts(waits=True, computes=True), pieces=self.chunks)
        if launch.kernel == MOVER_KERNEL and launch.args:
            args = [a.text for a in launch.args]
            plan = last_name(args[0])
            reaches = any(a.plain and _field_owner(a.target) == plan and touches_peer(a.expr)
                          for a in self.view.assignments)
            return RuntimeKernel(BodyFacts(loop_store=True), reaches, self.count_of(args[4]) if len(args) > 4 else None)
        return None


def _field_owner(target: str) -> str:
    """The last name of the object whose member an assignment target writes: `plan` for
    `plan.dst[s]` or `c->plan.dst[s]`; "" for a target that writes no member."""
    bare = re.sub(r"(?:\s*\[[^\]]*\])+\s*$", "", target.strip())
    m = re.match(r"^(.+?)\s*(?:\.|->)\s*[A-Za-z_]\w*$", bare, re.S)
    return last_name(m.group(1)) if m else ""
