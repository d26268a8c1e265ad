"""L0 synchronization checks: LSA barrier counts, waits nothing can signal, rank-dependent skips."""

from __future__ import annotations

import itertools

import pytest

from cuco_tui.agents.offline.strategy import StrategyBook
from cuco_tui.evaluate.cascade import EvalOptions, evaluate
from cuco_tui.core.result import Level, Status
from cuco_tui.evaluate.static_checks import check_static, is_rejected
from cuco_tui.evaluate.sync_checks import check_sync
from cuco_tui.workload.manifest import load_workload

W = load_workload("gemm_allgather")
SEED = W.seed.read_text()
LSA_PATH = W.root / "candidates" / "lsa_allgather.cu"
LSA = LSA_PATH.read_text()
FAULTS = sorted((W.root / "faults").glob("*.cu"))
SHIPPED = [W.seed] + sorted((W.root / "candidates").glob("*.cu"))


def line_of(text: str, needle: str) -> int:
    return next(i for i, l in enumerate(text.split("\n"), 1) if needle in l)


def edit(old: str, new: str, base: str = LSA) -> str:
    assert base.count(old) == 1, old
    return base.replace(old, new)


def errors(diags):
    return [d for d in diags if d.severity == "error"]


def _renders():
    """Every distinct source the strategies render, over every knob combination normalized as the
    agents normalize it (combinations that render the same code are checked once)."""
    book = StrategyBook.load(W.root, W.seed)
    seen: set[str] = set()
    for s in book.strategies:
        keys = list(s.knobs)
        for values in itertools.product(*(s.knobs[k] for k in keys)):
            knobs = s.normalized(dict(zip(keys, values)))
            source = book.render(s, knobs)
            if source not in seen:
                seen.add(source)
                yield f"{s.name}{knobs}", source


RENDERS = list(_renders())


# ---------------------------------------------------------------------------- nothing on good code


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_shipped_candidates_are_clean(path):
    assert check_sync(path.read_text(), path.name) == []


@pytest.mark.parametrize("name,source", RENDERS, ids=[n for n, _ in RENDERS])
def test_every_template_render_is_clean(name, source):
    assert check_sync(source, "render.cu") == [], name


def test_renders_cover_every_knob_combination():
    book = StrategyBook.load(W.root, W.seed)
    rendered = {source for _, source in RENDERS}
    for s in book.strategies:
        for values in itertools.product(*s.knobs.values()):
            assert book.render(s, s.normalized(dict(zip(s.knobs, values)))) in rendered
    assert len(RENDERS) > 10


L0_FAULTS = {"barrier_count"}  # faults the suite expects to be rejected before the GPU


@pytest.mark.parametrize("path", [p for p in FAULTS if p.stem not in L0_FAULTS],
                         ids=[p.stem for p in FAULTS if p.stem not in L0_FAULTS])
def test_no_fault_gets_a_sync_error(path):
    """The fault suite expects the hanging faults to reach the GPU: warnings only."""
    diags = check_sync(path.read_text(), path.name)
    assert errors(diags) == []
    assert not is_rejected(check_static(path.read_text(), SEED, path.name) + diags)


def test_the_barrier_count_fault_is_caught_at_l0():
    path = next(p for p in FAULTS if p.stem == "barrier_count")
    diags = errors(check_sync(path.read_text(), path.name))
    assert len(diags) == 1 and "32 barriers" in diags[0].message and "blocks 32..63" in diags[0].message


@pytest.mark.parametrize("stem", ["compile_error", "illegal_address", "infinite_loop", "missing_signal",
                                  "nan_output", "off_by_one_chunk", "unwritten", "wrong_values"])
def test_faults_not_about_sync_get_nothing(stem):
    path = W.root / "faults" / f"{stem}.cu"
    assert check_sync(path.read_text(), path.name) == []


# ---------------------------------------------------------------------------- 1. LSA barrier count


def test_barrier_count_smaller_than_grid_is_an_error():
    src = edit("lsa_allgather<<<kCopyBlocks, kCopyThreads", "lsa_allgather<<<kLaunchBlocks, kCopyThreads")
    src = edit("constexpr int kCopyThreads = 512;", "constexpr int kCopyThreads = 512;\nconstexpr int kLaunchBlocks = 128;",
               src)
    diags = check_sync(src, "cand.cu")
    launch = line_of(src, "lsa_allgather<<<")
    create = line_of(src, "lsa_devcomm_create")
    assert len(diags) == 1
    d = diags[0]
    assert d.severity == "error" and d.level == int(Level.STATIC) and d.code == "sync"
    assert d.line == launch and d.file == "cand.cu"
    assert d.message == (f"kernel `lsa_allgather` launched with 128 blocks at line {launch} syncs LSA barrier index "
                         f"blockIdx.x, but the device communicator has 64 barriers (line {create}): blocks 64..127 "
                         f"use barriers that do not exist")


def test_barrier_count_with_literals_and_expressions():
    src = edit("lsa_allgather<<<kCopyBlocks,", "lsa_allgather<<<2 * kCopyBlocks,")
    src = edit("lsa_devcomm_create(ctx, c->comm, kCopyBlocks,", "lsa_devcomm_create(ctx, c->comm, 100,", src)
    [d] = check_sync(src, "cand.cu")
    assert d.severity == "error" and "128 blocks" in d.message and "has 100 barriers" in d.message
    assert "blocks 100..127" in d.message


def test_enough_barriers_is_fine():
    src = edit("lsa_devcomm_create(ctx, c->comm, kCopyBlocks,", "lsa_devcomm_create(ctx, c->comm, 2 * kCopyBlocks,")
    assert check_sync(src, "cand.cu") == []


def test_barrier_count_not_a_constant_says_nothing():
    src = edit("lsa_devcomm_create(ctx, c->comm, kCopyBlocks,", "lsa_devcomm_create(ctx, c->comm, ctx->world,")
    assert check_sync(src, "cand.cu") == []
    src = edit("lsa_allgather<<<kCopyBlocks,", "lsa_allgather<<<(int)(c->M / 16),")
    assert check_sync(src, "cand.cu") == []


def test_barrier_count_error_rejects_at_l0(tmp_path, monkeypatch):
    monkeypatch.setenv("CUCO_NO_GPU", "1")
    path = tmp_path / "cand.cu"
    path.write_text(edit("lsa_devcomm_create(ctx, c->comm, kCopyBlocks,", "lsa_devcomm_create(ctx, c->comm, 16,"))
    result = evaluate(path, W, EvalOptions())
    assert result.status == Status.REJECTED and result.level == Level.STATIC
    assert "has 16 barriers" in result.reason


# ---------------------------------------------------------------------------- 2. never-signalled waits


_WAIT_READY = """struct ReadyFlags {
  unsigned ready[cuco::kMaxPeers];
};

__global__ void wait_ready(const ReadyFlags* mine, int peer, cuco::Trace trace) {
  cuco::wait_geq<unsigned>(trace, CUCO_SITE, peer, 1, &mine->ready[peer], 1u);
}

struct Candidate {"""

_LAUNCH_READY = """  CUCO_TRY_CUDA(ctx, cudaGetLastError());
  wait_ready<<<1, 1, 0, stream>>>((const ReadyFlags*)c->gathered.ptr, (ctx->rank + 1) % W, cuco::trace_of(ctx));"""


def _never_signalled() -> str:
    src = edit("struct Candidate {", _WAIT_READY)
    return edit("  CUCO_TRY_CUDA(ctx, cudaGetLastError());", _LAUNCH_READY, src)


def test_wait_on_a_flag_nothing_writes_is_an_error():
    src = _never_signalled()
    [d] = check_sync(src, "cand.cu")
    wait = line_of(src, "cuco::wait_geq<unsigned>")
    assert d.severity == "error" and d.line == wait and d.code == "sync"
    assert f"line {wait}" in d.message and "`ready`" in d.message and "never" in d.message


def test_wait_with_a_signaller_is_fine():
    signal = """__global__ void post_ready(ReadyFlags* peer, int rank) {
  cuda::atomic_ref<unsigned, cuda::thread_scope_system> ref(peer->ready[rank]);
  ref.store(1u, cuda::memory_order_release);
}

struct Candidate {"""
    src = edit("struct Candidate {", signal, _never_signalled())
    assert check_sync(src, "cand.cu") == []


@pytest.mark.parametrize("write", [
    "atomicAdd(&peer->ready[rank], 1u);",
    "peer->ready[rank] = 1u;",
    "unsigned* f = &peer->ready[rank];\n  *f = 1u;",
    "atomicExch(peer->ready + rank, 1u);",
])
def test_any_kind_of_store_counts_as_a_signaller(write):
    signal = f"""__global__ void post_ready(ReadyFlags* peer, int rank) {{
  {write}
}}

struct Candidate {{"""
    src = edit("struct Candidate {", signal, _never_signalled())
    assert errors(check_sync(src, "cand.cu")) == []


def test_hang_fault_gets_a_warning_not_an_error():
    path = W.root / "faults" / "hang.cu"
    text = path.read_text()
    [d] = check_sync(text, path.name)
    assert d.severity == "warning" and d.line == line_of(text, "cuco::wait_geq")
    assert "`flag`" in d.message and f"line {d.line}" in d.message


def test_missing_signal_fault_has_a_signaller_somewhere():
    # Its bug is that one rank skips posting: a path that stores exists, so no finding.
    path = W.root / "faults" / "missing_signal.cu"
    assert check_sync(path.read_text(), path.name) == []


def test_never_signalled_wait_rejects_at_l0(tmp_path, monkeypatch):
    monkeypatch.setenv("CUCO_NO_GPU", "1")
    path = tmp_path / "cand.cu"
    path.write_text(_never_signalled())
    result = evaluate(path, W, EvalOptions())
    assert result.status == Status.REJECTED and result.level == Level.STATIC
    assert "`ready`" in result.reason


# ---------------------------------------------------------------------------- 3. rank-dependent skips


def test_skip_barrier_fault_gets_the_rank_skip_warning():
    path = W.root / "faults" / "skip_barrier.cu"
    text = path.read_text()
    [d] = check_sync(text, path.name)
    line = line_of(text, "if (!skip_exit)")
    assert d.severity == "warning" and d.line == line
    assert d.message == (f"only some ranks reach the barrier at line {line} (condition on the rank at line {line}): "
                         f"the others will wait for ever")


def test_direct_rank_condition_on_a_barrier():
    old = "  cuco::lsa_barrier_sync(trace, CUCO_SITE, bar, block, blockIdx.x, cuda::memory_order_seq_cst);"
    src = edit(old, "  if (dc.lsaRank == 0) {\n" + old + "\n  }")
    [d] = check_sync(src, "cand.cu")
    assert d.severity == "warning"
    assert d.line == line_of(src, "memory_order_seq_cst") and f"at line {line_of(src, 'if (dc.lsaRank')}" in d.message


def test_rank_condition_on_a_host_collective():
    seed_call = "CUCO_TRY_NCCL(ctx, ncclAllGather("
    assert seed_call in SEED
    src = SEED.replace("  " + seed_call, "  if (ctx->rank != 0) CUCO_TRY_NCCL(ctx, ncclAllGather(", 1)
    [d] = check_sync(src, "cand.cu")
    assert d.severity == "warning" and "only some ranks reach the barrier" in d.message


def test_rank_condition_on_a_launch_of_a_barrier_kernel():
    src = edit("  lsa_allgather<<<", "  if (ctx->rank == 0) lsa_allgather<<<")
    [d] = check_sync(src, "cand.cu")
    assert d.severity == "warning" and d.line == line_of(src, "if (ctx->rank == 0)")


def test_both_branches_sync_is_fine():
    old = "  cuco::lsa_barrier_sync(trace, CUCO_SITE, bar, block, blockIdx.x, cuda::memory_order_seq_cst);"
    src = edit(old, "  if (dc.lsaRank == 0) {\n" + old + "\n  } else {\n" + old + "\n  }")
    assert check_sync(src, "cand.cu") == []


def test_condition_not_on_the_rank_is_fine():
    old = "  cuco::lsa_barrier_sync(trace, CUCO_SITE, bar, block, blockIdx.x, cuda::memory_order_seq_cst);"
    src = edit(old, "  if (shard_vecs > 0) " + old.strip())
    assert check_sync(src, "cand.cu") == []


def test_comments_and_strings_are_ignored():
    src = edit("struct Candidate {", "// if (rank == 0) ncclAllGather(x); wait_geq(t, 0, 0, 0, &f->ready[0], 1);\n"
                                      "struct Candidate {")
    assert check_sync(src, "cand.cu") == []


def test_garbage_does_not_raise():
    for text in ["", "if (rank", "__global__ void k(", "wait_geq(", "x<<<", "ncclLsaBarrierSession<", "}}}{{{"]:
        assert isinstance(check_sync(text, "x.cu"), list)
