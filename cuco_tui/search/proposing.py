"""Proposing: from the population's choice of parents to a drafted candidate. The request the
agent reads (the failure to learn from, the design context for the parent's point, the
meta-summary, the engineer's hints), the call to the agent, and the first screens of its answer:
no code at all, a duplicate (novelty), and, for the review gate, what is risky about it (a
backend change, L0's warnings: the static and sync checks', a design line the code contradicts).

L0 is given as a callable (`StaticScreen`, the engine passes evaluate's check_l0, the cascade's
own), so the gate warns of what the cascade will report and proposing depends on no evaluator."""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from cuco_tui.agents.base import Agent, AgentExhausted, BudgetExhausted, Proposal, ProposalRequest, StaticScreen
from cuco_tui.core.records import CandidateRecord, RecordStatus, candidate_id, id_number
from cuco_tui.core.workload import Workload
from cuco_tui.design.space import DIMENSIONS, DesignPoint
from cuco_tui.search import feedback, outcomes
from cuco_tui.core.ranking import is_failure
from cuco_tui.search.archive import design_point
from cuco_tui.search.config import SearchConfig
from cuco_tui.search.events import EngineError, Event, ProposalReady
from cuco_tui.search.novelty import Verdict
from cuco_tui.search.population import Population, Selection
from cuco_tui.source.regions import design_of as declared_design


def design_of(design: dict[str, Any], source: str) -> dict[str, Any]:
    """The proposal's design coordinates, or those its `// cuco-design:` line declares."""
    if any(k in DIMENSIONS for k in design):
        return dict(design)
    declared = {k: v for k, v in (declared_design(source) or {}).items() if k in DIMENSIONS}
    return {**declared, "knobs": dict(design.get("knobs", {}))}


class Drafts:
    """Candidate ids, handed out in order from any thread, and the pending records drafted
    under them: the seed, an agent's proposal, a re-benchmark, a finalist's confirmation.

    With `reserve` (the engine's: scratch/ids.json in the session folder) every id is reserved
    on disk before it is handed out, so an id is never used twice, not even one whose evaluation
    a kill cut short: a resume goes on after the highest id reserved or found in the scratch
    folder (`<id>.cu`, written when an evaluation starts), and names the evaluations lost."""

    def __init__(self, agent_name: str, reserve: Path | None = None) -> None:
        self._agent = agent_name
        self._next = 0
        self._reserve = reserve
        self._named: set[int] = set()  # lost evaluations a resume reported already (kept in the file)
        self._lock = threading.Lock()

    def restore(self, records: list[CandidateRecord]) -> tuple[str, ...]:
        """Continue after the highest id the lineage holds or an earlier run reserved. Returns
        the evaluations an earlier run started and never committed (a scratch source and no
        commit) that no earlier resume has named, in order; their sources stay where they are."""
        committed = {id_number(r.id) for r in records}
        upto, started, named = self._reserved()
        with self._lock:
            self._next = max([*committed, *started, upto - 1, -1]) + 1
            lost = sorted(started - committed - named)
            self._named = named | set(lost)
            if lost:  # named once: a later resume does not report them again
                self._write()
            return tuple(candidate_id(n) for n in lost)

    def _reserved(self) -> tuple[int, set[int], set[int]]:
        """The counter an earlier run left (ids below it were handed out), the ids whose
        evaluation started (scratch/<id>.cu), and those a resume reported lost already."""
        if self._reserve is None:
            return 0, set(), set()
        try:
            data = json.loads(self._reserve.read_text())
            upto, named = int(data.get("next", 0)), {id_number(str(c)) for c in data.get("lost", [])}
        except (OSError, ValueError, TypeError, AttributeError):  # none yet (or a session from before it)
            upto, named = 0, set()
        started = {id_number(p.stem) for p in self._reserve.parent.glob("c*.cu")} - {-1}
        return upto, started, named

    def _write(self) -> None:
        """The counter on disk (under the lock): written aside, then moved over the old one."""
        if self._reserve is None:
            return
        self._reserve.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._reserve.with_name(f".{self._reserve.name}.tmp")
        tmp.write_text(json.dumps({"next": self._next, "lost": [candidate_id(n) for n in sorted(self._named)]}))
        os.replace(tmp, self._reserve)

    def new_id(self) -> str:
        with self._lock:
            cid = candidate_id(self._next)
            self._next += 1
            self._write()  # on disk before anyone sees the id
            return cid

    def peek_id(self) -> str:
        """The id the next draft will get."""
        with self._lock:
            return candidate_id(self._next)

    def draft(self, **fields: Any) -> CandidateRecord:
        if "id" not in fields:
            fields["id"] = self.new_id()
        fields.setdefault("status", RecordStatus.PENDING)
        fields.setdefault("created", time.time())
        return CandidateRecord(**fields)

    def seed(self, source: str) -> CandidateRecord:
        return self.draft(kind="seed", generation=0, island=0, parents=(), source=source,
                          design=design_of({}, source), rationale="the workload's seed: its reference strategy",
                          agent="workload")

    def proposal(self, cid: str, request: ProposalRequest, proposal: Proposal | None,
                 known: dict[str, CandidateRecord]) -> CandidateRecord:
        """The agent's answer to `request` as a pending record (`proposal` None: the agent
        failed; the record keeps what was asked). Parents the search does not know are dropped."""
        asked = tuple(p.id for p in request.parents)
        parents = tuple(p for p in (proposal.parents if proposal else ()) if p in known) or asked
        extra: dict[str, Any] = {"phase": request.phase, "asked": request.kind}
        hints = tuple(request.hints)
        if request.inspirations:
            extra["inspirations"] = [r.id for r in request.inspirations]
        if proposal is None:
            return self.draft(id=cid, generation=request.generation, island=request.island, kind=request.kind,
                              parents=asked, source="", design={}, rationale="", agent=self._agent, hints=hints,
                              extra=extra)
        kind = "fast_path" if request.kind == "fast_path" else (proposal.kind or request.kind)
        return self.draft(
            id=cid, generation=request.generation, island=request.island, kind=kind,
            parents=parents, source=proposal.source, design=design_of(proposal.design, proposal.source),
            rationale=proposal.rationale, agent=proposal.agent or self._agent, cost_usd=proposal.cost_usd,
            tokens_in=proposal.tokens_in, tokens_out=proposal.tokens_out, hints=hints, extra={**extra, **proposal.extra})

    def rebenchmark_of(self, original: CandidateRecord, generation: int) -> CandidateRecord:
        return self.draft(generation=generation, island=original.island, kind="rebenchmark", parents=(original.id,),
                          source=original.source, design=dict(original.design),
                          rationale=f"re-benchmark of {original.id}", agent="engineer",
                          extra={"rebenchmark_of": original.id})

    def review_again(self, unreviewed: CandidateRecord) -> CandidateRecord:
        """A proposal the search stopped before the engineer reviewed, drafted again under a new
        id (candidates are committed once): the same code, parents and rationale, for review."""
        return self.draft(generation=unreviewed.generation, island=unreviewed.island, kind=unreviewed.kind,
                          parents=unreviewed.parents, source=unreviewed.source, design=dict(unreviewed.design),
                          rationale=unreviewed.rationale, agent=unreviewed.agent, hints=unreviewed.hints,
                          extra=dict(unreviewed.extra), review_of=unreviewed.id)

    def confirmation_of(self, finalist: CandidateRecord) -> CandidateRecord:
        n = finalist.concurrent
        return self.draft(generation=finalist.generation, island=finalist.island, kind="confirm",
                          parents=(finalist.id,), source=finalist.source, design=dict(finalist.design),
                          rationale=f"re-measured alone: {finalist.id} was timed beside {n} other "
                                    f"evaluation{'' if n == 1 else 's'}",
                          agent="engine", confirm_of=finalist.id)


class Proposer:
    """Builds the agent's requests, asks it, and screens what comes back. `population` gives
    the current population (it is rebuilt on resume); `lock` guards it."""

    def __init__(self, workload: Workload, agent: Agent, config: SearchConfig, drafts: Drafts, *,
                 population: Callable[[], Population], lock: threading.Condition,
                 publish: Callable[[Event], None], account: Callable[[float], None], screen: StaticScreen,
                 design_context: Callable[[DesignPoint], str] | None = None) -> None:
        self.workload = workload
        self.agent = agent
        self.config = config
        self._drafts = drafts
        self._population = population
        self._lock = lock
        self._publish = publish
        self._account = account
        self._screen = screen
        self._seed_source = workload.seed.read_text()
        self._context_fn = design_context  # None: cuco_tui.design.context with this machine's facts
        self._contexts: dict[str, str] = {}
        self.meta = ""  # the agent's latest meta-summary
        self._meta_fresh = False  # refreshed since the last generation started
        self._meta_cost = 0.0  # summarize() costs not yet carried by a record

    @property
    def seed_source(self) -> str:
        return self._seed_source

    # ------------------------------------------------------------------ the request

    def request(self, selection: Selection, *, generation: int, island: int, phase: str,
                hints: tuple[str, ...]) -> ProposalRequest:
        parent = selection.parents[0]
        return ProposalRequest(
            kind=selection.kind, workload=self.workload, parents=selection.parents,
            inspirations=selection.inspirations, feedback=self._feedback(island, parent), meta_summary=self.meta,
            hints=hints, design_context=self._context(parent), generation=generation, island=island, phase=phase)

    def fast_path_request(self, seed: CandidateRecord, last_try: CandidateRecord | None,
                          hints: tuple[str, ...]) -> ProposalRequest:
        """A device-initiated rewrite of the seed, told why the previous try failed."""
        return ProposalRequest(
            kind="fast_path", workload=self.workload, parents=(seed,),
            feedback=feedback.render_failure(last_try) if last_try else "", meta_summary=self.meta,
            hints=hints, design_context=self._context(seed), generation=0, island=0, phase="init")

    def _feedback(self, island: int, parent: CandidateRecord) -> str:
        """The parent's failure when it failed, else the island's latest failure."""
        with self._lock:
            failed = parent if is_failure(parent) and parent.result else self._population().last_failure(island)
        return feedback.render_failure(failed) if failed else ""

    def _context(self, parent: CandidateRecord) -> str:
        """The backend-conditioned notes for the parent's design point (cached per point)."""
        point = design_point(parent)
        key = point.line()
        if key not in self._contexts:
            if self._context_fn is None:
                self._context_fn = self._default_context()
            self._contexts[key] = self._context_fn(point)
        return self._contexts[key]

    def _default_context(self) -> Callable[[DesignPoint], str]:
        try:
            from cuco_tui.design.context import design_context, hardware_facts

            facts = hardware_facts()
        except Exception as exc:  # the notes are a help to the agent, never a reason to stop
            self._publish(EngineError(message=f"no design context for the agent: {type(exc).__name__}: {exc}"))
            return lambda point: ""
        world = self.config.world or min(self.workload.world_sizes)
        gpus = list(self.config.gpus) or None
        notes = self.workload.design_notes  # the workload's own baseline and strategy notes
        return lambda point: design_context(point, facts, world, gpus, notes_dir=notes)

    # ------------------------------------------------------------------ the agent's answer

    def ask(self, request: ProposalRequest, cid: str) -> CandidateRecord:
        """The agent's candidate as a pending record under `cid`, or, when it failed or gave no
        code, the record to commit as turned away. BudgetExhausted and AgentExhausted pass through."""
        try:
            proposal = self.agent.propose(request)
        except (BudgetExhausted, AgentExhausted):
            raise
        except Exception as exc:
            return outcomes.agent_failed(self._drafts.proposal(cid, request, None, self._population().records), exc)
        record = self._drafts.proposal(cid, request, proposal, self._population().records)
        self._account(proposal.cost_usd)
        self._publish(ProposalReady(candidate=cid, generation=record.generation, island=record.island,
                                    kind=record.kind, parents=record.parents, design=record.design,
                                    rationale=record.rationale, agent=record.agent, cost_usd=record.cost_usd))
        if proposal.error or not proposal.source.strip():
            return outcomes.no_candidate(record, proposal.error or "the reply held no candidate source")
        return record

    def claim_novelty(self, record: CandidateRecord) -> Verdict:
        """Whether the proposal is new; a new one is known from now on, so a twin proposed
        while this one runs is caught."""
        with self._lock:
            novelty = self._population().novelty
            verdict = novelty.check(record.source, record.design)
            if verdict.novel:
                novelty.add(record.id, record.source, record.design)
        return verdict

    @staticmethod
    def ask_again(request: ProposalRequest, verdict: Verdict) -> ProposalRequest:
        """The request once more, telling the agent its last answer was a duplicate."""
        note = f"Your previous proposal was {verdict.reason}; propose a different candidate."
        return replace(request, feedback="\n\n".join(x for x in (request.feedback, note) if x))

    def review_concerns(self, record: CandidateRecord) -> list[str]:
        """What makes the proposal risky: a backend change from its parent, L0's warnings (those
        the cascade will report)."""
        reasons = []
        parent = self._population().records.get(record.parents[0]) if record.parents else None
        if parent is not None:
            old, new = design_point(parent).backend, design_point(record).backend
            if old != new:
                reasons.append(f"it changes the backend from {old} to {new}")
        verdict = self._screen(record.source, self._seed_source, f"{record.id}.cu")
        warnings = list(dict.fromkeys(d.message for d in verdict.warnings))
        if warnings:
            reasons.append("the static checks warn: " + "; ".join(warnings[:3]))
        return reasons

    # ------------------------------------------------------------------ the meta-summary

    def summarize_if_due(self, generation: int) -> None:
        """Every meta_interval generations, unless a summary was just made (on resume)."""
        if (generation - 1) % self.config.meta_interval == 0 and not self._meta_fresh:
            self.summarize()
        self._meta_fresh = False

    def summarize(self) -> None:
        """Ask the agent for a fresh meta-summary of the search; what it cost is accounted now
        and carried by the next committed record (take_meta_cost)."""
        with self._lock:  # an unreviewed proposal has no outcome to learn from
            history = sorted((r for r in self._population().records.values() if not outcomes.is_unreviewed(r)),
                             key=lambda r: id_number(r.id))
        before = self.agent.spent_usd
        self.meta = self.agent.summarize(history)
        self._meta_fresh = True
        after = self.agent.spent_usd
        if before is not None and after is not None and after > before:
            with self._lock:
                self._meta_cost += after - before
            self._account(after - before)

    def take_meta_cost(self) -> float:
        with self._lock:
            cost, self._meta_cost = self._meta_cost, 0.0
            return cost


