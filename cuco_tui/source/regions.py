"""A candidate's EVOLVE regions: the frozen text between them, its hash, and the
`// cuco-design:` line of the first block. Plain text, no compiler."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Iterable, Literal

from cuco_tui.core.result import Diagnostic, Level

START = "EVOLVE-BLOCK-START"
END = "EVOLVE-BLOCK-END"
_MARKER = re.compile(r"^\s*//\s*EVOLVE-BLOCK-(START|END)\b")


@dataclass(frozen=True)
class Region:
    """A run of lines of one kind. Marker lines belong to no region. Lines are 1-based and
    inclusive; an empty region (two markers on consecutive lines, or a marker on the first
    or last line) has end_line == start_line - 1 and text ""."""

    kind: Literal["frozen", "evolve"]
    start_line: int
    end_line: int
    text: str


class Regions(list[Region]):
    """What `split_regions` returns: the regions in file order (frozen, evolve, frozen, ...,
    frozen), plus `diagnostics`, the marker errors found on the way (code "markers")."""

    def __init__(self, regions: Iterable[Region] = (), diagnostics: Iterable[Diagnostic] = ()) -> None:
        super().__init__(regions)
        self.diagnostics: list[Diagnostic] = list(diagnostics)
        self.markers: list[tuple[int, str]] = []  # (line, "START"|"END") of well-placed markers

    @property
    def ok(self) -> bool:
        return not self.diagnostics

    @property
    def evolve(self) -> list[Region]:
        return [r for r in self if r.kind == "evolve"]

    @property
    def frozen(self) -> list[Region]:
        return [r for r in self if r.kind == "frozen"]


def split_lines(text: str) -> list[str]:
    """Split like a compiler counts lines: on '\\n' only (a '\\r' before it stays on the line)."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def marker_of(line: str) -> str | None:
    m = _MARKER.match(line)
    return m.group(1) if m else None


def split_regions(text: str, file_name: str = "") -> Regions:
    """Split a candidate into frozen and evolve regions.

    Never raises on bad markers: an END without a START, a START inside an open block, or a
    block left open at the end of the file each become a Diagnostic (code "markers") in
    `.diagnostics`, and the regions are a best effort (a stray END stays frozen text, a
    nested START stays evolve text, an open block runs to the end of the file)."""
    lines = split_lines(text)
    regions = Regions()
    kind: Literal["frozen", "evolve"] = "frozen"
    start = 1  # first line of the region being collected
    open_at = 0  # line of the START that opened the current block
    body: list[str] = []

    def close(end_line: int) -> None:
        regions.append(Region(kind, start, end_line, "\n".join(body)))

    for no, line in enumerate(lines, start=1):
        which = marker_of(line)
        if which == "START":
            if kind == "evolve":
                regions.diagnostics.append(_diag(
                    f"nested {START} at line {no}: the block opened at line {open_at} is not closed; "
                    f"put `// {END}` before this line (blocks may not nest)",
                    file_name, no, line, code="markers"))
                body.append(line)
                continue
            close(no - 1)
            regions.markers.append((no, "START"))
            kind, start, open_at, body = "evolve", no + 1, no, []
        elif which == "END":
            if kind == "frozen":
                regions.diagnostics.append(_diag(
                    f"{END} at line {no} has no matching {START} before it",
                    file_name, no, line, code="markers"))
                body.append(line)
                continue
            close(no - 1)
            regions.markers.append((no, "END"))
            kind, start, body = "frozen", no + 1, []
        else:
            body.append(line)
    if kind == "evolve":
        regions.diagnostics.append(_diag(
            f"the {START} at line {open_at} is never closed: add a line `// {END}` after the block",
            file_name, open_at, lines[open_at - 1], code="markers"))
    close(len(lines))
    return regions


def frozen_lines(text: str) -> list[tuple[int, str]]:
    """The frozen lines and the marker lines of `text`, as (1-based line, normalized text):
    trailing whitespace of each line and blank lines at the end of the file removed."""
    out: list[tuple[int, str]] = []
    inside = False
    for no, line in enumerate(split_lines(text), start=1):
        which = marker_of(line)
        if which == "START" and not inside:
            inside = True
            out.append((no, line.rstrip()))
        elif which == "END" and inside:
            inside = False
            out.append((no, line.rstrip()))
        elif not inside:
            out.append((no, line.rstrip()))
    while out and out[-1][1] == "":
        out.pop()
    return out


def frozen_hash(text: str) -> str:
    """sha256 (hex) of the frozen text: the frozen regions joined with the marker lines kept as
    separators, each line's trailing whitespace and the file's trailing blank lines dropped.
    Editor noise (trailing spaces, CRLF, a final newline) does not change it; anything else does."""
    joined = "\n".join(t for _, t in frozen_lines(text))
    return hashlib.sha256(joined.encode("utf-8")).hexdigest()


DESIGN_LINE = re.compile(r"^\s*//\s*cuco-design:(.*)$")
DESIGN_PAIR = re.compile(r"^[A-Za-z_][\w.-]*=\S+$")


def design_line(regions: Regions) -> tuple[int, str] | None:
    """(1-based line, text) of the first `// cuco-design:` line in the first EVOLVE block, or None."""
    for region in regions.evolve[:1]:
        for off, line in enumerate(region.text.split("\n") if region.text else []):
            if DESIGN_LINE.match(line):
                return region.start_line + off, line
    return None


def design_in(regions: Regions) -> dict[str, str] | None:
    """The key=value pairs of the `// cuco-design:` line in the first EVOLVE block, or None
    when there is none (or it holds no well-formed pair)."""
    found = design_line(regions)
    m = DESIGN_LINE.match(found[1]) if found else None
    if m is None:
        return None
    pairs = [t for t in m.group(1).split() if DESIGN_PAIR.match(t)]
    return dict(t.split("=", 1) for t in pairs) if pairs else None


def design_of(source: str) -> dict[str, str] | None:
    """`design_in` of the regions of `source`."""
    return design_in(split_regions(source))


def _diag(message: str, file: str, line: int = 0, source_line: str = "", *, column: int = 0,
          code: str, severity: str = "error") -> Diagnostic:
    return Diagnostic(level=int(Level.STATIC), severity=severity, message=message, file=file, line=line,
                      column=column, source_line=source_line.rstrip("\r\n"), code=code)
