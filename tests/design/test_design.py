"""The design space and the static classifier of candidates (the design context for agents: test_design_context.py)."""

from __future__ import annotations

import itertools
import re

import pytest

from cuco_tui.design.classify import Evidence, check_declaration, classify, comm_sms_for_blocks
from cuco_tui.design.space import (
    DIMENSIONS,
    Capabilities,
    DesignError,
    DesignPoint,
    parse_design,
    violations,
)
from cuco_tui.source.regions import design_of
from repo_paths import DATA, REPO

WORKLOAD = REPO / "workloads" / "gemm_allgather"
SEED = (WORKLOAD / "seed.cu").read_text()
LSA = (WORKLOAD / "candidates" / "lsa_allgather.cu").read_text()
CE = (WORKLOAD / "candidates" / "ce_overlap.cu").read_text()
SHIPPED = {"seed.cu": SEED, "lsa_allgather.cu": LSA, "ce_overlap.cu": CE}


def redeclare(source: str, **changes: str) -> str:
    """`source` with its design line rewritten: the declared point changed by `changes`."""
    point = parse_design(design_of(source)).with_(**changes)
    return re.sub(r"^// cuco-design:.*$", point.line(), source, count=1, flags=re.M)


def warnings(diags) -> list[str]:
    return [d.message for d in diags if d.severity == "warning"]


def mismatches(source: str, name: str = "cand.cu") -> list[str]:
    return [d.message for d in check_declaration(source, name) if d.code == "design-mismatch"]


# ------------------------------------------------------------------ DesignPoint: the line


POINTS = [
    DesignPoint(),
    DesignPoint("nccl_lsa", "before", "global", "cta", "full", "1", "all"),
    DesignPoint("copy_engine", "interleaved", "per_peer", "host", "shard", "2", "0"),
    DesignPoint("cuda_ipc", "fused", "per_chunk", "multi_cta", "8", "4", "16"),
    DesignPoint("nvshmem", "after", "per_peer", "warp", "2", "3", "2"),
]


@pytest.mark.parametrize("point", POINTS, ids=lambda p: p.backend)
def test_line_round_trips_through_design_of_and_parse_design(point):
    source = SEED.replace(parse_design(design_of(SEED)).line(), point.line())
    pairs = design_of(source)
    assert pairs == point.coords()
    assert parse_design(pairs) == point
    assert DesignPoint.from_dict(point.to_dict()) == point


def test_every_value_of_every_dimension_round_trips():
    for dim, values in DIMENSIONS.items():
        for value in values:
            point = DesignPoint().with_(**{dim: value})
            line = point.line()
            pairs = dict(t.split("=", 1) for t in line.removeprefix("// cuco-design:").split())
            assert parse_design(pairs) == point


def test_parse_design_refuses_unknown_keys_and_values():
    with pytest.raises(DesignError, match="unknown design dimension `flavor`"):
        parse_design({"flavor": "x"})
    with pytest.raises(DesignError, match="`backend=mpi` is not a value of backend"):
        parse_design({"backend": "mpi"})
    assert parse_design({}) == DesignPoint()


# ------------------------------------------------------------------ validity rules


# One case per rule of space.violations: a point that breaks that rule and no other, the
# capabilities it is judged under, and a word of the sentence.
RULES = [
    ("gin", DesignPoint("nccl_gin", "before", "global", "cta", "full", "1", "all"), Capabilities(), "GIN"),
    ("nvshmem", DesignPoint("nvshmem", "before", "global", "cta", "full", "1", "all"), Capabilities(), "NVSHMEM"),
    ("lsa", DesignPoint("nccl_lsa", "before", "global", "cta", "full", "1", "all"), Capabilities(lsa=False),
     "LSA team"),
    ("host issuer", DesignPoint("nccl_host", "before", "global", "cta", "full", "1", "0"), Capabilities(),
     "issuer must be host"),
    ("host issuer ce", DesignPoint("copy_engine", "before", "global", "warp", "full", "1", "0"), Capabilities(),
     "issuer must be host"),
    ("device issuer", DesignPoint("cuda_ipc", "before", "global", "host", "full", "1", "all"), Capabilities(),
     "device-initiated"),
    ("ce sms", DesignPoint("copy_engine", "before", "global", "host", "full", "1", "8"), Capabilities(),
     "comm_sms must be 0"),
    ("nccl sms", DesignPoint("nccl_host", "before", "global", "host", "full", "1", "16"), Capabilities(),
     "comm_sms must be 0 or all"),
    ("fused host", DesignPoint("nccl_host", "fused", "global", "host", "shard", "1", "0"), Capabilities(),
     "fused into compute"),
    ("interleaved 1 stream", DesignPoint("copy_engine", "interleaved", "per_peer", "host", "shard", "1", "0"),
     Capabilities(), "at least 2 streams"),
    ("per_chunk", DesignPoint("cuda_ipc", "before", "per_chunk", "cta", "shard", "1", "all"), Capabilities(),
     "at least 2 chunks"),
    ("overlap full", DesignPoint("nccl_lsa", "interleaved", "per_peer", "cta", "full", "2", "all"), Capabilities(),
     "chunk must be shard"),
]


@pytest.mark.parametrize("point,caps,words", [r[1:] for r in RULES], ids=[r[0] for r in RULES])
def test_each_validity_rule(point, caps, words):
    found = violations(point, caps)
    assert len(found) == 1, found
    assert words in found[0]


def test_rule_cases_are_valid_once_the_cause_is_removed():
    assert not violations(RULES[0][1], Capabilities(gin=True))
    assert not violations(RULES[1][1], Capabilities(nvshmem=True))
    assert not violations(RULES[2][1], Capabilities(lsa=True))
    assert not violations(RULES[9][1].with_(streams="2"))
    assert not violations(RULES[10][1].with_(chunk="2"))
    assert not violations(RULES[11][1].with_(chunk="shard"))
    # Device-initiated overlap needs no second stream.
    assert not violations(DesignPoint("nccl_lsa", "interleaved", "per_peer", "cta", "shard", "1", "16"))


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_declarations_are_valid(name):
    point = parse_design(design_of(SHIPPED[name]))
    assert violations(point, Capabilities(world=2)) == []


# ------------------------------------------------------------------ the classifier on shipped code


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_candidates_classify_as_declared(name):
    source = SHIPPED[name]
    assert check_declaration(source, name) == []
    ev = classify(source)
    declared = parse_design(design_of(source))
    assert ev.declared == declared
    inferred = ev.inferred()
    for dim in ("backend", "placement", "sync", "chunk", "streams"):
        assert inferred[dim] == getattr(declared, dim), dim


def test_seed_evidence():
    ev = classify(SEED)
    assert ev.data_backends == ("nccl_host",)
    assert ev.first(backend="nccl_host", role="data").what == "ncclAllGather"
    assert ev.streams == 1 and ev.streams_exact
    assert ev.overlap == "none"
    assert ev.chunking == "full"
    assert ev.flag_waits == 0 and ev.barriers == 1
    assert ev.issuer == "host"
    assert ev.launches == ()


def test_lsa_evidence():
    ev = classify(LSA)
    assert ev.data_backends == ("nccl_lsa",)
    assert {s.what for s in ev.sites if s.backend == "nccl_lsa"} >= {
        "ncclGetLsaPointer", "ncclLsaBarrierSession", "lsa_barrier_sync", "symmetric_alloc", "lsa_devcomm_create"}
    data = ev.first(backend="nccl_lsa", role="data")
    assert data.where == "lsa_allgather"
    [launch] = ev.launches
    assert (launch.kernel, launch.grid, launch.grid_blocks, launch.stream) == ("lsa_allgather", "kCopyBlocks", 64,
                                                                                "stream")
    assert launch.backend == "nccl_lsa" and launch.moves_data and not launch.computes
    assert ev.issuer == "device" and ev.coop == "cta"
    assert ev.comm_sms_hint == "64"
    assert ev.barriers == 3 and ev.flag_waits == 0
    assert ev.overlap == "none" and ev.chunking == "full" and ev.streams == 1


def test_copy_engine_evidence():
    ev = classify(CE)
    assert ev.data_backends == ("copy_engine",)
    assert "cuda_ipc" in ev.backends  # peer_alloc and the flag kernels: setup and signals
    assert ev.first(backend="copy_engine", role="data").what == "cudaMemcpyAsync into peer memory"
    assert ev.first(backend="cuda_ipc", role="signal").what.startswith("post_flag")
    assert ev.streams == 2 and ev.streams_exact
    assert ev.overlap == "streams"
    assert set(ev.compute_streams) == {"side", "stream"} and ev.comm_streams == ("stream",)
    assert ev.chunking == "shard"
    assert ev.flag_waits >= 1 and ev.chunk_waits == 0 and ev.barriers == 0
    assert ev.issuer == "host"
    assert not any(k.moves_data for k in ev.launches)
    assert {k.kernel for k in ev.launches} == {"post_flag", "wait_flag"}
    assert all(k.grid_blocks == 1 for k in ev.launches)


def test_summary_names_what_was_seen():
    text = classify(CE).summary()
    assert "copy_engine" in text and "different streams" in text and "one transfer per peer" in text
    assert "lsa_allgather (line" in classify(LSA).summary()


def test_strategy_templates_render_candidates_that_classify_as_declared():
    jinja2 = pytest.importorskip("jinja2")  # noqa: F841
    from cuco_tui.agents.offline.strategy import StrategyBook

    book = StrategyBook.load(WORKLOAD, WORKLOAD / "seed.cu")
    rendered = 0
    for strategy in book.strategies:
        names = list(strategy.knobs)
        for values in itertools.product(*(strategy.knobs[k] for k in names)):
            knobs = dict(zip(names, values))
            diags = check_declaration(book.render(strategy, knobs), strategy.name)
            assert diags == [], (strategy.name, knobs, [d.message for d in diags])
            rendered += 1
    assert rendered > 10


# ------------------------------------------------------------------ a fused kernel of a candidate's own

# Not the runtime's FusedGemm: a compute kernel of the candidate's own that waits (cuco::wait_geq)
# on each peer chunk's arrival flag before multiplying its rows; copy engines move the chunks.
OWN_FUSED = (DATA / "fused_own_kernel.cu").read_text()
OWN_FUSED_POINT = {"backend": "copy_engine", "placement": "fused", "sync": "per_chunk", "issuer": "host",
                   "chunk": "4", "streams": "2", "comm_sms": "0"}


def test_a_compute_kernel_of_its_own_that_waits_per_chunk_is_fused():
    from cuco_tui.evaluate.static_checks import check_static
    from cuco_tui.evaluate.sync_checks import check_sync

    ev = classify(OWN_FUSED)
    assert ev.inferred() == OWN_FUSED_POINT
    assert check_declaration(OWN_FUSED, "own.cu") == []
    [kernel] = ev.launches
    assert (kernel.kernel, kernel.waits, kernel.computes, kernel.backend) == ("gemm_as_rows_land", True, True, "")
    wait = ev.first(role="wait")
    assert (wait.what, wait.where) == ("wait_geq", "gemm_as_rows_land")
    assert ev.chunk_waits >= 1 and ev.chunking == "pieces" and ev.chunk_count == 4
    assert [s.what for s in ev.sites if s.role == "signal"] == ["c->writer.post (FlagWriter) into peer memory"]
    diags = check_static(OWN_FUSED, SEED, "own.cu") + check_sync(OWN_FUSED, "own.cu")
    assert [d.render() for d in diags] == []


def test_without_its_wait_the_kernel_is_compute_alone_and_fused_is_a_mismatch():
    wait = re.search(r"\n\s*if \(step > 0 && threadIdx.x == 0\)\n\s*cuco::wait_geq[^;]*;", OWN_FUSED)
    assert wait is not None
    alone = OWN_FUSED.replace(wait.group(0), "")
    ev = classify(alone)
    assert not ev.fused and ev.launches[0].computes and not ev.launches[0].communicates
    assert any(m.startswith("declares placement=fused but no kernel both communicates and computes")
               for m in mismatches(alone))


def test_a_kernel_of_its_own_waiting_once_per_shard_is_per_peer():
    one = redeclare(OWN_FUSED.replace("constexpr int kChunks = 4;", "constexpr int kChunks = 1;"),
                    sync="per_peer", chunk="shard")
    ev = classify(one)
    assert ev.inferred() == {**OWN_FUSED_POINT, "sync": "per_peer", "chunk": "shard"}
    assert check_declaration(one, "own.cu") == []


# ------------------------------------------------------------------ the classifier on code that lies


def test_lsa_code_declared_as_nccl_host_warns_naming_both():
    lie = redeclare(LSA, backend="nccl_host", issuer="host", comm_sms="0")
    diags = check_declaration(lie, "lie.cu")
    assert diags and all(d.severity == "warning" for d in diags)
    backend = [m for m in warnings(diags) if m.startswith("declares backend=")]
    assert backend == [m for m in backend if "nccl_host" in m and "ncclGetLsaPointer" in m and "nccl_lsa" in m]
    assert len(backend) == 1
    first = next(d for d in diags if d.message.startswith("declares backend="))
    assert "ncclGetLsaPointer" in first.source_line and first.level == 0 and first.file == "lie.cu"
    assert any(m.startswith("declares issuer=host") and "lsa_allgather" in m for m in warnings(diags))


def test_seed_declared_as_lsa_warns():
    lie = redeclare(SEED, backend="nccl_lsa", issuer="cta", comm_sms="all")
    [msg] = [m for m in mismatches(lie) if m.startswith("declares backend=")]
    assert "backend=nccl_lsa" in msg and "ncclAllGather" in msg and "(nccl_host)" in msg


def test_copy_engine_declared_as_ipc_says_ipc_is_only_setup():
    lie = redeclare(CE, backend="cuda_ipc", issuer="multi_cta", comm_sms="16")
    [msg] = [m for m in mismatches(lie) if m.startswith("declares backend=")]
    assert "cudaMemcpyAsync" in msg and "copy_engine" in msg and "setup or signalling" in msg


@pytest.mark.parametrize("source,changes,words", [
    (SEED, {"streams": "2"}, "declares streams=2 but the code uses 1"),
    (CE, {"streams": "1", "placement": "before"}, "declares streams=1 but the code uses 2"),
    (CE, {"sync": "global"}, "declares sync=global but waits on per-peer flags"),
    (LSA, {"sync": "per_peer"}, "declares sync=per_peer but synchronizes only through barriers"),
    (CE, {"chunk": "4"}, "declares chunk=4 but every transfer is issued once per peer"),
    (SEED, {"chunk": "2"}, "declares chunk=2 but every transfer is issued once"),
    (LSA, {"placement": "fused", "chunk": "shard"}, "declares placement=fused but no kernel"),
    (SEED, {"placement": "interleaved", "streams": "2", "chunk": "shard"}, "cannot overlap"),
    (LSA, {"comm_sms": "0"}, "declares comm_sms=0 but kernel lsa_allgather"),
    (LSA, {"comm_sms": "8"}, "launch 64 blocks (comm_sms=64)"),
], ids=["streams-seed", "streams-ce", "sync-global", "sync-per-peer", "chunk-ce", "chunk-seed", "fused",
        "interleaved", "sms-0", "sms-8"])
def test_lies_about_other_dimensions_warn(source, changes, words):
    found = mismatches(redeclare(source, **changes))
    assert any(words in m for m in found), found


def test_declared_points_that_break_the_rules_warn():
    lie = redeclare(SEED, issuer="cta")
    found = mismatches(lie)
    assert any("not a valid point" in m and "issuer must be host" in m for m in found)


def test_capabilities_turn_unavailable_backends_into_warnings():
    diags = check_declaration(LSA, "lsa.cu", caps=Capabilities(lsa=False))
    assert [d.severity for d in diags] == ["warning"]
    assert "cannot run here" in diags[0].message and "LSA team" in diags[0].message


def test_comments_and_strings_are_not_evidence():
    noise = ('// ncclGetLsaPointer(window, 0, 1); nvshmem_putmem(a, b, n, 1); ncclGin\n'
             '/* cudaStreamCreate(&s); cudaMemcpyAsync(buf.peers[1], x, n, k, s); */\n'
             'static const char* kNote = "ncclGetLsaPointer cudaStreamCreate(&s) wait_geq";\n')
    source = SEED.replace("#include <cublas_v2.h>\n", "#include <cublas_v2.h>\n" + noise, 1)
    assert check_declaration(source, "noise.cu") == []
    ev = classify(source)
    assert ev.backends == ("nccl_host",) and ev.streams == 1 and ev.flag_waits == 0


def test_only_the_evolve_blocks_are_read():
    frozen_noise = "// frozen\nstatic void unused_frozen() { cudaStream_t s; cudaStreamCreate(&s); }\n"
    source = SEED.replace("// EVOLVE-BLOCK-START", frozen_noise + "// EVOLVE-BLOCK-START", 1)
    assert classify(source).streams == 1


# ------------------------------------------------------------------ the classifier on other backends


def with_block(body: str) -> str:
    """The seed with its EVOLVE block replaced by `body`."""
    start = SEED.index("// EVOLVE-BLOCK-START\n") + len("// EVOLVE-BLOCK-START\n")
    return SEED[:start] + body.strip("\n") + "\n" + SEED[SEED.index("// EVOLVE-BLOCK-END"):]


FUSED_LSA = with_block("""
// cuco-design: backend=nccl_lsa placement=fused sync=global issuer=warp chunk=4 streams=1 comm_sms=16
constexpr int kChunks = 4;
constexpr int kBlocks = 2 * 8;
__global__ void fused(ncclWindow_t w, ncclDevComm dc, const float* a, float* out, int n) {
  ncclCoopWarp warp;
  for (int ch = 0; ch < kChunks; ++ch) {
    float* peer = (float*)ncclGetLsaPointer(w, ch * n, (dc.lsaRank + 1) % dc.lsaSize);
    for (int i = threadIdx.x; i < n; i += blockDim.x) peer[i] = a[i];
    float acc = 0;
    for (int k = 0; k < n; ++k) acc += a[k] * peer[k];
    out[ch] = acc;
  }
}
static int candidate_launch(void* c, cudaStream_t stream) {
  fused<<<dim3(kBlocks), 256, 0, stream>>>(nullptr, {}, nullptr, nullptr, 10);
  return 0;
}
""")

IPC_TABLE = with_block("""
// cuco-design: backend=cuda_ipc placement=before sync=per_peer issuer=multi_cta chunk=full streams=1 comm_sms=32
struct Candidate { cuco_ctx* ctx; ncclComm_t comm; cuco::PeerBuffers g; cuco::PeerBuffers flags; void** table; };
__global__ void push(void** ptrs, const uint4* src, size_t n, int rank, int world) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    for (int p = 0; p < world; ++p) ((uint4*)ptrs[p])[rank * n + i] = src[i];
}
__global__ void spin(const unsigned long long* f, unsigned long long e) {
  cuda::atomic_ref<const unsigned long long, cuda::thread_scope_system> r(*f);
  while (r.load(cuda::memory_order_acquire) < e) {}
}
static int candidate_init(cuco_ctx* ctx, Candidate** out) {
  Candidate* c = new Candidate{};
  *out = c;
  CUCO_TRY(cuco::peer_alloc(ctx, c->comm, 1 << 20, 0, &c->g));
  CUCO_TRY_CUDA(ctx, cudaMemcpy(c->table, c->g.peers, sizeof(void*) * ctx->world, cudaMemcpyHostToDevice));
  return 0;
}
static int candidate_launch(Candidate* c, cudaStream_t stream) {
  push<<<32, 512, 0, stream>>>(c->table, nullptr, 100, c->ctx->rank, c->ctx->world);
  for (int p = 0; p < c->ctx->world; ++p)
    spin<<<1, 1, 0, stream>>>((const unsigned long long*)c->flags.local + p, 1);
  return 0;
}
""")

NVSHMEM = with_block("""
// cuco-design: backend=nvshmem placement=before sync=global issuer=cta chunk=full streams=1 comm_sms=8
__global__ void gather(char* sym, const char* src, size_t n) {
  const int pe = nvshmem_my_pe();
  for (int p = 0; p < nvshmem_n_pes(); ++p) nvshmemx_putmem_nbi_block(sym + pe * n, src, n, p);
  nvshmem_quiet();
}
static int candidate_launch(void* c, cudaStream_t stream) {
  gather<<<8, 256, 0, stream>>>(nullptr, nullptr, 0);
  nvshmemx_barrier_all_on_stream(stream);
  return 0;
}
""")

GIN = with_block("""
// cuco-design: backend=nccl_gin placement=before sync=per_peer issuer=thread chunk=full streams=1 comm_sms=2
__global__ void put(ncclDevComm dc, ncclWindow_t w) {
  ncclGin gin(dc, 0);
  gin.put(ncclTeamWorld(dc), 1, w, 0, w, 0, 64, ncclGin_SignalInc{0});
  gin.waitSignal(ncclCoopThread{}, 0, 1);
}
static int candidate_launch(void* c, cudaStream_t stream) {
  put<<<1, 1, 0, stream>>>({}, nullptr);
  return 0;
}
""")


def test_a_kernel_that_communicates_and_computes_is_fused():
    assert mismatches(FUSED_LSA) == []
    ev = classify(FUSED_LSA)
    [launch] = ev.launches
    assert launch.backend == "nccl_lsa" and launch.moves_data and launch.computes and launch.grid_blocks == 16
    assert ev.overlap == "kernel" and ev.fused and ev.coop == "warp" and ev.comm_sms_hint == "16"
    lie = redeclare(FUSED_LSA, placement="before", chunk="full", sync="global")
    assert any("declares placement=before but kernel fused" in m for m in mismatches(lie))


def test_ipc_store_kernel_through_a_device_table_of_peer_pointers():
    assert mismatches(IPC_TABLE) == []
    ev = classify(IPC_TABLE)
    assert ev.data_backends == ("cuda_ipc",)  # copying the pointer table is not copy_engine traffic
    push, spin = ev.launches[0], ev.launches[1]
    assert push.kernel == "push" and push.moves_data and push.grid_blocks == 32
    assert spin.kernel == "spin" and spin.waits and not spin.moves_data and not spin.backend
    assert ev.issuer == "device" and ev.flag_waits >= 1 and ev.comm_sms_hint == "32"
    assert any("declares backend=copy_engine" in m and "push<<<>>>" in m
               for m in mismatches(redeclare(IPC_TABLE, backend="copy_engine", issuer="host", comm_sms="0")))


def test_nvshmem_and_gin_kernels_are_recognized():
    assert mismatches(NVSHMEM) == [] and mismatches(GIN) == []
    assert classify(NVSHMEM).data_backends == ("nvshmem",)
    gin = classify(GIN)
    assert gin.data_backends == ("nccl_gin",) and gin.coop == "thread" and gin.flag_waits == 1
    assert any("ncclGin" in m and "(nccl_gin)" in m for m in mismatches(redeclare(GIN, backend="nccl_lsa")))
    # GIN is declared validly but cannot run on one host: a warning once capabilities are given.
    assert any("cannot run here" in d.message for d in check_declaration(GIN, caps=Capabilities()))


# ------------------------------------------------------------------ the design line: errors


def test_missing_design_line_is_an_error():
    source = re.sub(r"^// cuco-design:.*\n", "", SEED, count=1, flags=re.M)
    [diag] = check_declaration(source, "bare.cu")
    assert diag.severity == "error" and diag.level == 0 and diag.code == "design"
    assert "no valid `// cuco-design:` line" in diag.message and diag.file == "bare.cu"
    ev = classify(source)
    assert ev.declared is None and ev.declared_pairs is None and ev.design_error
    assert ev.data_backends == ("nccl_host",)  # the evidence is still read


@pytest.mark.parametrize("bad,words", [
    ("backend=mpi placement=before", "`backend=mpi` is not a value of backend"),
    ("backend=nccl_host flavor=spicy", "unknown design dimension `flavor`"),
])
def test_invalid_design_line_is_an_error(bad, words):
    source = re.sub(r"^// cuco-design:.*$", "// cuco-design: " + bad, SEED, count=1, flags=re.M)
    [diag] = check_declaration(source, "bad.cu")
    assert diag.severity == "error" and words in diag.message
    assert diag.line == next(i for i, l in enumerate(source.split("\n"), 1) if l.startswith("// cuco-design:"))


def test_no_evolve_block_at_all_is_an_error_not_a_crash():
    [diag] = check_declaration("int x;\n", "empty.cu")
    assert diag.severity == "error"


def test_comm_sms_for_blocks():
    assert [comm_sms_for_blocks(b) for b in (1, 2, 3, 16, 17, 64, 65, 132)] == ["2", "2", "4", "16", "32", "64",
                                                                                 "all", "all"]


def test_evidence_is_typed_and_frozen():
    ev = classify(SEED)
    assert isinstance(ev, Evidence)
    with pytest.raises(AttributeError):
        ev.streams = 3  # type: ignore[misc]
