"""The proposals waiting for the engineer: a list on top, the selected one below with its
rationale, design coordinates and unified diff against its parent (its lines wrap, and what
changed within a line is marked, so a change at the end of a long line is seen at any width). The dashboard hands it the
proposals of its state (show); the queue keeps the rows, the selection and the details.
`compact` (a small terminal) shortens the details to a few lines, so the diff stays in view."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.reactive import reactive
from textual.widgets import Label, ListItem, ListView, Static

from cuco_tui.app.search_state import PendingProposal
from cuco_tui.app.widgets.diff_text import diff_content


class ProposalRow(ListItem):
    def __init__(self, proposal: PendingProposal, **kwargs) -> None:
        super().__init__(**kwargs)
        self.proposal = proposal

    def compose(self) -> ComposeResult:
        p = self.proposal
        first = (p.rationale.strip().splitlines() or [""])[0]
        parents = ",".join(p.parents) or "-"
        yield Label(Content.assemble((f"{p.candidate} ", "bold"), (f"{p.kind} from {parents}  ", "$text-muted"),
                                     first), classes="proposal-line")


class ProposalQueue(Vertical):
    shown: str | None = None  # the candidate whose details are drawn below the list
    compact: reactive[bool] = reactive(False)

    def compose(self) -> ComposeResult:
        yield Label("Proposals to review (y accept · n reject · e edit · a accept all)", classes="panel-title",
                    id="proposal-title")
        yield ListView(id="proposal-list")
        with VerticalScroll(id="proposal-detail"):
            yield Static("No proposal is waiting.", id="proposal-head")
            yield Static("", id="proposal-diff")

    # --- what the screen calls ------------------------------------------------------------------

    @property
    def ids(self) -> list[str]:
        return [row.proposal.candidate for row in self.query(ProposalRow)]

    @property
    def selected(self) -> str | None:
        item = self.query_one(ListView).highlighted_child
        if isinstance(item, ProposalRow):
            return item.proposal.candidate
        ids = self.ids
        return ids[0] if ids else None

    def proposal(self, candidate: str) -> PendingProposal | None:
        return next((r.proposal for r in self.query(ProposalRow) if r.proposal.candidate == candidate), None)

    async def show(self, proposals: tuple[PendingProposal, ...]) -> None:
        """Rows for exactly `proposals`: the decided ones go, new ones join at the end, and the
        selection keeps its place."""
        wanted = {p.candidate for p in proposals}
        for cid in self.ids:
            if cid not in wanted:
                await self._discard(cid)
        for proposal in proposals:
            await self._add(proposal)

    async def _add(self, proposal: PendingProposal) -> None:
        if proposal.candidate in self.ids:
            return
        view = self.query_one(ListView)
        await view.append(ProposalRow(proposal, id=f"proposal-{proposal.candidate}"))
        if view.index is None:
            view.index = 0
        self._show_selected()

    async def _discard(self, candidate: str) -> None:
        rows = [r for r in self.query(ProposalRow) if r.proposal.candidate == candidate]
        if not rows:
            return
        view = self.query_one(ListView)
        index = view.index
        await rows[0].remove()
        count = len(self.ids)
        view.index = None if count == 0 else min(index or 0, count - 1)
        self._show_selected()

    # --- drawing --------------------------------------------------------------------------------

    def watch_compact(self, compact: bool) -> None:
        if self.is_mounted:
            self._show_selected()

    def on_list_view_highlighted(self, event: ListView.Highlighted) -> None:
        event.stop()
        self._show_selected()

    def _show_selected(self) -> None:
        cid = self.selected
        p = self.proposal(cid) if cid else None
        head = self.query_one("#proposal-head", Static)
        diff = self.query_one("#proposal-diff", Static)
        self.shown = p.candidate if p is not None else None
        if p is None:
            head.update("No proposal is waiting.")
            diff.update("")
            return
        head.update(render_compact_head(p) if self.compact else render_head(p))
        if p.diff:
            diff.update(diff_content(p.diff))  # wrapped, the changed characters marked
        else:
            diff.update(Content.styled("(the same code as its parent)", "$text-muted"))


def render_head(p: PendingProposal) -> Content:
    design = {k: v for k, v in p.design.items() if k != "knobs"}
    coords = " ".join(f"{k}={v}" for k, v in design.items()) or "-"
    knobs = " ".join(f"{k}={v}" for k, v in (p.design.get("knobs") or {}).items()) or "-"
    rows = [("candidate", f"{p.candidate} ({p.kind}) from {','.join(p.parents) or '-'}"), ("held", p.why),
            ("design", coords), ("knobs", knobs)]
    parts: list = []
    for name, value in rows:
        parts.append((f"{name:<10}", "$text-muted"))
        parts.append(value + "\n")
    parts.append(("rationale\n", "bold"))
    parts.append(p.rationale.strip() + "\n")
    return Content.assemble(*parts)


def render_compact_head(p: PendingProposal) -> Content:
    """The design and knobs only: the list row above says who, from which parent and why, so
    the diff below starts within a few lines."""
    design = {k: v for k, v in p.design.items() if k != "knobs"}
    knobs = " ".join(f"{k}={v}" for k, v in (p.design.get("knobs") or {}).items())
    return Content.assemble(("design ", "$text-muted"),
                            " ".join(f"{k}={v}" for k, v in design.items()) + (f" · {knobs}" if knobs else ""))
