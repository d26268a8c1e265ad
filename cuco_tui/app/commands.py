"""Command-palette providers: each screen's actions, by name, and the candidates a screen can
go to. A provider lists (name, action) pairs and runs the action on the screen the palette was
opened from; a screen that lists candidates (ListsCandidates) also gets one "Open candidate ..."
entry per candidate. The app's own actions (quit, browse, lineage, search, evaluate) are its
system commands (CucoApp.get_system_commands). Every key of every screen has an entry here or
there (tests/app/test_keys.py checks it)."""

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
    ("Search: open the highlighted candidate (else the best)", "open_candidate"),
    ("Search: go to a candidate id on the leaderboard", "jump"),
    ("Search: profile the highlighted candidate at a bench shape (GPU; the search paused)", "profile"),
    ("Search: stop (asks first; waiting proposals are kept as unreviewed)", "stop"),
)

CANDIDATE_COMMANDS = (
    ("Candidate: re-benchmark (a new candidate, this one its parent)", "rebenchmark"),
    ("Candidate: use it as the parent of the next proposal", "make_parent"),
    ("Candidate: export its .cu, result.json and rationale", "export"),
    ("Candidate: profile it at a bench shape (GPU): exposed communication, a trace", "profile"),
    ("Candidate: next tab", "next_tab"),
    ("Candidate: previous tab", "previous_tab"),
    ("Candidate: back", "back"),
)

LINEAGE_COMMANDS = (
    ("Lineage: open the highlighted candidate", "open_candidate"),
    ("Lineage: go to a candidate id", "jump"),
    ("Lineage: compare two candidates (mark one, then the other)", "compare"),
    ("Lineage: export the highlighted candidate", "export"),
    ("Lineage: profile the highlighted candidate at a bench shape (GPU)", "profile"),
    ("Lineage: filter by island (cycle)", "cycle_island"),
    ("Lineage: filter by status (cycle)", "cycle_status"),
    ("Lineage: filter by backend (cycle)", "cycle_backend"),
    ("Lineage: clear the filters", "clear_filters"),
    ("Lineage: back", "back"),
)

EVALUATE_COMMANDS = (
    ("Evaluate: run the selected candidate through the cascade", "evaluate_selected"),
    ("Evaluate: run every candidate, one after another", "evaluate_all"),
    ("Evaluate: open the selected candidate's source", "view_source"),
)

COMPARE_COMMANDS = (("Compare: back", "back"),)


@runtime_checkable
class ExplainsDisabled(Protocol):
    """A screen that turns some of its actions off says why (CandidateScreen)."""

    def explain_disabled(self, action: str) -> bool:
        """Notify why `action` cannot run now; True when it cannot."""
        ...


@runtime_checkable
class ListsCandidates(Protocol):
    """A screen whose candidates the palette can go to (the dashboard, the lineage)."""

    def candidate_choices(self) -> list[tuple[str, str]]:
        """(label, candidate id), in the screen's order."""
        ...

    def go_to_candidate(self, candidate_id: str) -> None: ...


class _ScreenCommands(Provider):
    COMMANDS: tuple[tuple[str, str], ...] = ()

    def _candidates(self) -> list[tuple[str, str]]:
        screen = self.screen
        return screen.candidate_choices() if isinstance(screen, ListsCandidates) else []

    async def discover(self) -> Hits:
        for name, action in self.COMMANDS:
            yield DiscoveryHit(name, partial(self._run, action))

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, action in self.COMMANDS:
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), partial(self._run, action))
        for name, cid in self._candidates():
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), partial(self._go, cid))

    async def _run(self, action: str) -> None:
        # Through the screen's own check: an action it has turned off says why, not nothing.
        screen = self.screen
        if isinstance(screen, ExplainsDisabled) and screen.explain_disabled(action):
            return
        await self.screen.run_action(action)

    def _go(self, candidate_id: str) -> None:
        screen = self.screen
        if isinstance(screen, ListsCandidates):
            screen.go_to_candidate(candidate_id)


class SearchCommands(_ScreenCommands):
    COMMANDS = SEARCH_COMMANDS


class CandidateCommands(_ScreenCommands):
    COMMANDS = CANDIDATE_COMMANDS


class LineageCommands(_ScreenCommands):
    COMMANDS = LINEAGE_COMMANDS


class EvaluateCommands(_ScreenCommands):
    COMMANDS = EVALUATE_COMMANDS


class CompareCommands(_ScreenCommands):
    COMMANDS = COMPARE_COMMANDS
