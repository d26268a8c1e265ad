"""Expert parallelism with static routing from a PyTorch program (expert_map.py): imported at 2 CPU
ranks, mapped when the float64 run shows the static-routing expert layer (the arrived rows grouped
by rank, tests/workload/programs/moe_alltoall.py, or by source with nn.Linear's weights,
moe_by_source.py), refused in one line when it is not (a router inside the layer); the written
reference fills the seed's layout and expects the layer computed here with NumPy; and the generated
seed, at each value of its overlap knob, run whole on the CPU model of CUDA, NCCL and cuBLAS
(workloads/cp_attention/emulator/, driven by moe_dispatch_combine's generic moe_main.inc: one launch
alone, launches back to back with fresh inputs in stream order, one after a host wait), at W=2 and
W=4 with the perturbations L2 applies, gives the layer's answer on every rank."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from cuco_tui.cli.workload_check import check_workload  # noqa: E402
from cuco_tui.harness.perturb import KINDS  # noqa: E402
from cuco_tui.source.knobs import with_knobs  # noqa: E402
from cuco_tui.workload.manifest import load_workload  # noqa: E402
from cuco_tui.workload.program.expert_map import static_experts  # noqa: E402
from cuco_tui.workload.program.gloo_run import GlooRanks  # noqa: E402
from cuco_tui.workload.program.record import NO_SEED_MARK  # noqa: E402
from emulator_helpers import compile_emulated, failures, needs_gxx, seeds_of, with_driver  # noqa: E402
from program_helpers import bf16_as_f64, imports_once, written_reference  # noqa: E402

PROGRAMS = Path(__file__).parent / "programs"
DRIVER = load_workload("moe_dispatch_combine").root / "emulator"
UNIT_US = 10_000


@pytest.fixture(scope="module")
def ranks():
    with GlooRanks(2) as pool:
        yield pool


@pytest.fixture(scope="module")
def imported(tmp_path_factory, ranks):
    return imports_once(tmp_path_factory, ranks)




@pytest.mark.parametrize("name,by_source,held", [("moe_alltoall", 0, "[EL, H, F]"),
                                                 ("moe_by_source", 1, "[EL, F, H] (nn.Linear's")])
def test_a_static_routing_expert_layer_is_mapped_onto_a_seed_with_knobs(imported, name, by_source, held):
    made = imported(name)
    line = next(line for line in made.lines if line.startswith("pattern: all-to-all →"))
    assert "(expert parallel): mapped (seed = host-driven NCCL + cuBLAS with knobs kPerPeer" in line, line
    w = load_workload(made.root)
    assert w.split_dims == ("E",) and {"T", "H", "F", "E", "BY_SOURCE"} <= set(w.dim_names)
    assert all(s.dims["BY_SOURCE"] == by_source for s in w.verify_shapes + w.bench_shapes)
    seed = w.seed.read_text()
    assert NO_SEED_MARK not in seed and "cuco-knob: 0 1 2" in seed and held in seed
    findings = check_workload(made.root, compile_seed=False, probe_timeout=900)
    assert not [f for f in findings if f.level in ("error", "warning")], findings


def test_the_reference_fills_the_seeds_layout_and_expects_the_layer(imported, ranks):
    """nn.Linear's [EL, F, H] weights are given as [EL, H, F]; expected() is the layer by source."""
    made = imported("moe_by_source")
    ref = written_reference(made.root)
    dims = dict(load_workload(made.root).verify_shapes[0].dims)
    T, H, F, E = dims["T"], dims["H"], dims["F"], dims["E"]
    assert ref.io_spec(dims, 2, 0) == {"inputs": [("x", (T, H), "bf16"), ("w", (E // 2, H, F), "bf16")],
                                       "outputs": [("y", (T, F), "bf16")]}
    inputs = []
    for rank in range(2):
        bufs = {n: np.zeros(s, dtype=np.uint16) for n, s, _ in ref.io_spec(dims, 2, rank)["inputs"]}
        ref.fill_inputs(np, bufs, dims, 2, rank, 3)
        inputs.append(bufs)
    want = static_experts([bf16_as_f64(r["x"]) for r in inputs], [bf16_as_f64(r["w"]) for r in inputs], 1)
    got = ref.PROGRAM.expected(inputs, dims, 2, ranks=ranks)
    for rank in range(2):
        assert np.allclose(got[rank]["y"], want[rank], rtol=1e-10, atol=1e-12)


def test_a_router_inside_the_layer_is_not_mapped_and_says_why(imported):
    made = imported("moe_router")
    line = next(line for line in made.lines if line.startswith("pattern: all-to-all →"))
    assert "not mapped (the expert seed reads tokens and weights and writes one output: solution takes 3" in line
    assert NO_SEED_MARK in (made.root / "seed.cu").read_text()


# The emulated runs: (world, dims) with E a multiple of W; T a multiple of W * (E/W) when by source.
SHAPES = [(2, {"T": 32, "H": 48, "F": 40, "E": 4, "BY_SOURCE": 0}),
          (2, {"T": 40, "H": 32, "F": 64, "E": 4, "BY_SOURCE": 1}),
          (4, {"T": 48, "H": 32, "F": 32, "E": 8, "BY_SOURCE": 0}),  # 24-row parts cross 12-row blocks
          (4, {"T": 32, "H": 40, "F": 48, "E": 8, "BY_SOURCE": 1})]


@pytest.fixture(scope="module")
def emulated(imported, tmp_path_factory):
    seed = load_workload(imported("moe_alltoall").root).seed.read_text()
    # kNcclMaxCtas = 16 at kPerPeer = 1: the communicator made with a config (its SM cap means nothing here)
    sources = {f"per_peer_{v}": with_driver(with_knobs(seed, {"kPerPeer": v, "kNcclMaxCtas": 16 * (v == 1)}),
                                            "moe_main.inc") for v in (0, 1, 2)}
    return compile_emulated(sources, tmp_path_factory.mktemp("experts_emu"), (DRIVER,))


def _run(binary: Path, folder: Path, world: int, dims: dict, perturb: int | None, launches: int = 3) -> list:
    T, H, F, EL = dims["T"], dims["H"], dims["F"], dims["E"] // world
    folder.mkdir(parents=True)
    rng = np.random.default_rng(world * 100 + T)
    want = []
    for i in range(launches + 1):
        xs, ws = [], []
        for rank in range(world):
            x = (rng.standard_normal((T, H), dtype=np.float32)).astype(np.float32)
            w = (rng.standard_normal((EL, H, F), dtype=np.float32) / np.sqrt(H)).astype(np.float32)
            for name, a in (("x", x), ("w", w)):
                bits = (a.view(np.uint32) >> 16).astype(np.uint16)  # truncated to bf16
                bits.tofile(folder / f"r{rank}-{name}{i}.bin")
                (xs if name == "x" else ws).append(bf16_as_f64(bits))
        want.append(static_experts(xs, ws, dims["BY_SOURCE"]))
    lines = [f"{world} {launches} 5 90 1 -1", f"{len(dims)} " + " ".join(f"{k} {v}" for k, v in dims.items())]
    for _ in range(world):
        lines += ["3", f"in x 1 2 {T} {H} 1 1", f"in w 1 3 {EL} {H} {F} 1", f"out y 1 2 {T} {F} 1 1"]
    (folder / "meta.txt").write_text("\n".join(lines) + "\n")
    (folder / "perturb.txt").write_text(f"{-1 if perturb is None else perturb} {UNIT_US} 1 1\n")
    r = subprocess.run([str(binary), str(folder)], capture_output=True, text=True, timeout=150)
    assert r.returncode == 0, f"exit {r.returncode}:\n{r.stderr[-4000:]}"
    tags = [("first launch alone", "first", 0)] + [(f"launch {i} back to back", f"b2b{i}", i)
                                                    for i in range(1, launches + 1)] + [("after a host wait", "last", 0)]
    return [(what, rank, np.fromfile(folder / f"r{rank}-y-{tag}.bin", dtype=np.uint16).reshape(T, F), want[i][rank])
            for what, tag, i in tags for rank in range(world)]


@needs_gxx
@pytest.mark.parametrize("per_peer", [0, 1, 2])
@pytest.mark.parametrize("world,dims", SHAPES, ids=[f"W{w}-by{'src' if d['BY_SOURCE'] else 'rank'}" for w, d in SHAPES])
def test_the_seed_gives_the_layers_answer_under_every_perturbation(emulated, tmp_path, per_peer, world, dims):
    """Unperturbed, then each kind of L2's perturbation aimed at one rank (another rank per kind)."""
    for s in [None] + [seeds_of(k, world)[i % world] for i, k in enumerate(KINDS)]:
        bad = failures(_run(emulated[f"per_peer_{per_peer}"], tmp_path / f"p{s}", world, dims, s), 0.02)
        assert not bad, f"kPerPeer={per_peer} W={world} {dims} perturbation {s}: {bad[:3]}"


@pytest.mark.slow
def test_an_offline_search_compiles_the_per_peer_pipeline(imported, tmp_path):
    """Two generations of the offline agent on the seed's knobs (no GPU here): the per-peer pipeline
    is among the candidates compiled."""
    import os
    import sys

    from cuco_tui.lineage import SessionRepo
    from cuco_tui.toolchain.toolchain import discover
    from repo_paths import REPO

    if not discover().can_compile:
        pytest.skip("no CUDA toolchain here: the cascade cannot compile")
    root = imported("moe_alltoall").root
    env = dict(os.environ, CUCO_NO_GPU="1")
    env.pop("ANTHROPIC_API_KEY", None)
    main = "import sys; from cuco_tui.cli import main; sys.exit(main())"
    out = subprocess.run([sys.executable, "-c", main, "search", "--workload", str(root), "--agent", "offline",
                          "--generations", "2", "--seed", "0", "--session", str(tmp_path / "s"), "--json"],
                         env=env, capture_output=True, text=True, timeout=3600, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    repo = SessionRepo.open(tmp_path / "s")
    try:
        records = repo.records(with_source=True)
    finally:
        repo.close()
    compiled = [r for r in records if r.status == "no_gpu"]
    assert any("constexpr int kPerPeer = 1;" in r.source for r in compiled), \
        [(r.id, r.status, r.design.get("knobs")) for r in records]
