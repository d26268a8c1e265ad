"""Hanging candidates on the CPU emulator with the wait trace on (issue 32): the runtime's waits,
compiled from cuco_runtime.cuh as they are for a GPU, record in each block's slot the function
that waits, without the candidate passing anything; the slots, decoded by the ABI mirror as the
watchdog dumps them, give a deadlock report that names the candidate's launch of the kernel
that hangs. The candidates: the one recorded hanging on the GPU host (its wait unnamed, in the
kernel), the same with the wait in a device function the kernel calls, and today's hang fault,
whose named wait (CUCO_WAIT_SITE) keeps its own launch line. The driver is emulator/hang_main.inc."""

import subprocess

import pytest

from cuco_tui.core.reference import reference_module
from cuco_tui.evaluate.launch_sites import launch_locator
from cuco_tui.harness import abi
from cuco_tui.harness.deadlock import analyze
from cuco_tui.harness.launcher import RankOutcome
from cuco_tui.harness.rank_events import TimedOut
from cuco_tui.workload.manifest import load_workload
from emulator_helpers import compile_emulated, needs_gxx, with_driver
from repo_paths import DATA, TESTS

W = load_workload("gemm_allgather")
DIMS = {"M": 256, "K": 64, "N": 128}
WORLD = 2
SLOTS = 8
RECORDED = (DATA / "runs" / "hang" / "hang.cu").read_text()  # its wait unnamed (CUCO_SITE) in the kernel
IN_HELPER = RECORDED.replace(
    "  if (threadIdx.x == 0) cuco::wait_geq<unsigned>(trace, CUCO_SITE, peer, 7, flag, 1u);",
    "  if (threadIdx.x == 0) wait_on(flag, peer, trace);", 1).replace(
    "__global__ void wait_for_neighbour(",
    "__device__ void wait_on(const unsigned* flag, int peer, cuco::Trace trace) {\n"
    "  cuco::wait_geq<unsigned>(trace, CUCO_SITE, peer, 7, flag, 1u);\n}\n\n__global__ void wait_for_neighbour(", 1)
SOURCES = {"recorded": RECORDED, "in_helper": IN_HELPER, "named": (W.root / "faults" / "hang.cu").read_text()}
# The emulator has no synchronous cudaMemset (its memory is the host's): the hang faults' init
# clears the flag with one, which the emulated sources do with memset, on the same line (the
# report's lines are the source's).
CLEAR = "cudaMemset(c->flag, 0, sizeof(unsigned))"


def line_of(source: str, text: str) -> int:
    return next(i for i, line in enumerate(source.splitlines(), 1) if text in line)


@pytest.fixture(scope="module")
def hung(tmp_path_factory):
    """{name: (rank outcomes as the watchdog reports them, raw slot records)} for each candidate."""
    assert IN_HELPER.count("wait_on(") == 2
    root = tmp_path_factory.mktemp("hang_emulated")
    assert all(s.count(CLEAR) == 1 for s in SOURCES.values())
    emulated = {n: with_driver(s.replace(CLEAR, "(memset(c->flag, 0, sizeof(unsigned)), cudaSuccess)"), "hang_main.inc")
                for n, s in SOURCES.items()}
    binaries = compile_emulated(emulated, root, (TESTS / "harness" / "emulator",))
    ref = reference_module(W.reference)
    out = {}
    for name, binary in binaries.items():
        run = root / f"{name}-run"
        run.mkdir()
        lines = [f"{WORLD} {SLOTS} 120", f"{len(DIMS)} " + " ".join(f"{k} {v}" for k, v in DIMS.items())]
        for rank in range(WORLD):
            spec = ref.io_spec(DIMS, WORLD, rank)
            bufs = [("in", *b) for b in spec["inputs"]] + [("out", *b) for b in spec["outputs"]]
            lines.append(str(len(bufs)))
            for kind, buf, shape, dtype in bufs:
                dims = list(shape) + [1] * (4 - len(shape))
                lines.append(f"{kind} {buf} {abi.DTYPES[dtype]} {len(shape)} " + " ".join(map(str, dims)))
        (run / "meta.txt").write_text("\n".join(lines) + "\n")
        done = subprocess.run([str(binary), str(run)], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{name}: exit {done.returncode}\n{done.stderr[-3000:]}"
        records = {r: abi.decode_slots((run / f"r{r}-trace.bin").read_bytes()) for r in range(WORLD)}
        outcomes = [RankOutcome(r, r, 0, 124, [TimedOut(rank=r, phase="verify:verify", what="candidate launch (check 1)",
                                                        limit_s=20.0, message="hung",
                                                        trace=tuple(s.__dict__ for s in records[r]))])
                    for r in range(WORLD)]
        out[name] = (outcomes, records)
    return out


def report(hung, name):
    source = SOURCES[name]
    return analyze(hung[name][0], file="hang.cu", source=source, locate=launch_locator(source, "hang.cu"))


@needs_gxx
def test_each_waiting_block_records_the_function_it_waits_in(hung):
    for name, function in (("recorded", "wait_for_neighbour"), ("in_helper", "wait_on"),
                           ("named", "wait_for_neighbour")):
        waiting = [s for r in range(WORLD) for s in hung[name][1][r] if s.state == "waiting"]
        assert len(waiting) == WORLD, name
        assert {(s.function, s.peer) for s in waiting} == {(function, 1), (function, 0)}, name


@needs_gxx
def test_an_unnamed_wait_in_a_kernel_is_reported_at_the_kernels_launch(hung):
    wait, launch = line_of(RECORDED, "cuco::wait_geq"), line_of(RECORDED, "wait_for_neighbour<<<")
    d = report(hung, "recorded")
    assert d.kind == "cycle"
    assert (f"rank 0 waits on rank 1 (hang.cu:{launch} (in wait_for_neighbour at line {wait}), flag 7: wants 1, "
            "saw 0)") in d.summary


@needs_gxx
def test_an_unnamed_wait_in_a_device_function_is_reported_at_the_launch_of_the_kernel_that_calls_it(hung):
    wait, launch = line_of(IN_HELPER, "cuco::wait_geq"), line_of(IN_HELPER, "wait_for_neighbour<<<")
    d = report(hung, "in_helper")
    assert (f"rank 1 waits on rank 0 (hang.cu:{launch} (in wait_on at line {wait}), flag 7: wants 1, saw 0)"
            in d.summary)
    assert any(x.startswith(f"hang.cu:{launch}: wait_for_neighbour<<<") for x in d.details)


@needs_gxx
def test_a_named_wait_keeps_its_launch_line_and_name(hung):
    source = SOURCES["named"]
    site = line_of(source, 'CUCO_WAIT_SITE("neighbour go")')
    d = report(hung, "named")
    assert f"rank 0 waits on rank 1 (hang.cu:{site}, 'neighbour go' (flag 7): wants 1, saw 0)" in d.summary
