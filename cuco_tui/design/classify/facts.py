"""What each kernel or device function does, read from its body and closed over the device
functions it calls: which device API it communicates with, whether it moves bulk data, indexes
peer pointers, waits, or computes."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from cuco_tui.design.classify.patterns import (ACQUIRE_LOAD, API_PATTERNS, DEVICE_COMPUTE, INDEXED_STORE,
                                               PEER_EXPR)
from cuco_tui.design.space import DEVICE_BACKENDS
from cuco_tui.source.functions import Function

_CALLEE = re.compile(r"\b([A-Za-z_]\w*)\s*(?:<[^;<>]*>)?\s*\(")
_LOOP = re.compile(r"\b(for|while)\s*\(")
_DEVICE_WAIT = re.compile(r"\bwait_geq\b|\blsa_barrier_sync\b|\bBarrierSession\b|\.(waitSignal|waitCounter)\s*\(|"
                          r"\bnvshmemx?_\w*wait\w*\s*\(")


@dataclass(frozen=True)
class BodyFacts:
    api_backend: str = ""  # the device API it uses to communicate (LSA, GIN, NVSHMEM)
    api_moves_data: bool = False
    peer_index: bool = False  # it indexes `peers[...]` itself
    loop_store: bool = False  # a loop and an indexed store: it moves bulk data
    waits: bool = False
    computes: bool = False

    def merge(self, other: "BodyFacts") -> "BodyFacts":
        return BodyFacts(self.api_backend or other.api_backend, self.api_moves_data or other.api_moves_data,
                         self.peer_index or other.peer_index, self.loop_store or other.loop_store,
                         self.waits or other.waits, self.computes or other.computes)


def body_facts(body: str) -> BodyFacts:
    """What one function body does on its own (callees are merged in by `device_facts`)."""
    backend, moves = "", False
    for pattern, b, role in API_PATTERNS:
        if b in DEVICE_BACKENDS and pattern.search(body):
            backend = backend or b
            moves = moves or role == "data"
    has_loop = _LOOP.search(body) is not None
    waits = bool(_DEVICE_WAIT.search(body)) or (has_loop and ACQUIRE_LOAD.search(body) is not None)
    return BodyFacts(backend, moves, bool(PEER_EXPR.search(body)),
                     has_loop and INDEXED_STORE.search(body) is not None, waits,
                     DEVICE_COMPUTE.search(body) is not None)


def device_facts(code: str, functions: Iterable[Function]) -> dict[str, BodyFacts]:
    """Facts per function name, each merged with those of the functions it calls (to any depth)."""
    funcs = list(functions)
    bodies = {f.name: code[f.body_start:f.body_end + 1] for f in funcs}
    facts = {name: body_facts(body) for name, body in bodies.items()}
    for _ in range(len(funcs)):
        for f in funcs:
            for callee in sorted(set(_CALLEE.findall(code, f.body_start, f.body_end + 1))):
                if callee in facts and callee != f.name:
                    facts[f.name] = facts[f.name].merge(facts[callee])
    return facts
