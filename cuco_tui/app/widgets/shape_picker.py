"""Which bench shape to profile at, in a small modal: the workload's bench shapes, the first
highlighted; enter (or a click) returns the shape's name, esc returns None and nothing happens."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option

from cuco_tui.core.workload import Shape


class ShapePicker(ModalScreen[str | None]):
    DEFAULT_CSS = """
    ShapePicker { align: center middle; }
    ShapePicker #shape-box {
        width: 76; max-width: 95%; height: auto; max-height: 90%;
        padding: 1 2; border: round $primary; background: $panel;
    }
    ShapePicker #shape-list { height: auto; max-height: 16; margin: 1 0; }
    ShapePicker #shape-help { color: $text-muted; }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, question: str, shapes: tuple[Shape, ...]) -> None:
        super().__init__()
        self.question = question
        self.shapes = shapes

    def compose(self) -> ComposeResult:
        with Vertical(id="shape-box"):
            yield Label(self.question, id="shape-question")
            yield OptionList(*(Option(s.label(), id=s.name) for s in self.shapes), id="shape-list")
            yield Label("enter profiles at the highlighted shape · esc cancels", id="shape-help")

    def on_mount(self) -> None:
        options = self.query_one(OptionList)
        options.highlighted = 0
        options.focus()

    @property
    def choices(self) -> list[str]:
        """The shapes offered, in order."""
        return [s.name for s in self.shapes]

    @property
    def highlighted(self) -> str | None:
        options = self.query_one(OptionList)
        return None if options.highlighted is None else self.shapes[options.highlighted].name

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)
