"""The cuco-tui application: opens a workload on the evaluate screen."""

from __future__ import annotations

from textual.app import App
from textual.binding import Binding

from cuco_tui.app.screens.evaluate import EvaluateFn, EvaluateScreen
from cuco_tui.evaluate.result import CascadeResult
from cuco_tui.workload.manifest import load_workload


def _cascade_evaluate(*args, **kwargs) -> CascadeResult:
    """The real evaluation cascade, imported when first used."""
    from cuco_tui.evaluate.cascade import evaluate

    return evaluate(*args, **kwargs)


class CucoApp(App):
    """`workload_name`: a folder under workloads/ or a path to one (raises WorkloadError with a
    sentence if it cannot be loaded); `gpus`: the GPU group to run on (None: the cascade picks);
    `evaluate_fn`: called as evaluate_fn(candidate, workload, EvalOptions, progress=callback)."""

    CSS_PATH = "cuco.tcss"
    TITLE = "cuco"
    BINDINGS = [Binding("q", "quit", "Quit")]

    def __init__(
        self,
        workload_name: str = "gemm_allgather",
        gpus: list[int] | None = None,
        evaluate_fn: EvaluateFn | None = None,
    ) -> None:
        super().__init__()
        self.workload = load_workload(workload_name)
        self.gpus = list(gpus) if gpus else None
        self.evaluate_fn = evaluate_fn or _cascade_evaluate

    def get_default_screen(self) -> EvaluateScreen:
        return EvaluateScreen(self.workload, self.gpus, self.evaluate_fn)
