"""gemm_reducescatter on the CPU under L2's perturbed schedules: the seed and the templates' host
logic and kernels, run whole over the CPU model of CUDA, NCCL and cuBLAS
(workloads/cp_attention/emulator/, with this workload's additions in
workloads/gemm_reducescatter/emulator/rs_emu.h: NCCL's reduce-scatter and reduce, the copy
engines' batched copy, stream-ordered flag writes), driven by
workloads/moe_dispatch_combine/emulator/moe_main.inc (one launch alone, launches back to back with
fresh inputs in stream order, one after a host wait), with the perturbation of a seed applied
around every cuco_launch exactly as the rank worker's interposer applies it.

The streams' own random sleeps are off (`quiet`): what moves the schedule is the perturbation
alone. Each hold of a late rank (every kind but scatter) lasts its time and then until the rest of
the run can go no further without that rank (the driver's SETTLE, emulator/emu_progress.h): a
GPU's hold outlasts the peers' kernels, the emulator's CTAs run one after another on a shared CPU,
and a hold of any fixed time may end before a peer has run ahead on a busy machine. A correct
candidate survives every kind of perturbation, aimed at every rank, at W=2 and W=4, with row blocks
that are no whole number of chunks; broken variants of ce_push (one staging buffer instead of
two; a reduction that waits for the previous launch's flags) and of ce_fold (one staging buffer; a
fold that waits for the previous chunk's flags) fail under the kind that opens their window,
whatever the machine's load. ce_fold's fold is a cuBLASLt matmul: its CPU model is
workloads/gemm_reducescatter/emulator/cublasLt.h."""

import subprocess

import numpy as np
import pytest

from cuco_tui.harness.perturb import KINDS, kind_of, target_of
from cuco_tui.workload.manifest import load_workload
from emulator_helpers import (candidate_source, compile_emulated, needs_gxx, seeds_of, with_driver,
                              failures as emulated_failures)
from rs_common import BOOK, REF, W

DRIVER = load_workload("moe_dispatch_combine").root / "emulator"
OWN = W.root / "emulator"
UNIT_US = 10_000  # holds of 10 and 20 ms, then (a late rank's) until the run has settled

CANDIDATES = {  # name: (strategy, knobs); None: the seed
    "seed": (None, None),
    "chunked_rs_4": ("host_chunked", {"chunks": 4, "collective": "reduce_scatter"}),
    "chunked_reduce_2": ("host_chunked", {"chunks": 2, "collective": "reduce"}),
    "ce_push_1": ("ce_push", {"chunks": 1, "reduce_blocks": 64, "movers": "one"}),
    "ce_push_4": ("ce_push", {"chunks": 4, "reduce_blocks": 128, "movers": "one"}),
    "ce_push_2_per_peer": ("ce_push", {"chunks": 2, "reduce_blocks": 64, "movers": "per_peer"}),
    "ce_fold_4": ("ce_fold", {"chunks": 4, "movers": "one"}),
    "ce_fold_2": ("ce_fold", {"chunks": 2, "movers": "one"}),
    "ce_fold_8_per_peer": ("ce_fold", {"chunks": 8, "movers": "per_peer"}),
}
# Broken on purpose (each from a correct candidate), with the kinds of perturbation that must
# expose them. The emulator runs a kernel's CTAs one after another, a fiber per thread, so the
# faster rank's reduction takes tens of milliseconds, longer on a busy machine: a hold that lasted
# a fixed time (it once was 80 ms) let single_staging through there. Held until the run has
# settled, the late rank's reduction runs only after its peer has pushed its next partial (and
# stale_flags' peer has summed before the late copy lands), whatever the load.
PARITY = "const int parity = (int)(e % 2);"
TARGET = "(const unsigned long long*)c->flags.local, e, W, r,"
FOLD_WAIT = "(const unsigned long long*)c->flags.local, e, W, r, k,"
FAULTS = {  # name: (the candidate it breaks, (text, its replacement), the kinds that expose it)
    # One staging buffer: a peer a launch ahead pushes its next partial into the slot this rank's
    # reduction has not read yet (this rank's own GEMM and reduction held back).
    "single_staging": ("ce_push_1", (PARITY, "const int parity = 0;"), ("compute_late", "rank_late")),
    # The reduction waits for the previous launch's flags: it sums slots whose copies are still
    # on their way.
    "stale_flags": ("ce_push_1", (TARGET, "(const unsigned long long*)c->flags.local, e - 1, W, r,"),
                    ("copies_late",)),
    # ce_fold with one staging buffer: a peer a launch ahead overwrites a chunk this rank's fold
    # has not read yet (its folds, GEMMs, held back). From 2 chunks, not 4: a seed's holds stop
    # after 32 units per configure (cuco_perturb.h), which the driver makes once per run, and
    # ce_fold_4's first launch alone (12 GEMMs and kernels, 2 units each) spends them before the
    # back-to-back launches where the window is. (L2 configures each round before its two launches
    # back to back, so there the first one's folds are held.)
    "fold_single_staging": ("ce_fold_2", (PARITY, "const int parity = 0;"), ("compute_late", "rank_late")),
    # ce_fold's fold of chunk k waits for chunk k-1's flags: it folds in a chunk still on its way.
    "fold_previous_chunk": ("ce_fold_4", (FOLD_WAIT, "(const unsigned long long*)c->flags.local, e, W, r, "
                                                     "k > 0 ? k - 1 : 0,"), ("copies_late",)),
}
# 74 rows per rank at W=2 and 37 at W=4: no whole number of chunks (ce_fold's 4: 19, 19, 19, 17
# rows and 10, 10, 10, 7).
DIMS = {2: {"M": 148, "K": 256, "N": 128}, 4: {"M": 148, "K": 256, "N": 128}}


def _source(name):
    if name in FAULTS:
        base, (old, new), _ = FAULTS[name]
        src = _source(base)
        assert src.count(old) == 1, name
        return src.replace(old, new)
    strategy, knobs = CANDIDATES[name]
    return candidate_source(W.seed, BOOK, strategy, knobs or {})


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    root = tmp_path_factory.mktemp("rs_e2e")
    names = list(CANDIDATES) + list(FAULTS)
    sources = {n: '#include "rs_emu.h"\n' + with_driver(_source(n), "moe_main.inc") for n in names}
    return compile_emulated(sources, root, (OWN, DRIVER))


def _meta(world, dims, launches, seed, timeout):
    lines = [f"{world} {launches} {seed} {timeout} 1 -1", f"{len(dims)} " + " ".join(f"{k} {v}" for k, v in dims.items())]
    for rank in range(world):
        spec = REF.io_spec(dims, world, rank)
        bufs = [("in", *b) for b in spec["inputs"]] + [("out", *b) for b in spec["outputs"]]
        lines.append(str(len(bufs)))
        for kind, name, shape, _dtype in bufs:
            lines.append(f"{kind} {name} 1 {len(shape)} " + " ".join(map(str, list(shape) + [1] * (4 - len(shape)))))
    return "\n".join(lines) + "\n"


def run(binary, folder, world, perturb_seed=None, launches=3, seed=7, timeout=90, unit_us=UNIT_US, settle=True):
    """Runs the emulated candidate, perturbed by `perturb_seed` (None: not at all) in units of
    `unit_us`, streams quiet; `settle`: a late rank's holds last until the run has settled too.
    Returns [(what, rank, y as bf16 bits, the float64 answer)] for every launch and rank."""
    dims = DIMS[world]
    folder.mkdir(parents=True)
    want = []
    for i in range(launches + 1):
        inputs = []
        for rank in range(world):
            spec = REF.io_spec(dims, world, rank)
            bufs = {n: np.empty(s, dtype=np.uint16) for n, s, _ in spec["inputs"]}
            REF.fill_inputs(np, bufs, dims, world, rank, seed + i)
            for name, arr in bufs.items():
                arr.tofile(folder / f"r{rank}-{name}{i}.bin")
            inputs.append(bufs)
        want.append(REF.expected(inputs, dims, world))
    (folder / "meta.txt").write_text(_meta(world, dims, launches, seed, timeout))
    (folder / "perturb.txt").write_text(f"{-1 if perturb_seed is None else perturb_seed} {unit_us} 1 {int(settle)}\n")
    r = subprocess.run([str(binary), str(folder)], capture_output=True, text=True, timeout=timeout + 60)
    assert r.returncode == 0, f"exit {r.returncode}:\n{r.stderr[-4000:]}"
    shape = (dims["M"] // world, dims["N"])
    tags = [("first launch alone", "first", 0)] + [(f"launch {i} of {launches} back to back", f"b2b{i}", i)
                                                    for i in range(1, launches + 1)] + [("after a host wait", "last", 0)]
    return [(what, rank, np.fromfile(folder / f"r{rank}-y-{tag}.bin", dtype=np.uint16).reshape(shape),
             want[i][rank]["y"]) for what, tag, i in tags for rank in range(world)]


def failures(results):
    return emulated_failures(results, W.rtol)


@needs_gxx
@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("name", list(CANDIDATES))
def test_a_correct_candidate_survives_every_perturbation(emulated, tmp_path, name, world):
    """No false alarm: every kind, aimed at every rank (at W=4 each kind at another rank)."""
    seeds = [s for k in KINDS for s in seeds_of(k, world)] if world == 2 else [0, 5, 10, 15]
    for s in [None] + seeds:
        bad = failures(run(emulated[name], tmp_path / f"p{s}", world, s))
        assert not bad, f"{name} at W={world}, perturbation seed {s} ({s is not None and kind_of(s)}): {bad[:3]}"


@needs_gxx
@pytest.mark.parametrize("name", list(FAULTS))
def test_a_broken_push_fails_under_the_perturbation_that_opens_its_window(emulated, tmp_path, name):
    """Each seed of the kinds that open the fault's window, aimed at either rank, fails the broken
    variant and passes the candidate it was made from, the holds settling (so whatever the load)."""
    base, _, kinds = FAULTS[name]
    for kind in kinds:
        for s in seeds_of(kind, 2):
            assert not failures(run(emulated[base], tmp_path / f"base{s}", 2, s))
            assert failures(run(emulated[name], tmp_path / f"p{s}", 2, s)), (
                f"{name} passed under perturbation seed {s} ({kind} aimed at rank {target_of(s, 2)})")


@needs_gxx
@pytest.mark.parametrize("name", list(FAULTS))
def test_the_window_is_opened_by_the_settling_not_by_the_time_held(emulated, tmp_path, name):
    """Holds of 1 us, far shorter than any kernel here: only the settling can let the peer run
    ahead of the late rank, and it does, so the fault shows however fast or busy the machine is.
    (Held for their time alone, such holds let ce_push's two faults through.)"""
    _, _, kinds = FAULTS[name]
    for kind in kinds:
        for s in seeds_of(kind, 2):
            assert failures(run(emulated[name], tmp_path / f"p{s}", 2, s, unit_us=1)), (
                f"{name} passed under perturbation seed {s} ({kind} aimed at rank {target_of(s, 2)}), 1 us units")


@needs_gxx
def test_the_emulated_reduce_scatter_rounds_like_a_bf16_ring(emulated, tmp_path):
    """The seed's answer in the emulator is the ring's: each rank's partial rounded to bf16, summed
    from the owner's next rank round to the owner, rounded after every addition. So the emulated
    NCCL is the reference's numerics, not an exact sum the tolerance would hide."""
    from rs_common import bf16, f64, inputs_of

    world, dims = 4, DIMS[4]
    results = run(emulated["seed"], tmp_path / "seed", world, None, launches=1)
    inputs = inputs_of(dims, world, seed=7)
    partials = [bf16(f64(i["a"]) @ f64(i["b"])) for i in inputs]
    rows = dims["M"] // world
    for what, rank, got, _ in results[:world]:  # the first launch
        acc = partials[(rank + 1) % world]
        for step in range(2, world + 1):
            acc = bf16(acc + partials[(rank + step) % world])
        ring = acc[rank * rows:(rank + 1) * rows]
        # cuBLAS's partials are summed in float here, so a bf16 partial may differ by one rounding.
        assert np.max(np.abs(f64(got) - ring)) <= 2 ** -6 * (np.max(np.abs(ring)) + 1), (what, rank)
