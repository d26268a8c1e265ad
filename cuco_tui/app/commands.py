"""Command-palette providers: each screen's actions, by name. A provider lists (name, action)
pairs and runs the action on the screen the palette was opened from."""

from __future__ import annotations

from functools import partial
from typing import Protocol, runtime_checkable

from textual.command import DiscoveryHit, Hit, Hits, Provider

SEARCH_COMMANDS = (
    ("Search: accept the selected proposal", "accept"),
    ("Search: reject the selected proposal", "reject"),
    ("Search: accept every waiting proposal", "accept_all"),
    ("Search: edit the selected proposal in $EDITOR", "edit"),
    ("Search: pause or resume", "toggle_pause"),
    ("Search: cycle the review mode (auto, review, risky)", "cycle_review_mode"),
    ("Search: give the agent a hint", "hint"),
    ("Search: set the budget in dollars", "budget"),
    ("Search: open a committed candidate", "open_candidate"),
    ("Search: stop", "stop"),
)

CANDIDATE_COMMANDS = (
    ("Candidate: re-benchmark (a new candidate, this one its parent)", "rebenchmark"),
    ("Candidate: make it the parent of the next proposal", "make_parent"),
    ("Candidate: export its .cu, result.json and rationale", "export"),
    ("Candidate: next tab", "next_tab"),
    ("Candidate: previous tab", "previous_tab"),
)

LINEAGE_COMMANDS = (
    ("Lineage: open the highlighted candidate", "open_candidate"),
    ("Lineage: go to a candidate id", "jump"),
    ("Lineage: compare two candidates", "compare"),
    ("Lineage: clear the filters", "clear_filters"),
)


@runtime_checkable
class ExplainsDisabled(Protocol):
    """A screen that turns some of its actions off says why (CandidateScreen)."""

    def explain_disabled(self, action: str) -> bool:
        """Notify why `action` cannot run now; True when it cannot."""
        ...


class _ScreenCommands(Provider):
    COMMANDS: tuple[tuple[str, str], ...] = ()

    async def discover(self) -> Hits:
        for name, action in self.COMMANDS:
            yield DiscoveryHit(name, partial(self._run, action))

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, action in self.COMMANDS:
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), partial(self._run, action))

    async def _run(self, action: str) -> None:
        # Through the screen's own check: an action it has turned off says why, not nothing.
        screen = self.screen
        if isinstance(screen, ExplainsDisabled) and screen.explain_disabled(action):
            return
        await self.screen.run_action(action)


class SearchCommands(_ScreenCommands):
    COMMANDS = SEARCH_COMMANDS


class CandidateCommands(_ScreenCommands):
    COMMANDS = CANDIDATE_COMMANDS


class LineageCommands(_ScreenCommands):
    COMMANDS = LINEAGE_COMMANDS
