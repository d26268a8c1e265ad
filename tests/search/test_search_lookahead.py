"""Look-ahead (SearchConfig.lookahead): the next generation is proposed while each GPU group
still runs the last evaluation of the one before, so no GPU waits through a generation's
proposing and compiling; a plateau's stop still waits for those results."""

from __future__ import annotations

import re
import threading
from pathlib import Path

from engine_helpers import FakeEvaluator, ScriptedAgent, make, timing

# One island, one group: generation 0 is the seed (variant 0) and the fast path (variant 1); the
# agent's calls 1 and 2 are generation 1 (variants 2 and 3), calls 3 and 4 generation 2.
LAST_OF_GENERATION_1 = 3


class GenerationAgent(ScriptedAgent):
    """Sets `asked[g]` when it is first asked for a proposal of generation g."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.asked: dict[int, threading.Event] = {g: threading.Event() for g in range(8)}

    def propose(self, request):
        self.asked[request.generation].set()
        return super().propose(request)


class WaitingEvaluator(FakeEvaluator):
    """Evaluates variant `hold` only once `gate` is set (`wait`), or notes, without waiting,
    whether it was set when that evaluation started (`wait=False`). `speedups`: flat figures
    for some variants (FakeEvaluator's grow with the variant number)."""

    def __init__(self, hold: int, gate: threading.Event, wait: bool, speedups=None):
        super().__init__()
        self.hold, self.gate, self.wait = hold, gate, wait
        self.overlapped: bool | None = None
        self.speedups = speedups or {}

    def __call__(self, path, workload, options, progress=None, kept=None):
        n = int(m.group(1)) if (m := re.search(r"cuco_variant = (\d+)", Path(path).read_text())) else 0
        if n == self.hold:
            self.overlapped = self.gate.wait(60) if self.wait else self.gate.is_set()
        result = super().__call__(path, workload, options, progress)
        if n in self.speedups:
            result.timings[:] = [timing(self.speedups[n])]
        return result


def test_the_next_generation_is_proposed_while_the_last_evaluation_of_this_one_runs(tmp_path):
    agent = GenerationAgent()
    evaluator = WaitingEvaluator(LAST_OF_GENERATION_1, agent.asked[2], wait=True)
    engine, repo, _ = make(tmp_path, agent=agent, evaluator=evaluator, islands=2, generations=3)
    summary = engine.run()
    assert evaluator.overlapped is True  # generation 2 was asked for while variant 3 waited to run
    assert summary.reason == "done"
    assert len(repo.committed) == 2 + 3 * 2  # nothing lost: the seed, the fast path, 3 generations of 2
    assert max(r.generation for r in repo.committed) == 3


def test_without_lookahead_each_generation_waits_for_every_result_of_the_last(tmp_path):
    agent = GenerationAgent()
    evaluator = WaitingEvaluator(LAST_OF_GENERATION_1, agent.asked[2], wait=False)
    engine, repo, _ = make(tmp_path, agent=agent, evaluator=evaluator, islands=2, generations=3, lookahead=False)
    engine.run()
    assert evaluator.overlapped is False
    assert len(repo.committed) == 8


def test_a_plateau_stop_waits_for_the_results_still_running(tmp_path):
    """plateau_stop=1: generation 1's first result is no gain over generation 0's best, so the
    search would stop after generation 1; but its last evaluation, still running then (held
    until the plateau is consulted), is a gain. The stop waits for it, sees the gain, goes on."""
    agent = GenerationAgent()
    consulted = threading.Event()
    evaluator = WaitingEvaluator(LAST_OF_GENERATION_1, consulted, wait=True, speedups={1: 1.5, 2: 1.5, 3: 3.0})
    engine, repo, _ = make(tmp_path, agent=agent, evaluator=evaluator, islands=2, generations=3,
                           plateau_warn=0, plateau_diversify=0, plateau_stop=1, plateau_margin=0.0)
    would_stop = engine._plateau.would_stop

    def consult(generation):
        consulted.set()
        return would_stop(generation)

    engine._plateau.would_stop = consult
    engine.run()
    assert evaluator.overlapped is True
    # generation 1's late gain kept the search going (generation 2 has no gain: it stops there)
    assert max(r.generation for r in repo.committed) == 2
