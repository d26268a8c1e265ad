"""Plateau handling: a search that stops improving warns, then diversifies, then stops.

`PlateauWatch` counts the generations since the best measured speedup last rose beyond noise
(core/noise.py: its band wholly above the last gain's) and by more than `plateau_margin` (a
fraction): a re-measure that came out a few percent higher is no gain. After `plateau_warn`
such generations it warns; after `plateau_diversify` the engine diversifies (every island
explores again, whatever the schedule says, and the islands exchange their best at once);
after `plateau_stop` the search stops with reason "plateau". A gain resets all three. 0 turns a stage off. Nothing is counted
before the first measured candidate: without a GPU nothing is measured, and a search that
cannot measure cannot tell a plateau. Plain data: rebuilt from the lineage on resume."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from cuco_tui.core.noise import Band, exceeds, record_speedup
from cuco_tui.core.records import CandidateRecord, id_number
from cuco_tui.core.ranking import is_better
from cuco_tui.search.config import SearchConfig

WARN, DIVERSIFY, STOP = "warn", "diversify", "stop"


@dataclass
class PlateauWatch:
    warn: int = 3
    diversify: int = 4
    stop: int = 8
    margin: float = 0.01
    gain_generation: int | None = None  # when the best last rose beyond noise and by more than the margin
    gain: Band | None = None  # the best then, with its band
    warned: bool = False
    diversified: bool = False
    resumed_at: int | None = None  # the last generation of the run a resume continues

    @classmethod
    def of(cls, config: SearchConfig) -> "PlateauWatch":
        return cls(config.plateau_warn, config.plateau_diversify, config.plateau_stop, config.plateau_margin)

    @property
    def gain_speedup(self) -> float | None:
        return self.gain.value if self.gain is not None else None

    def is_gain(self, speedup: Band) -> bool:
        """The first measurement, or above the last gain beyond noise and by more than the margin."""
        if self.gain is None:
            return True
        return exceeds(speedup, self.gain) and speedup.value > self.gain.value * (1.0 + self.margin)

    def best_measured(self, speedup: Band, generation: int) -> bool:
        """A new best was measured in `generation`; True when it counts as a gain (is_gain),
        which resets the stages."""
        if not self.is_gain(speedup):
            return False
        self.gain_generation, self.gain = generation, speedup
        self.warned = self.diversified = False
        self.resumed_at = None
        return True

    def restore(self, records: Iterable[CandidateRecord]) -> None:
        """The gains as the live search saw them, from the lineage's ranking view of its records
        (a finalist's withheld figure does not count; its confirmation does), each new best
        decided as the population decides it (core/ranking.is_better)."""
        best: CandidateRecord | None = None
        for r in sorted(records, key=lambda r: id_number(r.id)):
            speedup = record_speedup(r)
            if r.status == "measured" and speedup is not None and is_better(r, best):
                best = r
                self.best_measured(speedup, r.generation)
        last = max((r.generation for r in records), default=0) if self.gain_generation is not None else 0
        stale = self.stale(last)
        self.warned = bool(self.warn) and stale >= self.warn
        self.diversified = bool(self.diversify) and stale >= self.diversify
        # The engineer who resumes asks for more: the run keeps its diversified state but gets
        # the whole patience again before it stops.
        self.resumed_at = last if self.gain_generation is not None else None

    def stale(self, generation: int) -> int:
        """Generations finished since the last gain (0 before any measurement)."""
        return 0 if self.gain_generation is None else max(0, generation - self.gain_generation)

    def would_stop(self, generation: int) -> bool:
        """Whether `after(generation)` would say STOP (nothing changes)."""
        stale = self.stale(generation)
        since_resume = generation - self.resumed_at if self.resumed_at is not None else stale
        return bool(stale) and bool(self.stop) and min(stale, since_resume) >= self.stop

    def after(self, generation: int) -> str | None:
        """At the end of `generation`: the stage it newly reaches (STOP, DIVERSIFY, WARN), or None."""
        stale = self.stale(generation)
        if not stale:
            return None
        if self.would_stop(generation):
            return STOP
        if self.diversify and stale >= self.diversify and not self.diversified:
            self.diversified = self.warned = True
            return DIVERSIFY
        if self.warn and stale >= self.warn and not self.warned:
            self.warned = True
            return WARN
        return None

    def message(self, stage: str, generation: int) -> str:
        stale = self.stale(generation)
        best = self.gain.label() if self.gain is not None else "-"
        beyond = "beyond its noise and " if self.gain is not None and self.gain.spread > 0 else ""
        since = (f"no gain above {best} ({beyond}by more than {self.margin:.0%}) for {stale} generation"
                 f"{'' if stale == 1 else 's'}")
        if stage == WARN:
            nxt = f"; diversifying after {self.diversify}" if self.diversify else ""
            return f"plateau: {since}{nxt}"
        if stage == DIVERSIFY:
            end = f"; stopping after {self.stop} without a gain" if self.stop else ""
            return f"plateau: {since}: diversifying (every island explores, the islands exchange their best){end}"
        return f"plateau: {since}: stopping (plateau_stop={self.stop})"
