"""A workload's strategies for the offline agent: Jinja2 templates of the EVOLVE block
(`templates/strategies.py`), each with the knobs it takes and the design point a choice of knobs
lands on; or, for a workload without templates, the knobs its seed declares (`cuco-knob:`
comments, cuco_tui.source.knobs) as one strategy whose knobs change values in the seed."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import jinja2

from cuco_tui.design.space import COMM_SMS, Capabilities, DesignError, DesignPoint, parse_design, violations
from cuco_tui.source.knobs import KnobError, seed_knobs, with_knobs
from cuco_tui.source.regions import design_of

Knobs = dict[str, Any]


@dataclass(frozen=True)
class Strategy:
    name: str
    template: str  # file name under the workload's templates/ folder; "" for the seed's own knobs
    description: str
    knobs: dict[str, tuple[Any, ...]]  # knob -> the values it may take (first = default)
    design: Callable[[Knobs], DesignPoint]
    fast_path: bool = False  # the most conservative device-initiated strategy
    # Knobs that do not change the code for some settings of the others are reset to their
    # defaults there, so that two choices rendering the same code count as one.
    normalize: Callable[[Knobs], Knobs] | None = None
    # Knobs whose every setting is a long build of its own (a prebuilt library per value): an
    # exploration keeps the settings the session already built and lets exploitation move them.
    build_knobs: tuple[str, ...] = ()
    # Knob settings that render different code yet run the same at this world size (the world
    # is a run-time value, so normalize cannot fold them): False leaves the point out there.
    applies: Callable[[Knobs, Capabilities], bool] | None = None

    def normalized(self, knobs: Knobs) -> Knobs:
        return self.normalize(dict(knobs)) if self.normalize else dict(knobs)

    def default_knobs(self) -> Knobs:
        return {k: values[0] for k, values in self.knobs.items()}

    def one_knob_changes(self, names: list[str] | None = None) -> list[Knobs]:
        """The defaults, then each other value of each knob in `names` (default: all) with the
        rest at their defaults, normalized: a sweep of one knob at a time."""
        base = self.default_knobs()
        names = list(self.knobs) if names is None else names
        return [base] + [self.normalized({**base, k: v}) for k in names for v in self.knobs[k][1:]]

    def point(self, knobs: Knobs) -> DesignPoint:
        return self.design(knobs).with_(knobs={"strategy": self.name, **knobs})

    def valid(self, knobs: Knobs, caps: Capabilities) -> bool:
        if not self.template:  # the seed's own knobs keep the seed's design: the engineer's starting point
            return True
        if self.applies is not None and not self.applies(self.normalized(knobs), caps):
            return False
        return not violations(self.design(knobs), caps)


def chunk(pieces: int, whole: str = "shard") -> str:
    """The design-space chunk value of a transfer cut into `pieces`: `whole` when it is not cut
    ("shard": one per peer, "full": everything at once)."""
    return whole if pieces == 1 else str(pieces)


def comm_sms(blocks: int) -> str:
    """The design-space value for a kernel that uses `blocks` CTAs (one SM each, at most)."""
    numeric = [int(v) for v in COMM_SMS if v.isdigit() and int(v) > 0]
    fitting = [v for v in numeric if v >= blocks]
    return str(min(fitting)) if fitting else "all"


class StrategyError(ValueError):
    pass


SEED_KNOBS = "seed"  # the name of the strategy made of a seed's own knobs


def no_strategies_message(name: str) -> str:
    return (f"the offline agent has nothing to search on {name}: its seed declares no knobs and it ships no "
            f"templates/strategies.py; mark tunable constants in the seed's EVOLVE blocks "
            f"(`constexpr int kChunks = 1;  // cuco-knob: 1 2 4 8`) or add strategy templates "
            f"(docs/workloads.md), or search with --agent claude and ANTHROPIC_API_KEY set")


def _seed_point(source: str) -> DesignPoint:
    declared = design_of(source) or {}
    try:
        return parse_design(declared)
    except DesignError:
        return DesignPoint()


@dataclass
class StrategyBook:
    """The strategies of one workload, and rendering a choice into a whole candidate."""

    root: Path  # the workload folder
    strategies: list[Strategy]
    seed_source: str
    # Folders searched for templates after the workload's own templates/ (its strategies.py's
    # TEMPLATE_DIRS): an imported program reuses a shipped workload's templates from there.
    template_dirs: tuple[Path, ...] = ()
    env: jinja2.Environment = field(init=False)

    def __post_init__(self) -> None:
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader([str(self.root / "templates"), *map(str, self.template_dirs)]),
            undefined=jinja2.StrictUndefined,
            keep_trailing_newline=True,
            trim_blocks=True,
            lstrip_blocks=True,
        )

    @property
    def seed_strategy(self) -> str:
        """The strategy the seed itself is an instance of (what a seed record is filed under)."""
        return SEED_KNOBS if any(s.name == SEED_KNOBS and not s.template for s in self.strategies) \
            else "host_sequential"

    @classmethod
    def load(cls, workload_root: Path, seed: Path) -> "StrategyBook":
        """The workload's templates when it ships `templates/strategies.py`, else its seed's knobs.
        Raises StrategyError (one sentence naming the ways forward) when it has neither."""
        path = workload_root / "templates" / "strategies.py"
        if not path.exists():
            return cls.from_seed_knobs(workload_root, seed)
        spec = importlib.util.spec_from_file_location(f"cuco_strategies_{workload_root.name}", path)
        module = importlib.util.module_from_spec(spec)
        assert spec.loader is not None
        spec.loader.exec_module(module)
        dirs = tuple(Path(d) for d in getattr(module, "TEMPLATE_DIRS", ()))
        return cls(workload_root, list(module.STRATEGIES), seed.read_text(), dirs)

    def get(self, name: str) -> Strategy:
        for s in self.strategies:
            if s.name == name:
                return s
        raise StrategyError(f"no strategy {name!r}")

    @classmethod
    def from_seed_knobs(cls, workload_root: Path, seed: Path) -> "StrategyBook":
        source = seed.read_text()
        try:
            knobs = seed_knobs(source)
        except KnobError as exc:
            raise StrategyError(f"{seed}: {exc}") from exc
        if not knobs:
            from cuco_tui.workload.program.record import unmapped_message

            # An imported PyTorch program says what its trace holds instead of the generic advice.
            raise StrategyError(unmapped_message(workload_root, workload_root.name)
                                or no_strategies_message(workload_root.name))
        point = _seed_point(source)
        strategy = Strategy(
            name=SEED_KNOBS,
            template="",
            description="the seed with its declared knobs (" + ", ".join(k.name for k in knobs) + ") set",
            knobs={k.name: k.choices() for k in knobs},
            design=lambda _k: point,
        )
        return cls(workload_root, [strategy], source)

    def render(self, strategy: Strategy, knobs: Knobs) -> str:
        """The whole candidate: the seed's frozen skeleton around the rendered EVOLVE block, or,
        for the seed's own knobs, the seed with those values set."""
        if not strategy.template:
            return with_knobs(self.seed_source, knobs)
        point = strategy.point(knobs)
        block = self.env.get_template(strategy.template).render(design_line=point.line(), **knobs)
        start_marker, end_marker = "// EVOLVE-BLOCK-START\n", "// EVOLVE-BLOCK-END"
        start = self.seed_source.index(start_marker) + len(start_marker)
        end = self.seed_source.index(end_marker)
        return self.seed_source[:start] + block.rstrip("\n") + "\n" + self.seed_source[end:]
