"""The candidate's sections as tabs: one pane per section with content, each a scroll view of
Statics. Prose (a message, a summary, a note) wraps at the pane's width; code, tables and logs
scroll sideways rather than wrapping or squeezing (a wide part is as wide as its content,
measured once)."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import ScrollableContainer, Vertical
from textual.content import Content
from textual.widgets import Static, TabbedContent, TabPane

from cuco_tui.app.widgets.candidate.model import CandidateView
from cuco_tui.app.widgets.candidate.sections import Joined, Section, Verbatim, first_section, sections
from cuco_tui.app.widgets.measure import natural_width


def pane_id(section_id: str) -> str:
    return f"tab-{section_id}"


def part(renderable: Any, wide: bool) -> Static:
    """One Static: prose wraps; in a wide section, tables and code keep their width; Verbatim
    text keeps its lines whole; a Joined part has no blank line under it."""
    classes = "candidate-part"
    if isinstance(renderable, Joined):
        renderable, classes = renderable.part, classes + " -joined"
    if isinstance(renderable, Verbatim):
        return Static(renderable.content, classes=classes + " -wide")
    if isinstance(renderable, (Text, Content, str)):
        return Static(renderable, classes=classes)
    static = Static(renderable, classes=classes + " -wide" if wide else classes)
    width = natural_width(renderable) if wide else None
    if width is not None:
        static.styles.width = width
    return static


class CandidateTabs(Vertical):
    DEFAULT_CSS = """
    CandidateTabs { height: 1fr; }
    CandidateTabs TabbedContent { height: 1fr; }
    CandidateTabs TabPane { padding: 0; height: 1fr; }
    CandidateTabs .candidate-section { height: 1fr; padding: 0 1; }
    CandidateTabs .candidate-part { height: auto; margin-bottom: 1; }
    CandidateTabs .candidate-part.-wide { width: auto; }
    CandidateTabs .candidate-part.-joined { margin-bottom: 0; }
    """

    def __init__(self, view: CandidateView, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.view = view
        self.sections: list[Section] = sections(view)
        self.first = first_section(view, self.sections)

    def compose(self) -> ComposeResult:
        with TabbedContent(initial=pane_id(self.first)):
            for section in self.sections:
                with TabPane(section.title, id=pane_id(section.id)):
                    with ScrollableContainer(classes="candidate-section"):
                        for renderable in section.parts:
                            yield part(renderable, section.wide)

    @property
    def ids(self) -> list[str]:
        return [s.id for s in self.sections]

    @property
    def active(self) -> str:
        """The shown section's id; "" while the tabs are still being mounted (this widget is in
        the DOM a moment before its TabbedContent, and `ready` asks in between)."""
        tabbed = self.query(TabbedContent)
        return tabbed.first().active.removeprefix("tab-") if tabbed else ""

    def show(self, section_id: str) -> bool:
        if section_id not in self.ids:
            return False
        self.query_one(TabbedContent).active = pane_id(section_id)
        return True

    def step(self, by: int) -> None:
        ids = self.ids
        self.show(ids[(ids.index(self.active) + by) % len(ids)])
