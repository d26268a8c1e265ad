"""moe_dispatch_combine end to end on the CPU: the seed and the strategy templates, rendered at
several knob settings, run whole (cuco_init, launches, cuco_teardown, every rank at once as threads)
over the CPU model of the CUDA runtime, NCCL and cuBLAS in workloads/cp_attention/emulator/
(streams as threads with random delays, CUDA-IPC, NCCL send/recv matching, a watchdog for hangs,
guard pages for overruns and use after free), driven by workloads/moe_dispatch_combine/emulator/
moe_main.inc the way the rank worker drives a candidate: one launch alone; launches back to back,
each with fresh inputs (routing included) and poisoned outputs copied in stream order before it and
its output copied out in stream order after it (no host wait); a launch after a host wait; a
barrier, then teardown. Every rank's `out` is checked against the reference's float64 answer with
the workload's tolerance, as harness.verify.compare does. Races show up as wrong answers, hangs as
the watchdog's report, overruns and use after free as crashes. The driver also reports the cuBLAS
GEMM calls, so each test checks which way the expert GEMMs went (grouped_gemm.cuh.j2: one grouped
GEMM per call, or one cublasGemmEx per problem when its problems average many rows).

Each shape has two schedules (one with a rank whose streams lag far behind, one without). A
strategy's variants take turns: one runs the lagging schedule of a shape where the next runs the
other, so every variant meets a lagging rank at W=2 and at W=4, and every strategy every schedule
of every shape (a strategy with one variant runs them all); the perturbation kinds are shared out
the same way. Running every variant under every schedule proved each strategy's behaviour twice."""

import subprocess

import numpy as np
import pytest

from cuco_tui.harness.bf16 import from_bf16_bits
from cuco_tui.harness.verify import POISON_BF16
from cuco_tui.core.reference import reference_module
from cuco_tui.workload.manifest import load_workload
from emulator_helpers import candidate_source, compile_emulated, needs_gxx, schedules_of, turns, with_driver

W = load_workload("moe_dispatch_combine")
EMU = W.root / "emulator"
KINDS = {"bf16": np.uint16, "i32": np.int32, "f32": np.float32}
DTYPE_CODES = {"bf16": 1, "f32": 3, "i32": 4}  # cuco_abi.h enum cuco_dtype


REF = reference_module(W.reference)

# The pipelines run cuBLAS here: the emulator models cuBLAS, not the prebuilt CUTLASS grouped GEMM
# (their default), whose transport and waits are the same code; the CUTLASS way is verified on GPUs
# (test_moe_grouped_gemm.py).
CANDIDATES = [  # (name, strategy or None for the seed, knobs)
    ("seed", None, None),
    ("overlap-high", "dispatch_overlap", {"comm_priority": "high"}),
    ("overlap-same", "dispatch_overlap", {"comm_priority": "same"}),
    ("chunked-4", "chunked_pipeline", {"chunks": 4}),
    ("chunked-2", "chunked_pipeline", {"chunks": 2}),
    ("ipc-dispatch-ipc-16", "ipc_dispatch", {"mover": "ipc", "mover_blocks": 16}),
    ("ipc-dispatch-ce", "ipc_dispatch", {"mover": "copy_engine", "mover_blocks": 16}),
    ("pipe-ce-4-shared", "expert_pipeline", {"mover": "copy_engine", "groups": 4, "mover_blocks": 16,
                                             "results": "shared", "gemm": "cublas"}),
    ("pipe-ce-2-separate", "expert_pipeline", {"mover": "copy_engine", "groups": 2, "mover_blocks": 16,
                                               "results": "separate", "gemm": "cublas"}),
    ("pipe-ce-16-separate", "expert_pipeline", {"mover": "copy_engine", "groups": 16, "mover_blocks": 16,
                                                "results": "separate", "gemm": "cublas"}),
    ("pipe-ipc-4-16-shared", "expert_pipeline", {"mover": "ipc", "groups": 4, "mover_blocks": 16,
                                                 "results": "shared", "gemm": "cublas"}),
    ("pipe-ipc-8-64-separate", "expert_pipeline", {"mover": "ipc", "groups": 8, "mover_blocks": 64,
                                                   "results": "separate", "gemm": "cublas"}),
    ("arrival-ce-4", "arrival_pipeline", {"mover": "copy_engine", "chunks": 4, "mover_blocks": 16, "gemm": "cublas"}),
    ("arrival-ce-1", "arrival_pipeline", {"mover": "copy_engine", "chunks": 1, "mover_blocks": 16, "gemm": "cublas"}),
    ("arrival-ipc-2-32", "arrival_pipeline", {"mover": "ipc", "chunks": 2, "mover_blocks": 32, "gemm": "cublas"}),
    ("arrival-ipc-8-16", "arrival_pipeline", {"mover": "ipc", "chunks": 8, "mover_blocks": 16, "gemm": "cublas"}),
]


def _dims(T, H, E, I, HOT):
    return {"T": T, "H": H, "E": E, "I": I, "HOT": HOT}


SHAPES = [  # (world, dims, schedules): H, I multiples of 64, E a multiple of W and >= 8 (the manifest
    # and the reference). A schedule: the seed of the random delays, and the rank whose streams lag
    # far behind the others' (-1: every stream's delays drawn from the seed).
    (2, _dims(16, 64, 8, 64, 25), ((11, -1), (23, 1))),     # 4 experts a rank: 16 groups -> 4
    (2, _dims(24, 128, 16, 64, 90), ((37, 0), (41, -1))),   # heavy skew, 8 experts a rank
    (4, _dims(8, 64, 8, 64, 50), ((43, -1), (47, 3))),      # 2 experts a rank
    (4, _dims(3, 64, 16, 64, 60), ((53, 2), (59, -1))),     # 3 tokens: ranks get nothing from some peers
]

# arrival_pipeline cuts a peer's rows into chunks on 128-row tiles: the shapes above send fewer
# rows than that to a peer, so all of them travel in chunk 0. These send 2-4 tiles to each peer
# (and skewed, more to some), so every chunk count cuts, some chunks stay empty, and experts
# straddle the cuts. Their seeds keep the reference's own bf16 error (simulate against float64)
# below 0.018 on every input set, clear of the 0.02 tolerance: with this many rows some seeds put
# an element at 0.02 whatever the candidate does.
CHUNKED_SHAPES = [
    (2, _dims(96, 64, 8, 64, 25), ((61, -1), (67, 1))),     # ~384 rows to the peer: 3 tiles
    (4, _dims(128, 64, 16, 64, 60), ((71, 3), (83, -1))),   # ~256 rows to each peer, skewed
]

# grouped_gemm.cuh.j2 runs a call as one cublasGemmEx per problem when its problems average at
# least kPerProblemRows (128) rows, else as one grouped GEMM. SHAPES give no expert that many rows:
# every call there is grouped. Here every expert gets 160 rows from each rank (E = 8: a token's 8
# experts are all of them), so every call runs per problem, except where arrival_pipeline's chunks
# (4 or 8) cut an expert's rows into pieces that average fewer: those runs take both ways. The
# seeds keep the reference's own bf16 error below 0.017 on every input set (see CHUNKED_SHAPES).
GEMM_SHAPE = (2, _dims(160, 64, 8, 64, 25), ((97, -1), (107, 1)))
BOTH_WAYS = {"arrival-ce-4", "arrival-ipc-8-16"}


def _book():
    from cuco_tui.agents.offline import StrategyBook

    return StrategyBook.load(W.root, W.seed)


def _source(strategy, knobs, book):
    return candidate_source(W.seed, book, strategy, knobs)


def emulated_source(src):
    return with_driver(src, "moe_main.inc")


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    root = tmp_path_factory.mktemp("moe_e2e")
    book = _book()
    return compile_emulated({name: emulated_source(_source(s, k, book)) for name, s, k in CANDIDATES}, root, (EMU,))


def _inputs(dims, world, seed):
    out = []
    for rank in range(world):
        spec = REF.io_spec(dims, world, rank)
        bufs = {n: np.empty(s, dtype=KINDS[d]) for n, s, d in spec["inputs"]}
        REF.fill_inputs(np, bufs, dims, world, rank, seed)
        out.append(bufs)
    return out


def _meta(world, dims, launches, seed, timeout, teardown_barrier, lagging):
    lines = [f"{world} {launches} {seed} {timeout} {int(teardown_barrier)} {lagging}",
             f"{len(dims)} " + " ".join(f"{k} {v}" for k, v in dims.items())]
    for rank in range(world):
        spec = REF.io_spec(dims, world, rank)
        bufs = [("in", *b) for b in spec["inputs"]] + [("out", *b) for b in spec["outputs"]]
        lines.append(str(len(bufs)))
        for kind, name, shape, dtype in bufs:
            dims4 = list(shape) + [1] * (4 - len(shape))
            lines.append(f"{kind} {name} {DTYPE_CODES[dtype]} {len(shape)} " + " ".join(map(str, dims4)))
    return "\n".join(lines) + "\n"


def cublas_calls(folder):
    """The GEMM calls of an emulated run (every rank and launch), as moe_main.inc wrote them:
    {"gemm_ex": cublasGemmEx calls, "grouped": cublasGemmGroupedBatchedEx calls}."""
    words = (folder / "cublas-calls.txt").read_text().split()
    return {words[0]: int(words[1]), words[2]: int(words[3])}


def run_candidate(binary, folder, world, dims, seed, lagging=-1, launches=3, teardown_barrier=True, timeout=90,
                  perturb_seed=None):
    """Runs the emulated candidate (input set i from seed + i; `perturb_seed`: L2's schedule
    perturbation of that seed around every launch, as the rank worker applies it); returns [(what,
    rank, out as bf16 bits, the float64 answer)] for every launch it checks and every rank."""
    folder.mkdir(parents=True)
    want = []
    for i in range(launches + 1):
        inputs = _inputs(dims, world, seed + i)
        for rank, bufs in enumerate(inputs):
            for name, arr in bufs.items():
                arr.tofile(folder / f"r{rank}-{name}{i}.bin")
        want.append(REF.expected(inputs, dims, world))
    (folder / "meta.txt").write_text(_meta(world, dims, launches, seed, timeout, teardown_barrier, lagging))
    if perturb_seed is not None:
        (folder / "perturb.txt").write_text(f"{perturb_seed} 2000 0\n")
    r = subprocess.run([str(binary), str(folder)], capture_output=True, text=True, timeout=timeout + 60)
    assert r.returncode == 0, f"exit {r.returncode}:\n{r.stderr[-4000:]}"
    shape = (dims["T"], dims["H"])
    checks = [("first launch alone", "first", 0)]
    checks += [(f"launch {i} of {launches} back to back, inputs replaced and output poisoned in stream order",
                f"b2b{i}", i) for i in range(1, launches + 1)]
    checks += [("a launch after a host wait, fresh inputs", "last", 0)]
    return [(what, rank, np.fromfile(folder / f"r{rank}-out-{tag}.bin", dtype=np.uint16).reshape(shape),
             want[i][rank]["out"]) for what, tag, i in checks for rank in range(world)]


def check(got_bits, want, what, rtol=None):
    """harness.verify.compare's criterion against the float64 answer, with the worst element named."""
    rtol = W.rtol if rtol is None else rtol
    unwritten = int((got_bits == POISON_BF16).sum())
    got = from_bf16_bits(np, got_bits).astype(np.float64)
    finite = np.isfinite(got)
    rms = float(np.sqrt(np.mean(want * want)))
    rel = np.where(finite, np.abs(np.where(finite, got, 0.0) - want) / (np.abs(want) + rms), np.inf)
    worst = np.unravel_index(int(np.argmax(rel)), rel.shape)
    bad = rel > rtol
    assert unwritten == 0 and finite.all() and not bad.any(), (
        f"{what}: {unwritten} unwritten, {int((~finite).sum())} non-finite, {int(bad.sum())} of {rel.size} beyond "
        f"rtol {rtol}; worst at (token, column) {tuple(int(i) for i in worst)}: got {got[worst]:.4g}, want "
        f"{want[worst]:.4g}, rel {float(rel[worst]):.3g}; bad tokens {sorted(set(np.nonzero(bad)[0].tolist()))}")


def _shape_id(v):
    if isinstance(v, dict):
        return "-".join(f"{k}{x}" for k, x in v.items())
    if isinstance(v, int):
        return f"W{v}"
    return "seeds" + "-".join(f"{s}" + (f"lag{lag}" if lag >= 0 else "") for s, lag in v)


def test_the_seed_is_the_host_sequential_template():
    book = _book()
    assert book.render(book.get("host_sequential"), {}) == W.seed.read_text()


def test_every_template_runs_on_the_cpu():
    assert {s for _, s, _ in CANDIDATES if s} | {"host_sequential"} == {s.name for s in _book().strategies}


TURN = turns(CANDIDATES)


def _schedules_of(name, index, schedules):
    return schedules_of(TURN[name], index, schedules)


def _runs(shapes, names):
    """(name, world, dims, schedules) for every candidate named and every shape, with its schedules."""
    return [(n, world, dims, _schedules_of(n, i, schedules)) for n in names for i, (world, dims, schedules)
            in enumerate(shapes)]


def _run_id(run):
    name, world, dims, schedules = run
    return "-".join((name, _shape_id(world), _shape_id(dims), _shape_id(schedules)))


RUNS = _runs(SHAPES, [c[0] for c in CANDIDATES])


def test_the_end_to_end_runs_have_candidates_shapes_and_schedules():
    # A parametrize over an empty list collects no test and passes in silence, and a shape with no
    # schedule runs nothing: the end-to-end test below must have something to run.
    assert [c[0] for c in CANDIDATES] and SHAPES
    assert all(schedules for _, _, schedules in SHAPES)


def test_the_variants_share_out_the_schedules_and_perturbations():
    """Each shape has a lagging schedule and another; each variant meets both at W=2 and at W=4;
    each strategy meets every schedule of every shape and every perturbation kind."""
    for shapes in (SHAPES, CHUNKED_SHAPES, [GEMM_SHAPE]):
        for _, _, schedules in shapes:
            assert sorted(lag >= 0 for _, lag in schedules) == [False, True], schedules
    strategy = {name: s for name, s, _ in CANDIDATES}
    for name in strategy:
        ran = [(w, lag >= 0) for n, w, _, schedules in RUNS if n == name for _, lag in schedules]
        assert set(ran) == {(2, False), (2, True), (4, False), (4, True)}, name
    for shapes, names in ((SHAPES, strategy), (CHUNKED_SHAPES, ARRIVAL), ([GEMM_SHAPE], strategy)):
        for s in {strategy[n] for n in names}:
            ran = {(w, str(d), sch) for n, w, d, schedules in _runs(shapes, names) if strategy[n] == s
                   for sch in schedules}
            assert ran == {(w, str(d), sch) for w, d, schedules in shapes for sch in schedules}, s
    for s in set(strategy.values()):
        assert {p for n in strategy if strategy[n] == s for p in _perturbations_of(n)} == set(PERTURBED), s


@needs_gxx
@pytest.mark.parametrize("name,world,dims,schedules", RUNS, ids=[_run_id(r) for r in RUNS])
def test_candidate_runs_end_to_end_on_the_cpu(emulated, tmp_path, name, world, dims, schedules):
    for seed, lagging in schedules:
        for what, rank, got, want in run_candidate(emulated[name], tmp_path / f"s{seed}", world, dims, seed, lagging):
            check(got, want, f"{name}, schedule seed {seed}, lagging rank {lagging}, rank {rank}, {what}")
        calls = cublas_calls(tmp_path / f"s{seed}")
        assert calls["gemm_ex"] == 0 and calls["grouped"] > 0, f"few rows an expert: every call grouped, not {calls}"


@needs_gxx
@pytest.mark.parametrize("name", [c[0] for c in CANDIDATES])
def test_candidate_runs_per_problem_gemms_on_the_cpu(emulated, tmp_path, name):
    world, dims, schedules = GEMM_SHAPE
    for seed, lagging in _schedules_of(name, 0, schedules):
        for what, rank, got, want in run_candidate(emulated[name], tmp_path / f"s{seed}", world, dims, seed, lagging):
            check(got, want, f"{name}, schedule seed {seed}, lagging rank {lagging}, rank {rank}, {what}")
        calls = cublas_calls(tmp_path / f"s{seed}")
        assert calls["gemm_ex"] > 0, f"160 rows an expert: calls run per problem, not {calls}"
        assert (calls["grouped"] > 0) == (name in BOTH_WAYS), calls


# L2's perturbed schedules (cuco_tui/harness/perturb_lib/cuco_perturb.h): at W=2 copies_late on rank 0,
# rank_late on rank 1, compute_late on rank 0, scatter aimed at rank 1; a correct candidate survives all.
PERTURBED = (0, 5, 2, 7)


def _perturbations_of(name):
    """The perturbation seeds `name` runs: two of them by its turn (a rank aimed at each), all four
    for a strategy with one variant."""
    return PERTURBED if TURN[name] is None else PERTURBED[2 * TURN[name]:2 * TURN[name] + 2]


@needs_gxx
@pytest.mark.parametrize("name", [c[0] for c in CANDIDATES])
def test_candidate_survives_the_perturbed_schedules(emulated, tmp_path, name):
    world, dims, _ = SHAPES[0]
    for p in _perturbations_of(name):
        for what, rank, got, want in run_candidate(emulated[name], tmp_path / f"p{p}", world, dims, 11,
                                                   perturb_seed=p):
            check(got, want, f"{name}, perturbation seed {p}, rank {rank}, {what}")


ARRIVAL = [c[0] for c in CANDIDATES if c[1] == "arrival_pipeline"]
CHUNKED_RUNS = _runs(CHUNKED_SHAPES, ARRIVAL)


@needs_gxx
@pytest.mark.parametrize("name,world,dims,schedules", CHUNKED_RUNS, ids=[_run_id(r) for r in CHUNKED_RUNS])
def test_arrival_pipeline_cuts_chunks_on_the_cpu(emulated, tmp_path, name, world, dims, schedules):
    for seed, lagging in schedules:
        for what, rank, got, want in run_candidate(emulated[name], tmp_path / f"s{seed}", world, dims, seed, lagging):
            check(got, want, f"{name}, schedule seed {seed}, lagging rank {lagging}, rank {rank}, {what}")


OLD_SCHEDULES = ((11, -1), (23, 1), (29, 0))
MUTANTS = {  # name: (strategy, knobs, a wait the candidate needs, what dropping it does, (world, dims, schedules))
    "pipeline-no-rows-wait": (
        "expert_pipeline", {"mover": "copy_engine", "groups": 4, "mover_blocks": 16, "results": "separate", "gemm": "cublas"},
        "if (rows_from.bits[0])\n      wait_groups<<<dim3(W, 1), 1, 0, stream>>>(mine, kRows, g, rows_from, pushed, "
        'trace, CUCO_WAIT_SITE("rows"));',
        "each group is gathered and computed before the peers' rows of the group have landed",
        (*SHAPES[0][:2], OLD_SCHEDULES)),
    "pipeline-no-computed-wait": (
        "expert_pipeline", {"mover": "ipc", "groups": 2, "mover_blocks": 16, "results": "shared", "gemm": "cublas"},
        "CUCO_TRY_CUDA(ctx, cudaStreamWaitEvent(c->result_stream, c->computed[g], 0));",
        "each group's results are pushed back before they are computed", (*SHAPES[0][:2], OLD_SCHEDULES)),
    "arrival-no-chunk-wait": (
        "arrival_pipeline", {"mover": "copy_engine", "chunks": 4, "mover_blocks": 16, "gemm": "cublas"},
        "wait_flag<<<1, 1, 0, stream>>>(mine, kRows, p, q, pushed, trace);",
        "each chunk is computed before it has landed", (*CHUNKED_SHAPES[0][:2], ((61, -1), (67, 1), (83, 0)))),
    "arrival-no-computed-wait-w4": (
        "arrival_pipeline", {"mover": "ipc", "chunks": 2, "mover_blocks": 16, "gemm": "cublas"},
        "CUCO_TRY_CUDA(ctx, cudaStreamWaitEvent(c->result_stream, done, 0));",
        "each chunk's results are pushed back before they are computed",
        (*CHUNKED_SHAPES[1][:2], ((71, -1), (83, 3), (11, 1)))),
    "arrival-no-results-wait": (
        "arrival_pipeline", {"mover": "copy_engine", "chunks": 2, "mover_blocks": 16, "gemm": "cublas"},
        "if (remote) wait_results<<<dim3(W, kChunks), 1, 0, stream>>>(mine, results_from, pushed, trace);",
        "the weighted sum reads the combine buffer before the peers' results are back",
        (*CHUNKED_SHAPES[0][:2], ((61, -1), (67, 1), (83, 0)))),
}


@needs_gxx
def test_a_missing_wait_fails(tmp_path):
    """The test can fail: each mutant (a template with one wait dropped) gets a wrong answer."""
    book = _book()
    sources = {}
    for name, (strategy, knobs, wait, _, _) in MUTANTS.items():
        src = _source(strategy, knobs, book)
        assert wait in src, name
        sources[name] = emulated_source(src.replace(wait, ""))
    binaries = compile_emulated(sources, tmp_path, (EMU,))
    for name, (_, _, _, why, (world, dims, schedules)) in MUTANTS.items():
        # The emulator's delays are real sleeps, so whether a race shows also depends on how the
        # machine schedules the threads: a busy machine let one mutant pass its three schedules.
        # Until one fails, it gets more (each lagging rank in turn, fresh seeds); the first failure ends it.
        extra = [(101 + 2 * k, (k % (world + 1)) - 1) for k in range(EXTRA_SCHEDULES)]
        failed = next((seed for seed, lagging in (*schedules, *extra)
                       if _fails(binaries[name], tmp_path / f"{name}-runs" / f"s{seed}", world, dims, seed, lagging)),
                      None)
        assert failed is not None, f"{name} went unnoticed over {len(schedules) + len(extra)} schedules: {why}"


EXTRA_SCHEDULES = 12


def _fails(binary, folder, world, dims, seed, lagging) -> bool:
    """Whether some rank's output of some launch is wrong under this schedule."""
    for what, rank, got, want in run_candidate(binary, folder, world, dims, seed, lagging):
        try:
            check(got, want, what)
        except AssertionError:
            return True
    return False
