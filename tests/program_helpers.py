"""The PyTorch programs the import tests bring in (tests/workload/programs), variants of them, the
bad ones an import refuses, and gloo ranks spawned for the tests of the float64 run's emulations."""

from pathlib import Path

PROGRAMS = Path(__file__).parent / "workload" / "programs"
AG = PROGRAMS / "ag_linear.py"


def program_variant(tmp_path: Path, name: str, old: str, new: str) -> Path:
    """ag_linear.py with `old` replaced by `new`, written as tmp_path/NAME.py."""
    text = AG.read_text()
    assert old in text, old
    path = tmp_path / f"{name}.py"
    path.write_text(text.replace(old, new))
    return path


BAD = {  # name -> (text of ag_linear.py, replaced by, what the one line must say)
    "no_solution": ("def solution(", "def solve(", "defines no solution(*inputs)"),
    "no_shapes": ("SHAPES = {", "SIZES = {", "defines no SHAPES"),
    "no_verify_shape": ('"verify', '"small', "SHAPES has no verify shape"),
    "ignores_dtype": ("x = torch.randn(M // world, K, dtype=dtype,",
                      "x = torch.randn(M // world, K, dtype=torch.bfloat16,",
                      "make_inputs ignores dtype: asked for torch.float64, input 0 (x) is torch.bfloat16"),
    "ignores_device": ("x = torch.randn(M // world, K, dtype=dtype, device=device)",
                       "x = torch.randn(M // world, K, dtype=dtype)", "make_inputs ignores device"),
    "syntax_error": ('device="cuda"):', 'device="cuda")', "syntax_error.py:12: syntax error"),
    "raises": ("return F.linear(full, w, b)", "return F.linear(full, w.t(), b)",
               "solution at verify, rank 0 of 2 failed: RuntimeError"),
    "raises_on_the_cpu": ("return F.linear(full, w, b)",
                          "return F.linear(full, w, b) + torch.ones(3, device=x.device) if x.device.type == 'cpu' "
                          "else F.linear(full, w, b)",
                          "solution at verify (rank 0 of 2, float64 on the CPU under gloo) failed: RuntimeError"),
    # rank 0, left waiting in the all-gather, fails too (its peer went away): rank 1's error is the cause
    "raises_on_one_rank": ("    dist.all_gather_into_tensor(full, x)\n",
                           "    if x.device.type == 'cpu' and dist.get_rank() == 1:\n"
                           "        raise ValueError('rank 1 fails alone')\n"
                           "    dist.all_gather_into_tensor(full, x)\n",
                           "solution at verify (rank 1 of 2, float64 on the CPU under gloo) failed: ValueError: "
                           "rank 1 fails alone"),
}

# Through a `cuco` process (tests/cli/test_workload_import_cli.py: one line on stderr, exit 2, nothing
# written), a bad file of each stage of an import: loading it, its convention, its run on the CPU
# ranks. The others are refused by import_program in the same words (tests/workload/
# test_program_import.py, on ranks that file starts once: a CLI process and two ranks importing
# torch cost ~7 CPU-s a case).
BAD_AT_THE_CLI = ("syntax_error", "no_verify_shape", "raises_on_one_rank")


def spawned_ranks(target, world: int, tmp_path) -> list[tuple]:
    """Run `target(rank, init_method, results)` on `world` spawned processes (a gloo group through a
    file store in `tmp_path`); what they put on `results`, once each has exited cleanly."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    init = f"file://{tmp_path / 'store'}"
    procs = [ctx.Process(target=target, args=(r, init, results)) for r in range(world)]
    for p in procs:
        p.start()
    got = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    return got


def imports_once(tmp_path_factory, ranks, world: int = 2):
    """get(name, source=None): the ImportReport of PROGRAMS/<name>.py (or `source`) at `world` ranks on
    `ranks`, each made once (a module fixture's body)."""
    from cuco_tui.workload.program.importer import import_program

    made = {}

    def get(name: str, source: Path | None = None):
        if name not in made:
            made[name] = import_program(source or PROGRAMS / f"{name}.py", world, name=name,
                                        parent=tmp_path_factory.mktemp(name), ranks=ranks)
        return made[name]

    return get


def written_reference(root: Path):
    """An imported folder's reference.py, imported as the harness imports it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"ref_{root.name}", root / "reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bf16_as_f64(bits):
    """bf16 bits (uint16) as float64."""
    import numpy as np

    from cuco_tui.harness.bf16 import from_bf16_bits

    return from_bf16_bits(np, bits).astype(np.float64)
