"""The diff of two candidates' candidate.cu, highlighted as a unified diff."""

from __future__ import annotations

from rich.syntax import Syntax
from textual.containers import VerticalScroll
from textual.widgets import Static


class CandidateDiff(VerticalScroll):
    DEFAULT_CSS = """
    CandidateDiff {
        height: 1fr;
    }
    """

    def compose(self):
        yield Static("computing the diff…", id="diff-body")

    def show(self, diff: str, a_id: str, b_id: str) -> None:
        body = self.query_one("#diff-body", Static)
        if not diff:
            body.update(f"{a_id} and {b_id} have the same candidate.cu")
            return
        body.update(Syntax(diff, "diff", theme="ansi_dark", line_numbers=False, word_wrap=False))
