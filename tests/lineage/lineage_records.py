"""Candidate records for the session-store tests: `make` builds one with every field set, its
source the seed with a chunk count (so each is distinct code). A module of its own because a
test's child process imports it (a process killed between git and the index)."""

from __future__ import annotations

from cuco_tui.core.records import CandidateRecord

SEED_SOURCE = """// EVOLVE-BLOCK-START
int chunks = 1;
// EVOLVE-BLOCK-END
"""


def make(
    cid: str,
    parents: tuple[str, ...] = (),
    *,
    island: int = 0,
    generation: int = 0,
    kind: str | None = None,
    chunks: int = 1,
    status: str = "measured",
    speedup: float | None = 1.1,
    logs: dict[str, str] | None = None,
    result: bool = True,
) -> CandidateRecord:
    res = None
    if result:
        res = {"status": status, "reason": "ok", "speedup": speedup, "logs": logs or {}}
    return CandidateRecord(
        id=cid,
        generation=generation,
        island=island,
        kind=kind or ("seed" if not parents else "crossover" if len(parents) > 1 else "diff"),
        parents=parents,
        source=SEED_SOURCE.replace("chunks = 1", f"chunks = {chunks}"),
        design={"backend": "cuda_ipc", "knobs": {"chunks": chunks}},
        rationale=f"Use {chunks} chunks so the copy overlaps the GEMM.\nSecond line.\n\nDetails that stay out of the message.",
        agent="offline",
        status=status,
        result=res,
        speedup=speedup,
        latency_ms=0.25 if speedup else None,
        cost_usd=0.0125,
        tokens_in=10,
        tokens_out=20,
        created=1_790_000_000.5,
        extra={"note": "x"},
    )
