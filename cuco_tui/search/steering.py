"""Steering: the engineer's hold on a running search. Pause, resume and stop; the review gate,
the proposals it holds and the decisions on them; hints; the dollar budget and what has been
spent; a preferred parent; re-benchmarks. The controls are called from any thread (the TUI's,
the CLI's signal handler); they only record what was asked and wake the loop, which carries it
out on its own thread, in order, at its next checkpoint (`go`, `next_order`, `settle`).

Everything here is guarded by the engine's one condition, shared with the scheduler: the loop
waits on it for decisions, controls and finished evaluations alike."""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, replace
from typing import Callable, Iterable

from cuco_tui.core.records import CandidateRecord, Review, ReviewDecision, ReviewOutcome, id_number
from cuco_tui.search.config import REVIEW_MODES, ConfigError, SearchConfig, check_budget
from cuco_tui.search.summary import record_cost
from cuco_tui.search.events import AwaitingReview, BudgetSpent, Event, HintAdded, Paused, Resumed, ReviewDecided
from cuco_tui.search.population import Selection, can_be_parent
from cuco_tui.search.proposing import Drafts, design_of

DECISIONS = tuple(d.value for d in ReviewDecision)


class ReviewError(ValueError):
    """A review decision the engine cannot apply (unknown candidate, bad decision)."""


class SteeringError(ValueError):
    """A steering command the engine cannot carry out (unknown candidate, search not running)."""


class Stop(Exception):
    """Raised at a checkpoint: the loop stops proposing (`reason`: stopped, budget, agent exhausted,
    plateau, evaluations)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Held:
    record: CandidateRecord
    why: str


@dataclass(frozen=True)
class Decision:
    candidate: str
    decision: ReviewDecision
    reason: str
    source: str | None


@dataclass(frozen=True)
class Order:
    """What the loop does next for the engineer: launch `record` (a re-benchmark, an accepted or
    edited proposal), or, when `rejected` holds the engineer's reason, commit it as rejected."""

    record: CandidateRecord
    rejected: str | None = None


class Steering:
    def __init__(self, config: SearchConfig, cond: threading.Condition, publish: Callable[[Event], None], *,
                 drafts: Drafts, committed: Callable[[str], CandidateRecord | None],
                 cap_agent: Callable[[float | None], None], hints_unread: Callable[[], str] = lambda: "",
                 on_stop: Callable[[], None] = lambda: None) -> None:
        self._cond = cond
        self._publish = publish
        self._drafts = drafts
        self._committed = committed  # a committed candidate by id (the population's records)
        self._cap_agent = cap_agent  # gives the agent what is left of the budget
        self._hints_unread = hints_unread  # why the agent would never read a hint ("" when it reads them)
        self._on_stop = on_stop  # the scheduler's stop: an executor of cluster jobs cancels them
        self._running = False  # run() is under way
        self._accepting = False  # from run()'s start until its last drain: steering commands are taken
        self._paused = False
        self._stopping = False
        self._review_mode = config.review_mode
        self._budget = config.budget_usd
        self._spent = 0.0
        self._spent_before = 0.0  # what the session had spent when this run started
        self._hints: list[str] = []
        self._held: dict[str, Held] = {}
        self._decisions: deque[Decision] = deque()
        self._rebenchmarks: deque[CandidateRecord] = deque()  # drafted by rebenchmark(), launched by the loop
        self._preferred: str | None = None  # prefer_parent(): the next proposal's parent, once
        self.generation = 0  # the generation under way (re-benchmarks are filed under it); the loop sets it
        self.can_measure: bool | None = None  # the run has a GPU group (None until it planned them); the loop sets it

    # ------------------------------------------------------------------ the controls (any thread)

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
        committed as unreviewed (a resumed search holds them again), then run() returns."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._on_stop()

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def stopping(self) -> bool:
        return self._stopping

    @property
    def running(self) -> bool:
        """True while run() takes steering commands (from its start to its last drain)."""
        return self._accepting

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
                        self._decisions.append(Decision(cid, ReviewDecision.ACCEPT, "review mode set to auto", None))
            self._cond.notify_all()

    def add_hint(self, text: str) -> None:
        """Refused (SteeringError) for an agent that does not read hints: kept, it would be
        counted and never used."""
        unread = self._hints_unread()
        if unread:
            raise SteeringError(unread)
        text = text.strip()
        if not text:
            return
        with self._cond:
            self._hints.append(text)
        self._publish(HintAdded(text=text))

    @property
    def hints(self) -> tuple[str, ...]:
        with self._cond:
            return tuple(self._hints)

    @property
    def budget(self) -> float | None:
        return self._budget

    def set_budget(self, usd: float | None) -> None:
        check_budget(usd)
        with self._cond:
            self._budget = usd
            self._cond.notify_all()
        self.push_cap(lift=True)
        self._publish(BudgetSpent(spent=self._spent, cap=usd))

    def review(self, candidate_id: str, decision: ReviewDecision | str, reason: str = "",
               source: str | None = None) -> None:
        """Decide on a held proposal: accept it, reject it (with a reason), or edit it (the
        engineer's `source` is evaluated instead). Applied by the engine's loop, in order."""
        try:
            decided = ReviewDecision(decision)
        except ValueError:
            raise ReviewError(f"a review decision is one of {', '.join(DECISIONS)}, not {decision!r}") from None
        if decided is ReviewDecision.EDIT and not (source and source.strip()):
            raise ReviewError("an edit needs the edited source")
        with self._cond:
            if candidate_id not in self._held or any(d.candidate == candidate_id for d in self._decisions):
                waiting = ", ".join(self._held) or "none"
                raise ReviewError(f"{candidate_id} is not waiting for review (waiting: {waiting})")
            self._decisions.append(Decision(candidate_id, decided, reason.strip(), source))
            self._cond.notify_all()

    def awaiting_review(self) -> list[CandidateRecord]:
        with self._cond:
            return [h.record for h in self._held.values()]

    def rebenchmark(self, candidate_id: str) -> str:
        """Evaluate a committed candidate's source again; the outcome is committed as a new
        candidate (kind "rebenchmark", its parent the original) so both measurements stay in
        the lineage. Returns the new candidate's id. Runs even while paused: the engineer asked.
        Refused without a GPU: it would only compile the same code again and commit nothing new."""
        with self._cond:
            self._check_accepting("re-benchmark")
            if self.can_measure is False:
                raise SteeringError("re-benchmark needs a GPU to time on; this machine has none, so it would only "
                                    "compile the same code again")
            original = self._committed(candidate_id)
            if original is None:
                raise SteeringError(f"no committed candidate {candidate_id!r} in this search")
            if not original.source.strip():
                raise SteeringError(f"{candidate_id} has no source to benchmark (it was turned away before any code)")
            # The id is taken now so the caller can say which candidate to look for; the
            # loop launches it at its next checkpoint, in order with review decisions.
            record = self._drafts.rebenchmark_of(original, self.generation)
            self._rebenchmarks.append(record)
            self._cond.notify_all()
            return record.id

    def prefer_parent(self, candidate_id: str) -> None:
        """The next proposal of the loop (any island) starts from this candidate, once; the
        power-law choice resumes after it. A failed candidate is allowed: its failure goes to
        the agent as feedback, which is how an engineer asks for a fix."""
        with self._cond:
            self._check_accepting("make parent")
            record = self._committed(candidate_id)
            if record is None:
                raise SteeringError(f"no committed candidate {candidate_id!r} in this search")
            if not can_be_parent(record):
                raise SteeringError(f"{candidate_id} cannot be a parent: it has no code, or was turned away before "
                                    f"evaluation ({record.rejected_by or 'no source'})")
            self._preferred = candidate_id
            self._cond.notify_all()

    @property
    def preferred_parent(self) -> str | None:
        """The candidate prefer_parent() named, until a proposal used it."""
        return self._preferred

    def _check_accepting(self, what: str) -> None:
        if not self._accepting:
            raise SteeringError(f"{what} needs a running search; this one is not running")
        if self._stopping:
            raise SteeringError(f"{what} is refused: the search is stopping")

    # ------------------------------------------------------------------ the loop's side

    def begin(self) -> None:
        with self._cond:
            if self._running:
                raise RuntimeError("this search is already running")
            self._running = True
            self._accepting = True

    def end(self) -> None:
        with self._cond:
            self._running = False
            self._accepting = False
            self._rebenchmarks.clear()  # only after an interrupt: a normal end drained them

    def restore(self, records: Iterable[CandidateRecord]) -> None:
        """Spending and hints as the lineage left them (on resume)."""
        records = list(records)
        with self._cond:
            self._spent = sum(record_cost(r) for r in records)
            self._spent_before = self._spent
            latest = max(records, key=lambda r: id_number(r.id), default=None)
            if latest is not None and not self._hints:
                self._hints = list(latest.hints)

    @property
    def spent(self) -> float:
        """Every dollar the session's agent calls have cost, this run's included."""
        with self._cond:
            return self._spent

    def account(self, usd: float) -> None:
        """Dollars the agent spent (a proposal, a summary)."""
        if not usd:
            return
        with self._cond:
            self._spent += usd
            spent, cap = self._spent, self._budget
        self._publish(BudgetSpent(spent=spent, cap=cap))

    def push_cap(self, lift: bool = False) -> None:
        """An agent with its own cap gets what is left of the session's budget for this process.
        Without a session cap the agent keeps its own, unless the engineer lifted the cap (`lift`)."""
        if self._budget is None and not lift:
            return
        self._cap_agent(None if self._budget is None else max(0.0, self._budget - self._spent_before))

    def go(self) -> bool:
        """At a checkpoint: Stop when stopping or at the budget cap; True when not paused; else
        False after waiting a moment (the caller applies orders and asks again)."""
        with self._cond:
            if self._stopping:
                raise Stop("stopped")
            if self._budget is not None and self._spent >= self._budget:
                raise Stop("budget")
            if not self._paused:
                return True
            self._cond.wait(0.25)
            return False

    def steer(self, selection: Selection | None) -> Selection | None:
        """The population's selection with the engineer's preferred parent first, if one is
        waiting (used once). A crossover keeps one of its drawn partners as the second parent."""
        with self._cond:
            if selection is None or self._preferred is None:
                return selection
            preferred = self._committed(self._preferred)
            self._preferred = None
        if preferred is None:
            return selection
        others = tuple(p for p in selection.parents if p.id != preferred.id)[: len(selection.parents) - 1]
        return Selection(selection.kind, (preferred, *others),
                         tuple(r for r in selection.inspirations if r.id != preferred.id))

    def review_reason(self, record: CandidateRecord, concerns: Callable[[CandidateRecord], list[str]]) -> str:
        """Why this proposal waits for the engineer ("" when it does not). `concerns` (asked in
        "risky" mode only) says what about it is risky."""
        mode = self._review_mode
        if mode == "auto":
            return ""
        if mode == "review":
            return "review mode: every proposal waits for the engineer"
        return "; ".join(concerns(record))

    def hold(self, record: CandidateRecord, why: str) -> None:
        with self._cond:
            self._held[record.id] = Held(record, why)
        self._publish(AwaitingReview(candidate=record.id, kind=record.kind, parents=record.parents,
                                     source=record.source, design=record.design, rationale=record.rationale, why=why))

    def next_order(self) -> Order | None:
        """The next thing the engineer asked for: re-benchmarks first, then review decisions in
        the order they came (publishing ReviewDecided); None when nothing is queued."""
        while True:
            with self._cond:
                if self._rebenchmarks:
                    return Order(self._rebenchmarks.popleft())
                if not self._decisions:
                    return None
                d = self._decisions.popleft()
                held = self._held.pop(d.candidate, None)
            if held is None:
                continue
            self._publish(ReviewDecided(candidate=d.candidate, decision=d.decision, reason=d.reason))
            record = held.record
            if d.decision is ReviewDecision.REJECT:
                return Order(record, rejected=d.reason or "no reason given")
            if d.decision is ReviewDecision.EDIT:
                assert d.source is not None
                design = design_of({"knobs": record.design.get("knobs", {})}, d.source)
                extra = {**record.extra, "edited_by": "engineer", "edit_reason": d.reason} if d.reason else \
                    {**record.extra, "edited_by": "engineer"}
                return Order(replace(record, source=d.source, design=design,
                                     review=str(Review(ReviewOutcome.EDITED)), extra=extra))
            return Order(replace(record, review=str(Review(ReviewOutcome.ACCEPTED))))

    def settle(self, final: bool, in_flight: Callable[[], bool]) -> list[Held] | None:
        """One step of a drain. When stopping (or `final`) and no decision is queued, the held
        proposals, taken out to be committed as unreviewed; None once nothing is held, queued or
        `in_flight` (when `final`, from then on no steering command is taken); else [] after
        waiting a moment."""
        with self._cond:
            if (final or self._stopping) and not self._decisions and self._held:
                settled = list(self._held.values())
                self._held.clear()
                return settled
            if not in_flight() and not self._held and not self._decisions and not self._rebenchmarks:
                if final:  # under the same lock: no re-benchmark can be queued after this drain
                    self._accepting = False
                return None
            self._cond.wait(0.25)
            return []


class Controls:
    """The engineer's controls and what they read, listed once for the objects a UI or the CLI
    steers through (SearchEngine, the app's LiveSearch): each forwards to the Steering that
    carries it out (`steering`), where it is written."""

    @property
    def steering(self) -> Steering:
        raise NotImplementedError

    def pause(self) -> None:
        self.steering.pause()

    def resume(self) -> None:
        self.steering.resume()

    def stop(self) -> None:
        self.steering.stop()

    def set_review_mode(self, mode: str) -> None:
        self.steering.set_review_mode(mode)

    def add_hint(self, text: str) -> None:
        self.steering.add_hint(text)

    def set_budget(self, usd: float | None) -> None:
        self.steering.set_budget(usd)

    def review(self, candidate_id: str, decision: ReviewDecision | str, reason: str = "",
               source: str | None = None) -> None:
        self.steering.review(candidate_id, decision, reason, source)

    def rebenchmark(self, candidate_id: str) -> str:
        """The id the re-benchmark will be committed under."""
        return self.steering.rebenchmark(candidate_id)

    def prefer_parent(self, candidate_id: str) -> None:
        self.steering.prefer_parent(candidate_id)

    def awaiting_review(self) -> list[CandidateRecord]:
        return self.steering.awaiting_review()

    @property
    def paused(self) -> bool:
        return self.steering.paused

    @property
    def review_mode(self) -> str:
        return self.steering.review_mode

    @property
    def hints(self) -> tuple[str, ...]:
        return self.steering.hints

    @property
    def preferred_parent(self) -> str | None:
        """The candidate prefer_parent() named, until a proposal used it."""
        return self.steering.preferred_parent

    @property
    def running(self) -> bool:
        """True while run() takes steering commands (from its start to its last drain)."""
        return self.steering.running

    @property
    def can_measure(self) -> bool | None:
        """True when the run has a GPU group to verify and time on; False on a machine without
        GPUs (everything stops after compiling); None until run() planned its groups."""
        return self.steering.can_measure
