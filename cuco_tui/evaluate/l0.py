"""L0, the one static level: everything said of a candidate's source before a compiler sees it.

`check_l0(source, seed, file_name)` is what the cascade runs first, what the search's review gate
reads its warnings from (search/proposing.py, handed it by the engine) and what the Claude agent
screens its own edits with (agents/factory.py hands it in: the agents import no evaluator). So a
candidate is judged alike wherever it is judged; before there was one L0 (issue 30 item 4) the
three ran different subsets and disagreed.

In order: the static checks (static_checks.py; a source past MAX_SOURCE_BYTES gets that one
finding and is read no further), the synchronization checks (sync_checks.py) and the design
classifier's comparison of the declared design with the code (design/classify). A finding of
severity "error" rejects (StaticVerdict.rejected); the declaration check only ever warns: the
lineage can still store and measure a candidate whose line is wrong, and the cascade never
rejected one for it."""

from __future__ import annotations

from dataclasses import replace

from cuco_tui.core.result import Diagnostic, Level, StaticVerdict
from cuco_tui.design.classify import check_declaration
from cuco_tui.evaluate.static_checks import check_static
from cuco_tui.evaluate.sync_checks import check_sync
from cuco_tui.source.model import CandidateSource

__all__ = ["check_l0"]


def check_l0(source: str | CandidateSource, seed: str, file_name: str) -> StaticVerdict:
    """Every L0 finding of `source` against the workload's `seed` (the frozen text's reference)."""
    parsed = CandidateSource.of(source, file_name)  # one parse, read by every check
    found = check_static(parsed, seed, file_name)
    if any(d.code == "size" for d in found):  # one too large to check is read no further
        return StaticVerdict(tuple(found))
    found += check_sync(parsed, file_name)
    found += _declaration(parsed, file_name, found)
    return StaticVerdict(tuple(found))


def _declaration(parsed: CandidateSource, file_name: str, found: list[Diagnostic]) -> list[Diagnostic]:
    """The declared design against the code, as warnings. Nothing where the static checks already
    said the line is missing or malformed (code "design"), where the EVOLVE markers are broken (a
    rejection the classifier could only add noise to) or where there is no block to declare in."""
    if not parsed.regions.ok or not parsed.regions.evolve or any(d.code == "design" for d in found):
        return []
    try:
        diags = check_declaration(parsed, file_name)
    except Exception as exc:  # the classifier is advice: its failure must not stop an evaluation
        return [Diagnostic(level=int(Level.STATIC), severity="warning", file=file_name, code="design-mismatch",
                           message=f"the design classifier could not read this candidate ({type(exc).__name__}: "
                                   f"{exc}); its declared design is unchecked")]
    return [replace(d, severity="warning") if d.severity == "error" else d for d in diags]
