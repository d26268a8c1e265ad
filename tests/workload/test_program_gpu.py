"""GPU tests of imported PyTorch programs (scripts/gpu-tests.sh on a GPU host; skipped elsewhere).

Each program of tests/workload/programs/ whose pattern the tool maps is imported at 2 ranks, and its
generated seed is verified against the program itself, which the rank workers run under
torch.distributed with NCCL beside the harness's own group (adapter.py): with both ranks sharing
one GPU (correctness only) and with a GPU per rank (verified, then timed against the program at
the bench shapes). For the all-gather + linear program, gemm_allgather's templates at their
defaults verify too, with the program's bias kernel after them; for the gather patterns of
ParallelKernelBench's GEMM problems (all-gather along K → matmul, matmul → all-gather along dim 1,
matmul → all-reduce with a fixed K per rank), the seed's overlapping variants; for the attention
programs (mapped onto cp_attention), cp_attention's seed, and its templates on the causal one; for
the static-routing expert layers, the seed and its per-peer pipeline."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuco_tui.core.result import Level, Status
from cuco_tui.evaluate.cascade import EvalOptions, evaluate
from cuco_tui.harness.gpus import inventory
from cuco_tui.workload.manifest import load_workload

pytestmark = pytest.mark.gpu
pytest.importorskip("torch")

PROGRAMS = Path(__file__).parent / "programs"
MAPPED = ["ag_linear", "matmul_rs_residual", "linear_ar", "ag_k_cat", "ag_k_transposed", "mm_allgather_cols",
          "matmul_ar_fixed_k", "ag_linear_gelu", "matmul_ar_silu", "cp_attention_kv", "cp_attention_gqa_causal",
          "ulysses_attention", "cp_attention_batched", "moe_alltoall", "moe_by_source", "fsdp_linear"]
# cp_attention's templates on the causal grouped-query program ([B, S/W, heads, D], batch 2 folded
# into the heads): the overlapping and load-balancing ones, and the templates' own kernel.
ATTENTION_TEMPLATES = ["attn_overlap", "attn_balance", "balance_overlap", "ring", "ipc_pull", "host_flash"]
# The seed's overlapping variants (its knobs changed): program -> knob values.
OVERLAP = [("ag_k_cat", {"kPerPeer": 1}), ("ag_k_transposed", {"kPerPeer": 1}),
           ("ag_k_transposed", {"kPerPeer": 1, "kNcclMaxCtas": 16}), ("mm_allgather_cols", {"kChunks": 4}),
           ("mm_allgather_cols", {"kChunks": 8, "kNcclMaxCtas": 8}), ("matmul_ar_fixed_k", {"kChunks": 4}),
           ("moe_alltoall", {"kPerPeer": 1}), ("moe_by_source", {"kPerPeer": 1, "kNcclMaxCtas": 16}),
           ("moe_alltoall", {"kPerPeer": 2}), ("moe_by_source", {"kPerPeer": 2, "kNcclMaxCtas": 16})]


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    from cuco_tui.workload.program.importer import import_program

    made = {}

    def get(name: str):
        if name not in made:
            made[name] = load_workload(import_program(PROGRAMS / f"{name}.py", 2,
                                                      parent=tmp_path_factory.mktemp(name)).root)
        return made[name]

    return get


def _explain(r) -> str:
    return "\n".join([r.reason, r.deadlock_report] + [d.render() for d in r.diagnostics])


@pytest.mark.parametrize("name", MAPPED)
def test_the_seed_verifies_against_the_program_with_two_ranks_on_one_gpu(imported, name):
    w = imported(name)
    r = evaluate(w.seed, w, EvalOptions(gpus=[0], world=2, share_gpu=True))
    assert r.status == Status.VERIFIED and r.level == Level.VERIFY, _explain(r)
    assert r.verifications and all(v.ok for v in r.verifications)
    assert not any("reference" in d.code for d in r.diagnostics if d.severity == "error"), _explain(r)


@pytest.mark.parametrize("name", MAPPED)
def test_the_seed_verifies_and_is_timed_against_the_program_on_two_gpus(imported, name):
    if inventory().count < 2:
        pytest.skip("needs 2 GPUs")
    w = imported(name)
    r = evaluate(w.seed, w, EvalOptions(gpus=[0, 1], world=2))
    assert r.status == Status.MEASURED and r.level == Level.BENCHMARK, _explain(r)
    assert {t.shape for t in r.timings} == {s.name for s in w.bench_shapes}
    # The seed is the program's own algorithm (NCCL + cuBLAS, kChunks = 1): about as fast as torch's.
    assert all(t.speedup > 0.7 for t in r.timings), [(t.shape, t.speedup) for t in r.timings]


@pytest.mark.parametrize("strategy", ["host_chunked", "peer_pipeline", "fused_tile"])
def test_gemm_allgathers_templates_verify_with_the_programs_bias_on_two_gpus(imported, tmp_path, strategy):
    if inventory().count < 2:
        pytest.skip("needs 2 GPUs")
    from cuco_tui.agents.offline.strategy import StrategyBook

    w = imported("ag_linear")
    book = StrategyBook.load(w.root, w.seed)
    s = book.get(strategy)
    path = tmp_path / f"{strategy}.cu"
    path.write_text(book.render(s, s.default_knobs()))
    r = evaluate(path, w, EvalOptions(gpus=[0, 1], world=2, bench=False))
    assert r.status == Status.VERIFIED and r.level == Level.VERIFY, _explain(r)


@pytest.mark.parametrize("name,knobs", OVERLAP, ids=[f"{n}-{'-'.join(f'{k}{v}' for k, v in kn.items())}"
                                                     for n, kn in OVERLAP])
def test_the_seeds_overlapping_variants_verify_on_two_gpus(imported, tmp_path, name, knobs):
    if inventory().count < 2:
        pytest.skip("needs 2 GPUs")
    from cuco_tui.source.knobs import with_knobs

    w = imported(name)
    path = tmp_path / "variant.cu"
    path.write_text(with_knobs(w.seed.read_text(), knobs))
    r = evaluate(path, w, EvalOptions(gpus=[0, 1], world=2, bench=False))
    assert r.status == Status.VERIFIED and r.level == Level.VERIFY, _explain(r)


@pytest.mark.parametrize("strategy", ATTENTION_TEMPLATES)
def test_cp_attentions_templates_verify_against_an_attention_program_with_two_ranks_on_one_gpu(imported, tmp_path,
                                                                                                  strategy):
    from cuco_tui.agents.offline.strategy import StrategyBook

    w = imported("cp_attention_gqa_causal")
    book = StrategyBook.load(w.root, w.seed)
    s = book.get(strategy)
    path = tmp_path / f"{strategy}.cu"
    path.write_text(book.render(s, s.default_knobs()))
    r = evaluate(path, w, EvalOptions(gpus=[0], world=2, share_gpu=True, bench=False))
    assert r.status == Status.VERIFIED and r.level == Level.VERIFY, _explain(r)


def test_a_program_given_dims_by_keyword_runs_as_the_reference_on_the_gpu(tmp_path):
    """head_softmax.py's solution takes H by keyword: the harness's rank workers give it H too."""
    from cuco_tui.cli.workload_check import check_workload
    from cuco_tui.workload.program.importer import import_program

    root = import_program(PROGRAMS / "head_softmax.py", 2, parent=tmp_path).root
    findings = check_workload(root, compile_seed=False, probe_timeout=900,
                              on_gpus=EvalOptions(gpus=[0], world=2, share_gpu=True))
    assert not [f for f in findings if f.level == "error"], findings
    assert any("float64" in f.detail for f in findings if f.level == "ok"), findings
