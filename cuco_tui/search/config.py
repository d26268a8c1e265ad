"""The search's settings: one frozen dataclass whose defaults make a sensible search."""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from cuco_tui.core.workload import DEFAULT_WORKLOAD

REVIEW_MODES = ("auto", "review", "risky")


class ConfigError(ValueError):
    """A setting that cannot work, with a sentence saying what to change."""


def check_budget(usd: float | None) -> None:
    """A dollar cap (None: no cap). NaN compares false with everything: `usd < 0` alone lets it
    through, and a cap of NaN or infinity never stops the search."""
    if usd is not None and not (math.isfinite(usd) and usd >= 0):
        raise ConfigError(f"the budget is a number of dollars, 0 or more, not {usd}")


def _cpu_count() -> int:
    return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class SearchConfig:
    workload: str = DEFAULT_WORKLOAD
    generations: int = 10  # the session's total: generation 0 is the seed (and the fast path)
    islands: int = 3
    proposals_per_generation: int | None = None  # None: one per island
    explore_share: float = 0.5  # the first share of the generations explores, the rest exploits
    migration_interval: int = 3  # every k generations the best of island i visits island i+1
    meta_interval: int = 2  # every k generations the agent's meta-summary is refreshed
    selection_exponent: float = 1.5  # parent weight = (rank + 1) ** -exponent
    novelty_threshold: float = 0.999  # difflib ratio at or above which a same-design proposal is a near-duplicate
    novelty_retries: int = 2  # extra proposals asked for a slot whose proposal was a duplicate
    inspirations: int = 2  # other good candidates shown with the parent
    budget_usd: float | None = None  # None: no cap (the agent may still have its own)
    review_mode: str = "auto"  # "auto" | "review" (hold every proposal) | "risky" (hold backend changes, L0 warnings)
    gpus: tuple[int, ...] = ()  # (): every GPU this machine has
    world: int | None = None  # ranks per evaluation; None: the workload's smallest world size
    max_concurrent_builds: int = field(default_factory=_cpu_count)
    fast_path: bool = True  # ask for a fast-path candidate while no device-initiated one exists
    fast_path_attempts: int = 2
    # A candidate timed while other evaluations ran on other GPU groups, with a speedup above the
    # best's or within `confirm_margin` (a fraction) below it, is a finalist: it is re-measured
    # alone (kind "confirm") and only that figure can make it the best. Never triggers with one group.
    confirm_alone: bool = True
    confirm_margin: float = 0.02
    # Look-ahead: a generation's proposals are made (and compiled) while each GPU group still runs
    # the last evaluation of the one before, so that no GPU waits through a generation's proposing
    # and compiling (43 % of a search's time on 4 x H100, docs/performance.md, 2026-11-27); the
    # price, that those parents are drawn without the one or two results still running. Off: every
    # generation waits for all of the previous one's results.
    lookahead: bool = True
    # Kept rank workers (harness/kept.py): each GPU group's workers, their CUDA context and NCCL
    # group stay up from one evaluation to the next (2.5 s of an 8.5 s evaluation on 2 x H100
    # went to starting them), unless a run fails or a candidate leaves something behind. On since
    # measured on 2 x H200 (2026-11-27: 1.60 s an evaluation of the seed kept, 4.69 s fresh); off,
    # each evaluation starts its workers afresh.
    keep_workers: bool = True
    # A plateau (search/plateau.py): after this many generations in which the best measured speedup
    # did not rise beyond noise (core/noise.py) and by more than `plateau_margin` (a fraction), the
    # search warns, then diversifies (every island explores again and the islands exchange their
    # best), then stops (reason "plateau"). 0 turns a stage off. Nothing counts until a candidate is measured (a GPU).
    plateau_warn: int = 3
    plateau_diversify: int = 4
    plateau_stop: int = 8
    plateau_margin: float = 0.01
    # Measure the perfect-overlap bounds (% of bound in the TUI) once per session, on a GPU group
    # lent alone before the seed: the reference, its parts alone and the peer bandwidth, about a minute.
    measure_bounds: bool = True
    # The session's total of candidates sent to evaluation (the seed and fast path included; a
    # re-measure of a finalist or an engineer's re-benchmark is the same code again and not
    # counted): once reached, no more proposals are asked, the evaluations in flight finish, and
    # the search ends (reason "evaluations"). None: the generations alone bound it.
    evaluations: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.generations < 0:
            raise ConfigError(f"generations must be 0 or more, not {self.generations}")
        if self.islands < 1:
            raise ConfigError(f"the search needs at least one island, not {self.islands}")
        if self.proposals_per_generation is not None and self.proposals_per_generation < 1:
            raise ConfigError(f"proposals_per_generation must be at least 1, not {self.proposals_per_generation}")
        if not 0.0 <= self.explore_share <= 1.0:
            raise ConfigError(f"explore_share is a share of the generations, between 0 and 1, not {self.explore_share}")
        if self.migration_interval < 1 or self.meta_interval < 1:
            raise ConfigError("migration_interval and meta_interval count generations: use 1 or more")
        if self.selection_exponent < 0:
            raise ConfigError(f"selection_exponent must be 0 (uniform) or more, not {self.selection_exponent}")
        if not 0.0 < self.novelty_threshold <= 1.0:
            raise ConfigError(f"novelty_threshold is a similarity in (0, 1], not {self.novelty_threshold}")
        check_budget(self.budget_usd)
        if self.review_mode not in REVIEW_MODES:
            raise ConfigError(f"review mode {self.review_mode!r} is not one of {', '.join(REVIEW_MODES)}")
        if self.world is not None and self.world < 1:
            raise ConfigError(f"world size must be at least 1, not {self.world}")
        if self.max_concurrent_builds < 1:
            raise ConfigError(f"max_concurrent_builds must be at least 1, not {self.max_concurrent_builds}")
        if not 0.0 <= self.confirm_margin < 1.0:
            raise ConfigError(f"confirm_margin is a fraction of the best speedup, in [0, 1), not {self.confirm_margin}")
        for name in ("plateau_warn", "plateau_diversify", "plateau_stop"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} counts generations without a gain (0: never), not {getattr(self, name)}")
        if not 0.0 <= self.plateau_margin < 1.0:
            raise ConfigError(f"plateau_margin is the fraction a gain must exceed, in [0, 1), not {self.plateau_margin}")
        if self.evaluations is not None and self.evaluations < 1:
            raise ConfigError(f"evaluations is the number of candidates to evaluate, 1 or more, not {self.evaluations}")
        if len(set(self.gpus)) != len(self.gpus):
            raise ConfigError(f"the GPU list names a GPU twice: {list(self.gpus)}")
        # Last, for the float settings a range above does not bound on both sides (an exponent of
        # infinity, a NaN that every comparison lets through): a session.json may hold either.
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"{f.name} must be a finite number, not {value}")

    @property
    def proposals(self) -> int:
        return self.proposals_per_generation or self.islands

    @property
    def explore_generations(self) -> int:
        """How many of generations 1..N explore; the rest exploit."""
        return round(self.explore_share * self.generations)

    def with_(self, **changes: Any) -> "SearchConfig":
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["gpus"] = list(self.gpus)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SearchConfig":
        """From to_dict()'s output; keys this version does not know are ignored."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in d.items() if k in known}
        if "gpus" in values:
            values["gpus"] = tuple(values["gpus"] or ())
        return cls(**values)
