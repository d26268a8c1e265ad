"""The search engine's test doubles, shared by the search, app and Slurm tests: a scripted agent
(numbered variants of gemm_allgather's seed), an in-memory lineage and a fake evaluator whose
speedup grows with the variant number; `make` wires them into a real SearchEngine."""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from cuco_tui.agents.base import AgentExhausted, BudgetExhausted, Proposal, ProposalRequest
from cuco_tui.core.records import CandidateRecord
from cuco_tui.core.result import CascadeResult, Level, ShapeTiming, Spread, Status
from cuco_tui.executors import GpuGroup, GpuPool
from cuco_tui.search.config import SearchConfig
from cuco_tui.search.engine import SearchEngine
from cuco_tui.search.events import EventBus
from cuco_tui.workload.manifest import load_workload

W = load_workload("gemm_allgather")
SEED = W.seed.read_text()
HOST = "backend=nccl_host placement=before sync=global issuer=host chunk=full streams=1 comm_sms=0"
LSA = "backend=nccl_lsa placement=before sync=global issuer=multi_cta chunk=full streams=1 comm_sms=64"


def variant(n: int, design: str = HOST) -> str:
    """The seed with a numbered marker in its EVOLVE block (each n is distinct code)."""
    out = SEED.replace(SEED.split("\n")[7], f"// cuco-design: {design}", 1)
    return out.replace("struct Candidate {", f"static const int cuco_variant = {n};\nstruct Candidate {{", 1)


class MemoryLineage:
    """What the engine needs of a session repository, kept in a list."""

    def __init__(self, path: Path, records: list[CandidateRecord] | None = None):
        self.path = path
        self.committed: list[CandidateRecord] = list(records or [])
        self.heads: dict[int, str] = {}
        self.best: list[str] = []
        self.stored_bounds = None
        self.ended = ""
        self.lock = threading.Lock()

    def commit_candidate(self, record):
        with self.lock:
            known = {r.id for r in self.committed}
            assert record.id not in known, f"{record.id} committed twice"
            assert all(p in known for p in record.parents), (record.id, record.parents, known)
            assert record.status != "pending"
            self.committed.append(record)
            return f"sha-{record.id}"

    def records(self, with_source=False):
        with self.lock:
            return list(self.committed)

    def set_island_head(self, island, candidate_id):
        self.heads[island] = candidate_id

    def set_best(self, candidate_id):
        self.best.append(candidate_id)

    def bounds(self):
        return self.stored_bounds

    def set_bounds(self, bounds):
        self.stored_bounds = bounds

    def set_ended(self, reason):
        self.ended = reason


@dataclass
class ScriptedAgent:
    """Proposes numbered variants; `script` maps a call number to something special."""

    name: str = "scripted"
    cost: float = 0.0
    offset: int = 0  # added to variant numbers (a second agent on the same session)
    # call -> "error" | "raise" | "budget" | "exhausted" | "dup" | ("design", str)
    script: dict = field(default_factory=dict)
    calls: list = field(default_factory=list)
    summaries: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    spent_usd: float | None = None  # its proposals' costs come with each Proposal

    def set_budget(self, usd: float | None) -> None:
        pass  # no cap of its own: the session's budget stops it

    def propose(self, request: ProposalRequest) -> Proposal:
        with self.lock:
            n = len(self.calls)
            self.calls.append(request)
        action = self.script.get(n)
        parents = tuple(p.id for p in request.parents)
        if action == "raise":
            raise RuntimeError("the model is down")
        if action == "budget":
            raise BudgetExhausted("spent")
        if action == "exhausted":
            raise AgentExhausted("nothing new to propose")
        if action == "error":
            return Proposal(request.kind, parents, "", {}, "", self.name, cost_usd=self.cost,
                            error="no code block in the reply")
        design = LSA if request.kind == "fast_path" else HOST
        if isinstance(action, tuple) and action[0] == "design":
            design = action[1]
        source = variant(0 if action == "dup" else self.offset + n + 1, design)
        return Proposal(request.kind, parents, source, {}, f"variant {n + 1} ({request.kind})", self.name,
                        cost_usd=self.cost, tokens_in=100, tokens_out=50)

    def summarize(self, history):
        self.summaries += 1
        return f"{len(history)} candidates so far"


def timing(speedup: float) -> ShapeTiming:
    ref = Spread.of([1.0] * 20)
    cand = Spread.of([1.0 / speedup] * 20)
    return ShapeTiming("square-8k", {"M": 8192, "K": 8192, "N": 8192}, cand, ref, [cand, cand], speedup)


class FakeEvaluator:
    """Speedup grows with the variant number; variant numbers in `fail` do not compile."""

    def __init__(self, delay=0.0, fail=(), crash=()):
        self.delay, self.fail, self.crash = delay, set(fail), set(crash)
        self.active: dict[int, int] = {}
        self.worst = 0  # the most evaluations at once on one GPU
        self.running = 0
        self.peak = 0  # the most evaluations at once on any GPUs
        self.calls = []
        self.lock = threading.Lock()

    def __call__(self, path, workload, options, progress=None, kept=None):  # kept: the real one's workers
        source = Path(path).read_text()
        m = re.search(r"cuco_variant = (\d+)", source)
        n = int(m.group(1)) if m else 0
        gpus = tuple(options.gpus or ())
        with self.lock:
            self.calls.append((Path(path).stem, gpus))
            for g in gpus:
                self.active[g] = self.active.get(g, 0) + 1
                self.worst = max(self.worst, self.active[g])
            self.running += 1
            self.peak = max(self.peak, self.running)
        try:
            if progress:
                progress(_progress(Level.STATIC, "static"))
                progress(_progress(Level.COMPILE, "compile"))
            time.sleep(self.delay)
            if n in self.crash:
                raise OSError("the launcher lost its run folder")
            base = dict(candidate=str(path), workload=workload.name, world=2, gpus=list(gpus))
            if n in self.fail:
                return CascadeResult(**base, status=Status.COMPILE_ERROR, level=Level.COMPILE,
                                     reason="compile error at x.cu:12:3: expected ';'")
            if progress:  # every rank reports each step
                progress(_progress(Level.BENCHMARK, "bench square-8k"))
                progress(_progress(Level.BENCHMARK, "bench square-8k"))
            return CascadeResult(**base, status=Status.MEASURED, level=Level.BENCHMARK, timings=[timing(1.0 + n / 10)],
                                 reason="measured")
        finally:
            with self.lock:
                self.running -= 1
                for g in gpus:
                    self.active[g] -= 1


def _progress(level, message):
    from cuco_tui.evaluate.cascade import Progress

    return Progress(level, message)


def make(tmp_path, agent=None, evaluator=None, records=None, groups=1, **cfg):
    cfg.setdefault("generations", 3)
    cfg.setdefault("islands", 2)
    cfg.setdefault("max_concurrent_builds", 2)
    config = SearchConfig(**cfg)
    repo = MemoryLineage(tmp_path, records)
    bus = EventBus()
    pool = GpuPool([GpuGroup(i, (2 * i, 2 * i + 1)) for i in range(groups)])
    engine = SearchEngine(W, agent or ScriptedAgent(), repo, config, evaluate_fn=evaluator or FakeEvaluator(),
                          events=bus, gpu_pool=pool, compile_ahead=False,
                          design_context=lambda point: f"notes for {point.backend}")
    return engine, repo, bus


def run_in_thread(engine):
    out = {}

    def target():
        try:
            out["summary"] = engine.run()
        except BaseException as exc:  # pragma: no cover - surfaced by the assertion below
            out["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t, out


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False
