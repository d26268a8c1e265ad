"""A yes/no question in a small modal: dismisses with True (y or enter) or False (n or esc)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label


class Confirm(ModalScreen[bool]):
    DEFAULT_CSS = """
    Confirm { align: center middle; }
    Confirm #confirm-box {
        width: 76; max-width: 95%; height: auto;
        padding: 1 2; border: round $warning; background: $panel;
    }
    Confirm #confirm-question, Confirm #confirm-detail { width: 1fr; }
    Confirm #confirm-detail { color: $text-muted; margin-top: 1; }
    Confirm #confirm-buttons { height: auto; margin-top: 1; }
    Confirm Button { margin-right: 2; }
    """
    BINDINGS = [
        Binding("y,enter", "answer(True)", "Yes", show=False),
        Binding("n", "answer(False)", "No", show=False),
        Binding("escape", "cancel", "Cancel", show=False),  # esc backs out of a question: the same as no
    ]

    def __init__(self, question: str, detail: str = "", yes: str = "Yes", no: str = "No") -> None:
        super().__init__()
        self.question = question
        self.detail = detail
        self._yes, self._no = yes, no

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box"):
            yield Label(self.question, id="confirm-question")
            if self.detail:
                yield Label(self.detail, id="confirm-detail")
            with Horizontal(id="confirm-buttons"):
                yield Button(f"{self._yes} (y)", variant="warning", id="confirm-yes")
                yield Button(f"{self._no} (n, esc)", id="confirm-no")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "confirm-yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)

    def action_cancel(self) -> None:
        self.dismiss(False)
