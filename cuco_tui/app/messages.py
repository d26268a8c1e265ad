"""Messages the app's widgets and workers exchange, and the per-candidate state they carry."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

from textual.message import Message

from cuco_tui.app.profile_run import ProfileEnded, ProfileRequest
from cuco_tui.core.result import CascadeResult, Level, Status


class CandidateState(str, Enum):
    """Where a candidate is in its evaluation, as the candidate list shows it."""

    IDLE = ""
    QUEUED = "queued"
    STATIC = "L0"
    COMPILING = "compiling"
    VERIFYING = "verifying"
    BENCHMARKING = "benchmarking"
    DONE = "done"
    FAILED = "failed"  # the evaluation itself raised: a bug of ours, not a candidate status

    @classmethod
    def of_level(cls, level: Level) -> "CandidateState":
        return {
            Level.STATIC: cls.STATIC,
            Level.COMPILE: cls.COMPILING,
            Level.VERIFY: cls.VERIFYING,
            Level.BENCHMARK: cls.BENCHMARKING,
        }[Level(level)]

    @property
    def busy(self) -> bool:
        return self in (CandidateState.QUEUED, CandidateState.STATIC, CandidateState.COMPILING,
                        CandidateState.VERIFYING, CandidateState.BENCHMARKING)


class CandidateHighlighted(Message):
    """The cursor of the candidate list moved onto `path`."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path


class EvaluationProgress(Message):
    """A worker reports that `path` entered `state` (`detail`: the cascade's own words)."""

    def __init__(self, path: Path, state: CandidateState, detail: str = "") -> None:
        super().__init__()
        self.path = path
        self.state = state
        self.detail = detail


class EvaluationFinished(Message):
    """A worker finished evaluating `path`."""

    def __init__(self, path: Path, result: CascadeResult) -> None:
        super().__init__()
        self.path = path
        self.result = result


class EvaluationFailed(Message):
    """Evaluating `path` raised instead of returning a result."""

    def __init__(self, path: Path, error: str) -> None:
        super().__init__()
        self.path = path
        self.error = error


def status_tone(status: Status) -> str:
    """The CSS class a status is drawn with: `-ok` measured or verified (correct, not timed),
    `-warn` compiled only, `-bad` failed."""
    if status in (Status.MEASURED, Status.VERIFIED):
        return "-ok"
    if status is Status.NO_GPU:
        return "-warn"
    return "-bad"


class SearchEvent(Message):
    """The search engine published `event` (a cuco_tui.search.events.Event); posted from the
    engine's threads, handled on the event loop."""

    def __init__(self, event) -> None:
        super().__init__()
        self.event = event


class SearchCrashed(Message):
    """Starting or running the search raised (`error`: a sentence for the engineer)."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class ProfileStarted(Message):
    """A profile the app runs (app/profiles.py) started."""

    def __init__(self, request: ProfileRequest) -> None:
        super().__init__()
        self.request = request


class ProfileFinished(Message):
    """A profile the app ran ended; when it went well, the profile is kept with the candidate in
    its session, for a screen showing it to read again."""

    def __init__(self, ended: ProfileEnded) -> None:
        super().__init__()
        self.ended = ended
