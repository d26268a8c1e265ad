"""Record an example session whose failures can be browsed without a GPU: a short search of
gemm_allgather on ONE GPU, its two ranks sharing it (`--share-gpu`: a correctness run, nothing
timed), with a scripted agent that proposes the workload's broken candidates (faults/: a
compile error, wrong values, unwritten output, a NaN, an illegal address, a cycle of waits, a
missing signal, an endless loop) between good ones (the hand-written ce_overlap.cu, then the
offline agent's strategies that do not communicate from the device, which cannot reach a peer
when ranks share a GPU). Every candidate goes through the real cascade and is committed with its
diagnostics, deadlock report and logs; the session records the GPU, driver, CUDA and NCCL it ran
on. The session is exported as a bundle (for sessions/examples/) and summed up in a table.

    python3 benchmarks/example_failures.py --out DIR [--gpu 0] [--session PATH]

Exit status 0 when the session holds at least a compile error, an incorrect result, a deadlock
and a verified candidate, 1 otherwise (the table says what is missing)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cuco_tui.agents.base import Proposal, ProposalRequest  # noqa: E402
from cuco_tui.agents.factory import make_agent  # noqa: E402
from cuco_tui.core.records import CandidateRecord  # noqa: E402
from cuco_tui.evaluate.cascade import evaluate  # noqa: E402
from cuco_tui.evaluate.shared_gpu import device_initiated  # noqa: E402
from cuco_tui.executors import GpuGroup, GpuPool  # noqa: E402
from cuco_tui.lineage import export_bundle  # noqa: E402
from cuco_tui.search.config import SearchConfig  # noqa: E402
from cuco_tui.search.engine import SearchEngine  # noqa: E402
from cuco_tui.search.sessions import create_session  # noqa: E402
from cuco_tui.workload.manifest import load_workload  # noqa: E402

WORKLOAD = "gemm_allgather"
# In the order proposed: a good one first, then the faults with good ones between them.
SCRIPT = ("candidates/ce_overlap.cu", "faults/compile_error.cu", "faults/wrong_values.cu", "faults/hang.cu",
          None, "faults/unwritten.cu", "faults/missing_signal.cu", None, "faults/nan_output.cu",
          "faults/illegal_address.cu", None, "faults/infinite_loop.cu")
WANTED = ("compile_error", "incorrect", "deadlock", "measured")
WHY = {
    "candidates/ce_overlap.cu": "A hand-written candidate: peer shards pulled by the copy engines, each multiplied as it lands.",
    "faults/compile_error.cu": "A deliberate fault: a misspelt cuBLAS call (the compiler names the line).",
    "faults/wrong_values.cu": "A deliberate fault: the output is computed from the wrong rows (verification catches it).",
    "faults/hang.cu": "A deliberate fault: each rank waits on the next one's flag before it signals its own (a cycle).",
    "faults/unwritten.cu": "A deliberate fault: part of the output is never written (the NaN poison shows it).",
    "faults/missing_signal.cu": "A deliberate fault: rank 1 never signals the flag rank 0 waits on.",
    "faults/nan_output.cu": "A deliberate fault: the output holds NaN (told apart from unwritten).",
    "faults/illegal_address.cu": "A deliberate fault: a store past the end of a peer buffer (CUDA reports it).",
    "faults/infinite_loop.cu": "A deliberate fault: a loop that never ends, with no traced wait.",
}


@dataclass
class ScriptedAgent:
    """Proposes SCRIPT in order; each None, and everything after the script, is the offline
    agent's proposal, asked again (up to 6 times) while it would communicate from the device."""

    offline: Any
    name: str = "scripted+offline"
    calls: int = 0
    log: list[str] = field(default_factory=list)

    def propose(self, request: ProposalRequest) -> Proposal:
        n, self.calls = self.calls, self.calls + 1
        step = SCRIPT[n] if n < len(SCRIPT) else None
        parents = tuple(p.id for p in request.parents)
        if step is not None:
            source = (REPO / "workloads" / WORKLOAD / step).read_text()
            self.log.append(f"{n}: {step}")
            return Proposal(request.kind, parents, source, {}, WHY[step], self.name)
        for _ in range(6):
            proposal = self.offline.propose(request)
            if proposal.source and not device_initiated(proposal.source):
                self.log.append(f"{n}: offline {proposal.kind}")
                return replace(proposal, agent=self.name)
        self.log.append(f"{n}: offline gave only device-initiated candidates")
        return Proposal(request.kind, parents, "", {}, "", self.name,
                        error="the offline agent proposed only device-initiated candidates, which cannot run "
                              "with ranks sharing a GPU")

    def summarize(self, history: list[CandidateRecord]) -> str:
        return self.offline.summarize(history)


def shared(gpu: int):
    """The cascade with every rank on GPU `gpu` (a correctness run: nothing is timed)."""

    def evaluate_shared(path, workload, options, progress=None):
        return evaluate(path, workload, replace(options, gpus=[gpu], share_gpu=True), progress=progress)

    return evaluate_shared


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="where the bundle, the table and show.txt go")
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--session", type=Path, default=None, help="the session folder (default: OUT/session)")
    ap.add_argument("--generations", type=int, default=6)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    workload = load_workload(WORKLOAD)
    config = SearchConfig(workload=WORKLOAD, generations=args.generations, islands=1, proposals_per_generation=2,
                          world=2, gpus=(args.gpu,), fast_path=False, measure_bounds=False, review_mode="auto",
                          plateau_warn=0, plateau_diversify=0, plateau_stop=0, seed=1, max_concurrent_builds=4,
                          keep_workers=False)  # ranks sharing one GPU: never kept
    agent = ScriptedAgent(make_agent("offline", workload, world=2, gpus=(args.gpu,), seed=1))
    repo = create_session(workload, config, args.session or args.out / "session")
    engine = SearchEngine(workload, agent, repo, config, evaluate_fn=shared(args.gpu),
                          gpu_pool=GpuPool([GpuGroup(0, (args.gpu,))]), bounds_fn=None)
    summary = engine.run()
    records = repo.records()
    machine = repo.machine()
    bundle = export_bundle(repo, args.out / f"{WORKLOAD}-failures-shared-gpu.bundle")
    repo.close()

    lines = [f"machine: {machine.describe() if machine else 'not recorded'}",
             f"session: {summary.candidates} candidates, reason {summary.reason}, bundle {bundle.name}", "",
             f"{'id':6} {'kind':10} {'status':14} reason"]
    for r in records:
        reason = str((r.result or {}).get("reason", "")).replace("\n", " ")
        lines.append(f"{r.id:6} {r.kind:10} {r.status:14} {reason[:100]}")
    found = {r.status for r in records}
    missing = [s for s in WANTED if s not in found]
    lines += ["", "proposed: " + "; ".join(agent.log),
              "missing: " + (", ".join(missing) if missing else "nothing: compile error, incorrect, deadlock and "
                                                                   "verified candidates are all there")]
    table = "\n".join(lines)
    (args.out / "example_failures.txt").write_text(table + "\n")
    print(table)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
