"""The search engine: islands of candidates evolved by an agent, every proposal evaluated by the
cascade on a GPU group and committed to the session's lineage, progress published as events.

This module is the loop and the commit; it reads top to bottom. `run` evaluates the seed, asks
for a fast-path candidate, then runs the generations. One generation (`_run_generation`): for
each proposal slot, sample the island's parents → build the request → propose → screen
(`_propose`: agent failures, duplicates) → review gate → compile ahead → evaluate → commit →
update the population (`_commit`). Beside it, each step's machinery:

- steering.py: the engineer's controls (pause, resume, stop, review, hints, budget, preferred
  parent, re-benchmark), safe from any thread; the loop takes them up at its checkpoints;
- proposing.py: ids and drafts, the request's context, the agent call, the first screens;
- scheduling.py: compile ahead, GPU leases from an executor (cuco_tui.executors), finalists
  re-measured alone;
- outcomes.py: the record committed for each way a proposal ends; plateau.py: warn, diversify,
  stop when the best stops rising; bounds.py: the perfect-overlap bounds, measured once on a GPU.

The engine never imports a UI; the CLI and the TUI watch its events and call its controls."""

from __future__ import annotations

import random
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Literal, Protocol

from cuco_tui.agents.base import Agent, AgentExhausted, BudgetExhausted, ProposalRequest, hints_unread
from cuco_tui.core.bounds import Bounds
from cuco_tui.core.noise import record_speedup
from cuco_tui.core.records import CandidateRecord, RecordStatus, id_number
from cuco_tui.core.workload import Workload
from cuco_tui.design.space import DesignPoint
from cuco_tui.evaluate.cascade import evaluate
from cuco_tui.evaluate.l0 import check_l0
from cuco_tui.executors import Executor
from cuco_tui.executors.base import JobExecutor
from cuco_tui.search import outcomes
from cuco_tui.core.ranking import is_failure
from cuco_tui.search.archive import design_point
from cuco_tui.search.bounds import BoundsFn, measure_bounds
from cuco_tui.search.config import SearchConfig
from cuco_tui.search.events import (
    BestImproved,
    BoundsKnown,
    CandidateCommitted,
    EngineError,
    Event,
    EventBus,
    GenerationStarted,
    MeasuringBounds,
    Plateau,
    SearchFinished,
    SearchStarted,
    SessionRestored,
)
from cuco_tui.search.plateau import DIVERSIFY, STOP, PlateauWatch
from cuco_tui.search.population import EXPLORE, Population, phase_of
from cuco_tui.search.proposing import Drafts, Proposer
from cuco_tui.search.scheduling import EvaluateFn, Scheduler, is_finalist, ranking_view
from cuco_tui.search.steering import DECISIONS, Controls, ReviewError, SteeringError, Steering, Stop
from cuco_tui.search.summary import SearchSummary

__all__ = ["DECISIONS", "EvaluateFn", "Lineage", "ReviewError", "SearchEngine", "SteeringError", "ranking_view"]


class Lineage(Protocol):
    """What the engine needs of the session store (cuco_tui.lineage.SessionRepo)."""

    path: Path

    def commit_candidate(self, record: CandidateRecord) -> str: ...
    def records(self, with_source: bool = False) -> list[CandidateRecord]: ...
    def set_island_head(self, island: int, candidate_id: str) -> None: ...
    def set_best(self, candidate_id: str) -> None: ...
    def bounds(self) -> Bounds | None: ...
    def set_bounds(self, bounds: Bounds) -> None: ...
    def set_ended(self, reason: str) -> None: ...  # how the search ended (core/ending.py), "" as one starts


class SearchEngine(Controls):
    def __init__(
        self,
        workload: Workload,
        agent: Agent,
        repo: Lineage,
        config: SearchConfig,
        evaluate_fn: EvaluateFn = evaluate,
        events: EventBus | None = None,
        *,
        gpu_pool: Executor | None = None,
        compile_ahead: bool = True,
        design_context: Callable[[DesignPoint], str] | None = None,
        bounds_fn: BoundsFn | None | Literal["auto"] = "auto",
    ) -> None:
        """`bounds_fn` measures the session's bounds on a GPU group ("auto": the baseline run of
        search/bounds.py when `evaluate_fn` is the real cascade, nothing for a stand-in, whose
        candidates' figures a real baseline would not describe)."""
        self.workload = workload
        self.agent = agent
        self.repo = repo
        self.config = config
        self.events = events or EventBus()
        self.scratch = Path(repo.path) / "scratch"
        # One condition for the whole engine: the population, the controls and the evaluations
        # in flight are read and changed under it, and the loop waits on it for any of them.
        self._cond = threading.Condition(threading.RLock())
        self._evaluated_before = 0  # evaluations the session held when this run began (config.evaluations)
        self._population = Population(config)
        self._drafts = Drafts(agent.name, reserve=self.scratch / "ids.json")
        self._steering = Steering(config, self._cond, self._publish, drafts=self._drafts,
                                  committed=lambda cid: self._population.records.get(cid),
                                  cap_agent=lambda cap: self.agent.set_budget(cap),
                                  hints_unread=lambda: hints_unread(self.agent),
                                  on_stop=lambda: self._scheduler.stop())
        self._proposer = Proposer(workload, agent, config, self._drafts, population=lambda: self._population,
                                  lock=self._cond, publish=self._publish, account=self._steering.account,
                                  screen=check_l0, design_context=design_context)
        self._scheduler = Scheduler(workload, config, evaluate_fn, executor=gpu_pool, compile_ahead=compile_ahead,
                                    scratch=self.scratch, cond=self._cond, publish=self._publish,
                                    commit=self._commit, drafts=self._drafts)
        if bounds_fn == "auto":
            bounds_fn = measure_bounds if evaluate_fn is evaluate else None
        self._bounds_fn: BoundsFn | None = bounds_fn if config.measure_bounds else None
        self._plateau = PlateauWatch.of(config)

    @classmethod
    def from_session(
        cls,
        path: Path | str,
        agent: Agent | Callable[[Workload, SearchConfig], Agent],
        overrides: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> "SearchEngine":
        """An engine on the session at `path`, with the workload and config it was started with
        (`overrides` replaces some, e.g. generations), started as every search is (search/launch.py).
        `agent` may be a factory taking the workload and config. run() then continues after the
        last committed generation; the engine's `repo` is the session's, for the caller to close."""
        from cuco_tui.search.launch import resumed_target, start_engine

        given = agent
        maker = given if not hasattr(given, "propose") and callable(given) else (lambda workload, config: given)
        executor, events = kwargs.pop("gpu_pool", None), kwargs.pop("events", None)
        engine, _ = start_engine(resumed_target(Path(path), overrides), maker, executor, events, **kwargs)
        return engine

    # ================================================================== controls: steering.Controls

    @property
    def steering(self) -> Steering:
        """The engineer's controls (pause, stop, review, hints, ...), which the engine's own
        (steering.Controls) forward to."""
        return self._steering

    def snapshot(self) -> SearchSummary:
        """The summary as of now (for a status line; safe while running)."""
        with self._cond:
            records = list(self._population.records.values())
        return SearchSummary.of(records, session=str(self.repo.path), workload=self.workload.name)

    @property
    def population(self) -> Population:
        return self._population

    @property
    def evaluating(self) -> bool:
        """True while evaluations it started are in flight (a paused search lets them finish)."""
        return self._scheduler.in_flight()

    @property
    def working(self) -> bool:
        """True while a build or an evaluation it started still runs: after an interruption, a
        caller that kills their processes waits on this (a build taken up just as they were
        killed starts a compiler of its own, which a second kill must reach)."""
        return self._scheduler.working()

    # ================================================================== the run

    def run(self) -> SearchSummary:
        """Runs (or resumes) the search to `config.generations`; blocking. Returns the summary
        SearchFinished also carries; the session records how it ended. Interrupted (a second
        Ctrl-C, SystemExit), it leaves at once: evaluations in flight are abandoned uncommitted."""
        self._steering.begin()
        started = time.monotonic()
        try:
            reason, error = self._search()
            try:  # what is still in flight is committed, held proposals as unreviewed
                self._drain(final=True)
            except Exception as exc:  # ours: reported, then re-raised once the run is wound down
                reason, error = "error", error or exc
                self._publish(EngineError(message=f"{type(exc).__name__}: {exc}"))
        except BaseException:  # KeyboardInterrupt (a second Ctrl-C, even while draining), SystemExit
            self._scheduler.abandon()
            self._end("interrupted", started)
            raise
        self._scheduler.shutdown(wait=True)
        summary = self._end(reason, started)
        if error is not None:
            raise error
        return summary

    def _search(self) -> tuple[str, Exception | None]:
        """The run up to its last generation: why it ended, and the error of ours that ended it."""
        reason, error = "done", None
        try:
            executor = self._scheduler.start()
            self._steering.can_measure = executor.can_measure
            records = self.repo.records(with_source=True)
            lost = self._restore(records)
            start = max((r.generation for r in records), default=0) + 1
            self._steering.generation = start - 1
            self._publish(SearchStarted(
                session=str(self.repo.path), workload=self.workload.name, agent=self.agent.name,
                resumed=bool(records), start_generation=start, generations=self.config.generations,
                islands=self.config.islands, gpu_groups=tuple(g.gpus for g in executor.groups),
                can_measure=executor.can_measure,
                review_mode=self._steering.review_mode, budget_usd=self._steering.budget,
                executor=self._scheduler.describe_executor(), hints_unread=hints_unread(self.agent),
                evaluations=self.config.evaluations))
            if records or lost:
                with self._cond:
                    best = self._population.best
                self._publish(SessionRestored(records=tuple(records), best=best, lost=lost,
                                              next_id=self._drafts.peek_id()))
                self.repo.set_ended("")  # running again: an earlier end no longer describes it
            self._session_bounds(executor)
            if not records:
                self._evaluate_seed()
            self._scheduler.confirm_left_over(records)
            self._review_again(records)
            self._fast_path()
            for generation in range(start, self.config.generations + 1):
                self._check_evaluations()
                self._run_generation(generation)
            if self._steering.stopping:
                reason = "stopped"
        except Stop as stop:
            reason = stop.reason
        except BudgetExhausted:
            reason = "budget"
        except AgentExhausted:  # the agent said so: a resume would end the same way at once
            reason = "agent exhausted"
        except Exception as exc:  # ours: reported, then re-raised once the run is wound down
            reason, error = "error", exc
            self._publish(EngineError(message=f"{type(exc).__name__}: {exc}"))
        return reason, error

    def _end(self, reason: str, started: float) -> SearchSummary:
        """Record why the search ended (an interruption waits for nothing), publish SearchFinished."""
        if reason != "interrupted":
            try:
                self.repo.set_ended(reason)  # `cuco sessions` and the browser list the session's state from it
            except Exception as exc:  # the end is still published; the listing says "stopped"
                self._publish(EngineError(message=f"recording why the search ended: {exc}"))
        summary = SearchSummary.of(self._population.records.values(), session=str(self.repo.path),
                                   workload=self.workload.name, agent=self.agent.name, reason=reason,
                                   seconds=time.monotonic() - started, spent_usd=self._steering.spent)
        self._steering.end()
        self._publish(SearchFinished(summary=summary, reason=reason))
        return summary

    def _restore(self, records: list[CandidateRecord]) -> tuple[str, ...]:
        """Islands, archive, best, ids, spending and hints as the lineage left them. Returns the
        evaluations an earlier run started and never committed (Drafts.restore)."""
        with self._cond:
            self._population = Population.rebuild([ranking_view(r) for r in records], self.config)
            lost = self._drafts.restore(records)
            self._evaluated_before = sum(outcomes.is_evaluation(r) for r in records)
            self._steering.restore(records)
            self._plateau.restore([ranking_view(r) for r in records])
        self._steering.push_cap()
        if len(records) > 1:
            self._proposer.summarize()
        return lost

    def _session_bounds(self, executor: Executor) -> None:
        """The session's bounds: read back, or measured now on a group lent alone (once per
        session, with a GPU); published with the work per shape either way."""
        from cuco_tui.evaluate.work import work_counts

        world = self._scheduler.world
        bounds, why = self.repo.bounds(), ""
        if bounds is None:
            if not self._steering.can_measure:
                why = "no GPU on this machine: nothing is timed"
            elif self._bounds_fn is None:
                why = "not measured (a stand-in evaluator, or measure_bounds off)"
            elif isinstance(executor, JobExecutor):
                why = "not measured: evaluations run as jobs elsewhere, and the bounds are measured on local GPUs"
            else:
                with executor.lease(exclusive=True) as group:
                    self._publish(MeasuringBounds(gpus=group.gpus))
                    try:
                        bounds = self._bounds_fn(self.workload, group.gpus, world)
                    except Exception as exc:  # a help to the engineer, never a reason to stop
                        why = f"the bounds could not be measured: {type(exc).__name__}: {exc}"
                        self._publish(EngineError(message=f"{why}; the search goes on without % of bound"))
                if bounds is not None:
                    self.repo.set_bounds(bounds)
                    if not bounds.reference_ok:  # loud, once per session: every verdict rests on it
                        self._publish(EngineError(
                            message=f"the reference on the GPUs: {bounds.reference_check}; every candidate is verified against "
                                    f"it: fix it, or its tolerance, before trusting a verdict (cuco workload check "
                                    f"--gpu)"))
        work = {b.shape: b.work for b in bounds.shapes} if bounds is not None else work_counts(self.workload, world)
        self._publish(BoundsKnown(bounds=bounds, work=work, why=why))

    def _review_again(self, records: list[CandidateRecord]) -> None:
        """On resume: the proposals the last run left unreviewed go through the review gate
        again, each under a new id (held in review or risky mode, launched in auto)."""
        again = {r.review_of for r in records}
        for old in sorted(records, key=lambda r: id_number(r.id)):
            if not outcomes.is_unreviewed(old) or old.id in again:
                continue
            if self._evaluations_left() == 0:  # left unreviewed: a resume to a higher total holds them again
                break
            record = self._drafts.review_again(old)
            why = self._steering.review_reason(record, self._proposer.review_concerns)
            if why:
                held = old.held_because
                self._steering.hold(record, f"{old.id} was not reviewed before the search stopped"
                                            + (f" (held: {held})" if held else ""))
            else:
                self._scheduler.launch(record)

    def _evaluate_seed(self) -> None:
        record = self._drafts.seed(self._proposer.seed_source)
        self._publish(GenerationStarted(generation=0, phase="init"))
        self._scheduler.launch(record)
        self._drain()

    def _fast_path(self) -> None:
        """Before the slow path: while no device-initiated candidate has passed, ask for one."""
        if not self.config.fast_path:
            return
        for _ in range(self.config.fast_path_attempts):
            with self._cond:
                records = list(self._population.records.values())
            if any(design_point(r).device_initiated and not is_failure(r) for r in records):
                return
            tries = [r for r in records if r.kind == "fast_path"]
            if len(tries) >= self.config.fast_path_attempts:  # earlier runs of this session tried already
                return
            self._checkpoint()
            seed = next((r for r in records if r.kind == "seed"), None)
            if seed is None:
                return
            last = max(tries, key=lambda r: id_number(r.id), default=None)
            self._check_evaluations()
            self._propose(self._proposer.fast_path_request(seed, last, self.hints))
            self._drain()

    def _run_generation(self, generation: int) -> None:
        """One generation: a proposal per slot, each on its island, then wait for them all."""
        cfg = self.config
        # On a plateau every island explores again (full rewrites, crossovers, failures in the draw).
        phase = EXPLORE if self._plateau.diversified else phase_of(generation, cfg)
        self._steering.generation = generation
        self._publish(GenerationStarted(generation=generation, phase=phase))
        self._proposer.summarize_if_due(generation)
        rng = random.Random(f"{cfg.seed}:{generation}")
        produced = 0
        for slot in range(cfg.proposals):
            self._checkpoint()
            self._check_evaluations()
            island = ((generation - 1) * cfg.proposals + slot) % cfg.islands
            with self._cond:  # the parents: the population's draw, or the engineer's choice
                selection = self._steering.steer(self._population.select(island, phase, rng))
            if selection is None:
                continue
            request = self._proposer.request(selection, generation=generation, island=island, phase=phase,
                                             hints=self.hints)
            produced += self._propose(request)
        self._drain(keep=self._lookahead(generation))
        if generation % cfg.migration_interval == 0:
            with self._cond:
                self._population.migrate()
        if produced == 0 and not self._steering.stopping:
            raise Stop("agent exhausted")
        self._watch_plateau(generation)

    def _evaluations_left(self) -> int | None:
        """How many more candidates the session may send to evaluation (config.evaluations; None:
        no limit). A proposal held for review counts as sent: accepted, it is launched."""
        limit = self.config.evaluations
        if limit is None:
            return None
        with self._cond:
            used = self._evaluated_before + self._scheduler.sent + len(self._steering.awaiting_review())
        return max(0, limit - used)

    def _check_evaluations(self) -> None:
        """Stop asking for candidates once the session has sent config.evaluations of them to
        evaluation (those in flight finish and are committed as the run ends). While proposals
        that reach the total are held, the engineer's decisions are awaited first: a rejected
        one frees its place."""
        while self._evaluations_left() == 0:
            if not self._steering.awaiting_review():
                raise Stop("evaluations")
            self._drain()

    def _lookahead(self, generation: int) -> int:
        """How many of this generation's evaluations may still run when the next one is proposed:
        one per GPU group (config.lookahead), fewer than the generation made (the next one's
        parents see at least one of its results), none after the last generation or when stopping."""
        if not self.config.lookahead or generation >= self.config.generations or self._steering.stopping:
            return 0
        return max(0, min(self._scheduler.groups, self.config.proposals - 1))

    def _watch_plateau(self, generation: int) -> None:
        """After a generation: warn, diversify (the islands exchange their best now) or stop. A run
        that cannot measure (no GPU) cannot tell a plateau, even on a session measured before."""
        if self._steering.can_measure is False:
            return
        with self._cond:
            unsure = self._plateau.would_stop(generation) and self._scheduler.in_flight_count() > 0
        if unsure:  # the look-ahead left results running: one of them may be the gain that goes on
            self._drain()
        with self._cond:
            stage = self._plateau.after(generation)
            if stage is None:
                return
            if stage == DIVERSIFY:
                self._population.migrate()
            message = self._plateau.message(stage, generation)
            event = Plateau(stage=stage, generations=self._plateau.stale(generation),
                            best_speedup=self._plateau.gain_speedup, message=message)
        self._publish(event)
        if stage == STOP:
            raise Stop("plateau")

    def _propose(self, request: ProposalRequest) -> int:
        """Ask the agent for one candidate and see it into evaluation (or review). Duplicates
        are committed as rejected and asked again, up to novelty_retries times. Returns 1 when
        a candidate went on to evaluation or review, else 0."""
        repeated = ""
        for _ in range(1 + self.config.novelty_retries):
            self._checkpoint()
            record = self._proposer.ask(request, self._drafts.new_id())
            if record.status is not RecordStatus.PENDING:  # turned away: the agent failed or gave no code
                self._commit(record)
                return 0
            verdict = self._proposer.claim_novelty(record)
            if not verdict.novel:
                self._commit(outcomes.duplicate(record, verdict))
                if record.source == repeated:  # the agent gives the same answer again: asking more is futile
                    return 0
                repeated = record.source
                request = self._proposer.ask_again(request, verdict)
                continue
            why = self._steering.review_reason(record, self._proposer.review_concerns)
            if why:
                self._steering.hold(record, why)
            else:
                self._scheduler.launch(record)  # compile ahead, then evaluate on a leased GPU group
            return 1
        return 0

    def _commit(self, record: CandidateRecord) -> CandidateRecord:
        """Into the lineage, then into the population; island head and best follow. A finalist
        timed beside other evaluations enters the population without its figure (ranking_view).
        Returns the record as committed. Called from the evaluation threads too."""
        with self._cond:
            meta_cost = self._proposer.take_meta_cost()
            if meta_cost:
                record = replace(record, meta_cost_usd=round(meta_cost, 6))
            previous = self._population.best
            if is_finalist(record, previous, self.config):
                record = replace(record, finalist=True)
            sha = self.repo.commit_candidate(record)
            ranked = ranking_view(record)
            improved = self._population.add(ranked)
            speedup = record_speedup(ranked) if improved else None  # improved: faster than the best beyond noise
            if speedup is not None:
                self._plateau.best_measured(speedup, record.generation)  # as restore() counts it
            head = self._population.best_of_island(record.island % self.config.islands)
            if head is not None and head.id == record.id:
                self.repo.set_island_head(record.island, record.id)
            if improved:
                self.repo.set_best(record.id)
        self._publish(CandidateCommitted(record=record, sha=sha))
        if improved:
            self._publish(BestImproved(record=record, previous=previous.id if previous else None,
                                       previous_speedup=previous.speedup if previous else None))
        return record

    # ================================================================== between steps

    def _apply_orders(self) -> None:
        """Carry out what the engineer queued (re-benchmarks, review decisions), in order."""
        while (order := self._steering.next_order()) is not None:
            if order.rejected is not None:
                self._commit(outcomes.rejected_in_review(order.record, order.rejected))
            else:
                self._scheduler.launch(order.record)

    def _checkpoint(self) -> None:
        """Between steps: apply the engineer's orders, wait while paused, stop when asked, and
        stop at the budget cap (steering.Stop)."""
        while True:
            self._apply_orders()
            if self._steering.go():
                return

    def _drain(self, final: bool = False, keep: int = 0) -> None:
        """Wait until nothing is in flight (at most `keep` evaluations) or held, applying orders as
        they come. When stopping (or at the end of the run), held proposals are committed as
        unreviewed (a resumed search holds them again)."""
        def busy() -> bool:
            return self._scheduler.in_flight_count() > keep

        while True:
            self._apply_orders()
            settled = self._steering.settle(final, busy)
            if settled is None:
                return
            for held in settled:
                self._commit(outcomes.unreviewed(held.record, held.why))

    def _publish(self, event: Event) -> None:
        self.events.publish(event)
