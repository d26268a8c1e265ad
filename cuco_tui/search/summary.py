"""The end-of-search summary: the best candidate (as the search decides it: core/ranking.best_measured,
a candidate replaces the best only when faster beyond noise), its speedup per bench shape with
its spread, the candidates within noise of it, how many candidates ended in each status, and
what the agent cost."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

from cuco_tui.core.ending import describe_end, end_state
from cuco_tui.core.bounds import all_figures
from cuco_tui.core.noise import Band, figure_label, read_timings, record_speedup, within_noise
from cuco_tui.core.records import CandidateRecord, RecordStatus
from cuco_tui.core.ranking import best_measured, rank_key

S = RecordStatus
STATUS_ORDER = (S.MEASURED, S.VERIFIED, S.NO_GPU, S.INCORRECT, S.DEADLOCK, S.RUNTIME_ERROR, S.COMPILE_ERROR, S.REJECTED,
                S.UNREVIEWED, S.PENDING)


@dataclass(frozen=True)
class ShapeSpeedup:
    shape: str
    reference_ms: float
    candidate_ms: float
    speedup: float
    spread: float = 0.0  # the speedup's half-band (core/noise.py), a fraction


@dataclass(frozen=True)
class SearchSummary:
    session: str
    workload: str
    agent: str
    reason: str  # why the search ended: "done", "evaluations", "stopped", "budget", "agent exhausted", "plateau",
    # "error", "" (a snapshot);
    # the session's state it leaves (finished, exhausted, stopped) is core.ending.end_state(reason)
    generations: int  # the last generation committed
    candidates: int
    by_status: dict[str, int]
    spent_usd: float
    best: str | None  # id of the best measured candidate
    best_speedup: float | None
    best_design: dict[str, Any] = field(default_factory=dict)
    best_shapes: tuple[ShapeSpeedup, ...] = ()
    best_rationale: str = ""
    best_spread: float = 0.0  # the best speedup's half-band (core/noise.py), a fraction; 0: not recorded
    ties: tuple[str, ...] = ()  # measured candidates within noise of the best, fastest first
    seconds: float = 0.0
    # Placeholders an older engine committed when the agent had nothing new (EXHAUSTED): not
    # candidates, so in neither `candidates` nor `by_status`.
    placeholders: int = 0

    @classmethod
    def of(cls, records: Iterable[CandidateRecord], *, session: str = "", workload: str = "", agent: str = "",
           reason: str = "", seconds: float = 0.0, spent_usd: float | None = None) -> "SearchSummary":
        """`spent_usd`: what the engine accounted (every model call, meta-summaries among them);
        None: the records' own costs plus the meta-summary costs they carry."""
        every = list(records)
        recs = [r for r in every if not r.placeholder]
        by_status: dict[str, int] = {}
        for r in recs:
            by_status[r.status] = by_status.get(r.status, 0) + 1
        # A finalist's figure, timed beside other evaluations, does not rank; its confirmation
        # does (scheduling.ranking_view).
        measured = [r for r in recs if r.status is S.MEASURED and r.speedup is not None and not r.finalist]
        best = best_measured(measured)
        best_band = record_speedup(best) if best is not None else None
        shapes: tuple[ShapeSpeedup, ...] = ()
        ties: tuple[str, ...] = ()
        if best is not None and best_band is not None:
            shapes = tuple(ShapeSpeedup(f.shape, f.reference_ms, f.time_ms, f.speedup, f.speedup_band.spread)
                           for f in all_figures(read_timings(best.result)))
            ties = tuple(r.id for r in sorted(measured, key=rank_key)
                         if r is not best and within_noise(_band(r), best_band))
        ordered = {s: by_status[s] for s in STATUS_ORDER if s in by_status}
        ordered |= {s: n for s, n in sorted(by_status.items()) if s not in ordered}
        return cls(
            session=session, workload=workload, agent=agent or _agents(recs), reason=reason,
            generations=max((r.generation for r in every), default=0), candidates=len(recs), by_status=ordered,
            spent_usd=round(spent_usd if spent_usd is not None else sum(record_cost(r) for r in every), 6),
            best=best.id if best else None, best_speedup=best.speedup if best else None,
            best_design=dict(best.design) if best else {}, best_shapes=shapes,
            best_rationale=best.rationale if best else "", best_spread=best_band.spread if best_band else 0.0,
            ties=ties, seconds=seconds, placeholders=len(every) - len(recs),
        )

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["best_shapes"] = [asdict(s) for s in self.best_shapes]
        d["ties"] = list(self.ties)
        d["state"] = end_state(self.reason) if self.reason else ""  # as `cuco sessions` lists the session
        return d

    def render(self) -> str:
        lines = [f"session   {self.session}" if self.session else "",
                 f"workload  {self.workload}" + (f"   agent {self.agent}" if self.agent else ""),
                 f"ended     {describe_end(self.reason)}" if self.reason else "",
                 f"searched  {self.candidates} candidates over {self.generations} generations"
                 + (f" in {self.seconds:.0f} s" if self.seconds else ""),
                 "statuses  " + (", ".join(f"{s} {n}" for s, n in self.by_status.items()) or "none"),
                 (f"agent     ran out of new proposals: {self.placeholders} placeholder record(s) of an older "
                  f"cuco-tui say so (no code, nothing evaluated; not counted as candidates)"
                  if self.placeholders else ""),
                 f"spent     ${self.spent_usd:.2f}"]
        if self.best is None:
            why = (" (the verified ones were not timed)" if self.by_status.get("verified")
                   else " (no GPU here: candidates were compiled, not run)" if self.by_status.get("no_gpu") else "")
            lines.append("best      none measured yet" + why)
        else:
            best = figure_label(self.best_speedup or 0.0, self.best_spread, ".3f")  # set with best
            lines.append(f"best      {self.best}: {best} the reference (geometric mean)")
            if self.ties:
                more = f" and {len(self.ties) - 8} more" if len(self.ties) > 8 else ""
                lines.append(f"ties      within noise of it: {', '.join(self.ties[:8])}{more}")
            coords = " ".join(f"{k}={v}" for k, v in self.best_design.items() if k != "knobs")
            if coords:
                lines.append(f"design    {coords}")
            knobs = self.best_design.get("knobs") or {}
            if knobs:
                lines.append("knobs     " + " ".join(f"{k}={v}" for k, v in knobs.items()))
            if self.best_shapes:
                width = max(len(s.shape) for s in self.best_shapes)
                lines.append("per shape " + f"{'shape':<{width}}  reference ms  candidate ms  speedup")
                for s in self.best_shapes:
                    lines.append(f"          {s.shape:<{width}}  {s.reference_ms:12.3f}  {s.candidate_ms:12.3f}  "
                                 f"{figure_label(s.speedup, s.spread, '6.2f')}")
        return "\n".join(line for line in lines if line)


def _band(record: CandidateRecord) -> Band:
    band = record_speedup(record)
    return band if band is not None else Band.exact(0.0)


def _agents(records: list[CandidateRecord]) -> str:
    names = sorted({r.agent for r in records if r.agent not in ("workload", "engineer", "engine")})
    return ", ".join(names)


def record_cost(record: CandidateRecord) -> float:
    """Dollars a record accounts for: its proposal's model calls, and the meta-summaries
    refreshed just before it (its meta_cost_usd)."""
    return record.cost_usd + record.meta_cost_usd
