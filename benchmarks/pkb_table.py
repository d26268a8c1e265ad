"""The words of docs/parallelkernelbench.md (benchmarks/parallelkernelbench.py writes it): the table
of every problem of a ParallelKernelBench clone from the results of the runs, what it means (how
many import, the refusals and failed checks grouped by reason, the patterns), and every refusal's
one line. Pure Python over the results' JSON."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pkb_gpu import GpuProblem, gpu_cells, load_gpu  # noqa: E402  (the GPU columns' cells)
from pkb_reference import load_reference, reference_cell, reference_text  # noqa: E402

from cuco_tui.core.noise import within_noise  # noqa: E402

GPU_CELL = "not run (needs a GPU host)"

REASONS = (  # (what a refusal says, the group it falls in), first match wins
    ("tuple of tensors", ("inputs or outputs that are not tensors (process groups, lists of tensors, modules, "
                          "values that change with the shape or world size)")),
    ("meta device", "a shape cannot be sized on the meta device (data-dependent sizes, .item(), .tolist())"),
    ("from float64 inputs", "an output in another dtype than the inputs (fp8, integer or fixed float32 results)"),
    ("ignores dtype", "make_inputs ignores dtype (PKB builds some inputs in a fixed dtype)"),
    ("no floating-point input", "no floating-point input"),
    ("does not divide by the world size", "a split dim that does not divide by the world size"),
    ("on the CPU and", "output shapes differ between the meta device and the CPU"),
    ("No module named", "the problem imports a module this machine lacks (triton)"),
    ("not compiled with CUDA", "CUDA-only code (device='cuda', torch.cuda), which a CPU build of torch lacks"),
    ("ProcessGroupGloo", "a collective call gloo (the CPU backend the reference runs under) does not take as NCCL "
                         "does"),
    ("under gloo", "solution fails on the CPU under gloo"),
    ("did not finish", "solution did not finish under gloo in time"),
    ("failed", "PKB's inputs or solution fail while sized (the problem's own assertion or error)"),
)


CHECK_REASONS = (  # (what a failed check says, the group it falls in)
    ("constant", ("an input PKB makes constant (torch.full of rank + 1 for the collectives, zeroed optimizer "
                  "state for the Adam steps), which the check refuses: constant inputs hide indexing bugs")),
)


def check_reason(line: str) -> str:
    if line.startswith(("crash", "timed out")):
        return reason(line)
    return next((group for words, group in CHECK_REASONS if words in line), line.split(":")[1].strip()
                if ":" in line else line)


def reason(line: str) -> str:
    if line.startswith("timed out"):
        return "the import took longer than the timeout"
    if line.startswith("crash"):
        return "crash of cuco-tui (a bug)"
    return next((group for words, group in REASONS if words in line), "other")


def shown_in(table: Path) -> tuple[set[int], set[int]]:
    """The problems a table written here shows as run on the CPU (its imported cell is not 'not
    run') and on a GPU (its 'reference verified on GPU' cell says yes or no)."""
    cpu: set[int] = set()
    gpu: set[int] = set()
    for line in (table.read_text(errors="replace").splitlines() if table.is_file() else []):
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) > 5 and cells[0].isdigit():
            if cells[2] != "not run":
                cpu.add(int(cells[0]))
            if cells[5].startswith(("yes", "no ")):
                gpu.add(int(cells[0]))
    return cpu, gpu


def lost_from(table: Path, results: dict[str, Any], running: set[int], on_gpu: set[int]) -> str:
    """What writing `table` from `results` (with the problems `running` now and those read `on_gpu`)
    would drop that it shows; "" when nothing."""
    cpu, gpu = shown_in(table)
    lost_cpu = cpu - {int(i) for i in results["problems"]} - running
    lost_gpu = gpu - set(load_gpu(results)) - on_gpu

    def ids(xs: set[int]) -> str:
        return ", ".join(map(str, sorted(xs)[:10])) + (" ..." if len(xs) > 10 else "")

    return "; ".join(f"{len(xs)} problem(s) run {where} ({ids(xs)})" for xs, where in
                     ((lost_cpu, "on the CPU"), (lost_gpu, "on a GPU")) if xs)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_table(problems: list[Any], results: dict[str, Any], worlds: list[int], command: str, date: str,
                 pkb: str = "PKB_CLONE", shapes: dict[str, dict[str, int]] | None = None) -> str:
    """docs/parallelkernelbench.md: the table of every problem of the clone, what it means, and each
    refusal's one line."""
    shapes = shapes or {"verify": {"M": 256, "N": 256}, "bench": {"M": 1024, "N": 1024}}
    done = results["problems"]
    ws = [str(w) for w in worlds]
    head = (["#", "problem", "imported " + ", ".join(f"W={w}" for w in ws), "CPU check", "pattern",
             "reference verified on GPU"]
            + [f"best speedup W={w} over {what}" for w in ws for what in ("the program", "the pattern's reference")]
            + ["reference against float64 on GPU"])
    on_gpu = load_gpu(results)
    on_gpu_ref = load_reference(results)
    ints = [int(w) for w in ws]

    def gpu(pid: int) -> str:
        if not on_gpu:
            cells = [GPU_CELL] * (1 + 2 * len(ws))
        else:
            cells = gpu_cells(on_gpu[pid], ints) if pid in on_gpu else ["not run"] * (1 + 2 * len(ws))
        cells.append(reference_cell(on_gpu_ref[pid]) if pid in on_gpu_ref else GPU_CELL if not on_gpu_ref
                     else "not run")
        return "".join(f" {_cell(c)} |" for c in cells)

    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    refusals: dict[str, set[int]] = {}
    failed_checks: dict[str, set[int]] = {}
    imported = {w: 0 for w in ws}
    patterns: dict[str, list[str]] = {}
    lines: list[str] = []
    checked = passed = 0
    for q in problems:
        r = done.get(str(q.id))
        if r is None:
            rows.append(f"| {q.id} | {q.stem} | not run | - | - |{gpu(q.id)}")
            continue
        outs = [(w, r["worlds"][w]) for w in ws if w in r["worlds"]]
        imp = ", ".join("yes" if o["imported"] == "yes" else o["imported"].split(":")[0] for _, o in outs)
        check = next(((w, o["check"]) for w, o in outs if o["check"]), None)
        chk = f"{check[1].split(':')[0]} (W={check[0]})" if check else "-"
        pats = sorted({o["pattern"] for _, o in outs if o["pattern"]})
        for w, o in outs:
            imported[w] += o["imported"] == "yes"
            if o["imported"] != "yes":
                refusals.setdefault(reason(o["imported"]), set()).add(q.id)
            for line, what in ((o["imported"], "import"), (o["check"], "check")):
                if line and line not in ("yes", "passed"):
                    lines.append(f"- {q.id} W={w} {what}: {line}")
        if check:
            checked += 1
            passed += check[1] == "passed"
            if check[1] != "passed":
                failed_checks.setdefault(check_reason(check[1]), set()).add(q.id)
        for pat in pats:
            if pat != "none":
                patterns.setdefault(pat, []).append(str(q.id))
        rows.append(f"| {q.id} | {q.stem} | {imp} | {chk} | {_cell('; '.join(pats) or '-')} |{gpu(q.id)}")
    ran = sum(1 for q in problems if str(q.id) in done)
    minutes = sum(o.get("seconds", 0) for r in done.values() for o in r["worlds"].values()) / 60

    def grouped(groups: dict[str, set[int]]) -> str:
        return "; ".join(f"{why}: {', '.join(map(str, sorted(ids)))}"
                         for why, ids in sorted(groups.items(), key=lambda kv: (-len(kv[1]), kv[0])))

    meaning = [f"Of the {len(problems)} problems of ParallelKernelBench, {ran} were run here: "
               + ", ".join(f"{imported[w]} import at W={w}" for w in ws)
               + f"; of the {checked} checked, {passed} pass `cuco workload check` (the reference run in float64 "
                 f"under gloo against its contract; no compile). The imports and checks took {minutes:.0f} minutes "
                 f"on 2 CPU cores."]
    if failed_checks:
        meaning.append(f"The checks that fail, by reason (problem ids): {grouped(failed_checks)}.")
    if refusals:
        meaning.append(f"The refusals, one line each (listed below), by reason (problem ids, refused at either "
                       f"world size): {grouped(refusals)}.")
    meaning.append("Patterns the importer names: " + ("; ".join(
        f"{pat}: {', '.join(ids)}" for pat, ids in sorted(patterns.items())) if patterns else "none") + ".")
    return "\n".join([
        "# ParallelKernelBench through `cuco workload import`", "",
        f"Made {date} by `{command}` (`benchmarks/parallelkernelbench.py`; `--problems` runs a subset, and "
        f"the results of runs add up) on a CPU-only machine, from a clone of "
        f"[ParallelKernelBench](https://github.com/togethercomputer/ParallelKernelBench) at commit "
        f"`{results.get('pkb_commit', 'unknown')}` (`git clone https://github.com/togethercomputer/"
        f"ParallelKernelBench {pkb}`), kept outside this repository. Each problem's own inputs "
        f"(PKB's `create_input_tensor`, verify shape M=N={shapes['verify']['M']}, bench shape M=N="
        f"{shapes['bench']['M']}) and its reference `solution` are wrapped in an adapter in the scratch folder "
        f"that follows the program convention (docs/workloads.md); the adapter is imported with "
        f"`cuco workload import --world W`, and the folder of the first world size that imports is checked with "
        f"`cuco workload check --no-compile` (it probes the reference at the folder's smallest world size either "
        f"way). The adapters, folders and results stay in the scratch folder.", "",
        "## What it means", "", *("\n\n".join(meaning).split("\n")), "",
        *("\n\n".join(gpu_text(on_gpu, ints, shapes["bench"])).split("\n") if on_gpu else [(
            "The GPU columns (the reference verified against float64 on the GPU, the best offline speedup over the "
            "program and over the recognized pattern's reference) need a GPU host and were not run.")]), "",
        *([reference_text(on_gpu_ref), ""] if on_gpu_ref else []),
        *rows, "",
        "## Every refusal and failed check, in one line", "",
        *(lines or ["None."]), ""])


def _ids(ps: list[GpuProblem]) -> str:
    return ", ".join(str(p.id) for p in sorted(ps, key=lambda p: p.id))


def _span(values: list[float], spec: str) -> str:
    lo, hi = f"{min(values):{spec}}", f"{max(values):{spec}}"
    return lo if lo == hi else f"{lo}-{hi}"


def gpu_text(gpu: dict[int, dict[int, GpuProblem]], worlds: list[int], bench: dict[str, int]) -> list[str]:
    """The paragraphs that say where the GPU columns come from, what they mean and what they show."""
    by_world: dict[int, list[GpuProblem]] = {}
    for entries in gpu.values():
        for w, p in entries.items():
            by_world.setdefault(w, []).append(p)
    where = []
    for w in sorted(set(worlds) | set(by_world)):
        devices: dict[str, list[GpuProblem]] = {}
        for p in by_world.get(w, []):
            devices.setdefault(p.device, []).append(p)
        where.append(f"W={w}: " + ("; ".join(f"{d}, problems {_ids(ps)}" for d, ps in devices.items())
                                   if devices else "not run"))
    shape = ", ".join(f"{k}={v}" for k, v in bench.items())
    out = [(
        "The GPU columns come from device calls of `benchmarks/runs/pkb_gemm.sh` (each problem imported on the GPU "
        "host, its generated seed evaluated against the program with `cuco eval`, then a short offline search from "
        "the seed and `cuco show` of it), read back from the call's folder with `--gpu-results OUT --world W` (the "
        "results add up in the scratch folder's results.json): " + "; ".join(where) + "."), (
        "*Reference verified on GPU*: the program ran under torch.distributed (NCCL) on the GPUs as the reference, "
        "and the seed (NCCL + cuBLAS, the recognized pattern's host-driven version at full strength) matched it in "
        "every check of `cuco eval` (the verify shapes, back to back, under perturbed schedules, the bench shape). "
        f"*Best speedup over the program*: the program's time over the best candidate's at PKB's bench shape "
        f"({shape}), ± half the band of noise; the best is the search's, which replaces the seed only when faster "
        "beyond noise; where the search did not finish, the seed's own speedup from its evaluation, marked so. "
        "*Best speedup over the pattern's reference*: the seed is the pattern's reference, so this is the best "
        "candidate's speedup over the program divided by the seed's, each timed against the program in its own run "
        "of the same search; ± the two spreads combined; 1.00x where the best is the seed itself; \"within noise\" "
        "where the two bands overlap (core/noise.py's test, the one `cuco show`'s ties use).")]
    ps = [p for w in sorted(by_world) for p in by_world[w]]
    figures = [f.value for p in ps for f in (p.seed.speedup, p.search.best_speedup) if f is not None]
    times = [t for p in ps for t in (p.search.shapes or p.seed.shapes)]
    if figures and times:
        words = (f"At PKB's bench shape the program takes {_span([t.program_ms for t in times], '.2f')} ms a call "
                 f"and the best candidate {_span([t.candidate_ms for t in times], '.2f')} ms; the speedups over the "
                 f"program read {_span(figures, '.1f')}x.")
        if max(t.program_ms for t in times) < 1.0:
            words += (" At this size the program's time is mostly its own Python and torch.distributed launch "
                      "overhead per call, not its GEMM or its collective, and so is the seed's speedup over it: "
                      "these figures do not measure fusion.")
        out.append(words)
    done = [p for p in ps if p.search.state == "done" and p.search.seed_speedup() is not None]
    if done:
        beyond = [p for p in done if p.search.beats_seed()]
        sizes = "/".join(map(str, sorted({p.search.searched for p in done})))
        stopped = [p for p in done if p.search.detail]
        words = (f"Of the {len(done)} searches with a result ({sizes} candidates each"
                 + (f"; {_ids(stopped)} stopped at the step's time limit" if stopped else "") + "), "
                 + (f"{len(beyond)} found a candidate faster than the seed beyond noise ({_ids(beyond)})" if beyond
                    else "none found a candidate faster than the seed beyond noise")
                 + f"; the best is the seed itself in {sum(p.search.best_is_seed() for p in done)}.")
        rest = [p for p in ps if p not in done]
        if rest:
            words += f" No search result: {_ids(rest)} (the cells say why)."
        out.append(words)
    twice = [(p, p.seed.speedup, p.search.seed_speedup()) for p in done if p.seed.speedup is not None]
    if twice:
        agree = sum(within_noise(a.band(), b.band()) for _, a, b in twice if b is not None)
        out.append("The seed was timed twice per problem, in its evaluation and as the search's first candidate: "
                   f"{agree} of {len(twice)} pairs are within noise of each other ("
                   + "; ".join(f"{p.id}: {a.label()} and {b.label()}" for p, a, b in twice if b is not None) + ").")
    return out
