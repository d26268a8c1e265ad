"""moe_dispatch_combine's seed and strategy templates through L0 and L1: the static checks and
declared design of the seed, every knob setting of every strategy rendered through L0, the fast
path, and the offline agent's space compiled and stopped at no_gpu: every strategy, every value of
every knob, and the knob combinations that change which code is compiled together."""

import itertools

from cuco_tui.toolchain.toolchain import discover
from cuco_tui.evaluate.cascade import evaluate
from cuco_tui.core.result import Status
from moe_common import REF, SEED, W, _book, can_compile
from static_helpers import assert_static_ok


# ---------------------------------------------------------------------------- seed and templates (L0, L1)


def _static_ok(src):
    assert_static_ok(src, SEED)


def test_seed_passes_the_static_checks_and_declares_what_it_does():
    from cuco_tui.design.classify import classify

    _static_ok(SEED)
    assert classify(SEED).inferred() == {"backend": "nccl_host", "placement": "before", "sync": "per_peer",
                                         "issuer": "host", "chunk": "shard", "streams": "1", "comm_sms": "0"}


def test_seed_and_templates_switch_to_per_problem_gemms_where_the_reference_does():
    """grouped_gemm.cuh.j2 (in the seed and every template) runs a call per problem from the
    reference's auto threshold on: the same measurements, one number."""
    assert f"constexpr int kPerProblemRows = {REF.PER_EXPERT_MIN_ROWS};" in SEED
    assert "rows >= (long long)kPerProblemRows * call.count" in SEED


@can_compile
def test_seed_compiles_and_stops_with_no_gpu(monkeypatch):
    monkeypatch.setenv("CUCO_NO_GPU", "1")
    r = evaluate(W.seed, W)
    assert r.status == Status.NO_GPU, r.reason


def test_every_strategy_renders_every_knob_setting_through_l0():
    book = _book()
    assert {s.name for s in book.strategies} >= {"host_sequential", "dispatch_overlap", "chunked_pipeline",
                                                  "ipc_dispatch", "expert_pipeline", "arrival_pipeline"}
    assert book.render(book.get("host_sequential"), {}) == SEED
    for s in book.strategies:
        for values in itertools.product(*s.knobs.values()):
            knobs = s.normalized(dict(zip(s.knobs, values)))
            _static_ok(book.render(s, knobs))


def test_fast_path_is_the_ipc_store_dispatch():
    from cuco_tui.agents.base import ProposalRequest
    from cuco_tui.agents.offline import OfflineAgent
    from cuco_tui.core.records import CandidateRecord

    seed = CandidateRecord(id="c0000", generation=0, island=0, kind="seed", parents=(), source=SEED, design={},
                           rationale="seed", agent="workload", status="measured", speedup=1.0)
    p = OfflineAgent(W).propose(ProposalRequest(kind="fast_path", workload=W, parents=(seed,)))
    assert p.error == "" and p.design["backend"] == "cuda_ipc" and p.design["knobs"]["strategy"] == "ipc_dispatch"


def _every_point(book, grouped=True):
    """{rendered source: (strategy, knobs)} for every knob combination of every strategy,
    normalized (knobs a template ignores are pinned), one entry per distinct source. grouped=False:
    without the points that link the prebuilt CUTLASS grouped GEMM (knob gemm other than cublas:
    a library build of minutes, compiled in test_moe_grouped_gemm.py, marked slow)."""
    out = {}
    for s in book.strategies:
        for values in itertools.product(*s.knobs.values()):
            knobs = s.normalized(dict(zip(s.knobs, values)))
            if grouped or knobs.get("gemm", "cublas") == "cublas":
                out.setdefault(book.render(s, knobs), (s.name, knobs))
    return out


# Combinations where two knobs choose code together (the mover and its block count, the expert
# groups with the mover and the results' layout, the arrival chunks with the mover): compiled as
# they are, beside each knob's values taken one at a time.
TOGETHER = [("dispatch_overlap", {"comm_priority": "same"}), ("chunked_pipeline", {"chunks": 8}),
            ("ipc_dispatch", {"mover": "copy_engine", "mover_blocks": 16}),
            ("ipc_dispatch", {"mover": "ipc", "mover_blocks": 64}),
            ("expert_pipeline", {"mover": "ipc", "groups": 8, "mover_blocks": 64, "results": "separate",
                                 "gemm": "cublas"}),
            ("expert_pipeline", {"mover": "copy_engine", "groups": 4, "mover_blocks": 16, "results": "separate",
                                 "gemm": "cublas"}),
            ("arrival_pipeline", {"mover": "copy_engine", "chunks": 1, "mover_blocks": 16, "gemm": "cublas"}),
            ("arrival_pipeline", {"mover": "ipc", "chunks": 8, "mover_blocks": 64, "gemm": "cublas"})]


def _covering_points(book):
    """{rendered source: (strategy, knobs)}: each strategy at its defaults, TOGETHER, and for every
    value of every knob a point that has it, the one closest to the defaults (a value that only
    comes with another knob's, like an IPC mover's block count, comes with it). A compile error
    that only a combination beyond these would show is left to L0's render of every point and to
    L1 in a search: 21 compiles here instead of 51 (7 CPU-seconds each)."""
    out = {}

    def add(s, knobs):
        # cuBLAS where the default is the CUTLASS grouped GEMM: its points are compiled in
        # test_moe_grouped_gemm.py (slow), each library a build of minutes
        cublas = {"gemm": "cublas"} if "gemm" in s.knobs else {}
        knobs = s.normalized({**s.default_knobs(), **cublas, **knobs})
        out.setdefault(book.render(s, knobs), (s.name, knobs))

    for s in book.strategies:
        add(s, {})
    for name, knobs in TOGETHER:
        add(book.get(name), knobs)
    every = _every_point(book, grouped=False)
    for s in book.strategies:
        default = s.normalized(s.default_knobs())
        points = sorted((knobs for name, knobs in every.values() if name == s.name),
                        key=lambda k: sum(k[n] != default.get(n) for n in k))
        for knob, values in s.knobs.items():
            for v in values:
                if not any(name == s.name and k.get(knob) == v for name, k in out.values()):
                    first = next((k for k in points if k.get(knob) == v), None)
                    if first is not None:
                        add(s, first)
    return out


@can_compile
def test_every_strategy_and_knob_value_compiles_and_stops_with_no_gpu(tmp_path, monkeypatch):
    """What `cuco eval FILE --workload moe_dispatch_combine` does without a GPU, for every point
    of the offline agent's space: L0 and L1 pass and the cascade stops at no_gpu. The builds run
    in parallel into the session's build cache first; the cascade then finds them built."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    from cuco_tui.toolchain import BuildCache, compile_candidate

    book = _book()
    assert sum(name == "arrival_pipeline" for name, _ in _every_point(book).values()) == 48
    every = _every_point(book, grouped=False)
    named = {(name, tuple(sorted(knobs.items()))) for name, knobs in every.values()}
    for name, knobs in TOGETHER:  # points of the agent's space, as they are
        assert (name, tuple(sorted(knobs.items()))) in named, (name, knobs)
    assert sum(name == "arrival_pipeline" for name, _ in every.values()) == 16
    points = _covering_points(book)
    assert set(points) <= set(every)  # nothing compiled that the agent would not propose
    covered = {(name, k, v) for name, knobs in points.values() for k, v in knobs.items()}
    assert covered == {(name, k, v) for name, knobs in every.values() for k, v in knobs.items()}
    paths = []
    for i, (text, (name, knobs)) in enumerate(points.items()):
        path = tmp_path / (f"{i:03d}-{name}" + "".join(f"-{v}" for v in knobs.values()) + ".cu")
        path.write_text(text)
        paths.append(path)
    toolchain, cache = discover(), BuildCache()
    with ThreadPoolExecutor(max(1, min(4, (os.cpu_count() or 2)))) as pool:
        builds = list(pool.map(lambda path: (path, compile_candidate(path, toolchain, cache)), paths))
    failed = [f"{path.name}:\n" + "\n".join(d.render() for d in r.diagnostics) for path, r in builds if not r.ok]
    assert not failed, "\n".join(failed)
    monkeypatch.setenv("CUCO_NO_GPU", "1")
    for path in paths:
        r = evaluate(path, W)
        assert r.status == Status.NO_GPU, f"{path.name}: {r.status} {r.reason}"
