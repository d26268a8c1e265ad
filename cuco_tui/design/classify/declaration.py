"""`check_declaration`: the design a candidate declares against what its code shows, one rule
per dimension (each in its dimension's module)."""

from __future__ import annotations

from cuco_tui.core.result import Diagnostic, Level
from cuco_tui.design.classify import backend, chunk, comm_sms, issuer, placement, streams, sync
from cuco_tui.design.classify.classifier import classify
from cuco_tui.design.classify.evidence import Evidence, Finding
from cuco_tui.design.space import Capabilities, DesignPoint, violations
from cuco_tui.source.model import CandidateSource
from cuco_tui.source.regions import design_line

_L0 = int(Level.STATIC)
# The rules, in the order their warnings are listed.
_RULES = (backend.check, streams.check, placement.check, chunk.check, sync.check, issuer.check, comm_sms.check)
_EVERYTHING = Capabilities(gin=True, nvshmem=True, lsa=True)


def check_declaration(source: str | CandidateSource, file_name: str = "", caps: Capabilities | None = None,
                      evidence: Evidence | None = None) -> list[Diagnostic]:
    """Compare the declared design with what the code shows. Errors only for a missing or
    invalid design line; contradictions are warnings (code "design-mismatch"). With `caps`,
    a point that is not valid on this machine is also a warning."""
    src = CandidateSource.of(source)
    ev = evidence or classify(src)
    at = _design_line_no(src)

    def diag(message: str, line: int, severity: str = "warning", code: str = "design-mismatch") -> Diagnostic:
        return Diagnostic(level=_L0, severity=severity, message=message, file=file_name, line=line,
                          source_line=src.line(line), code=code)

    if ev.declared is None:
        if ev.declared_pairs is None:
            msg = (f"the first EVOLVE block has no valid `// cuco-design:` line; add one as its first line, "
                   f"e.g. `{DesignPoint().line()}`")
        else:
            msg = f"the cuco-design line is invalid: {ev.design_error}"
        return [diag(msg, at, "error", "design")]
    findings = _validity(ev.declared, caps)
    for rule in _RULES:
        findings += rule(ev.declared, ev)
    return [diag(message, site.line if site else at) for message, site in findings]


def _validity(d: DesignPoint, caps: Capabilities | None) -> list[Finding]:
    """The rules of the space that do not depend on the machine; with `caps`, those that do."""
    out: list[Finding] = [(f"the declared design is not a valid point: {reason}", None)
                          for reason in violations(d, _EVERYTHING)]
    if caps is not None:
        structural = set(violations(d, Capabilities(gin=True, nvshmem=True, lsa=True, world=caps.world)))
        out += [(f"the declared design cannot run here: {reason}", None)
                for reason in violations(d, caps) if reason not in structural]
    return out


def _design_line_no(src: CandidateSource) -> int:
    """The design line's number; else the line before the first EVOLVE block; 0 without one."""
    found = design_line(src.regions)
    if found:
        return found[0]
    evolve = src.regions.evolve
    return max(evolve[0].start_line - 1, 1) if evolve else 0
