"""Running rendered candidates on the CPU emulator (workloads/cp_attention/emulator): the launch
rewrite, the compile, and the marker for machines that cannot. Shared by the emulated tests of
every workload; each workload brings its own driver (an .inc included after the candidate)."""

import platform
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from cuco_tui.harness.bf16 import from_bf16_bits
from cuco_tui.harness.perturb import KINDS
from cuco_tui.harness.verify import POISON_BF16
from cuco_tui.toolchain.nvcc import runtime_defines

ROOT = Path(__file__).resolve().parents[1]
CP_EMU = ROOT / "workloads" / "cp_attention" / "emulator"
RUNTIME = ROOT / "cuco_tui" / "harness" / "runtime"

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None or platform.machine() not in ("x86_64", "AMD64"),
                               reason="runs CUDA code on the CPU: needs g++ (C++20) on x86-64")


def _match(text, at):
    """Offset of the bracket closing the one at `at`."""
    pairs = {"(": ")", "[": "]", "{": "}", "<": ">"}
    want = [pairs[text[at]]]
    for k in range(at + 1, len(text)):
        ch = text[k]
        if want[-1] == ">" and ch == ">":
            want.pop()
        elif ch in "([{" or (ch == "<" and want[-1] == ">"):
            want.append(pairs[ch])
        elif ch in ")]}" and ch == want[-1]:
            want.pop()
        if not want:
            return k
    raise ValueError(f"no bracket closes offset {at}")


def _split_top(text):
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return parts + [cur.strip()]


def rewrite_launches(text):
    """kernel<<<grid, block, smem, stream>>>(args) -> emu_enqueue_kernel("kernel", stream, grid, block,
    kernel, args): the emulator runs it on that stream's thread."""
    out, pos = [], 0
    while (at := text.find("<<<", pos)) >= 0:
        j = at
        while text[j - 1].isspace():
            j -= 1
        if text[j - 1] == ">":  # template arguments
            depth, j = 0, j - 1
            while True:
                depth += text[j] == ">"
                depth -= text[j] == "<"
                if depth == 0:
                    break
                j -= 1
        start = j
        while text[start - 1].isalnum() or text[start - 1] in "_:":
            start -= 1
        kernel = text[start:at].strip()
        close = text.index(">>>", at)
        config = _split_top(text[at + 3:close])
        paren = close + 3
        while text[paren].isspace():
            paren += 1
        assert text[paren] == "(", kernel
        end = _match(text, paren)
        args = text[paren + 1:end].strip()
        stream = config[3] if len(config) > 3 else "nullptr"
        call = (f'emu_enqueue_kernel("{kernel}", {stream}, dim3({config[0]}), dim3({config[1]}), {kernel}'
                + (f", {args}" if args else "") + ")")
        out.append(text[pos:start] + call)
        pos = end + 1
    return "".join(out) + text[pos:]


def compile_emulated(sources: dict[str, str], root: Path, includes: tuple[Path, ...] = ()) -> dict[str, Path]:
    """{name: C++ source} -> {name: binary}, compiled in parallel against the emulator's stubs,
    the emulator, `includes` (a workload's driver folder) and the harness runtime headers."""
    jobs = {}
    for name, text in sources.items():
        (root / f"{name}.cpp").write_text(text)
        cmd = ["g++", "-std=c++20", "-O1", "-pthread", "-fno-strict-aliasing", "-D__CUDACC__",
               f"-I{CP_EMU / 'stubs'}", f"-I{CP_EMU}", *[f"-I{p}" for p in includes], f"-I{RUNTIME}",
               *runtime_defines(text), str(root / f"{name}.cpp"), "-o", str(root / name)]
        jobs[name] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for name, job in jobs.items():
        _, err = job.communicate()
        assert job.returncode == 0, f"{name}:\n{err[-4000:]}"
    return {name: root / name for name in jobs}


def candidate_source(seed: Path, book, strategy: str | None, knobs: dict) -> str:
    """The seed (strategy None), or the strategy rendered at its normalized knobs (a knob the
    test does not name at its default: a knob added later keeps the test's candidate)."""
    if strategy is None:
        return seed.read_text()
    s = book.get(strategy)
    return book.render(s, s.normalized({**s.default_knobs(), **knobs}))


def with_driver(src: str, driver: str) -> str:
    """A rendered candidate for the emulator: launches rewritten, the workload's driver after it."""
    return rewrite_launches(src) + f'\n#include "{driver}"\n'


def seeds_of(kind: str, world: int) -> list[int]:
    """One perturbation seed of `kind` aimed at each rank (harness/perturb.py kind_of, target_of)."""
    k = KINDS.index(kind)
    return [len(KINDS) * t + k for t in range(world)]


def wrong(got_bits, want, rtol: float) -> str:
    """harness.verify.compare's verdict on a bf16 output against the float64 answer: '' when it
    passes, else why not."""
    unwritten = int((got_bits == POISON_BF16).sum())
    got = from_bf16_bits(np, got_bits).astype(np.float64)
    finite = np.isfinite(got)
    rms = float(np.sqrt(np.mean(want * want)))
    rel = np.where(finite, np.abs(np.where(finite, got, 0.0) - want) / (np.abs(want) + rms), np.inf)
    if unwritten == 0 and finite.all() and float(rel.max()) <= rtol:
        return ""
    worst = np.unravel_index(int(np.argmax(rel)), rel.shape)
    return (f"{unwritten} unwritten, {int((~finite).sum())} non-finite, max rel error {float(rel.max()):.3g} at "
            f"{tuple(int(i) for i in worst)}: got {got[worst]:.4g}, want {want[worst]:.4g}")


def failures(results, rtol: float) -> list[str]:
    """What failed of an emulated run's (what, rank, got, want) results."""
    return [f"rank {rank}, {what}: {why}" for what, rank, got, want in results if (why := wrong(got, want, rtol))]


def turns(candidates) -> dict[str, int | None]:
    """name -> 0 or 1 for each (name, strategy, knobs) of `candidates`: the variants of a strategy
    take turns in the order listed; None for a strategy with one variant alone, which takes both."""
    by_strategy: dict = {}
    for name, strategy, _ in candidates:
        by_strategy.setdefault(strategy, []).append(name)
    return {name: None if len(names) == 1 else k % 2 for names in by_strategy.values() for k, name in enumerate(names)}


def schedules_of(turn: int | None, index: int, schedules):
    """Of a shape's two (seed, lagging rank) schedules, one with a rank whose streams lag far behind
    (lagging >= 0) and one without, those a variant of `turn` runs at the shape `index` of its list:
    the lagging one at every other shape, the other at the rest; both for a variant alone (None).
    A strategy's variants taking turns meet every schedule of every shape between them, each once
    (running both proved each strategy's behaviour twice)."""
    if turn is None:
        return tuple(schedules)
    lagging = (turn + index) % 2 == 0
    return tuple(s for s in schedules if (s[1] >= 0) == lagging)
