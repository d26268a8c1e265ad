"""The search engine: islands of candidates evolved by an agent, every proposal evaluated by the
cascade on a GPU group and committed to the session's lineage, progress published as events.

One generation reads top to bottom in `_run_generation`: for each proposal slot, pick the
island, the phase's mutation kind, the parent(s) and inspirations; ask the agent; filter
duplicates; hold for the engineer's review when the mode says so; write the candidate, compile
it ahead on a CPU thread, evaluate it on a free GPU group; commit whatever came of it. A
candidate timed while other groups ran evaluations (`concurrent` in its extra) whose figure
would lead or nearly lead is a finalist: it is re-measured alone (`_confirm`), and only that
figure can make it the best. The engine never imports a UI; the CLI and the TUI watch its events and call its controls
(pause, resume, stop, review, hints, budget, re-benchmark, preferred parent), which are safe from
any thread."""

from __future__ import annotations

import random
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Protocol

from cuco_tui.agents.base import Agent, BudgetExhausted, Proposal, ProposalRequest
from cuco_tui.toolchain import BuildResult
from cuco_tui.design.space import DIMENSIONS, DesignPoint
from cuco_tui.evaluate.cascade import EvalOptions, Progress, evaluate
from cuco_tui.core.result import CascadeResult, Level
from cuco_tui.evaluate.static_checks import check_static
from cuco_tui.source.regions import design_of
from cuco_tui.search import feedback
from cuco_tui.search.archive import design_point, is_failure
from cuco_tui.search.config import REVIEW_MODES, ConfigError, SearchConfig
from cuco_tui.search.events import (
    AwaitingReview,
    BestImproved,
    BudgetSpent,
    CandidateCommitted,
    EngineError,
    Event,
    EventBus,
    GenerationStarted,
    HintAdded,
    Paused,
    ProposalReady,
    Resumed,
    ReviewDecided,
    SearchFinished,
    SearchStarted,
    StageFinished,
    StageStarted,
)
from cuco_tui.search.pool import BuildPool, GpuPool, PlacementError, plan_groups, topology_of
from cuco_tui.search.population import Population, Selection, can_be_parent, phase_of
from cuco_tui.core.records import CandidateRecord, candidate_id, id_number
from cuco_tui.search.summary import SearchSummary
from cuco_tui.core.workload import Workload

EvaluateFn = Callable[..., CascadeResult]  # evaluate(path, workload, options, progress=...)
DECISIONS = ("accept", "reject", "edit")


class Lineage(Protocol):
    """What the engine needs of the session store (cuco_tui.lineage.SessionRepo)."""

    path: Path

    def commit_candidate(self, record: CandidateRecord) -> str: ...

    def records(self, with_source: bool = False) -> list[CandidateRecord]: ...

    def set_island_head(self, island: int, candidate_id: str) -> None: ...

    def set_best(self, candidate_id: str) -> None: ...


class ReviewError(ValueError):
    """A review decision the engine cannot apply (unknown candidate, bad decision)."""


class SteeringError(ValueError):
    """A steering command the engine cannot carry out (unknown candidate, search not running)."""


class _Stop(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class _Held:
    record: CandidateRecord
    why: str


@dataclass(frozen=True)
class _Decision:
    candidate: str
    decision: str
    reason: str
    source: str | None


class SearchEngine:
    def __init__(
        self,
        workload: Workload,
        agent: Agent,
        repo: Lineage,
        config: SearchConfig,
        evaluate_fn: EvaluateFn = evaluate,
        events: EventBus | None = None,
        *,
        gpu_pool: GpuPool | None = None,
        compile_ahead: bool = True,
        design_context: Callable[[DesignPoint], str] | None = None,
    ) -> None:
        self.workload = workload
        self.agent = agent
        self.repo = repo
        self.config = config
        self.events = events or EventBus()
        self._evaluate = evaluate_fn
        self._context_fn = design_context  # None: cuco_tui.design.context with this machine's facts
        self._contexts: dict[str, str] = {}
        self._gpu_pool = gpu_pool
        self._compile_ahead = compile_ahead
        self.scratch = Path(repo.path) / "scratch"

        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._population = Population(config)
        self._next = 0
        self._paused = False
        self._stopping = False
        self._running = False
        self._review_mode = config.review_mode
        self._budget = config.budget_usd
        self._hints: list[str] = []
        self._meta = ""
        self._meta_fresh = False  # refreshed since the last generation started
        self._meta_cost = 0.0  # summarize() costs not yet carried by a record
        self._spent = 0.0
        self._spent_before = 0.0  # what the session had spent when this run started
        self._held: dict[str, _Held] = {}
        self._decisions: deque[_Decision] = deque()
        self._rebenchmarks: deque[CandidateRecord] = deque()  # drafted by rebenchmark(), launched by the loop
        self._accepting = False  # True from run()'s start until its last drain: steering commands are taken
        self._preferred: str | None = None  # prefer_parent(): the next proposal's parent, once
        self._generation = 0  # the generation under way (re-benchmarks are filed under it)
        self._in_flight: dict[str, Future] = {}
        self._on_gpu: dict[str, set[str]] = {}  # evaluation holding a GPU group -> those that overlapped it
        self._builds: BuildPool | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._seed_source = workload.seed.read_text()

    @classmethod
    def from_session(
        cls,
        path: Path | str,
        agent: Agent | Callable[[Workload, SearchConfig], Agent],
        overrides: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> "SearchEngine":
        """An engine on the session at `path`, with the workload and config it was started with
        (`overrides` replaces some, e.g. generations). `agent` may be a factory taking the
        workload and config. run() then continues after the last committed generation."""
        from cuco_tui.search.session import open_session

        repo, workload, config = open_session(Path(path))
        config = config.with_(**(overrides or {}))
        if not hasattr(agent, "propose") and callable(agent):
            agent = agent(workload, config)
        return cls(workload, agent, repo, config, **kwargs)

    # ================================================================== controls (any thread)

    def pause(self) -> None:
        """No new proposal starts until resume(); evaluations in flight finish."""
        with self._cond:
            if self._paused:
                return
            self._paused = True
        self._publish(Paused())

    def resume(self) -> None:
        with self._cond:
            if not self._paused:
                return
            self._paused = False
            self._cond.notify_all()
        self._publish(Resumed())

    def stop(self) -> None:
        """Stop proposing; evaluations in flight finish and are committed, held proposals are
        committed as rejected ("stopped before review"), then run() returns."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def review_mode(self) -> str:
        return self._review_mode

    def set_review_mode(self, mode: str) -> None:
        """Switching to "auto" accepts the proposals waiting for review."""
        if mode not in REVIEW_MODES:
            raise ConfigError(f"review mode {mode!r} is not one of {', '.join(REVIEW_MODES)}")
        with self._cond:
            self._review_mode = mode
            if mode == "auto":
                queued = {d.candidate for d in self._decisions}
                for cid in self._held:
                    if cid not in queued:
                        self._decisions.append(_Decision(cid, "accept", "review mode set to auto", None))
            self._cond.notify_all()

    def add_hint(self, text: str) -> None:
        text = text.strip()
        if not text:
            return
        with self._cond:
            self._hints.append(text)
        self._publish(HintAdded(text=text))

    @property
    def hints(self) -> tuple[str, ...]:
        with self._lock:
            return tuple(self._hints)

    def set_budget(self, usd: float | None) -> None:
        if usd is not None and usd < 0:
            raise ConfigError(f"the budget is a number of dollars, 0 or more, not {usd}")
        with self._cond:
            self._budget = usd
            self._cond.notify_all()
        self._push_budget_to_agent(lift=True)
        self._publish(BudgetSpent(spent=self._spent, cap=usd))

    def review(self, candidate_id: str, decision: str, reason: str = "", source: str | None = None) -> None:
        """Decide on a held proposal: accept it, reject it (with a reason), or edit it (the
        engineer's `source` is evaluated instead). Applied by the engine's loop, in order."""
        if decision not in DECISIONS:
            raise ReviewError(f"a review decision is one of {', '.join(DECISIONS)}, not {decision!r}")
        if decision == "edit" and not (source and source.strip()):
            raise ReviewError("an edit needs the edited source")
        with self._cond:
            if candidate_id not in self._held or any(d.candidate == candidate_id for d in self._decisions):
                waiting = ", ".join(self._held) or "none"
                raise ReviewError(f"{candidate_id} is not waiting for review (waiting: {waiting})")
            self._decisions.append(_Decision(candidate_id, decision, reason.strip(), source))
            self._cond.notify_all()

    def rebenchmark(self, candidate_id: str) -> str:
        """Evaluate a committed candidate's source again; the outcome is committed as a new
        candidate (kind "rebenchmark", its parent the original) so both measurements stay in
        the lineage. Returns the new candidate's id. Runs even while paused: the engineer asked."""
        with self._cond:
            self._check_accepting("re-benchmark")
            original = self._population.records.get(candidate_id)
            if original is None:
                raise SteeringError(f"no committed candidate {candidate_id!r} in this search")
            if not original.source.strip():
                raise SteeringError(f"{candidate_id} has no source to benchmark (it was turned away before any code)")
            # The id is taken now so the caller can say which candidate to look for; the
            # loop launches it at its next checkpoint, in order with review decisions.
            record = self._draft(id=self._new_id(), generation=self._generation, island=original.island,
                                 kind="rebenchmark", parents=(original.id,), source=original.source,
                                 design=dict(original.design), rationale=f"re-benchmark of {original.id}",
                                 agent="engineer", extra={"rebenchmark_of": original.id})
            self._rebenchmarks.append(record)
            self._cond.notify_all()
            return record.id

    def prefer_parent(self, candidate_id: str) -> None:
        """The next proposal of the loop (any island) starts from this candidate, once; the
        power-law choice resumes after it. A failed candidate is allowed: its failure goes to
        the agent as feedback, which is how an engineer asks for a fix."""
        with self._cond:
            self._check_accepting("make parent")
            record = self._population.records.get(candidate_id)
            if record is None:
                raise SteeringError(f"no committed candidate {candidate_id!r} in this search")
            if not can_be_parent(record):
                raise SteeringError(f"{candidate_id} cannot be a parent: it has no code, or was turned away before "
                                    f"evaluation ({record.extra.get('rejected_by', 'no source')})")
            self._preferred = candidate_id
            self._cond.notify_all()

    @property
    def preferred_parent(self) -> str | None:
        """The candidate prefer_parent() named, until a proposal used it."""
        return self._preferred

    @property
    def running(self) -> bool:
        """True while run() takes steering commands (from its start to its last drain)."""
        return self._accepting

    def _check_accepting(self, what: str) -> None:
        if not self._accepting:
            raise SteeringError(f"{what} needs a running search; this one is not running")
        if self._stopping:
            raise SteeringError(f"{what} is refused: the search is stopping")

    def awaiting_review(self) -> list[CandidateRecord]:
        with self._lock:
            return [h.record for h in self._held.values()]

    def snapshot(self) -> SearchSummary:
        """The summary as of now (for a status line; safe while running)."""
        with self._lock:
            records = list(self._population.records.values())
        return SearchSummary.of(records, session=str(self.repo.path), workload=self.workload.name)

    @property
    def population(self) -> Population:
        return self._population

    # ================================================================== the run

    def run(self) -> SearchSummary:
        """Runs (or resumes) the search to `config.generations`; blocking. Returns the summary
        that the SearchFinished event also carries."""
        with self._cond:
            if self._running:
                raise RuntimeError("this search is already running")
            self._running = True
            self._accepting = True
        started = time.monotonic()
        reason, error, interrupted = "done", None, False
        try:
            self._setup()
            records = self.repo.records(with_source=True)
            resumed = bool(records)
            self._restore(records)
            start = max((r.generation for r in records), default=0) + 1
            self._generation = start - 1
            self._publish(SearchStarted(
                session=str(self.repo.path), workload=self.workload.name, agent=self.agent.name, resumed=resumed,
                start_generation=start, generations=self.config.generations, islands=self.config.islands,
                gpu_groups=tuple(g.gpus for g in self._gpu_pool.groups), review_mode=self._review_mode,
                budget_usd=self._budget))
            if not resumed:
                self._evaluate_seed()
            self._confirm_left_over(records)
            self._fast_path()
            for generation in range(start, self.config.generations + 1):
                self._run_generation(generation)
            if self._stopping:
                reason = "stopped"
        except _Stop as stop:
            reason = stop.reason
        except BudgetExhausted:
            reason = "budget"
        except Exception as exc:  # ours: reported, then re-raised once the run is wound down
            reason, error = "error", exc
            self._publish(EngineError(message=f"{type(exc).__name__}: {exc}"))
        except BaseException:  # KeyboardInterrupt, SystemExit: leave without waiting for anything
            reason, interrupted = "interrupted", True
            raise
        finally:
            try:
                if not interrupted:
                    self._drain(final=True)
            finally:
                self._teardown(wait=not interrupted)
            summary = SearchSummary.of(self._population.records.values(), session=str(self.repo.path),
                                       workload=self.workload.name, agent=self.agent.name, reason=reason,
                                       seconds=time.monotonic() - started)
            with self._cond:
                self._running = False
                self._accepting = False
                self._rebenchmarks.clear()  # only after an interrupt: a normal end drained them
            self._publish(SearchFinished(summary=summary, reason=reason))
        if error is not None:
            raise error
        return summary

    def _run_generation(self, generation: int) -> None:
        """One generation: a proposal per slot, each on its island, then wait for them all."""
        cfg = self.config
        phase = phase_of(generation, cfg)
        self._generation = generation
        self._publish(GenerationStarted(generation=generation, phase=phase))
        if (generation - 1) % cfg.meta_interval == 0 and not self._meta_fresh:
            self._refresh_meta()
        self._meta_fresh = False
        rng = random.Random(f"{cfg.seed}:{generation}")
        produced = 0
        for slot in range(cfg.proposals):
            self._checkpoint()
            island = ((generation - 1) * cfg.proposals + slot) % cfg.islands
            with self._lock:
                selection = self._with_preferred_parent(self._population.select(island, phase, rng))
            if selection is None:
                continue
            parent = selection.parents[0]
            request = ProposalRequest(
                kind=selection.kind, workload=self.workload, parents=selection.parents,
                inspirations=selection.inspirations, feedback=self._feedback(island, parent),
                meta_summary=self._meta, hints=self.hints, design_context=self._context(parent),
                generation=generation, island=island, phase=phase)
            produced += self._propose(request)
        self._drain()
        if generation % cfg.migration_interval == 0:
            with self._lock:
                self._population.migrate()
        if produced == 0 and not self._stopping:
            raise _Stop("agent exhausted")

    # ================================================================== steps

    def _setup(self) -> None:
        cfg = self.config
        world = cfg.world or min(self.workload.world_sizes)
        self.workload.check_world(world)  # WorkloadError: this workload does not run on `world` ranks
        if self._gpu_pool is None:
            self._gpu_pool = self._plan_gpus(world)
        if self._compile_ahead:
            self._builds = BuildPool(cfg.max_concurrent_builds)
        self._executor = ThreadPoolExecutor(max_workers=self._gpu_pool.size + cfg.max_concurrent_builds,
                                            thread_name_prefix="cuco-eval")
        self.scratch.mkdir(parents=True, exist_ok=True)

    def _plan_gpus(self, world: int) -> GpuPool:
        from cuco_tui.harness.gpus import inventory

        inv = inventory()
        if inv.count == 0:
            return GpuPool.cpu_only(self.config.max_concurrent_builds)
        gpus = list(self.config.gpus) or [g.index for g in inv.gpus]
        missing = [g for g in gpus if g >= inv.count]
        if missing:
            raise PlacementError(f"GPU {missing[0]} does not exist: this machine has {inv.count} (0-{inv.count - 1})")
        return GpuPool(plan_groups(gpus, world, topology_of(inv)))

    def _teardown(self, wait: bool = True) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=wait, cancel_futures=not wait)
        if self._builds is not None:
            self._builds.shutdown(wait=wait)

    def _restore(self, records: list[CandidateRecord]) -> None:
        """Islands, archive, best, ids, spending and hints as the lineage left them."""
        with self._lock:
            self._population = Population.rebuild([ranking_view(r) for r in records], self.config)
            self._next = max((id_number(r.id) for r in records), default=-1) + 1
            self._spent = sum(r.cost_usd + float(r.extra.get("meta_cost_usd", 0.0)) for r in records)
            self._spent_before = self._spent
            latest = max(records, key=lambda r: id_number(r.id), default=None)
            if latest is not None and not self._hints:
                self._hints = list(latest.extra.get("hints", []))
        self._push_budget_to_agent()
        if len(records) > 1:
            self._refresh_meta()

    def _evaluate_seed(self) -> None:
        source = self._seed_source
        record = self._draft(kind="seed", generation=0, island=0, parents=(), source=source,
                             design=self._design({}, source), rationale="the workload's seed: its reference strategy",
                             agent="workload")
        self._publish(GenerationStarted(generation=0, phase="init"))
        self._launch(record)
        self._drain()

    def _fast_path(self) -> None:
        """Before the slow path: while no device-initiated candidate has passed, ask for one."""
        if not self.config.fast_path:
            return
        for _ in range(self.config.fast_path_attempts):
            with self._lock:
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
            request = ProposalRequest(
                kind="fast_path", workload=self.workload, parents=(seed,),
                feedback=feedback.render_failure(last) if last else "", meta_summary=self._meta,
                hints=self.hints, design_context=self._context(seed), generation=0, island=0, phase="init")
            self._propose(request)
            self._drain()

    def _propose(self, request: ProposalRequest) -> int:
        """Ask the agent for one candidate and see it into evaluation (or review). Duplicates
        are committed as rejected and asked again, up to novelty_retries times. Returns 1 when
        a candidate went on to evaluation or review, else 0."""
        repeated = ""
        for _ in range(1 + self.config.novelty_retries):
            self._checkpoint()
            cid = self._new_id()
            try:
                proposal = self.agent.propose(request)
            except BudgetExhausted:
                raise
            except Exception as exc:
                record = self._draft_from(cid, request, None)
                self._commit(feedback.turned_away(record, "agent", f"the agent failed: {type(exc).__name__}: {exc}",
                                                  "agent"))
                return 0
            record = self._draft_from(cid, request, proposal)
            self._account(proposal.cost_usd)
            self._publish(ProposalReady(candidate=cid, generation=record.generation, island=record.island,
                                        kind=record.kind, parents=record.parents, design=record.design,
                                        rationale=record.rationale, agent=record.agent, cost_usd=record.cost_usd))
            if proposal.error or not proposal.source.strip():
                why = proposal.error or "the reply held no candidate source"
                self._commit(feedback.turned_away(record, "agent", f"no candidate: {why}", "agent"))
                return 0
            with self._lock:
                verdict = self._population.novelty.check(record.source, record.design)
                if verdict.novel:  # known from now on, so a twin proposed while this one runs is caught
                    self._population.novelty.add(record.id, record.source, record.design)
            if not verdict.novel:
                self._commit(feedback.turned_away(record, "novelty", f"novelty filter: {verdict.reason}", "novelty",
                                                  duplicate_of=verdict.duplicate_of,
                                                  similarity=round(verdict.similarity, 6)))
                if record.source == repeated:  # the agent gives the same answer again: asking more is futile
                    return 0
                repeated = record.source
                note = f"Your previous proposal was {verdict.reason}; propose a different candidate."
                request = replace(request, feedback="\n\n".join(x for x in (request.feedback, note) if x))
                continue
            why = self._review_reason(record)
            if why:
                self._hold(record, why)
            else:
                self._launch(record)
            return 1
        return 0

    def _review_reason(self, record: CandidateRecord) -> str:
        """Why this proposal waits for the engineer ("" when it does not)."""
        mode = self._review_mode
        if mode == "auto":
            return ""
        if mode == "review":
            return "review mode: every proposal waits for the engineer"
        reasons = []
        parent = self._population.records.get(record.parents[0]) if record.parents else None
        if parent is not None:
            old, new = design_point(parent).backend, design_point(record).backend
            if old != new:
                reasons.append(f"it changes the backend from {old} to {new}")
        warnings = list(dict.fromkeys(d.message for d in self._l0_findings(record) if d.severity == "warning"))
        if warnings:
            reasons.append("the static checks warn: " + "; ".join(warnings[:3]))
        return "; ".join(reasons)

    def _l0_findings(self, record: CandidateRecord) -> list:
        """What L0 says of the proposal: the static checks, and the design classifier's
        comparison of the declared design with the code."""
        found = check_static(record.source, self._seed_source, f"{record.id}.cu")
        try:
            from cuco_tui.design.classify import check_declaration

            found += check_declaration(record.source, f"{record.id}.cu")
        except Exception as exc:  # the classifier is advice; its failure must not hold the search
            self._publish(EngineError(message=f"the design classifier failed on {record.id}: {exc}",
                                      candidate=record.id))
        return found

    def _hold(self, record: CandidateRecord, why: str) -> None:
        with self._cond:
            self._held[record.id] = _Held(record, why)
        self._publish(AwaitingReview(candidate=record.id, kind=record.kind, parents=record.parents,
                                     source=record.source, design=record.design, rationale=record.rationale, why=why))

    def _apply_decisions(self) -> None:
        """Carry out the review decisions queued by review() and launch the re-benchmarks
        queued by rebenchmark() (on the engine's thread)."""
        while True:
            with self._cond:
                rebench = self._rebenchmarks.popleft() if self._rebenchmarks else None
            if rebench is not None:
                self._launch(rebench)
                continue
            with self._cond:
                if not self._decisions:
                    return
                d = self._decisions.popleft()
                held = self._held.pop(d.candidate, None)
            if held is None:
                continue
            self._publish(ReviewDecided(candidate=d.candidate, decision=d.decision, reason=d.reason))
            record = held.record
            if d.decision == "reject":
                reason = d.reason or "no reason given"
                self._commit(feedback.turned_away(replace(record, review=f"rejected: {reason}"), "review",
                                                  f"rejected in review: {reason}", "review"))
            elif d.decision == "edit":
                assert d.source is not None
                design = self._design({"knobs": record.design.get("knobs", {})}, d.source)
                extra = {**record.extra, "edited_by": "engineer", "edit_reason": d.reason} if d.reason else \
                    {**record.extra, "edited_by": "engineer"}
                self._launch(replace(record, source=d.source, design=design, review="edited", extra=extra))
            else:
                self._launch(replace(record, review="accepted"))

    def _launch(self, record: CandidateRecord, exclusive: bool = False) -> None:
        """Write the candidate, start its compile on a CPU thread, queue its evaluation
        (`exclusive`: on a GPU group lent while no other is, see GpuPool.acquire_exclusive)."""
        path = self.scratch / f"{record.id}.cu"
        path.write_text(record.source)
        build: Future[BuildResult] | None = None
        if self._builds is not None:
            self._publish(StageStarted(candidate=record.id, level=int(Level.COMPILE), message="compiling ahead"))
            build = self._builds.submit(path)
        assert self._executor is not None
        with self._cond:
            future = self._executor.submit(self._evaluate_and_commit, record, path, build, exclusive)
            self._in_flight[record.id] = future

    def _evaluate_and_commit(self, record: CandidateRecord, path: Path, build: Future[BuildResult] | None,
                             exclusive: bool = False) -> None:
        try:
            try:
                result, beside = self._evaluate_on_gpus(record, path, build, exclusive)
                done = feedback.evaluated(record, result)
                if beside is not None and self._gpu_pool is not None and self._gpu_pool.size > 1:
                    done = replace(done, extra={**done.extra, "concurrent": len(beside),
                                                "concurrent_with": sorted(beside, key=id_number)})
            except Exception as exc:
                done = feedback.crashed(record, exc)
                self._publish(StageFinished(candidate=record.id, level=int(Level.COMPILE), status=done.status))
            committed = self._commit(done)
        except Exception as exc:  # the commit itself failed: say so, keep the search going
            self._publish(EngineError(message=f"could not commit {record.id}: {type(exc).__name__}: {exc}",
                                      candidate=record.id))
        else:
            if committed.extra.get("finalist"):  # launched before this one leaves _in_flight: a drain waits for it
                try:
                    self._confirm(committed)
                except Exception as exc:  # e.g. the run was interrupted: the finalist stays unconfirmed
                    self._publish(EngineError(message=f"could not re-measure {record.id} alone: "
                                                      f"{type(exc).__name__}: {exc}", candidate=record.id))
        finally:
            with self._cond:
                self._in_flight.pop(record.id, None)
                self._cond.notify_all()

    def _confirm_left_over(self, records: list[CandidateRecord]) -> None:
        """On resume: the finalists whose confirmation never ran (the search was killed or
        stopped between the two) are re-measured alone now; until then they do not rank."""
        confirmed = {r.extra.get("confirm_of") for r in records if r.kind == "confirm"}
        for r in sorted(records, key=lambda r: id_number(r.id)):
            if r.extra.get("finalist") and r.id not in confirmed:
                self._confirm(r)

    def _confirm(self, finalist: CandidateRecord) -> None:
        """Re-measure a finalist alone: the same source, evaluated on a group lent while no other
        evaluation runs, committed as its child (kind "confirm"). Only that figure can make the
        code the best (see ranking_view)."""
        n = int(finalist.extra.get("concurrent", 0))
        record = self._draft(generation=finalist.generation, island=finalist.island, kind="confirm",
                             parents=(finalist.id,), source=finalist.source, design=dict(finalist.design),
                             rationale=f"re-measured alone: {finalist.id} was timed beside {n} other "
                                       f"evaluation{'' if n == 1 else 's'}",
                             agent="engine", extra={"confirm_of": finalist.id})
        self._publish(ProposalReady(candidate=record.id, generation=record.generation, island=record.island,
                                    kind=record.kind, parents=record.parents, design=record.design,
                                    rationale=record.rationale, agent=record.agent))
        self._launch(record, exclusive=True)

    def _evaluate_on_gpus(self, record: CandidateRecord, path: Path, build: Future[BuildResult] | None,
                          exclusive: bool = False) -> tuple[CascadeResult, set[str] | None]:
        """The cascade's result, and the evaluations that held another GPU group at some time
        while this one held its own (None when it needed no GPU)."""
        built_ok = True
        if build is not None:
            t0 = time.monotonic()
            b = build.result()
            built_ok = b.ok
            self._publish(StageFinished(candidate=record.id, level=int(Level.COMPILE),
                                        status="" if b.ok else "compile_error", seconds=time.monotonic() - t0))
        assert self._gpu_pool is not None
        if not built_ok:  # the cascade will stop at L1 (from the cache): no GPU needed
            return self._run_cascade(record, path, ()), None
        with self._gpu_pool.lease(exclusive) as group:
            with self._cond:
                others = set(self._on_gpu)
                for other in others:
                    self._on_gpu[other].add(record.id)
                self._on_gpu[record.id] = others
            try:
                result = self._run_cascade(record, path, group.gpus)
            finally:
                with self._cond:
                    beside = self._on_gpu.pop(record.id)
        return result, beside

    def _run_cascade(self, record: CandidateRecord, path: Path, gpus: tuple[int, ...]) -> CascadeResult:
        stage: dict[str, Any] = {"level": None, "t": time.monotonic(), "last": None}

        def progress(p: Progress) -> None:
            level = int(p.level)
            if stage["last"] == (level, p.message):  # every rank reports each step: say it once
                return
            stage["last"] = (level, p.message)
            if stage["level"] is not None and stage["level"] != level:
                self._publish(StageFinished(candidate=record.id, level=stage["level"],
                                            seconds=time.monotonic() - stage["t"]))
                stage["t"] = time.monotonic()
            stage["level"] = level
            self._publish(StageStarted(candidate=record.id, level=level, gpus=gpus, message=p.message))

        options = EvalOptions(gpus=list(gpus) or None, world=self.config.world or min(self.workload.world_sizes),
                              run_root=self.scratch / "runs")
        result = self._evaluate(path, self.workload, options, progress=progress)
        self._publish(StageFinished(candidate=record.id, level=int(result.level), status=result.status.value,
                                    seconds=time.monotonic() - stage["t"]))
        return result

    def _commit(self, record: CandidateRecord) -> CandidateRecord:
        """Into the lineage, then into the population; island head and best follow. A finalist
        timed beside other evaluations enters the population without its figure (ranking_view).
        Returns the record as committed."""
        with self._lock:
            if self._meta_cost:
                record = replace(record, extra={**record.extra, "meta_cost_usd": round(self._meta_cost, 6)})
                self._meta_cost = 0.0
            previous = self._population.best
            if self._is_finalist(record, previous):
                record = replace(record, extra={**record.extra, "finalist": True})
            sha = self.repo.commit_candidate(record)
            improved = self._population.add(ranking_view(record))
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

    def _is_finalist(self, record: CandidateRecord, best: CandidateRecord | None) -> bool:
        """Measured while other evaluations ran, and faster than the best or within
        confirm_margin of it: its figure may owe something to the interference."""
        if not self.config.confirm_alone or record.status != "measured" or record.speedup is None:
            return False
        if not record.extra.get("concurrent"):
            return False
        return best is None or best.speedup is None or \
            record.speedup > best.speedup * (1.0 - self.config.confirm_margin)

    def _drain(self, final: bool = False) -> None:
        """Wait until nothing is in flight or held, applying review decisions as they come.
        When stopping (or at the end of the run), held proposals are committed as rejected."""
        while True:
            self._apply_decisions()
            with self._cond:
                settle = list(self._held.values()) if (final or self._stopping) and not self._decisions else []
                if settle:
                    self._held.clear()
                elif not self._in_flight and not self._held and not self._decisions and not self._rebenchmarks:
                    if final:  # under the same lock: no re-benchmark can be queued after this drain
                        self._accepting = False
                    return
                else:
                    self._cond.wait(0.25)
                    continue
            for held in settle:
                record = replace(held.record, review="rejected: the search stopped before review")
                self._commit(feedback.turned_away(record, "review", "the search stopped before this proposal "
                                                  "was reviewed", "review"))

    def _checkpoint(self) -> None:
        """Between steps: apply review decisions, wait while paused, stop when asked, and
        stop at the budget cap."""
        while True:
            self._apply_decisions()
            with self._cond:
                if self._stopping:
                    raise _Stop("stopped")
                if self._budget is not None and self._spent >= self._budget:
                    raise _Stop("budget")
                if not self._paused:
                    return
                self._cond.wait(0.25)

    # ================================================================== helpers

    def _new_id(self) -> str:
        with self._lock:
            cid = candidate_id(self._next)
            self._next += 1
            return cid

    def _design(self, design: dict[str, Any], source: str) -> dict[str, Any]:
        """The proposal's design coordinates, or those its `// cuco-design:` line declares."""
        if any(k in DIMENSIONS for k in design):
            return dict(design)
        declared = {k: v for k, v in (design_of(source) or {}).items() if k in DIMENSIONS}
        return {**declared, "knobs": dict(design.get("knobs", {}))}

    def _draft(self, **fields: Any) -> CandidateRecord:
        if "id" not in fields:
            fields["id"] = self._new_id()
        fields.setdefault("status", "pending")
        fields.setdefault("created", time.time())
        return CandidateRecord(**fields)

    def _draft_from(self, cid: str, request: ProposalRequest, proposal: Proposal | None) -> CandidateRecord:
        known = self._population.records
        asked = tuple(p.id for p in request.parents)
        parents = tuple(p for p in (proposal.parents if proposal else ()) if p in known) or asked
        extra: dict[str, Any] = {"phase": request.phase, "asked": request.kind}
        if request.hints:
            extra["hints"] = list(request.hints)
        if request.inspirations:
            extra["inspirations"] = [r.id for r in request.inspirations]
        if proposal is None:
            return self._draft(id=cid, generation=request.generation, island=request.island, kind=request.kind,
                               parents=asked, source="", design={}, rationale="", agent=self.agent.name, extra=extra)
        kind = "fast_path" if request.kind == "fast_path" else (proposal.kind or request.kind)
        return self._draft(
            id=cid, generation=request.generation, island=request.island, kind=kind,
            parents=parents, source=proposal.source, design=self._design(proposal.design, proposal.source),
            rationale=proposal.rationale, agent=proposal.agent or self.agent.name, cost_usd=proposal.cost_usd,
            tokens_in=proposal.tokens_in, tokens_out=proposal.tokens_out, extra={**extra, **proposal.extra})

    def _with_preferred_parent(self, selection: Selection | None) -> Selection | None:
        """Under the lock: the selection with the engineer's preferred parent first, if one is
        waiting (used once). A crossover keeps one of its drawn partners as the second parent."""
        if selection is None or self._preferred is None:
            return selection
        preferred = self._population.records.get(self._preferred)
        self._preferred = None
        if preferred is None:
            return selection
        others = tuple(p for p in selection.parents if p.id != preferred.id)[: len(selection.parents) - 1]
        return Selection(selection.kind, (preferred, *others),
                         tuple(r for r in selection.inspirations if r.id != preferred.id))

    def _feedback(self, island: int, parent: CandidateRecord) -> str:
        """The parent's failure when it failed, else the island's latest failure."""
        with self._lock:
            failed = parent if is_failure(parent) and parent.result else self._population.last_failure(island)
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
        return lambda point: design_context(point, facts, world, gpus)

    def _refresh_meta(self) -> None:
        with self._lock:
            history = sorted(self._population.records.values(), key=lambda r: id_number(r.id))
        before = _agent_spent(self.agent)
        self._meta = self.agent.summarize(history)
        self._meta_fresh = True
        after = _agent_spent(self.agent)
        if before is not None and after is not None and after > before:
            with self._lock:
                self._meta_cost += after - before
            self._account(after - before)

    def _account(self, usd: float) -> None:
        if not usd:
            return
        with self._lock:
            self._spent += usd
            spent, cap = self._spent, self._budget
        self._publish(BudgetSpent(spent=spent, cap=cap))

    def _push_budget_to_agent(self, lift: bool = False) -> None:
        """An agent with its own cap (`set_budget(usd)`, or a `ledger.cap_usd` as ClaudeAgent
        has) gets what is left of the session's budget for this process. Without a session cap
        the agent keeps its own, unless the engineer lifted the cap (`lift`)."""
        if self._budget is None and not lift:
            return
        cap = None if self._budget is None else max(0.0, self._budget - self._spent_before)
        setter = getattr(self.agent, "set_budget", None)
        if callable(setter):
            setter(cap)
            return
        ledger = getattr(self.agent, "ledger", None)
        if ledger is not None and hasattr(ledger, "cap_usd"):
            ledger.cap_usd = cap

    def _publish(self, event: Event) -> None:
        self.events.publish(event)


def ranking_view(record: CandidateRecord) -> CandidateRecord:
    """The record as the population ranks it: a finalist's figure, timed beside other
    evaluations, is withheld (speedup None), so neither the best, nor an island's head, nor an
    archive cell is decided by it; its confirmation, the same source measured alone, ranks
    instead. The lineage keeps the figure as measured."""
    if record.extra.get("finalist") and record.speedup is not None:
        return replace(record, speedup=None)
    return record


def _agent_spent(agent: Agent) -> float | None:
    spent = getattr(agent, "spent_usd", None)
    if spent is None:
        spent = getattr(getattr(agent, "ledger", None), "spent_usd", None)
    return float(spent) if isinstance(spent, (int, float)) else None
