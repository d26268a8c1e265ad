"""One L0 (evaluate/l0.py, issue 30 item 4): the cascade, the search's review gate and the Claude
agent's screen of its own edits judge a candidate alike. Each candidate here was judged
differently by the three before: the cascade ran the static and sync checks, the review gate the
static checks and the design declaration check, the agent's screen the static checks alone."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from cuco_tui.agents.base import Proposal, ProposalRequest
from cuco_tui.agents.claude.edits import apply_full
from cuco_tui.agents.factory import make_agent
from cuco_tui.core.result import Diagnostic, Level, Status
from cuco_tui.evaluate.cascade import EvalOptions, evaluate
from cuco_tui.search.events import AwaitingReview
from cuco_tui.toolchain.toolchain import Library, Toolchain
from engine_helpers import SEED, W, make, variant

LSA = (W.root / "candidates" / "lsa_allgather.cu").read_text()
# A machine without nvcc: the cascade stops at L1, after L0 has said everything it says.
NO_NVCC = Toolchain(None, "", Library("nccl", None, None, "libnccl.so.2"),
                    Library("cublas", None, None, "libcublas.so.12"), problems=("no nvcc on this machine",))


def _edit(base: str, old: str, new: str) -> str:
    assert base.count(old) == 1, old
    return base.replace(old, new)


def never_signalled() -> str:
    """The LSA candidate with a wait on a flag nothing writes: a sync check error."""
    wait = ("struct ReadyFlags {\n  unsigned ready[cuco::kMaxPeers];\n};\n\n"
            "__global__ void wait_ready(const ReadyFlags* mine, int peer, cuco::Trace trace) {\n"
            "  cuco::wait_geq<unsigned>(trace, CUCO_SITE, peer, 1, &mine->ready[peer], 1u);\n}\n\n"
            "struct Candidate {")
    launch = ("  CUCO_TRY_CUDA(ctx, cudaGetLastError());\n"
              "  wait_ready<<<1, 1, 0, stream>>>((const ReadyFlags*)c->gathered.ptr, (ctx->rank + 1) % W, "
              "cuco::trace_of(ctx));")
    return _edit(_edit(LSA, "struct Candidate {", wait), "  CUCO_TRY_CUDA(ctx, cudaGetLastError());", launch)


def warned() -> str:
    """The seed with a rank-dependent collective (a sync check warning) and a design line its code
    contradicts (the declaration check's warnings)."""
    lie = "backend=nccl_host placement=interleaved sync=per_chunk issuer=host chunk=4 streams=2 comm_sms=0"
    src = _edit(SEED, SEED.split("\n")[7], f"// cuco-design: {lie}")
    return _edit(src, "  CUCO_TRY_NCCL(ctx, ncclAllGather(", "  if (ctx->rank != 0) CUCO_TRY_NCCL(ctx, ncclAllGather(")


def cascade_l0(tmp_path: Path, source: str) -> tuple[Status, list[Diagnostic]]:
    path = tmp_path / "cand.cu"
    path.write_text(source)
    result = evaluate(path, W, EvalOptions(), toolchain=NO_NVCC)
    return result.status, [d for d in result.diagnostics if d.level == int(Level.STATIC)]


def claude_screen(source: str):
    """The Claude agent's edit of the seed into `source` (a full rewrite of the blocks), screened
    by the L0 its factory wires."""
    agent = make_agent("claude", W, env={"ANTHROPIC_API_KEY": "sk-test"})
    return apply_full(SEED, f"```cuda\n{source}```\n", seed=SEED, file_name="cand.cu", screen=agent.screen)


class OneSource:
    """An agent whose every proposal is `source`."""

    name = "one-source"
    uses_hints = True
    spent_usd = None

    def set_budget(self, usd: float | None) -> None:
        pass  # no cap of its own

    def __init__(self, source: str) -> None:
        self.source = source

    def propose(self, request: ProposalRequest) -> Proposal:
        return Proposal(request.kind, tuple(p.id for p in request.parents), self.source, {}, "as asked", self.name)

    def summarize(self, history) -> str:
        return ""


def gate_concerns(tmp_path: Path, source: str) -> str:
    """Why the review gate in risky mode holds a proposal of `source` ("" when it does not)."""
    engine, repo, bus = make(tmp_path, agent=OneSource(source), review_mode="risky", generations=1,
                             fast_path=False, islands=1)
    held: list[AwaitingReview] = []

    def on_event(e) -> None:
        if isinstance(e, AwaitingReview):
            held.append(e)
            threading.Thread(target=engine.review, args=(e.candidate, "reject", "seen")).start()

    bus.subscribe(on_event)
    engine.run()
    assert len(held) <= 1
    return held[0].why if held else ""


def test_a_sync_error_the_cascade_rejects_is_refused_by_the_agents_screen(tmp_path, monkeypatch):
    monkeypatch.setenv("CUCO_NO_GPU", "1")
    source = never_signalled()
    status, diags = cascade_l0(tmp_path, source)
    [error] = [d for d in diags if d.severity == "error"]
    assert status == Status.REJECTED and error.code == "sync" and "`ready`" in error.message
    edit = claude_screen(source)  # the screen passed it before: only the cascade ran the sync checks
    assert not edit.ok and "fails the static checks (L0)" in edit.error and error.message in edit.error


def test_warnings_are_the_same_in_the_cascade_the_review_gate_and_the_agents_notes(tmp_path, monkeypatch):
    monkeypatch.setenv("CUCO_NO_GPU", "1")
    source = warned()
    status, diags = cascade_l0(tmp_path, source)
    assert status == Status.COMPILE_ERROR and all(d.severity == "warning" for d in diags)
    # the cascade reports the design line's contradictions too (the gate alone did before) ...
    codes = [d.code for d in diags]
    assert "sync" in codes and "design-mismatch" in codes
    messages = list(dict.fromkeys(d.message for d in diags))
    # ... the review gate warns of the sync check's finding too (the cascade alone did before) ...
    assert gate_concerns(tmp_path / "gate", source) == "the static checks warn: " + "; ".join(messages[:3])
    # ... and the agent's screen passes it with every one of them as a note (it saw none before)
    edit = claude_screen(source)
    assert edit.ok and edit.source == source
    assert len(edit.notes) == len(diags) and all(d.message in n for d, n in zip(diags, edit.notes))


@pytest.mark.parametrize("line", ["backend=nccl_host placement=sideways", "backend=nccl_host chunk=many"])
def test_an_invalid_design_value_is_a_warning_everywhere_never_a_rejection(tmp_path, monkeypatch, line):
    # the declaration check calls it an error; the cascade never rejected on it, so it warns
    monkeypatch.setenv("CUCO_NO_GPU", "1")
    source = variant(1, line)  # new code (not the seed's twin) under the line
    status, diags = cascade_l0(tmp_path, source)
    assert status == Status.COMPILE_ERROR
    [d] = [d for d in diags if d.code == "design"]
    assert d.severity == "warning" and "the cuco-design line is invalid" in d.message
    assert claude_screen(source).ok
    assert gate_concerns(tmp_path / "gate", source) == f"the static checks warn: {d.message}"
