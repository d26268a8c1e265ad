"""The evaluate screen: a workload's candidates on the left, the selected one's last result on
the right; `r` runs the selected candidate through the cascade, `R` all of them, one after
another; `o` or Enter opens its source (keys mean the same on every screen: README, "Keys").

Evaluations run in a thread worker that drains a queue, so a GPU group is never shared by two
candidates and the event loop never waits on nvcc or a GPU. Progress comes back as messages."""

from __future__ import annotations

import threading
import traceback
from collections import deque
from pathlib import Path
from typing import Callable

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import ModalScreen, Screen
from textual.widgets import Header, Label, TextArea
from textual.worker import get_current_worker

from cuco_tui.app.commands import EvaluateCommands
from cuco_tui.app.messages import (
    CandidateHighlighted,
    CandidateState,
    EvaluationFailed,
    EvaluationFinished,
    EvaluationProgress,
)
from cuco_tui.app.widgets.candidate_list import CandidateList
from cuco_tui.app.widgets.gpu_banner import GpuBanner
from cuco_tui.app.widgets.result_view import ResultView, Shown
from cuco_tui.app.widgets.key_bar import KeyBar
from cuco_tui.core.result import CascadeResult
from cuco_tui.core.workload import Workload

# evaluate(candidate, workload, options, progress=callback) -> CascadeResult
EvaluateFn = Callable[..., CascadeResult]

NO_GPU_BANNER = ("candidates are compiled (L0 + L1) but not run; verification (L2) and timing (L3) need a machine "
                 "with NVIDIA GPUs.")


def candidate_files(workload: Workload) -> list[Path]:
    """The workload's candidates, then the deliberately broken ones under `faults/`."""
    files = list(workload.candidates())
    faults = workload.root / "faults"
    if faults.is_dir():
        files += sorted(p.resolve() for p in faults.glob("*.cu"))
    return list(dict.fromkeys(files))  # in order, each once


class EvaluateScreen(Screen):
    BINDINGS = [
        Binding("r", "evaluate_selected", "Run"),
        Binding("R", "evaluate_all", "Run all"),
        Binding("o", "view_source", "Open source"),
        # Before the focused list's own Enter (its Selected, which a mouse click sends too: a click
        # only highlights).
        Binding("enter", "view_source", "Open source", show=False, priority=True),
    ]
    COMMANDS = {EvaluateCommands}

    def __init__(self, workload: Workload, gpus: list[int] | None, evaluate_fn: EvaluateFn) -> None:
        super().__init__()
        self._workload = workload
        self._gpus = gpus
        self._evaluate_fn = evaluate_fn
        self._paths = candidate_files(workload)
        self._results: dict[Path, CascadeResult] = {}
        self._notes: dict[Path, str] = {}
        self._queue: deque[Path] = deque()
        self._lock = threading.Lock()
        self._draining = False
        # Set before the Header mounts: a title changed in on_mount reaches the Header through a
        # watcher queued for later, which fails if the screen is already gone by then.
        self.sub_title = f"{self._workload.title} ({self._workload.name})"

    def compose(self) -> ComposeResult:
        yield Header()
        yield GpuBanner(NO_GPU_BANNER, id="no-gpu-banner")
        with Horizontal(id="evaluate-body"):
            yield CandidateList(self._paths, self._workload.root, id="candidates")
            yield ResultView(id="result")
        yield KeyBar()

    def on_mount(self) -> None:
        self._show(self._paths[0] if self._paths else None)

    # --- actions ----------------------------------------------------------------------------

    def action_evaluate_selected(self) -> None:
        path = self.query_one(CandidateList).highlighted
        if path is not None:
            self.enqueue([path])

    def action_evaluate_all(self) -> None:
        self.enqueue(self._paths)

    def action_view_source(self) -> None:
        path = self.query_one(CandidateList).highlighted
        if path is not None:
            self.app.push_screen(SourceScreen(path, self.query_one(CandidateList).label_of(path)))

    def enqueue(self, paths: list[Path]) -> None:
        """Queue `paths` for evaluation (those already queued or running are skipped)."""
        candidates = self.query_one(CandidateList)
        fresh = [p for p in paths if not candidates.state_of(p).busy]
        if not fresh:
            self.notify("already queued or being evaluated", severity="warning")
            return
        for p in fresh:
            candidates.set_state(p, CandidateState.QUEUED, self._status_of(p))
        with self._lock:
            self._queue.extend(fresh)
            start = not self._draining
            self._draining = True
        if start:
            self._drain_queue()
        self._refresh_if_shown(fresh)

    @work(thread=True, exclusive=False, group="evaluate", name="evaluate candidates")
    def _drain_queue(self) -> None:
        worker = get_current_worker()
        while True:
            with self._lock:
                if not self._queue or worker.is_cancelled:
                    self._draining = False
                    return
                path = self._queue.popleft()
            self._evaluate_one(path)

    def _evaluate_one(self, path: Path) -> None:
        """Runs in the worker thread."""

        def progress(p) -> None:
            self.post_message(EvaluationProgress(path, CandidateState.of_level(p.level), p.message))

        self.post_message(EvaluationProgress(path, CandidateState.STATIC, "starting"))
        try:
            from cuco_tui.evaluate.cascade import EvalOptions  # the engine's public API

            result = self._evaluate_fn(path, self._workload, EvalOptions(gpus=self._gpus), progress=progress)
        except Exception as exc:  # shown on the candidate; the traceback goes to the Textual log
            self.app.log.error(traceback.format_exc())
            self.post_message(EvaluationFailed(path, f"the evaluation raised {type(exc).__name__}: {exc}"))
            return
        self.post_message(EvaluationFinished(path, result))

    # --- messages -----------------------------------------------------------------------------

    def on_candidate_highlighted(self, message: CandidateHighlighted) -> None:
        self._show(message.path)

    def on_evaluation_progress(self, message: EvaluationProgress) -> None:
        self.query_one(CandidateList).set_state(message.path, message.state, self._status_of(message.path))
        self._refresh_if_shown([message.path])

    def on_evaluation_finished(self, message: EvaluationFinished) -> None:
        self._results[message.path] = message.result
        self._notes.pop(message.path, None)
        self.query_one(CandidateList).set_state(message.path, CandidateState.DONE, message.result.status)
        self._refresh_if_shown([message.path])

    def on_evaluation_failed(self, message: EvaluationFailed) -> None:
        self._notes[message.path] = message.error
        self.query_one(CandidateList).set_state(message.path, CandidateState.FAILED)
        self._refresh_if_shown([message.path])
        self.notify(message.error, title="evaluation failed", severity="error")

    # --- drawing ------------------------------------------------------------------------------

    def _status_of(self, path: Path):
        result = self._results.get(path)
        return result.status if result is not None else None

    def _refresh_if_shown(self, paths: list[Path]) -> None:
        current = self.query_one(CandidateList).highlighted
        if current in paths:
            self._show(current)

    def _show(self, path: Path | None) -> None:
        view = self.query_one(ResultView)
        if path is None:
            view.show(None)
            return
        candidates = self.query_one(CandidateList)
        view.show(Shown(path=path, label=candidates.label_of(path), state=candidates.state_of(path),
                        result=self._results.get(path), note=self._notes.get(path, "")))


class SourceScreen(ModalScreen[None]):
    """A candidate's source, read-only, with CUDA/C++ highlighting where Textual has it."""

    BINDINGS = [Binding("escape", "close", "Close")]

    def __init__(self, path: Path, label: str) -> None:
        super().__init__()
        self._path = path
        self._label = label

    def compose(self) -> ComposeResult:
        try:
            text = self._path.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            text = f"// cannot read {self._path}: {exc}"
        area = TextArea.code_editor(text, read_only=True, id="source")
        for language in ("cuda", "cpp", "c"):
            if language in area.available_languages:
                area.language = language
                break
        yield Label(f"{self._label}  (read-only; esc closes)", id="source-title", classes="panel-title")
        yield area
        yield KeyBar()

    def action_close(self) -> None:
        self.dismiss(None)
