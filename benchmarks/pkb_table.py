"""The words of docs/parallelkernelbench.md (benchmarks/parallelkernelbench.py writes it): the table
of every problem of a ParallelKernelBench clone from the results of the runs, what it means (how
many import, the refusals and failed checks grouped by reason, the patterns), and every refusal's
one line. Pure Python over the results' JSON."""

from __future__ import annotations

from typing import Any

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
            + [f"best speedup W={w} over {what}" for w in ws for what in ("the program", "the pattern's reference")])
    gpu = f" {GPU_CELL} |" * (1 + 2 * len(ws))
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
            rows.append(f"| {q.id} | {q.stem} | not run | - | - |{gpu}")
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
        rows.append(f"| {q.id} | {q.stem} | {imp} | {chk} | {_cell('; '.join(pats) or '-')} |{gpu}")
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
        "The GPU columns (the reference verified against float64 on the GPU, the best offline speedup over the "
        "program and over the recognized pattern's reference) need a GPU host and were not run.", "",
        *rows, "",
        "## Every refusal and failed check, in one line", "",
        *(lines or ["None."]), ""])
