"""The CPU ranks of a program import (gloo_run.GlooRanks): started once and handed one job after
another (the import's traced run, then the written reference's expected() on the same ranks), each
job as in fresh processes; a rank that fails, dies or hangs in a later job says so in the one line
run_gloo always gave, and leaves no process behind. An import starts as many processes as ranks
(rank 0 inspects the program first): it started five at 2 ranks, each importing torch."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from cuco_tui.core.workload import WorkloadError  # noqa: E402
from cuco_tui.workload.program.gloo_run import GlooRanks, ProgramRunError, run_gloo  # noqa: E402
from cuco_tui.workload.program.importer import import_program  # noqa: E402

from program_helpers import AG, program_variant  # noqa: E402
SHAPES = {"verify": {"M": 64, "K": 32, "N": 64}}
GATHER = "    dist.all_gather_into_tensor(full, x)\n"


def _children() -> set[int]:
    """This process's children, running or not yet reaped."""
    found: set[int] = set()
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        try:
            found |= {int(p) for p in (task / "children").read_text().split()}
        except FileNotFoundError:  # a thread that has ended since the listing
            pass
    return found


def _files_job(ranks: GlooRanks, program: Path, first, folder: Path, timeout: float = 600.0):
    """`program` on the first job's inputs (the harness's layout being the program's own), as the
    import's check of the written reference runs it."""
    folder.mkdir()
    specs = []
    for r in range(ranks.world):
        shapes = first.ranks[r]["shapes"]["verify"]["inputs"]
        for i in range(len(shapes)):
            shutil.copy(first.folder / f"in_0_{r}_{i}.npy", folder / f"in_0_{r}_{i}.npy")
        specs.append([{"layout": "as_is", "shape": s, "dtype": d} for s, d in shapes])
    return ranks.run(program, SHAPES, folder, mode="files", inputs=specs, timeout=timeout), specs


def _second_job_fails(tmp_path: Path, program: Path, timeout: float = 600.0) -> str:
    before = _children()
    with GlooRanks(2) as ranks:
        first = ranks.run(AG, SHAPES, _mkdir(tmp_path / "first"))
        assert len(_children() - before) == 2  # the ranks, still there for the next job
        with pytest.raises(ProgramRunError) as caught:
            _files_job(ranks, program, first, tmp_path / "second", timeout)
        assert _children() == before  # ended at the failure, not at the `with`'s end
    return str(caught.value)


def _mkdir(path: Path) -> Path:
    path.mkdir()
    return path


def test_a_rank_that_raises_in_the_second_job_says_so_in_one_line(tmp_path):
    bad = program_variant(tmp_path, "bad", GATHER, "    if dist.get_rank() == 1:\n        raise ValueError('rank 1 fails "
                                            "alone')\n" + GATHER)
    said = _second_job_fails(tmp_path, bad)
    assert said == "solution at verify (rank 1 of 2, float64 on the CPU under gloo) failed: ValueError: rank 1 " \
                   "fails alone (bad.py:24)"


def test_a_rank_that_dies_in_the_second_job_says_its_last_words(tmp_path):
    dies = program_variant(tmp_path, "dies", GATHER, "    if dist.get_rank() == 1:\n        print('rank 1 leaves', "
                                              "flush=True)\n        import os; os._exit(3)\n" + GATHER)
    assert _second_job_fails(tmp_path, dies) == "rank 1 of the CPU run ended without a report: rank 1 leaves"


def test_a_program_that_hangs_in_a_collective_is_stopped_at_the_timeout(tmp_path):
    """Rank 1 waits for a message rank 0 never sends, rank 0 in the all-gather: gloo's own timeout
    (30 s at least) comes after the run's."""
    hangs = program_variant(tmp_path, "hangs", GATHER, "    if dist.get_rank() == 1:\n        dist.recv(torch.empty(1, "
                                                "dtype=x.dtype), src=0)\n" + GATHER)
    said = _second_job_fails(tmp_path, hangs, timeout=5)
    assert said == "the program did not finish within 5 s on 2 CPU processes under gloo (does every rank call " \
                   "the same collectives in the same order?)"


STATEFUL = '''
CALLS = [0]


def noisy(y):
    CALLS[0] += 1  # module-level state: a second call in the same module would add 2
    torch.set_default_dtype(torch.float64)  # a process-wide setting the next job must not inherit
    return y + CALLS[0]
'''


def test_the_second_job_runs_as_in_fresh_processes(tmp_path):
    """The same inputs on the pool's ranks in a first and a second job, and on processes of their own:
    the same outputs, though the program counts its calls at module level and changes torch's
    default dtype (the second job failed the program's assertion, or added 2)."""
    stateful = program_variant(tmp_path, "stateful", "    return F.linear(full, w, b)",
                        "    assert torch.get_default_dtype() == torch.float32 and torch.is_grad_enabled() is False\n"
                        "    return noisy(F.linear(full, w, b))")
    stateful.write_text(stateful.read_text() + STATEFUL)
    with GlooRanks(2) as ranks:
        first = ranks.run(stateful, SHAPES, _mkdir(tmp_path / "first"))
        pooled, specs = _files_job(ranks, stateful, first, tmp_path / "pooled")
    fresh_folder = _mkdir(tmp_path / "fresh")
    for f in (tmp_path / "pooled").glob("in_*.npy"):
        shutil.copy(f, fresh_folder / f.name)
    fresh = run_gloo(stateful, 2, SHAPES, fresh_folder, mode="files", inputs=specs)
    for r in range(2):
        assert np.array_equal(pooled.output(0, r, 0), fresh.output(0, r, 0))
        assert np.array_equal(pooled.output(0, r, 0), first.output(0, r, 0))


def test_an_import_runs_the_program_in_as_many_processes_as_ranks(tmp_path):
    """Each process that loads the program notes its pid: the inspection, the traced run and the
    written reference's check share the 2 ranks' processes, none is left after the import."""
    pids = tmp_path / "pids"
    noted = program_variant(tmp_path, "noted", "import torch\n",
                     f"import os\nwith open({str(pids)!r}, 'a') as f:\n    f.write(f'{{os.getpid()}}\\n')\n"
                     f"import torch\n")
    before = _children()
    made = import_program(noted, 2, parent=tmp_path / "w")
    assert any("all-gather → linear + bias: mapped" in line for line in made.lines), made.lines
    assert len(set(pids.read_text().split())) == 2
    assert _children() == before


def test_imports_handed_the_callers_ranks_run_in_its_processes(tmp_path):
    """A caller importing several programs at one world size hands them its ranks: both imports run
    in the pool's 2 processes, which stay for the caller's next job; ranks of another world size
    are refused before anything is written."""
    pids = tmp_path / "pids"
    noted = program_variant(tmp_path, "noted", "import torch\n",
                            f"import os\nwith open({str(pids)!r}, 'a') as f:\n    f.write(f'{{os.getpid()}}\\n')\n"
                            f"import torch\n")
    before = _children()
    with GlooRanks(2) as ranks:
        first = import_program(noted, 2, parent=tmp_path / "a", ranks=ranks)
        second = import_program(noted, 2, parent=tmp_path / "b", ranks=ranks)
        assert len(_children() - before) == 2
        with pytest.raises(ValueError, match="at world 4 was handed 2 ranks"):
            import_program(noted, 4, parent=tmp_path / "c", ranks=ranks)
    assert len(set(pids.read_text().split())) == 2
    assert (first.root / "reference.py").read_text() == (second.root / "reference.py").read_text()
    assert not (tmp_path / "c").exists()
    assert _children() == before


def test_a_program_that_ends_its_process_while_loading_is_one_line(tmp_path):
    """Rank 0 inspects the program: a program that ends it while loading is said as before, with
    the last line it wrote to stderr, and the other rank goes with it."""
    leaves = program_variant(tmp_path, "leaves", "import torch\n",
                      "import os, sys\nprint('no GPU here, bye', file=sys.stderr, flush=True)\nos._exit(1)\n")
    before = _children()
    with pytest.raises(WorkloadError) as caught:
        import_program(leaves, 2, parent=tmp_path / "w")
    assert str(caught.value) == "loading leaves.py failed: no GPU here, bye"
    assert _children() == before
    assert not (tmp_path / "w").exists()
