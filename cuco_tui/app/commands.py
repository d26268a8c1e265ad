"""Command-palette providers: the dashboard's steering, by name."""

from __future__ import annotations

from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider

SEARCH_COMMANDS = (
    ("Search: accept the selected proposal", "accept"),
    ("Search: reject the selected proposal", "reject"),
    ("Search: accept every waiting proposal", "accept_all"),
    ("Search: pause or resume", "toggle_pause"),
    ("Search: cycle the review mode (auto, review, risky)", "cycle_review_mode"),
    ("Search: give the agent a hint", "hint"),
    ("Search: stop", "stop"),
)


class SearchCommands(Provider):
    async def discover(self) -> Hits:
        for name, action in SEARCH_COMMANDS:
            yield DiscoveryHit(name, partial(self._run, action))

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, action in SEARCH_COMMANDS:
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(name), partial(self._run, action))

    async def _run(self, action: str) -> None:
        await self.screen.run_action(action)
