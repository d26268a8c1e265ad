"""Attention programs imported at 2 CPU ranks (tests/workload/programs/): all-gather of K/V →
attention in three ways (sdpa on [1, H, S/W, D]; [B, S/W, heads, D] with grouped-query heads and a
causal mask from the rank's offset; Ulysses' all-to-alls around a hand-written attention) are mapped
onto cp_attention's buffers, seed and templates once the float64 run shows each computes its function;
the written reference fills cp_attention's layout and expects what an attention computed here with
NumPy gives; a program that only looks like attention (another scale) keeps the placeholder seed and
says why; an offline search without a GPU compiles cp_attention's overlapping variants (slow)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from cuco_tui.agents.offline.strategy import StrategyBook  # noqa: E402
from cuco_tui.cli.workload_check import check_workload  # noqa: E402
from cuco_tui.evaluate.static_checks import check_static, is_rejected  # noqa: E402
from cuco_tui.toolchain.toolchain import discover  # noqa: E402
from cuco_tui.workload.manifest import load_workload  # noqa: E402
from cuco_tui.workload.program.attention_map import NOT_ATTENTION  # noqa: E402
from cuco_tui.workload.program.gloo_run import GlooRanks  # noqa: E402
from cuco_tui.workload.program.record import NO_SEED_MARK  # noqa: E402
from repo_paths import REPO  # noqa: E402
from program_helpers import bf16_as_f64, imports_once, written_reference  # noqa: E402

PROGRAMS = Path(__file__).parent / "programs"
EVERY = {"host_sequential", "host_attn", "host_flash", "ring", "attn_overlap", "attn_balance", "balance_overlap",
         "ipc_pull"}
CUDNN = {"host_attn", "attn_overlap", "attn_balance", "balance_overlap"}
# program -> (the pattern it prints, (q, k, v) buffers' layout names in the line, causal, strategies offered)
CASES = {
    "cp_attention_kv": ("all-gather of K/V (2 gather(s)) → attention", "[B, H, S/W, D]", False, CUDNN),
    "cp_attention_gqa_causal": ("all-gather of K/V (2 gather(s)) → attention", "[B, S/W, H, D]", True, EVERY),
    "ulysses_attention": ("all-to-all → attention → all-to-all (sequence parallel, as Ulysses)", "[S/W, H, D]",
                          False, CUDNN),
    "cp_attention_heads_first": ("all-gather of K/V (2 gather(s)) → attention", "[H, S/W, D]", False, EVERY),
    "cp_attention_batched": ("all-gather of K/V (2 gather(s)) → attention", "[B, H, S/W, D]", False, EVERY),
}


@pytest.fixture(scope="module")
def ranks():
    with GlooRanks(2) as pool:
        yield pool


@pytest.fixture(scope="module")
def imported(tmp_path_factory, ranks):
    return imports_once(tmp_path_factory, ranks)




def _attention(q: np.ndarray, k_all: np.ndarray, v_all: np.ndarray, q0: int, causal: bool) -> np.ndarray:
    """o [rows, H, D] of queries at positions q0.. over k_all, v_all [S, HKV, D], head h reading h // G."""
    group = q.shape[1] // k_all.shape[1]
    out = np.empty_like(q)
    for h in range(q.shape[1]):
        s = q[:, h] @ k_all[:, h // group].T / math.sqrt(q.shape[2])
        if causal:
            s[np.arange(k_all.shape[0])[None, :] > q0 + np.arange(q.shape[0])[:, None]] = -np.inf
        p = np.exp(s - s.max(axis=1, keepdims=True))
        out[:, h] = (p / p.sum(axis=1, keepdims=True)) @ v_all[:, h // group]
    return out


def _check_is_clean(root: Path) -> None:
    findings = check_workload(root, compile_seed=False, probe_timeout=900)
    assert not [f for f in findings if f.level == "error"], findings


@pytest.mark.parametrize("name", sorted(CASES))
def test_an_attention_program_gets_cp_attentions_seed_and_templates(imported, name):
    pattern, layout, causal, offered = CASES[name]
    made = imported(name)
    line = next(line for line in made.lines if line.startswith(f"pattern: {pattern}"))
    assert ": mapped (seed = cp_attention's" in line and f"`q` = program's `q` {layout}" in line, line
    assert ("causal by global position" if causal else "not causal") in line
    w = load_workload(made.root)
    assert w.split_dims == ("S",) and w.libraries == ("attention",) and w.floor == 0.25
    assert {"S", "H", "HKV", "D", "CAUSAL"} <= set(w.dim_names)
    assert all(s.dims["CAUSAL"] == int(causal) for s in w.verify_shapes + w.bench_shapes)
    seed = w.seed.read_text()
    assert NO_SEED_MARK not in seed and "ncclAllGather" in seed and "cuco_attn_run" in seed
    book = StrategyBook.load(made.root, w.seed)
    assert {s.name for s in book.strategies} == offered
    for s in book.strategies:
        assert not is_rejected(check_static(book.render(s, s.default_knobs()), seed, f"{s.name}.cu")), s.name
    _check_is_clean(made.root)


def test_a_batch_folded_into_the_heads_renames_the_programs_h(imported):
    """B=2, H=2: cp_attention's H is 4, the program's H becomes H_prog, and make_inputs still gets H."""
    made = imported("cp_attention_batched")
    line = next(line for line in made.lines if line.startswith("pattern: all-gather"))
    assert "the program's H is H_prog in the manifest" in line, line
    w = load_workload(made.root)
    assert w.dim_names[:4] == ("B", "S", "H_prog", "D") and "H" in w.dim_names
    for s in w.verify_shapes + w.bench_shapes:
        assert s.dims["H"] == s.dims["B"] * s.dims["H_prog"] and s.dims["HKV"] == s.dims["H"]
    ref = written_reference(made.root)
    dims = dict(w.verify_shapes[0].dims)
    assert ref.io_spec(dims, 2, 0)["inputs"][0] == ("q", (dims["S"] // 2, dims["B"], dims["H_prog"], dims["D"]),
                                                     "bf16")
    assert "# H, HKV, CAUSAL: the pattern's totals" in (made.root / "manifest.toml").read_text()


def test_a_rename_onto_a_dim_the_program_has_already_is_refused_and_says_which(imported, tmp_path):
    text = (PROGRAMS / "cp_attention_batched.py").read_text()
    for old, new in (("D=64)", "D=64, H_prog=1)"), ("D=128)", "D=128, H_prog=1)"),
                     ("*, B, S, H, D,", "*, B, S, H, D, H_prog,")):
        assert old in text, old
        text = text.replace(old, new)
    (tmp_path / "batched_h_prog.py").write_text(text)
    made = imported("batched_h_prog", tmp_path / "batched_h_prog.py")
    line = next(line for line in made.lines if line.startswith("pattern: all-gather"))
    assert "not mapped (the program's dim H must be renamed H_prog in the manifest" in line, line


def test_the_reference_fills_cp_attentions_layout_and_expects_the_programs_attention(imported, ranks):
    """[B, S/W, NH, D] tensors are held as [S/W, B, NH, D] (cp_attention's [S/W, B*NH, D]); expected()
    is the causal attention of the rank's queries over every rank's keys in sequence order."""
    import torch

    made = imported("cp_attention_gqa_causal")
    ref = written_reference(made.root)
    w = load_workload(made.root)
    dims = dict(w.verify_shapes[0].dims)
    B, S, NH, NKV, D = dims["B"], dims["S"], dims["NH"], dims["NKV"], dims["D"]
    assert (dims["H"], dims["HKV"]) == (B * NH, B * NKV)
    sl = S // 2
    spec = ref.io_spec(dims, 2, 0)
    assert spec["inputs"] == [("q", (sl, B, NH, D), "bf16"), ("k", (sl, B, NKV, D), "bf16"),
                              ("v", (sl, B, NKV, D), "bf16")]
    assert spec["outputs"] == [("o", (sl, B, NH, D), "bf16")]
    inputs = []
    for rank in range(2):
        bufs = {n: np.zeros(s, dtype=np.uint16) for n, s, _ in ref.io_spec(dims, 2, rank)["inputs"]}
        ref.fill_inputs(np, bufs, dims, 2, rank, 4)
        inputs.append(bufs)
    torch.manual_seed(4 * 7919 + 1)  # the adapter's seeding of rank 1 at seed 4
    q, _, _ = ref.PROGRAM._module().make_inputs(1, 2, **{d: dims[d] for d in ("B", "S", "NH", "NKV", "D")},
                                                dtype=torch.bfloat16, device="cpu")
    assert np.array_equal(inputs[1]["q"], q.permute(1, 0, 2, 3).contiguous().view(torch.int16).numpy().view(np.uint16))
    flat = lambda a, heads: bf16_as_f64(a).reshape(sl, B * heads, D)  # noqa: E731
    k_all = np.concatenate([flat(r["k"], NKV) for r in inputs])
    v_all = np.concatenate([flat(r["v"], NKV) for r in inputs])
    got = ref.PROGRAM.expected(inputs, dims, 2, ranks=ranks)
    for rank in range(2):
        want = _attention(flat(inputs[rank]["q"], NH), k_all, v_all, rank * sl, causal=True)
        assert got[rank]["o"].shape == (sl, B, NH, D)
        assert np.allclose(got[rank]["o"].reshape(want.shape), want, rtol=1e-9, atol=1e-12)


def _variant(imported, tmp_path: Path, base: str, name: str, old: str, new: str):
    text = (PROGRAMS / f"{base}.py").read_text()
    assert old in text, old
    path = tmp_path / f"{name}.py"
    path.write_text(text.replace(old, new))
    return imported(name, path)


@pytest.mark.parametrize("name,base,old,new,said", [
    # KV heads tiled (h % HKV) where cp_attention groups them (h // (H/HKV)): another function
    ("tiled_gqa", "cp_attention_heads_first", ".repeat_interleave(group, dim=0)", ".repeat(group, 1, 1)",
     NOT_ATTENTION),
    # every input 1: every reading of them gives the program's result
    ("all_ones", "cp_attention_kv", "torch.randn(1, H, S // world, D,", "torch.ones(1, H, S // world, D,",
     "make_inputs' values do not tell the mapping apart"),
    # is_causal=True over the gathered keys: top-left, not by global position
    ("top_left", "cp_attention_kv", "torch.cat(vs, dim=2))", "torch.cat(vs, dim=2), is_causal=True)",
     "its causal mask is aligned top-left"),
    # D = 12: cuDNN takes multiples of 8
    ("head_dim_12", "cp_attention_kv", "dict(S=64, H=4, D=32)", "dict(S=64, H=4, D=12)",
     "a head dim D that is a multiple of 8 up to 256; verify has D=12"),
])
def test_an_attention_program_the_candidates_cannot_compute_is_not_mapped(imported, tmp_path, name, base, old, new,
                                                                             said):
    made = _variant(imported, tmp_path, base, name, old, new)
    line = next(line for line in made.lines if line.startswith("pattern: all-gather of K/V"))
    assert "not mapped (" in line and said in line, line
    assert NO_SEED_MARK in (made.root / "seed.cu").read_text()


def test_a_nan_never_agrees():
    from cuco_tui.workload.program.attention_map import agrees

    want = np.array([1.0, 2.0])
    assert agrees(want + 1e-12, want)
    assert not agrees(np.array([np.nan, 2.0]), want) and not agrees(want, np.array([np.nan, 2.0]))
    assert not agrees(np.zeros(2), np.zeros(2))  # an all-zero result tells nothing


def _scaled(imported, tmp_path: Path):
    """cp_attention_kv.py with another scale: attention by its trace, not cp_attention's function."""
    text = (PROGRAMS / "cp_attention_kv.py").read_text()
    old = "torch.cat(vs, dim=2))"
    assert old in text
    path = tmp_path / "scaled_attention.py"
    path.write_text(text.replace(old, "torch.cat(vs, dim=2), scale=0.5)"))
    return imported("scaled_attention", path)


def test_a_program_that_is_not_cp_attentions_function_keeps_the_placeholder_and_says_why(imported, tmp_path):
    made = _scaled(imported, tmp_path)
    line = next(line for line in made.lines if line.startswith("pattern: all-gather of K/V"))
    assert f"not mapped ({NOT_ATTENTION})" in line, line
    assert NO_SEED_MARK in (made.root / "seed.cu").read_text()
    assert not (made.root / "templates").exists()
    assert json.loads((made.root / "program.json").read_text())["layout"]["pattern"] == ""


def test_the_bound_of_a_program_is_made_of_its_patterns_parts_never_of_the_program_itself(imported, tmp_path):
    """The baseline counts every part not named as communication as compute: a part that ran the
    program whole would put the program's own time into its bound (it did until 2026-12-08)."""
    from cuco_tui.evaluate.baseline import COMM_PARTS
    from cuco_tui.workload.program.adapter import ProgramReference, RankProgram

    unmapped = object.__new__(RankProgram)
    unmapped.ref = ProgramReference(_scaled(imported, tmp_path).root)
    assert unmapped.parts({}, {}) == {}
    mapped = object.__new__(RankProgram)
    mapped.ref, mapped.pattern_ref, mapped.warnings = ProgramReference(imported("cp_attention_kv").root), None, []

    class Halves:  # cp_attention's reference's two halves, as _attention_parts calls them
        warnings: list[str] = []
        allgather = attention = None

    mapped.pattern_ref = Halves()
    names = set(mapped.parts({}, {}))
    assert names == {"allgather", "attention"} and names & COMM_PARTS == {"allgather"}


MAIN = "import sys; from cuco_tui.cli import main; sys.exit(main())"


@pytest.mark.slow
@pytest.mark.skipif(not discover().can_compile, reason="no CUDA toolchain here: the cascade cannot compile")
def test_an_offline_search_of_an_imported_attention_program_compiles_overlapping_candidates(tmp_path):
    """One generation of the offline agent on the causal GQA program: cp_attention's templates,
    rendered into its seed, compile (L1; no GPU here), overlapping ones among them."""
    from cuco_tui.lineage import SessionRepo

    env = dict(os.environ, CUCO_NO_GPU="1")
    env.pop("ANTHROPIC_API_KEY", None)
    program = PROGRAMS / "cp_attention_gqa_causal.py"
    made = subprocess.run([sys.executable, "-c", MAIN, "workload", "import", str(program), "--world", "2", "--dir",
                           str(tmp_path)], env=env, capture_output=True, text=True, timeout=900, cwd=REPO)
    assert made.returncode == 0, made.stderr
    session = tmp_path / "s"
    out = subprocess.run([sys.executable, "-c", MAIN, "search", "--workload", str(tmp_path / program.stem),
                          "--agent", "offline", "--generations", "1", "--seed", "0", "--session", str(session),
                          "--json"], env=env, capture_output=True, text=True, timeout=3600, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    repo = SessionRepo.open(session)
    try:
        records = repo.records(with_source=True)
    finally:
        repo.close()
    compiled = {r.design.get("knobs", {}).get("strategy") for r in records if r.status == "no_gpu"}
    assert compiled & {"ring", "attn_overlap", "balance_overlap", "ipc_pull"}, \
        [(r.id, r.status, r.design.get("knobs")) for r in records]
