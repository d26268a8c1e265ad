"""cp_attention's seed and templates whole on the CPU emulator, every rank at once, over a model of
the CUDA runtime, NCCL and cuBLAS (workloads/cp_attention/emulator/emu_runtime.h)."""

import subprocess

import numpy as np
import pytest

from cp_common import REF, SEED, W, _book, _check, _dims, _f64, _inputs, _passes, _sequential
from emulator_helpers import compile_emulated, needs_gxx
from cp_emulator import _candidate_source


# Whole candidates on the CPU: emu_runtime.h models the CUDA runtime (streams as threads with
# random delays, events, IPC), NCCL (send/recv matching, all-gather) and cuBLAS; every rank is a
# thread. A launch on one input set, then the other input set and a poisoned output in stream order
# and a second launch with no host wait between them (as the harness's back-to-back check), then
# the first set again after a host wait: races (within a launch and between launches), missing
# joins, stale state and unwritten elements show up as wrong answers, hangs as the watchdog's
# report, overruns and use after free as crashes.

E2E = [  # (name, strategy, knobs)
    ("seed", None, None),
    ("sequential", "host_sequential", {}),
    ("overlap", "attn_overlap", {"comm_priority": "high"}),
    ("balance-remote", "attn_balance", {"first": "remote", "comm_priority": "high"}),
    ("balance-local", "attn_balance", {"first": "local", "comm_priority": "same"}),
    ("balance-overlap", "balance_overlap", {"order": "remote_first", "exchange_first": "queries",
                                            "kv_pieces": "per_source", "comm_priority": "high"}),
    ("balance-overlap-grouped", "balance_overlap", {"order": "local_first", "exchange_first": "kv",
                                                    "kv_pieces": "grouped", "comm_priority": "same"}),
    ("host_flash", "host_flash", {}),
    ("ring", "ring", {"attention": "cudnn", "comm_priority": "high"}),  # priorities mean nothing to the emulator
    ("pull-ipc-1", "ipc_pull", {"mover": "ipc", "chunks": 1, "mover_blocks": 16, "comm_priority": "high",
                                "attention": "blockwise"}),
    ("pull-ipc-4", "ipc_pull", {"mover": "ipc", "chunks": 4, "mover_blocks": 32, "comm_priority": "same",
                                "attention": "cudnn"}),
    ("pull-ce-2", "ipc_pull", {"mover": "copy_engine", "chunks": 2, "mover_blocks": 16, "comm_priority": "high",
                               "attention": "blockwise"}),
    ("pull-ce-1", "ipc_pull", {"mover": "copy_engine", "chunks": 1, "mover_blocks": 16, "comm_priority": "same",
                               "attention": "cudnn"}),
]
# The candidates that deal the causal work out evenly: with the harness attention, every rank's
# calls attend to the same number of (query, key) pairs; the others' last rank does the most.
BALANCED = {"balance-remote", "balance-local", "balance-overlap", "balance-overlap-grouped"}
BLOCKWISE = {"sequential", "host_flash", "pull-ipc-1", "pull-ce-2"}  # no harness attention: no pairs counted

# balance_overlap with its merge broken: the last piece of every half-chunk (a source's keys) left
# out of the log-sum-exp merge. The checks must catch it.
DROPPED = "merge(ctx, result_of(c, b), blk.part, blk.lse, blk.n, blk.rows"
MUTANTS = {"balance-overlap-drops-a-source": ("balance-overlap", DROPPED, DROPPED.replace("blk.n,", "blk.n - 1,"))}


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    """The E2E candidates built for the CPU: {name: binary}. The seed's score budget is cut so that
    its query-block loop takes several blocks, the last one short."""
    root = tmp_path_factory.mktemp("cp_e2e")
    book = _book()
    sources = {}
    for name, strategy, knobs in E2E:
        if strategy is None:
            sources[name] = _candidate_source(SEED)
        elif strategy == "host_sequential":
            sources[name] = _candidate_source(_sequential(), score_budget=48 * 4 * 512 * 6)  # 48 rows at H=4, 96 at H=2
        else:
            s = book.get(strategy)
            sources[name] = _candidate_source(book.render(s, s.normalized(knobs)))
    for name, (of, old, new) in MUTANTS.items():
        assert sources[of].count(old) == 1, name
        sources[name] = sources[of].replace(old, new)
    return compile_emulated(sources, root)


def _run_candidate(binary, folder, dims, world, seed, launches=2):
    """Both input sets through the emulated candidate; returns [(o_A, o_B, o_A1) per rank] as float64
    (o_A1: the first set's output of the launch before the back-to-back one, copied in stream order)."""
    sl, H, D = dims["S"] // world, dims["H"], dims["D"]
    folder.mkdir()
    sets = {"A": _inputs(dims, world, seed=seed), "B": _inputs(dims, world, seed=seed + 1)}
    for tag, inputs in sets.items():
        for r, inp in enumerate(inputs):
            for name in ("q", "k", "v"):
                inp[name].astype(np.uint16).tofile(folder / f"r{r}-{name}{tag}.bin")
    (folder / "meta.txt").write_text(f"{world} {dims['S']} {H} {dims['HKV']} {D} {dims['CAUSAL']} {launches} "
                                     f"{seed} 120\n")
    r = subprocess.run([str(binary), str(folder)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"exit {r.returncode}:\n{r.stderr[-4000:]}"
    outs = []
    for rank in range(world):
        outs.append(tuple(_f64(np.fromfile(folder / f"r{rank}-o{tag}.bin", dtype=np.uint16).reshape(sl, H, D))
                          for tag in ("A", "B", "A1")))
    return outs, {tag: REF.expected(inputs, dims, world) for tag, inputs in sets.items()}


def _pairs(folder, world):
    """Each rank's (query, key) pairs through the harness attention over the run's three launches,
    or None for a candidate that does not call it."""
    files = [folder / f"r{rank}-pairs.txt" for rank in range(world)]
    return [int(f.read_text()) for f in files] if all(f.exists() for f in files) else None


E2E_SHAPES = [  # (world, dims, schedule seeds)
    (2, _dims(512, 4, 2, 64, 1), (31, 47)),  # GQA, causal; the seed's blocks: 48 rows, the last of 256 short
    (2, _dims(256, 2, 1, 64, 0), (59, 61)),   # MQA, not causal
    (4, _dims(512, 2, 2, 128, 0), (37,)),     # the seed: blocks of 96 rows, the last of 128 short
    (4, _dims(512, 4, 1, 64, 1), (41, 53)),   # MQA, causal
    (8, _dims(512, 2, 2, 64, 1), (43,)),      # 64 rows a rank; ipc_pull's 4 chunks of one tile
    (8, _dims(512, 2, 1, 64, 0), (67,)),      # not causal at W=8
]


def _shape_id(v):
    if isinstance(v, dict):
        return "-".join(f"{k}{x}" for k, x in v.items())
    return f"W{v}" if isinstance(v, int) else "seeds" + "-".join(map(str, v))


# Every candidate at every shape, under one of the shape's schedule seeds: the candidates take
# the seeds in turn, so that each seed still runs (a second seed for every candidate and shape
# proved the same behaviour twice, over a sixth of the suite's time on the emulator).
RUNS = [(name, world, dims, seeds[(i + j) % len(seeds)]) for i, (name, _, _) in enumerate(E2E)
        for j, (world, dims, seeds) in enumerate(E2E_SHAPES)]


def test_the_end_to_end_runs_have_candidates_shapes_and_seeds():
    # A parametrize over an empty list collects no test and passes in silence, and a shape with no
    # schedule seed runs nothing: the end-to-end test below must have something to run.
    assert [e[0] for e in E2E] and E2E_SHAPES
    assert all(seeds for _, _, seeds in E2E_SHAPES)
    # Each candidate at every shape; every seed of every shape run by some candidate.
    assert {(n, w, str(d)) for n, w, d, _ in RUNS} == {(n, w, str(d)) for n, _, _ in E2E for w, d, _ in E2E_SHAPES}
    assert {(w, str(d), s) for _, w, d, s in RUNS} == {(w, str(d), s) for w, d, seeds in E2E_SHAPES for s in seeds}


@needs_gxx
@pytest.mark.parametrize("name,world,dims,seed", RUNS,
                         ids=[f"{n}-{_shape_id(w)}-{_shape_id(d)}-seed{s}" for n, w, d, s in RUNS])
def test_candidate_runs_end_to_end_on_the_cpu(emulated, tmp_path, name, world, dims, seed):
    outs, want = _run_candidate(emulated[name], tmp_path / f"s{seed}", dims, world, seed)  # seed: the delays' schedule
    for rank, (got_a, got_b, got_a1) in enumerate(outs):
        _check(got_a1, want["A"][rank]["o"], f"{name} rank {rank}, the launch before the back-to-back one")
        _check(got_b, want["B"][rank]["o"], f"{name} rank {rank}, inputs replaced between launches back to back")
        _check(got_a, want["A"][rank]["o"], f"{name} rank {rank}, fresh inputs, poisoned output")
    pairs = _pairs(tmp_path / f"s{seed}", world)
    assert (pairs is None) == (name in BLOCKWISE), name
    if pairs is not None:  # the work: every visible pair once a launch, spread evenly where it should be
        S, causal = dims["S"], dims["CAUSAL"]
        visible = (S * (S + 1) // 2 if causal else S * S) * dims["H"]
        assert sum(pairs) == 3 * visible, (name, pairs)
        assert (len(set(pairs)) == 1) == (not causal or name in BALANCED), (name, pairs)


@needs_gxx
@pytest.mark.parametrize("causal", [1, 0])
def test_a_merge_that_drops_a_source_fails_the_check(emulated, tmp_path, causal):
    dims = _dims(512, 4, 2, 64, causal)
    outs, want = _run_candidate(emulated["balance-overlap-drops-a-source"], tmp_path / "run", dims, 2, 31)
    failing = [rank for rank, (got_a, _, _) in enumerate(outs)
               if not _passes(got_a, want["A"][rank]["o"], W.rtol, W.floor)]
    # Causal at W=2, rank 0's two halves are one piece each (its first half sees only its own keys,
    # its second half, computed by rank 1, only rank 0's): nothing merged, nothing dropped.
    assert failing == ([1] if causal else [0, 1])
