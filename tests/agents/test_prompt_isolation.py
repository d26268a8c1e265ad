"""Facts belong to their workload: every prompt an agent can get for one workload (system prompts
of every role, fast path, full, diff, crossover, judge, meta-summary, with the design context of
every backend) carries nothing that only another workload's files say."""

from __future__ import annotations

import re

import pytest

from cuco_tui.agents.base import ProposalRequest
from cuco_tui.agents.claude.prompts import PROMPTS_DIR, Prompts
from cuco_tui.core.records import CandidateRecord
from cuco_tui.design.context import NOTES_DIR, HardwareFacts, design_context
from cuco_tui.design.space import BACKENDS, DesignPoint
from cuco_tui.workload.manifest import list_workloads, load_workload

WORKLOADS = list_workloads()
FACTS = HardwareFacts(nccl_version="2.28.9", problem="no NVIDIA driver answered")


def _own_text(name: str) -> list[str]:
    w = load_workload(name)
    files = [w.task] + sorted(w.design_notes.glob("*.md"))
    return [f.read_text() for f in files if f.is_file()]


def _generic_text() -> str:
    return "\n".join(p.read_text() for p in sorted(NOTES_DIR.glob("*.md")) + sorted(PROMPTS_DIR.glob("*.j2")))


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"(?m)^\s*(?:#+|[-*])\s+", " ", text)).strip()


def _lines(texts: list[str]) -> set[str]:
    """The sentences of `texts`, whitespace and list markers normalized, at least 40 characters
    (shorter ones are structure, not facts)."""
    out = set()
    for text in texts:
        for sentence in re.split(r"(?<=[.])\s+", _flat(text)):
            if len(sentence) >= 50:
                out.add(sentence)
    return out


def _facts_of_others(name: str) -> set[str]:
    """Lines found in another workload's own files (task, design notes) but in neither this
    workload's own files nor the generic notes and prompt templates."""
    mine = _lines(_own_text(name)) | _lines([_generic_text()])
    theirs: set[str] = set()
    for other in WORKLOADS:
        if other != name:
            theirs |= _lines(_own_text(other))
            theirs.add(f"`{other}`")
    return theirs - mine


def _record(w, cid: str, kind: str, parents: tuple[str, ...] = ()) -> CandidateRecord:
    return CandidateRecord(id=cid, generation=0, island=0, kind=kind, parents=parents, source=w.seed.read_text(),
                           design={}, rationale="the seed", agent="engineer", status="measured", speedup=1.0)


def _every_prompt(name: str) -> str:
    w = load_workload(name)
    prompts = Prompts()
    seed = _record(w, "c0000", "seed")
    other = _record(w, "c0001", "full", ("c0000",))
    out = [prompts.system(w, role) for role in ("author", "judge", "summarizer")]
    for backend in BACKENDS:
        context = design_context(DesignPoint().with_(backend=backend), FACTS, 2, notes_dir=w.design_notes)
        for kind in ("fast_path", "full", "diff", "crossover"):
            parents = (seed, other) if kind == "crossover" else (seed,)
            request = ProposalRequest(kind=kind, workload=w, parents=parents, design_context=context)
            out.append(prompts.fast_path(request) if kind == "fast_path" else prompts.proposal(request))
        out.append(prompts.judge(ProposalRequest(kind="fast_path", workload=w, parents=(seed,)), seed.source))
    out.append(prompts.meta_summary([seed, other]))
    return _flat("\n".join(out))


@pytest.mark.parametrize("name", WORKLOADS)
def test_no_prompt_of_a_workload_carries_another_workloads_facts(name):
    text = _every_prompt(name)
    leaked = sorted(f for f in _facts_of_others(name) if f in text)
    assert not leaked, f"{name}'s prompts carry other workloads' facts: {leaked[:5]}"


@pytest.mark.parametrize("name", [w for w in WORKLOADS if w != "gemm_allgather"])
def test_the_all_gather_facts_that_once_leaked_stay_with_gemm_allgather(name):
    text = _every_prompt(name)
    for phrase in ("NCCL all-gather, then one cuBLAS GEMM", "Chunking NCCL itself loses",
                   "before the computation reads the gathered data", "ce_overlap.cu", "lsa_allgather.cu"):
        assert phrase not in text, f"{name}'s prompts still say {phrase!r}"


def test_a_workload_gets_its_own_notes():
    w = load_workload("gemm_allgather")
    context = design_context(DesignPoint().with_(backend="copy_engine"), FACTS, 2, notes_dir=w.design_notes)
    assert "NCCL all-gather" in context or "ncclAllGather" in context  # its baseline
    assert "ce_overlap.cu" in context  # what was measured on it with this backend
    bare = design_context(DesignPoint().with_(backend="copy_engine"), FACTS, 2)
    assert "ce_overlap.cu" not in bare


def test_the_fingerprints_are_not_empty():
    # the check above must be able to fail: every workload has facts of its own
    for name in WORKLOADS:
        assert len(_facts_of_others(name)) > 20, name
