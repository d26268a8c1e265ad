"""kv_transfer end to end on the CPU: the seed and every strategy template, rendered at several knob
settings, run whole (cuco_init, launches, cuco_teardown, both ranks at once as threads) over the
CPU model of the CUDA runtime, NCCL and cuBLAS in workloads/cp_attention/emulator/ (streams as
threads with random delays, CUDA-IPC, a watchdog for hangs, guard pages for overruns and use after
free), driven by workloads/kv_transfer/emulator/kv_main.inc the way the rank worker drives a candidate,
with every launch's output checked: one launch alone; launches back to back, each with fresh inputs
and a poisoned output copied in stream order before it and its output copied out in stream order
after it (no host wait); a launch after a host wait; a barrier (the harness's, before teardown),
then teardown. Rank 1's kv is checked against the reference's float64 answer with the workload's
tolerance, as harness.verify.compare does (no element unwritten or non-finite, every element within
rtol of |ref| + rms(ref)). Some schedules make one rank's streams lag far behind the other's: a
strategy's variants take turns on each shape's lagging and calm schedules. Races show up as wrong
answers, hangs as the watchdog's report, overruns and use after free as crashes."""

import subprocess

import numpy as np
import pytest

from cuco_tui.harness.bf16 import from_bf16_bits
from cuco_tui.harness.verify import POISON_BF16
from cuco_tui.core.reference import reference_module
from cuco_tui.workload.manifest import load_workload
from emulator_helpers import candidate_source, compile_emulated, needs_gxx, schedules_of, turns, with_driver

W = load_workload("kv_transfer")
EMU = W.root / "emulator"
REF = reference_module(W.reference)

CANDIDATES = [  # (name, strategy or None for the seed, knobs)
    ("seed", None, None),
    ("layered-2", "host_layered", {"groups": 2}),
    ("layered-8", "host_layered", {"groups": 8}),
    ("pull-2", "ce_pull", {"groups": 2}),
    ("pull-4", "ce_pull", {"groups": 4}),
    ("pull-8", "ce_pull", {"groups": 8}),
    ("pull-32", "ce_pull", {"groups": 32}),   # more groups than layers: one layer a group
    ("push-2", "ce_push", {"groups": 2}),
    ("push-4", "ce_push", {"groups": 4}),
    ("push-8", "ce_push", {"groups": 8}),
    ("push-32", "ce_push", {"groups": 32}),
    ("ipc-4-16", "ipc_push", {"groups": 4, "mover_blocks": 16}),
    ("ipc-2-64", "ipc_push", {"groups": 2, "mover_blocks": 64}),
    ("ipc-8-8", "ipc_push", {"groups": 8, "mover_blocks": 8}),
]

SHAPES = [  # (dims, schedules); S, H, D multiples of 64 (the manifest), L free. A schedule: the seed of
    # the random delays, and the rank whose streams lag far behind the other's (-1: every stream's
    # delays drawn from the seed).
    ({"L": 5, "S": 64, "H": 64, "D": 64}, ((11, -1), (23, 1))),      # 5 layers: uneven groups of 2, 4 and 8
    ({"L": 12, "S": 128, "H": 128, "D": 64}, ((37, 0), (41, -1))),   # 12 layers: 8 groups of 1 or 2
]


def _book():
    from cuco_tui.agents.offline import StrategyBook

    return StrategyBook.load(W.root, W.seed)


def _source(strategy, knobs, book):
    return candidate_source(W.seed, book, strategy, knobs)


def emulated_source(src):
    return with_driver(src, "kv_main.inc")


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    root = tmp_path_factory.mktemp("kv_e2e")
    book = _book()
    return compile_emulated({name: emulated_source(_source(s, k, book)) for name, s, k in CANDIDATES}, root, (EMU,))


def _inputs(dims, seed):
    spec = REF.io_spec(dims, 2, 0)
    bufs = {n: np.empty(s, dtype=np.uint16) for n, s, _ in spec["inputs"]}
    REF.fill_inputs(np, bufs, dims, 2, 0, seed)
    return [bufs, {}]


def run_candidate(binary, folder, dims, seed, lagging=-1, launches=4, teardown_barrier=True, timeout=60,
                  perturb_seed=None):
    """Runs the emulated candidate (input set i from seed + i; `lagging`: the rank whose streams lag
    far behind the other's, -1 for delays drawn per stream from the seed; `perturb_seed`: L2's
    schedule perturbation of that seed around every launch, as the rank worker applies it); returns
    [(what, rank 1's kv as bf16 bits, the float64 answer)] for every launch it checks.

    teardown_barrier=False tears a rank down as soon as its own stream is done: the IPC templates
    (ce_pull, ce_push, ipc_push) then crash on a peer's last signal or copy into freed memory; they
    rely on the harness's barrier before cuco_teardown (worker.py), which the default models."""
    folder.mkdir(parents=True)
    L, S, H, D = dims["L"], dims["S"], dims["H"], dims["D"]
    want = []
    for i in range(launches + 1):
        inputs = _inputs(dims, seed + i)
        for name in ("x", "w"):
            inputs[0][name].astype(np.uint16).tofile(folder / f"r0-{name}{i}.bin")
        want.append(REF.expected(inputs, dims, 2)[1]["kv"])
    (folder / "meta.txt").write_text(f"{L} {S} {H} {D} {launches} {seed} {timeout} {int(teardown_barrier)} "
                                     f"{lagging}\n")
    if perturb_seed is not None:
        (folder / "perturb.txt").write_text(f"{perturb_seed} 2000 0\n")
    r = subprocess.run([str(binary), str(folder)], capture_output=True, text=True, timeout=timeout + 60)
    assert r.returncode == 0, f"exit {r.returncode}:\n{r.stderr[-4000:]}"

    def got(tag):
        return np.fromfile(folder / f"r1-kv-{tag}.bin", dtype=np.uint16).reshape(L, S, 2 * D)

    return ([("first launch alone", got("first"), want[0])]
            + [(f"launch {i} of {launches} back to back, inputs replaced and output poisoned in stream order",
                got(f"b2b{i}"), want[i]) for i in range(1, launches + 1)]
            + [("a launch after a host wait, fresh inputs", got("last"), want[0])])


def check(got_bits, want, what, rtol=None):
    """harness.verify.compare's criterion against the float64 answer, with the worst element named."""
    rtol = W.rtol if rtol is None else rtol
    unwritten = int((got_bits == POISON_BF16).sum())
    got = from_bf16_bits(np, got_bits).astype(np.float64)
    finite = np.isfinite(got)
    rms = float(np.sqrt(np.mean(want * want)))
    rel = np.where(finite, np.abs(np.where(finite, got, 0.0) - want) / (np.abs(want) + rms), np.inf)
    worst = np.unravel_index(int(np.argmax(rel)), rel.shape)
    bad = int((rel > rtol).sum())
    assert unwritten == 0 and finite.all() and bad == 0, (
        f"{what}: {unwritten} unwritten, {int((~finite).sum())} non-finite, {bad} of {rel.size} beyond rtol "
        f"{rtol}; worst at {tuple(int(i) for i in worst)} (layer, row, col): got {got[worst]:.4g}, "
        f"want {want[worst]:.4g}, rel {float(rel[worst]):.3g}; bad layers "
        f"{sorted(set(int(i) for i in np.nonzero(rel > rtol)[0]))}")


def _shape_id(v):
    if isinstance(v, dict):
        return "-".join(f"{k}{x}" for k, x in v.items())
    return "seeds" + "-".join(f"{s}" + (f"lag{lag}" if lag >= 0 else "") for s, lag in v)


def test_the_seed_is_the_host_sequential_template():
    book = _book()
    assert book.render(book.get("host_sequential"), {}) == W.seed.read_text()


def test_every_template_runs_on_the_cpu():
    assert {s for _, s, _ in CANDIDATES if s} | {"host_sequential"} == {s.name for s in _book().strategies}


# A strategy's variants take turns on each shape's two schedules (emulator_helpers.schedules_of).
TURN = turns(CANDIDATES)
RUNS = [(name, dims, schedules_of(TURN[name], i, schedules)) for name, _, _ in CANDIDATES
        for i, (dims, schedules) in enumerate(SHAPES)]


def test_the_end_to_end_runs_have_candidates_shapes_and_schedules():
    # A parametrize over an empty list collects no test and passes in silence, and a shape with no
    # schedule runs nothing: the end-to-end test below must have something to run.
    assert [c[0] for c in CANDIDATES] and SHAPES
    assert all(schedules for _, schedules in SHAPES)


def test_the_variants_share_out_the_schedules():
    """Each shape has a lagging schedule and another; each variant meets both, each strategy every
    schedule of every shape."""
    for _, schedules in SHAPES:
        assert sorted(lag >= 0 for _, lag in schedules) == [False, True], schedules
    strategy = {name: s for name, s, _ in CANDIDATES}
    for name in strategy:
        assert {lag >= 0 for n, _, schedules in RUNS if n == name for _, lag in schedules} == {False, True}, name
    for s in set(strategy.values()):
        ran = {(str(d), sch) for n, d, schedules in RUNS if strategy[n] == s for sch in schedules}
        assert ran == {(str(d), sch) for d, schedules in SHAPES for sch in schedules}, s


@needs_gxx
@pytest.mark.parametrize("name,dims,schedules", RUNS,
                         ids=[f"{n}-{_shape_id(d)}-{_shape_id(s)}" for n, d, s in RUNS])
def test_candidate_runs_end_to_end_on_the_cpu(emulated, tmp_path, name, dims, schedules):
    for seed, lagging in schedules:
        for what, got, want in run_candidate(emulated[name], tmp_path / f"s{seed}", dims, seed, lagging):
            check(got, want, f"{name}, schedule seed {seed}, lagging rank {lagging}, {what}")


# L2's perturbed schedules (cuco_tui/harness/perturb_lib/cuco_perturb.h): copies_late on rank 0,
# rank_late on rank 1, compute_late on rank 0, scatter aimed at rank 1; a correct candidate survives all.
PERTURBED = (0, 5, 2, 7)


@needs_gxx
@pytest.mark.parametrize("name", [c[0] for c in CANDIDATES])
def test_candidate_survives_the_perturbed_schedules(emulated, tmp_path, name):
    dims = SHAPES[0][0]
    for p in PERTURBED:
        for what, got, want in run_candidate(emulated[name], tmp_path / f"p{p}", dims, 11, perturb_seed=p):
            check(got, want, f"{name}, perturbation seed {p}, {what}")


MUTANTS = {  # name: (strategy, knobs, a wait the candidate needs, what dropping it does)
    "layered-no-compute-wait": (
        "host_layered", {"groups": 4},
        "CUCO_TRY_CUDA(ctx, cudaStreamWaitEvent(c->send_stream, c->computed[g], 0));",
        "the send stream sends each group before its GEMM has computed it"),
    "push-no-consumed-wait": (
        "ce_push", {"groups": 4},
        'wait_for<<<1, 1, 0, c->copy_stream>>>(&mine->consumed, kConsumed, kDecode, e - 1, trace, '
        'CUCO_WAIT_SITE("consumed"));',
        "rank 0 copies the next launch's groups over rank 1's landing buffer before rank 1 has copied "
        "the last launch's out"),
}


def _failures(binary, folder, dims, seeds, lagging):
    failures = 0
    for seed in seeds:
        for what, got, want in run_candidate(binary, folder / f"s{seed}", dims, seed, lagging, launches=8):
            try:
                check(got, want, what)
            except AssertionError:
                failures += 1
                break
        if failures:
            return failures  # one is enough to tell
    return failures


@needs_gxx
def test_a_missing_wait_fails(tmp_path):
    """The test can fail: each mutant (a template with one wait dropped) gets a wrong answer. Rank 1
    lags, so that rank 0 runs a launch ahead of it (ce_push without its wait then overwrites what
    rank 1 has not copied out), over 8 launches back to back; small layers, so rank 0's GEMMs do
    not hold it back."""
    book = _book()
    sources = {}
    for name, (strategy, knobs, wait, _) in MUTANTS.items():
        src = _source(strategy, knobs, book)
        assert wait in src, name
        sources[name] = emulated_source(src.replace(wait, ""))
    binaries = compile_emulated(sources, tmp_path, (EMU,))
    # The emulator's delays are real sleeps, so whether a race shows also depends on how the machine
    # schedules the threads: until a mutant fails it gets more seeds; the first failure ends it.
    seeds = (37, 41, 43, *range(101, 125, 2))
    for name, (_, _, _, why) in MUTANTS.items():
        assert _failures(binaries[name], tmp_path / f"{name}-runs", SHAPES[0][0], seeds, lagging=1) > 0, (
            f"{name} went unnoticed over {len(seeds)} seeds: {why}")
