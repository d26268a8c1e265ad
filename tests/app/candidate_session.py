"""A session to look at, for the candidate screen's tests (test_candidate_view, test_supervise_tui,
test_snapshots): hand-made records whose every section has known content (a measured seed, a
compile error, a deadlock, a wrong crossover, an L0 rejection), the fixed recorded bundle, and
the Pilot steps that open a candidate and read a tab."""

from __future__ import annotations

import io
from pathlib import Path

from rich.console import Console
from textual.content import Content
from textual.widgets import Static

from cuco_tui.app.screens.candidate import CandidateScreen
from cuco_tui.core.records import CandidateRecord
from cuco_tui.core.result import CascadeResult, Diagnostic, Level, ShapeTiming, Spread, Status, Verification
from cuco_tui.harness.deadlock import analyze
from cuco_tui.harness.launcher import RankOutcome
from cuco_tui.harness.rank_events import from_json
from cuco_tui.lineage import SessionRepo
from engine_helpers import W
from pilot_helpers import wait_until
from repo_paths import DATA

SEED = W.seed.read_text()
# A fixed copy of the first recorded GPU session: the example under sessions/examples/ may be
# replaced by a newer search, the snapshots must not change with it.
BUNDLE = DATA / "gemm_allgather-52-candidates.bundle"

BROKEN = SEED.replace("  const int W = ctx->world;\n", "  const int W = ctx->world\n", 1)  # line 36 loses its ';'
HANG = SEED.replace("  return 0;\n}\n\nstatic int candidate_teardown",
                    "  peer_wait<<<2, 1, 0, stream>>>(c->flags, (ctx->rank + 1) % W);  // waits on the next rank\n"
                    "  return 0;\n}\n\nstatic int candidate_teardown", 1)
HANG_LINE = 47  # the added launch: where the kernel's traced wait sits in this made-up source


def _spread(median: float, width: float = 0.02, n: int = 30) -> Spread:
    return Spread(median=median, min=median - 2 * width, max=median + 3 * width, p25=median - width,
                  p75=median + width, n=n)


def _timing(shape: str, ref: float, cand: float, ranks: tuple[float, ...]) -> ShapeTiming:
    return ShapeTiming(shape, {"M": 8192, "K": 8192, "N": 8192}, _spread(cand), _spread(ref),
                       [_spread(r) for r in ranks], ref / cand)


def _hang_report() -> str:
    def hung(rank: int, peer: int, observed: int) -> RankOutcome:
        slots = [{"slot": i, "state": "waiting", "site": HANG_LINE, "kind": "flag", "peer": peer, "id": 3,
                  "expected": 1, "observed": observed, "completed": 0} for i in range(2)]
        return RankOutcome(rank, rank, 100 + rank, 124, [from_json({"event": "timeout", "rank": rank, "what":
                           "candidate launch (check 1)", "phase": "verify:verify", "trace": slots})])

    return analyze([hung(0, 1, 0), hung(1, 0, 0)]).render()


def _result(cid: str, status: Status, level: Level, reason: str, **kw) -> dict:
    return CascadeResult(candidate=f"/scratch/{cid}.cu", workload="gemm_allgather", status=status, level=level,
                         reason=reason, world=2, gpus=[0, 1] if level >= Level.VERIFY else [], **kw).to_dict()


def _record(cid: str, parents: tuple[str, ...], source: str, result: dict, kind: str = "diff",
            rationale: str = "") -> CandidateRecord:
    r = CascadeResult.from_dict(result)
    latency = sum(t.candidate.median for t in r.timings) if r.timings else None
    return CandidateRecord(id=cid, generation=len(parents) and 1, island=0, kind=kind, parents=parents,
                           source=source, design={"backend": "nccl_host", "knobs": {"strategy": "host_sequential"}},
                           rationale=rationale or f"{kind} from {', '.join(parents) or 'nothing'}", agent="offline",
                           status=r.status.value, result=result, speedup=r.speedup, latency_ms=latency, created=1.0)


def build_session(path: Path) -> SessionRepo:
    """c0000 measured seed (per-rank timings), c0001 compile error, c0002 deadlock, c0003
    crossover of c0000 and c0002 with a wrong output, c0004 rejected at L0 (a line, no text)."""
    repo = SessionRepo.create(path, "gemm_allgather", {"generations": 1})
    timings = [_timing("square-8k", 1.20, 1.00, (0.97, 1.00)), _timing("mlp-up", 3.05, 2.85, (2.60, 2.85))]
    repo.commit_candidate(_record("c0000", (), SEED, _result(
        "c0000", Status.MEASURED, Level.BENCHMARK, "verified and measured on 2 shapes", timings=timings,
        logs={"nvcc": "", "rank0.stderr": "NCCL INFO comm 0x1 rank 0 nranks 2 - Init COMPLETE\n"}),
        kind="seed", rationale="the workload's seed: its reference strategy"))
    nvcc = ("c0001.cu(36): error: expected a \";\"\n    const int W = ctx->world\n"
            "                            ^\n1 error detected in the compilation of \"c0001.cu\".\n")
    repo.commit_candidate(_record("c0001", ("c0000",), BROKEN, _result(
        "c0001", Status.COMPILE_ERROR, Level.COMPILE, "nvcc: 1 error (first: c0001.cu:36:27: expected a \";\")",
        diagnostics=[Diagnostic(level=1, severity="error", message='expected a ";"', file="c0001.cu", line=36,
                                column=27, source_line="  const int W = ctx->world", code="nvcc")],
        logs={"nvcc": nvcc})))
    repo.commit_candidate(_record("c0002", ("c0000",), HANG, _result(
        "c0002", Status.DEADLOCK, Level.VERIFY, "rank 0: candidate launch (check 1) did not finish within 20.0 s",
        deadlock_report=_hang_report(),
        diagnostics=[Diagnostic(level=2, severity="error", rank=0, code="timeout",
                                message="candidate launch (check 1) did not finish within 20.0 s")],
        logs={"rank0.stderr": "rank 0: watchdog: dumping the wait trace\n",
              "rank1.stderr": "rank 1: watchdog: dumping the wait trace\n"})))
    wrong = Verification("verify", False, 0.5, 0.3, 0, 0, 1024, "rank 1, y[513, 7]: got 3.1, want 2.9", 0.02)
    repo.commit_candidate(_record("c0003", ("c0000", "c0002"), SEED.replace("1.0f, beta", "2.0f, beta"), _result(
        "c0003", Status.INCORRECT, Level.VERIFY, "wrong output at verify: max relative error 0.5 exceeds 0.02",
        verifications=[wrong]), kind="crossover"))
    repo.commit_candidate(_record("c0004", ("c0000",), BROKEN, _result(
        "c0004", Status.REJECTED, Level.STATIC, "static checks: a frozen region changed",
        diagnostics=[Diagnostic(level=0, severity="error", message="the frozen region changed", file="c0004.cu",
                                line=36, column=3, code="frozen-region")])))
    return repo


async def open_candidate(app, pilot, repo: SessionRepo, cid: str, **kwargs) -> CandidateScreen:
    screen = CandidateScreen(repo, cid, **kwargs)
    await app.push_screen(screen)
    assert await wait_until(pilot, lambda: screen.ready)
    return screen


def section_text(screen: CandidateScreen, section: str) -> str:
    """What a tab holds, as plain text."""
    out = []
    for static in screen.query_one(f"#tab-{section}").query(Static):
        content = static.content
        if isinstance(content, (Content, str)):
            out.append(str(content.plain if isinstance(content, Content) else content))
        else:
            console = Console(width=200, record=True, color_system=None, file=io.StringIO())
            console.print(content)
            out.append(console.export_text())
    return "\n".join(out)
