"""What the search engine tells its watchers (the headless CLI, the TUI): typed, frozen events
on a thread-safe bus that delivers them in order and keeps a bounded history."""

from __future__ import annotations

import itertools
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from cuco_tui.core.bounds import Bounds, Work
from cuco_tui.core.ending import end_state
from cuco_tui.core.records import CandidateRecord, ReviewDecision

if TYPE_CHECKING:
    from cuco_tui.search.summary import SearchSummary


@dataclass(frozen=True, kw_only=True)
class Event:
    at: float = field(default_factory=time.time)

    @property
    def name(self) -> str:
        return type(self).__name__


@dataclass(frozen=True, kw_only=True)
class SearchStarted(Event):
    session: str  # the session folder
    workload: str
    agent: str
    resumed: bool
    start_generation: int
    generations: int
    islands: int
    gpu_groups: tuple[tuple[int, ...], ...]
    can_measure: bool  # evaluations are verified and timed on GPUs (not only compiled)
    review_mode: str
    budget_usd: float | None
    executor: str = ""  # where evaluations run when not on this machine's GPU groups ("Slurm (...)")
    hints_unread: str = ""  # "" when the agent reads hints, else why a hint would change nothing (one line)
    evaluations: int | None = None  # the session's total of candidates to evaluate (SearchConfig.evaluations)


@dataclass(frozen=True, kw_only=True)
class SessionRestored(Event):
    """A resumed search's earlier candidates (with their sources), as the lineage holds them, and
    the best among them: what a watcher that joins now needs to show the whole session."""

    records: tuple[CandidateRecord, ...]
    best: CandidateRecord | None
    # Evaluations the last run started and never committed (it was killed, or its commit
    # failed): their ids are not used again, their sources stay in the session's scratch/.
    lost: tuple[str, ...] = ()
    next_id: str = ""  # the id the resumed search's next candidate gets


@dataclass(frozen=True, kw_only=True)
class GenerationStarted(Event):
    generation: int
    phase: str  # "init" | "explore" | "exploit"


@dataclass(frozen=True, kw_only=True)
class ProposalReady(Event):
    candidate: str
    generation: int
    island: int
    kind: str
    parents: tuple[str, ...]
    design: dict[str, Any]
    rationale: str
    agent: str
    cost_usd: float = 0.0


@dataclass(frozen=True, kw_only=True)
class AwaitingReview(Event):
    candidate: str
    kind: str
    parents: tuple[str, ...]
    source: str
    design: dict[str, Any]
    rationale: str
    why: str  # why it is held: "review mode" or what makes it risky


@dataclass(frozen=True, kw_only=True)
class ReviewDecided(Event):
    candidate: str
    decision: ReviewDecision
    reason: str = ""


@dataclass(frozen=True, kw_only=True)
class StageStarted(Event):
    candidate: str
    level: int  # cuco_tui.core.result.Level
    gpus: tuple[int, ...] = ()
    message: str = ""


@dataclass(frozen=True, kw_only=True)
class BuildQueued(Event):
    """A candidate's compile ahead waits for a CPU builder (toolchain.BuildPool). `queued`: the
    builds waiting now, this one included. A BuildStarted for it follows, at once when a builder
    is free."""

    candidate: str
    queued: int


@dataclass(frozen=True, kw_only=True)
class BuildStarted(Event):
    """A builder took the candidate's compile: it began at `at`. `queued`: the builds still
    waiting for a builder. It ends with the candidate's StageFinished at level 1 (compile)."""

    candidate: str
    queued: int


@dataclass(frozen=True, kw_only=True)
class StageFinished(Event):
    candidate: str
    level: int
    status: str = ""  # the candidate's status when this was its last stage; "" when it went on
    seconds: float = 0.0


@dataclass(frozen=True, kw_only=True)
class JobChanged(Event):
    """An evaluation's cluster job (the Slurm executor) changed state: "pending" (Slurm's reason,
    e.g. Resources), "running" (on `nodes`), "finished" (Slurm's end state as the reason),
    "lost" (its node failed, it was preempted or cancelled from outside: the reason says which;
    the proposal runs again as a new job) or "cancelled" (by the search: it stopped, or the job
    was left over by an earlier run of the session). `job` is "" when none was submitted."""

    candidate: str
    job: str
    state: str
    reason: str = ""
    nodes: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class CandidateCommitted(Event):
    record: CandidateRecord
    sha: str


@dataclass(frozen=True, kw_only=True)
class BestImproved(Event):
    record: CandidateRecord
    previous: str | None  # the former best's id
    previous_speedup: float | None


@dataclass(frozen=True, kw_only=True)
class BudgetSpent(Event):
    spent: float
    cap: float | None


@dataclass(frozen=True, kw_only=True)
class HintAdded(Event):
    text: str


@dataclass(frozen=True, kw_only=True)
class Paused(Event):
    pass


@dataclass(frozen=True, kw_only=True)
class Resumed(Event):
    pass


@dataclass(frozen=True, kw_only=True)
class MeasuringBounds(Event):
    """The session's bounds are being measured (once per session, before the seed)."""

    gpus: tuple[int, ...]


@dataclass(frozen=True, kw_only=True)
class BoundsKnown(Event):
    """What % of bound, TFLOP/s and GB/s are computed from: the session's bounds (None when not
    measured: `why` says why) and the work of each bench shape (empty when the reference counts none)."""

    bounds: Bounds | None
    work: dict[str, Work]
    why: str = ""


@dataclass(frozen=True, kw_only=True)
class Plateau(Event):
    """The best has not risen for `generations` generations (search/plateau.py)."""

    stage: str  # "warn" | "diversify" | "stop"
    generations: int
    best_speedup: float | None
    message: str


@dataclass(frozen=True, kw_only=True)
class SearchFinished(Event):
    summary: "SearchSummary"
    reason: str  # "done" | "evaluations" | "stopped" | "budget" | "agent exhausted" | "plateau" | "error" | "interrupted"

    @property
    def state(self) -> str:
        """The session's state now: "finished", "exhausted" or "stopped" (core/ending.py)."""
        return end_state(self.reason)


@dataclass(frozen=True, kw_only=True)
class EngineError(Event):
    message: str
    candidate: str = ""


Subscriber = Callable[[Event], None]


class EventBus:
    """Delivers each event to every subscriber, in publication order, on the publishing thread
    (one event at a time across threads). A subscriber that raises stays subscribed; the
    traceback goes to `errors`, and the engine goes on. The history is bounded.

    A subscriber runs on the engine's threads: it should be quick (a UI hands the event to its
    own loop, e.g. Textual's call_from_thread) and may call the engine's controls."""

    def __init__(self, history: int = 2000) -> None:
        self._subscribers: dict[int, Subscriber] = {}
        self._ids = itertools.count()
        self._history: deque[Event] = deque(maxlen=history)
        self._lock = threading.Lock()  # guards subscribers and history
        self._deliver = threading.RLock()  # one delivery at a time, so every subscriber sees one order
        self.errors: deque[str] = deque(maxlen=50)

    def subscribe(self, callback: Subscriber, replay: bool = False) -> Callable[[], None]:
        """Add a subscriber; with replay, it first receives the history. Returns the unsubscribe."""
        with self._deliver:
            with self._lock:
                key = next(self._ids)
                self._subscribers[key] = callback
                past = list(self._history) if replay else []
            for event in past:
                self._call(callback, event)

        def unsubscribe() -> None:
            with self._lock:
                self._subscribers.pop(key, None)

        return unsubscribe

    def publish(self, event: Event) -> None:
        with self._deliver:
            with self._lock:
                self._history.append(event)
                subscribers = list(self._subscribers.values())
            for callback in subscribers:
                self._call(callback, event)

    def _call(self, callback: Subscriber, event: Event) -> None:
        try:
            callback(event)
        except Exception:  # a watcher's bug must not stop the search
            self.errors.append(f"subscriber {callback!r} failed on {event.name}:\n{traceback.format_exc()}")

    def history(self, kind: type[Event] | None = None) -> list[Event]:
        with self._lock:
            events = list(self._history)
        return [e for e in events if kind is None or isinstance(e, kind)]
