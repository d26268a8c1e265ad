"""`cuco search --keep-workers` (SearchConfig.keep_workers): each GPU group's evaluations share
one set of kept rank workers (harness/kept.py), ended when the search ends."""

from __future__ import annotations

import subprocess
import sys

from engine_helpers import FakeEvaluator, make

from cuco_tui.harness.kept import KeepKey, KeptWorker


class KeptRecorder(FakeEvaluator):
    """Notes the kept workers each evaluation was given, by its GPUs; the first evaluation of a
    group leaves a process in them, as a real run's idle workers (it waits for its stdin to end)."""

    def __init__(self, tmp_path):
        super().__init__()
        self.tmp_path = tmp_path
        self.given: list[tuple[str, tuple[int, ...], object]] = []
        self.procs: list[subprocess.Popen] = []
        self.seeded: set[int] = set()

    def __call__(self, path, workload, options, progress=None, **kw):
        gpus, kept = tuple(options.gpus or ()), kw.get("kept")
        self.given.append((path.stem, gpus, kept))
        if kept is not None and id(kept) not in self.seeded:
            self.seeded.add(id(kept))
            proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE,
                                    start_new_session=True)
            self.procs.append(proc)
            log = self.tmp_path / f"worker{proc.pid}.log"
            kept.keep(KeepKey(gpus, None, 0, 1.0), [KeptWorker(proc, proc.stdin, log, log)])
        return super().__call__(path, workload, options, progress)


def test_each_gpu_group_keeps_one_set_of_workers_and_the_search_ends_them(tmp_path):
    evaluator = KeptRecorder(tmp_path)
    engine, repo, _ = make(tmp_path, evaluator=evaluator, groups=2, generations=2, keep_workers=True)
    engine.run()
    # A finalist timed beside another group is re-measured alone (whether one was depends on
    # the threads' timing): that figure can make it the best, so it runs in fresh workers.
    confirms = {r.id for r in repo.records() if r.kind == "confirm"}
    by_group: dict[tuple[int, ...], set[int]] = {}
    for name, gpus, kept in evaluator.given:
        if name in confirms:
            assert kept is None, name
            continue
        assert kept is not None, name
        by_group.setdefault(gpus, set()).add(id(kept))
    assert set(by_group) <= {(0, 1), (2, 3)} and all(len(ids) == 1 for ids in by_group.values())
    assert evaluator.procs and all(p.poll() is not None for p in evaluator.procs)  # ended with the search


def test_turned_off_every_evaluation_starts_its_own_workers(tmp_path):
    evaluator = KeptRecorder(tmp_path)
    engine, _, _ = make(tmp_path, evaluator=evaluator, groups=2, generations=1, keep_workers=False)
    engine.run()
    assert evaluator.given and all(kept is None for _, _, kept in evaluator.given) and not evaluator.procs
