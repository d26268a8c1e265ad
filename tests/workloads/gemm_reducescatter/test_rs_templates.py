"""gemm_reducescatter's strategy templates through L0 and L1: every point of the offline agent's
space renders, passes the static and sync checks and declares what its code does (the classifier
reads the same coordinates back); each strategy at its defaults and at each single-knob change
compiles with nvcc and stops at no_gpu in the cascade; the offline agent proposes them."""

import os
from concurrent.futures import ThreadPoolExecutor

import pytest

from cuco_tui.core.result import Status
from cuco_tui.design.space import Capabilities, parse_design, violations
from cuco_tui.evaluate.cascade import evaluate
from cuco_tui.source.regions import design_of
from rs_common import BOOK, SEED, W, can_compile
from strategy_helpers import every_point
from static_helpers import assert_static_ok


def test_the_strategies_and_their_spaces():
    assert [s.name for s in BOOK.strategies] == ["host_sequential", "host_chunked", "ce_push", "ce_fold"]
    assert BOOK.render(BOOK.get("host_sequential"), {}) == SEED
    assert len(every_point(BOOK.get("host_chunked"))) == 3 * 2
    assert len(every_point(BOOK.get("ce_push"))) == 3 * 3 * 2
    assert len(every_point(BOOK.get("ce_fold"))) == 3 * 2
    assert BOOK.get("ce_fold").default_knobs() == {"chunks": 4, "movers": "one"}


@pytest.mark.parametrize("name", ["host_chunked", "ce_push", "ce_fold"])
def test_every_point_renders_passes_l0_and_declares_what_its_code_does(name):
    from cuco_tui.design.classify import classify

    s = BOOK.get(name)
    sources = set()
    for knobs in every_point(s):
        src = BOOK.render(s, knobs)
        assert_static_ok(src, SEED)
        declared = parse_design(design_of(src))
        assert declared == s.point(knobs), knobs
        assert not violations(declared, Capabilities(world=8)), knobs
        # The classifier reads every coordinate of the declaration back from the code; a stream per
        # peer is created in a loop over the peers, whose count it cannot know.
        inferred = classify(src).inferred()
        if knobs.get("movers") == "per_peer":
            assert inferred.pop("streams") == "" and declared.streams == "4"
        assert inferred == {k: v for k, v in declared.coords().items() if k in inferred}, knobs
        sources.add(src)
    assert len(sources) == len(every_point(s)), "two knob settings render the same candidate"


def test_the_design_points_follow_the_knobs():
    chunked = BOOK.get("host_chunked")
    assert chunked.point({"chunks": 4, "collective": "reduce_scatter"}).coords() == {
        "backend": "nccl_host", "placement": "interleaved", "sync": "per_chunk", "issuer": "host", "chunk": "4",
        "streams": "2", "comm_sms": "0"}
    push = BOOK.get("ce_push")
    one = push.point({"chunks": 1, "reduce_blocks": 128, "movers": "one"})
    four = push.point({"chunks": 4, "reduce_blocks": 64, "movers": "per_peer"})
    assert (one.backend, one.sync, one.chunk, one.comm_sms, one.issuer, one.streams) == (
        "copy_engine", "per_peer", "shard", "0", "host", "2")
    assert (four.sync, four.chunk, four.streams) == ("per_chunk", "4", "4")
    fold = BOOK.get("ce_fold")
    assert fold.point({"chunks": 4, "movers": "one"}) == push.point({"chunks": 4, "reduce_blocks": 128, "movers": "one"})
    assert fold.point({"chunks": 8, "movers": "per_peer"}).coords() == {
        "backend": "copy_engine", "placement": "interleaved", "sync": "per_chunk", "issuer": "host", "chunk": "8",
        "streams": "4", "comm_sms": "0"}


def test_the_fold_is_a_cublaslt_gemm_on_the_main_stream_after_a_traced_wait_per_chunk():
    """What the classifier reads of ce_fold: the fold (cublasLtMatmul) and the peers' GEMMs are
    compute on the harness's stream; each own chunk's wait is a one-thread kernel on that stream
    whose wait is a named site; no kernel moves data (the copy engines do)."""
    from cuco_tui.design.classify import classify

    s = BOOK.get("ce_fold")
    src = BOOK.render(s, s.default_knobs())
    ev = classify(src)
    compute = {site.what for site in ev.sites if site.role == "compute"}
    assert compute == {"cublasGemmEx", "cublasLtMatmul"}, compute
    waits = [launch for launch in ev.launches if launch.waits]
    assert [(w.kernel, w.grid_blocks, w.stream) for w in waits] == [("wait_chunk", 1, "stream")]
    assert not any(launch.moves_data for launch in ev.launches)
    assert src.count('CUCO_WAIT_SITE("partial arrived")') == 1


def test_a_declaration_that_contradicts_the_push_warns():
    from cuco_tui.design.classify import check_declaration

    s = BOOK.get("ce_push")
    knobs = {"chunks": 2, "reduce_blocks": 128, "movers": "one"}
    src = BOOK.render(s, knobs)
    declared = s.point(knobs)

    def warnings_for(**changes):
        return [d.message for d in check_declaration(src.replace(declared.line(), declared.with_(**changes).line()))]

    assert any("backend=nccl_host" in m for m in warnings_for(backend="nccl_host"))
    assert any("chunk=4" in m for m in warnings_for(chunk="4"))
    assert any("streams=1" in m for m in warnings_for(streams="1"))


def test_the_offline_agent_proposes_the_push_first_when_asked_for_a_fast_path():
    """No template communicates from the device; the fast path is the first one that leaves NCCL."""
    from cuco_tui.agents.base import ProposalRequest
    from cuco_tui.agents.offline import OfflineAgent
    from cuco_tui.core.records import CandidateRecord

    seed = CandidateRecord(id="c0000", generation=0, island=0, kind="seed", parents=(), source=SEED, design={},
                           rationale="seed", agent="workload", status="measured", speedup=1.0)
    p = OfflineAgent(W).propose(ProposalRequest(kind="fast_path", workload=W, parents=(seed,)))
    assert p.error == "" and p.design["knobs"]["strategy"] == "ce_push" and p.design["backend"] == "copy_engine"


def _one_knob_sources():
    """{label: source}: every strategy at its defaults and at each single-knob change (what
    benchmarks/runs/prebuild.py builds on a device host)."""
    out = {}
    for s in BOOK.strategies:
        for knobs in s.one_knob_changes():
            out.setdefault(BOOK.render(s, knobs), s.name + "".join(f"-{v}" for v in knobs.values()))
    return {label: src for src, label in out.items()}


@can_compile
def test_each_strategy_and_each_single_knob_change_compiles_and_stops_with_no_gpu(tmp_path, monkeypatch):
    """What `cuco eval FILE --workload gemm_reducescatter` does without a GPU: L0 and L1 pass and the
    cascade stops at no_gpu. The builds run in parallel into the session's build cache first."""
    from cuco_tui.toolchain import BuildCache, compile_candidate
    from cuco_tui.toolchain.toolchain import discover

    sources = _one_knob_sources()
    assert set(sources) == {"host_sequential", "host_chunked-4-reduce_scatter", "host_chunked-2-reduce_scatter",
                            "host_chunked-8-reduce_scatter", "host_chunked-4-reduce", "ce_push-1-128-one",
                            "ce_push-2-128-one", "ce_push-4-128-one", "ce_push-1-64-one", "ce_push-1-256-one",
                            "ce_push-1-128-per_peer", "ce_fold-4-one", "ce_fold-2-one", "ce_fold-8-one",
                            "ce_fold-4-per_peer"}
    paths = []
    for label, text in sources.items():
        path = tmp_path / f"{label}.cu"
        path.write_text(text)
        paths.append(path)
    toolchain, cache = discover(), BuildCache()
    with ThreadPoolExecutor(max(1, min(4, os.cpu_count() or 2))) as pool:
        builds = list(pool.map(lambda path: (path, compile_candidate(path, toolchain, cache)), paths))
    failed = [f"{path.name}:\n" + "\n".join(d.render() for d in r.diagnostics) for path, r in builds if not r.ok]
    assert not failed, "\n".join(failed)
    monkeypatch.setenv("CUCO_NO_GPU", "1")
    for path in paths:
        r = evaluate(path, W)
        assert r.status == Status.NO_GPU, f"{path.name}: {r.status} {r.reason}"
