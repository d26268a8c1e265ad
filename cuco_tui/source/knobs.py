"""Tunable knobs a seed declares inside its EVOLVE blocks, so the offline agent can search a
workload that ships no strategy templates.

A knob is a constant whose line ends with a `cuco-knob:` comment listing the values it may take:

    constexpr int kChunks = 1;        // cuco-knob: 1 2 4 8
    #define COMM_BLOCKS 16            // cuco-knob: 8, 16, 32
    constexpr bool kOwnRowsFirst = true;  // cuco-knob: true false

The value written in the code is the default and must be one of the listed values. Only the
value changes between candidates; everything else on the line stays as the seed has it."""

from __future__ import annotations

import re
from dataclasses import dataclass

from cuco_tui.source.regions import split_regions

__all__ = ["SeedKnob", "KnobError", "seed_knobs", "with_knobs", "knob_value"]

_KNOB = re.compile(r"//\s*cuco-knob:(?P<values>.*)$")
# `... NAME = VALUE;` (constexpr, const, static, enum members) or `#define NAME VALUE`
_ASSIGN = re.compile(r"\b(?P<name>[A-Za-z_]\w*)\s*=\s*(?P<value>[^;,\s/]+)\s*[;,]\s*$")
_DEFINE = re.compile(r"^\s*#\s*define\s+(?P<name>[A-Za-z_]\w*)\s+(?P<value>[^\s/]+)\s*$")
_TOKEN = re.compile(r"^(?:[-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?[uUlLfF]*|[A-Za-z_][\w:]*)$")


class KnobError(ValueError):
    """A `cuco-knob:` line that cannot be used; the message names the line and what to fix."""


@dataclass(frozen=True)
class SeedKnob:
    name: str
    line: int  # 1-based
    default: str  # the value written in the seed, as C source text
    values: tuple[str, ...]  # every allowed value, the default first

    def choices(self) -> tuple[object, ...]:
        """The values as the offline agent records them: ints and floats as numbers."""
        return tuple(knob_value(v) for v in self.values)


def knob_value(token: str) -> object:
    """A C value token as a JSON-friendly Python value ("8" -> 8, "0.5f" -> 0.5, "true" -> "true")."""
    bare = token.rstrip("uUlLfF") if not token.startswith(("0x", "0X")) else token
    try:
        return int(bare)
    except ValueError:
        pass
    try:
        return float(bare)
    except ValueError:
        return token


def _parse_line(text: str, no: int) -> SeedKnob | None:
    m = _KNOB.search(text)
    if m is None:
        return None
    code = text[:m.start()].rstrip()
    target = _DEFINE.match(code) or _ASSIGN.search(code)
    if target is None:
        raise KnobError(f"line {no}: a cuco-knob comment must end a constant's line, as in "
                        f"`constexpr int kChunks = 1;  // cuco-knob: 1 2 4 8` or `#define CHUNKS 1  // cuco-knob: 1 2 4 8`")
    values = [v for v in re.split(r"[\s,]+", m.group("values").strip()) if v]
    if len(values) < 2:
        raise KnobError(f"line {no}: knob {target.group('name')} lists {len(values)} value(s); "
                        f"list at least two, e.g. `// cuco-knob: 1 2 4`")
    bad = [v for v in values if not _TOKEN.match(v)]
    if bad:
        raise KnobError(f"line {no}: knob {target.group('name')} value {bad[0]!r} is neither a number nor a name")
    if len(set(values)) != len(values):
        raise KnobError(f"line {no}: knob {target.group('name')} lists a value twice")
    default = target.group("value")
    if default not in values:
        raise KnobError(f"line {no}: knob {target.group('name')} is {default} in the code, which its list "
                        f"({' '.join(values)}) does not hold; the code's value is the default and must be listed")
    ordered = (default,) + tuple(v for v in values if v != default)
    return SeedKnob(target.group("name"), no, default, ordered)


def seed_knobs(source: str) -> list[SeedKnob]:
    """The knobs declared inside the EVOLVE blocks of `source`, in file order. Raises KnobError
    for a malformed declaration, a knob named twice, or a `cuco-knob:` outside the blocks."""
    lines = source.split("\n")
    evolve = set()
    for r in split_regions(source).evolve:
        evolve.update(range(r.start_line, r.end_line + 1))
    knobs: list[SeedKnob] = []
    for no, text in enumerate(lines, start=1):
        knob = _parse_line(text, no)
        if knob is None:
            continue
        if no not in evolve:
            raise KnobError(f"line {no}: knob {knob.name} is outside the EVOLVE blocks; a knob must be code "
                            f"that candidates may change")
        if any(k.name == knob.name for k in knobs):
            raise KnobError(f"line {no}: knob {knob.name} is declared twice")
        knobs.append(knob)
    return knobs


def with_knobs(source: str, values: dict[str, object]) -> str:
    """`source` with each named knob's value replaced on its line (and nothing else changed)."""
    knobs = {k.name: k for k in seed_knobs(source)}
    unknown = sorted(set(values) - set(knobs))
    if unknown:
        raise KnobError(f"no knob {unknown[0]!r} in this source (knobs: {', '.join(knobs) or 'none'})")
    lines = source.split("\n")
    for name, value in values.items():
        knob = knobs[name]
        token = next((v for v in knob.values if knob_value(v) == value or v == str(value)), None)
        if token is None:
            raise KnobError(f"knob {name} cannot be {value!r}: its values are {' '.join(knob.values)}")
        text = lines[knob.line - 1]
        cut = _KNOB.search(text).start()
        code = text[:cut]
        m = _DEFINE.match(code.rstrip()) or _ASSIGN.search(code.rstrip())
        lines[knob.line - 1] = code[:m.start("value")] + token + code[m.end("value"):] + text[cut:]
    return "\n".join(lines)
