"""`cuco workload import FILE.py --world N`: a workload folder from the engineer's PyTorch program.

In order, each step in the N CPU processes of gloo_run.GlooRanks, started once for the import (the
program never runs in this one; each process imports torch once):
1. inspect_program, in rank 0: the convention, and every shape sized on the meta device at N ranks
   and at the usual world sizes (a split dim that does not divide by N is the program's error);
2. solution at the verify shapes in float64 on the CPU under gloo, on the N processes, with one
   call traced; its outputs must have the shapes the meta device gave;
3. patterns.recognize on the trace; layout.pattern_layout for a mappable pattern;
4. the folder is written beside its destination, and its reference is tried there as the harness
   will use it (expected() through the adapter, on the CPU run's inputs in the harness's layout,
   must give the CPU run's outputs); a mapping that fails this falls back to the program's own layout;
5. the folder is renamed into place. Any problem before that is one line, and nothing is written."""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from cuco_tui.core.workload import WorkloadError
from cuco_tui.workload.program.generate import PATTERN_SPLITS, ImportPlan, render
from cuco_tui.workload.program.gloo_run import (RUN_TIMEOUT_S, GlooRanks, ProgramRunError, ProgramTimeout,
                                                temporary_folder)
from cuco_tui.workload.program.attention_map import ATTENTION_PATTERNS, attention_layout, layout_words
from cuco_tui.workload.program.expert_map import experts_layout
from cuco_tui.workload.program.trace_graph import Match
from cuco_tui.workload.program.weight_gather_map import DESCRIPTION as WEIGHT_GATHER
from cuco_tui.workload.program.weight_gather_map import weight_gather_layout
from cuco_tui.workload.program.layout import (Layout, pattern_layout, program_layout, program_name, to_harness,
                                              with_renames)
from cuco_tui.workload.program.patterns import recognize, summary
from cuco_tui.workload.program.precision import TORCH_DTYPE, own_rounding, widened
from cuco_tui.workload.program.record import RECORD
from cuco_tui.workload.scaffold import valid_name

SEED_KNOBS = {"allgather_k_matmul": "kPerPeer (gather then one GEMM, or per-peer K blocks as they land), "
                                    "kNcclMaxCtas",
              "alltoall_experts": "kPerPeer (all-to-all, GEMMs, all-to-all; or by peer: each block's GEMMs as it "
                                  "lands, its results sent back after every arrival or, 2, as they finish), "
                                  "kNcclMaxCtas"}
LONGER = "a program that needs longer: --timeout SECONDS"  # how `cuco workload import` gives a step more time
TOLERANCE = {  # dtype -> (rtol, rtol when the program sums over ranks)
    "bfloat16": (0.02, 0.04), "float16": (0.01, 0.02), "float32": (0.001, 0.001)}


@dataclass(frozen=True)
class ImportReport:
    root: Path
    files: tuple[str, ...]
    lines: tuple[str, ...]  # what was found, one finding a line, as the CLI prints it


def _name_from(stem: str) -> str:
    name = re.sub(r"[^a-z0-9_]+", "_", stem.lower()).strip("_")
    return name if name[:1].isalpha() else f"program_{name}"


def _inspect(ranks: GlooRanks, source: Path, timeout: float) -> dict[str, Any]:
    seen = ranks.inspect(source, timeout)
    if seen.timed_out:
        raise WorkloadError(f"loading {source.name} and sizing its shapes took over {timeout:g} s (a solution "
                            f"the meta device cannot run, for a .item() say, is sized on the CPU, slowly at large "
                            f"bench shapes; {LONGER})")
    report = seen.report
    if report is None:
        raise WorkloadError(f"loading {source.name} failed: {seen.stderr_tail}")
    if "error" in report:
        raise WorkloadError(f"{source.name}: {report['error']}" if not report["error"].startswith(source.name)
                            else report["error"])
    return report


def _tolerance(dtype: str, trace: dict[str, Any]) -> tuple[float, str]:
    sums = any(op.get("collective") in ("all_reduce", "reduce_scatter", "reduce") for op in trace["ops"])
    plain, summed = TOLERANCE.get(dtype, (0.001, 0.001))
    why = (f"{dtype} output{', summed over the ranks in any order' if sums else ''}: an element passes when "
           f"|y - ref| <= rtol * (|ref| + rms(ref))")
    return (summed if sums else plain), why


def _templates(plan: ImportPlan) -> None:
    """gemm_allgather's templates for an all-gather → matmul: all of them where every shape meets
    their divisibility (gemm_allgather's [divisible]) at every world size, else the host ones."""
    from cuco_tui.workload.manifest import REPO_WORKLOADS, load_workload

    shipped = load_workload(REPO_WORKLOADS / "gemm_allgather")
    for world in plan.world_sizes:
        for shape, dims in plan.layout.derived.items():
            for d, unit in shipped.divisible.items():
                need = unit * (world if d in shipped.split_dims else 1)
                if dims[d] % need:
                    plan.templates = ["host_sequential", "host_chunked"]
                    plan.templates_why = (f"Only host_sequential and host_chunked are offered: the device-initiated "
                                          f"and fused templates need {d} to be a multiple of {need} at world {world}, "
                                          f"and {shape} has {d}={dims[d]}.")
                    return
    plan.templates = ["all"]
    for d, unit in shipped.divisible.items():
        plan.divisible[d] = max(plan.divisible.get(d, 1), unit)


def _verify_shapes(conv: dict[str, Any]) -> dict[str, dict[str, int]]:
    """The convention's verify shapes, in its order (the float64 run's shape indices)."""
    return {s: conv["shapes"][s] for s in conv["shapes"] if s.startswith("verify")}


def _cpu_run(ranks: GlooRanks, source: Path, world: int, conv: dict[str, Any], sizes: dict[str, Any],
             timeout: float):
    verify = _verify_shapes(conv)
    tmp = temporary_folder()
    try:
        run = ranks.run(source, verify, Path(tmp.name), trace=True, timeout=timeout)
    except ProgramTimeout as exc:
        tmp.cleanup()
        raise WorkloadError(f"{source.name}: {exc}; {LONGER}") from None
    except ProgramRunError as exc:
        tmp.cleanup()
        raise WorkloadError(f"{source.name}: {exc}") from None
    meta = {e["shape"]: e for e in sizes[str(world)]["shapes"]}
    for r, rep in enumerate(run.ranks):
        for shape, got in rep["shapes"].items():
            want = [s for s, _ in meta[shape]["ranks"][r]["outputs"]]
            if [s for s, _ in got["outputs"]] != want:
                tmp.cleanup()
                raise WorkloadError(f"{source.name}: solution's outputs at {shape} (rank {r}) have shapes "
                                    f"{[s for s, _ in got['outputs']]} in the float64 run and {want} when sized: "
                                    f"output shapes that depend on the data cannot be sized")
    return run, tmp


def _agrees(root: Path, run: Any, world: int, plan: ImportPlan, ranks: GlooRanks) -> str:
    """Whether the written reference's expected() gives the CPU run's outputs from the CPU run's inputs
    (in the harness's layout), on the import's ranks: "" when it does, else what went wrong."""
    import numpy as np

    from cuco_tui.workload.program.adapter import ProgramReference

    lay = plan.layout
    shape = plan.convention_verify
    dims = plan.shape_dims(shape)
    inputs = []
    for r in range(world):
        inputs.append({b.name: np.ascontiguousarray(to_harness(run.input(0, r, b.index), b)) for b in lay.inputs})
    try:
        got = ProgramReference(root).expected(inputs, dims, world, ranks=ranks)
    except Exception as exc:  # the program under the adapter's views: report, do not crash
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    for r in range(world):
        for b in lay.outputs:
            want = to_harness(run.output(0, r, b.index), b)
            have = np.asarray(got[r][b.name]).reshape(want.shape)
            if not np.allclose(have, want, rtol=1e-9, atol=1e-12 * (np.abs(want).max() + 1)):
                return f"output {b.name} of rank {r} differs"
    return ""


def _write(stage: Path, plan: ImportPlan, source: Path) -> tuple[str, ...]:
    if stage.exists():
        shutil.rmtree(stage)
    files = render(plan)
    record = {
        "version": 1, "program": "program.py", "source": str(source), "dims": plan.convention["dims"],
        "dtype": plan.convention["dtype"], "world": plan.world, "shapes": plan.convention["shapes"],
        "sizes": plan.sizes, "split_dims": plan.split_dims, "layout": plan.layout.to_json(),
        "patterns": [m.to_json() for m in plan.patterns], "summary": plan.summary, "trace": plan.trace,
    }
    for rel, text in {**files, "program.py": source.read_text(), RECORD: json.dumps(record, indent=1)}.items():
        path = stage / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tuple(sorted(files) + ["program.py", RECORD])


def import_program(source: Path, world: int, name: str | None = None, parent: Path = Path("workloads"),
                   timeout: float = RUN_TIMEOUT_S, ranks: GlooRanks | None = None,
                   say: Callable[[str], None] | None = None) -> ImportReport:
    """`ranks`: a GlooRanks of `world` processes to run on (a caller importing several programs at one
    world size starts them once, each job loading its program afresh); else ranks of its own.
    `timeout`: the limit of each step that runs the program; `say`: told, one line, as each starts."""
    source = Path(source)
    if source.is_dir():
        raise WorkloadError(f"{source} is a folder: give the program's .py file")
    if not source.is_file():
        raise WorkloadError(f"{source}: no such file (give the program's .py file)")
    if world < 2:
        raise WorkloadError(f"--world {world}: a program of collectives needs 2 ranks or more")
    name = name or _name_from(source.stem)
    if not valid_name(name):
        raise WorkloadError(f"{name!r} is not a workload name: use 2-48 lowercase letters, digits and _, starting "
                            f"with a letter (--name)")
    root = Path(parent) / name
    if root.exists():
        raise WorkloadError(f"{root} exists already; choose another --name or --dir (nothing was written)")
    if ranks is not None:
        if ranks.world != world:
            raise ValueError(f"an import at world {world} was handed {ranks.world} ranks")
        return _import(ranks, source, world, name, parent, timeout, say or _silent)
    with GlooRanks(world) as own:
        return _import(own, source, world, name, parent, timeout, say or _silent)


def _silent(line: str) -> None:
    pass


def _import(ranks: GlooRanks, source: Path, world: int, name: str, parent: Path, timeout: float,
            say: Callable[[str], None]) -> ImportReport:
    # A line before each step that waits on the program: a hang is then seen to be the program's,
    # in that step, and not the tool's.
    root = Path(parent) / name
    say(f"loading {source.name} and sizing its shapes (rank 0, once torch has started) ...")
    report = _inspect(ranks, source, timeout)
    conv, sizes = report["convention"], report["sizes"]
    say(f"running solution on {world} CPU processes in float64 under gloo at "
        f"{', '.join(_verify_shapes(conv))} ...")
    run, tmp = _cpu_run(ranks, source, world, conv, sizes, timeout)
    made_parent = not Path(parent).exists()
    stage = Path(parent) / f".{name}.importing"
    try:
        trace = run.ranks[0]["trace"]
        matches = recognize(trace, world)
        first = sizes[str(world)]["shapes"][0]["ranks"][0]
        layout: Layout = program_layout(conv["input_names"], first)
        lines = [f"{source.name}: dims {', '.join(conv['dims'])}; shapes "
                 f"{', '.join(conv['shapes'])}; {conv['dtype']}; world sizes {', '.join(sizes)}"]
        lines += [f"world {w} left out: {why}" for w, why in report["refused"].items()]
        lines.append(f"ran solution on {world} CPU processes in float64 under gloo at "
                     f"{', '.join(s for s in conv['shapes'] if s.startswith('verify'))}")
        lines.append(f"trace ({trace['shape']}, rank 0): {summary(trace)}")
        mapped = next((m for m in matches if m.mapped), None)
        gathered = next((m for m in matches if m.pattern == "allgather_matmul" and not m.mapped), None)
        lay, problem = None, ""
        if mapped is not None:
            lay, problem = _pattern_layout(mapped, sizes, run, world, conv, len(first["inputs"]), say)
        elif gathered is not None:
            # The gathered operand may be the weight (FSDP): gemm_allgather's problem, transposed.
            lay, problem = weight_gather_layout(sizes, run, world, len(_verify_shapes(conv)))
            if lay is not None or problem:
                mapped = Match("allgather_matmul", WEIGHT_GATHER, problem=problem)
                matches = [mapped if m is gathered else m for m in matches]
        if mapped is not None:
            if lay is not None:
                lay = with_renames(lay, sizes, tuple(conv["dims"]))
            taken = [d for d in (lay.renamed if lay else ()) if program_name(d) in conv["dims"]]
            if taken:
                lay, problem = None, (f"the program's dim {taken[0]} must be renamed {program_name(taken[0])} in "
                                      f"the manifest (the pattern's {taken[0]} differs), and it has a dim of that "
                                      f"name already: rename that one")
            if lay is None:
                matches = [replace(m, problem=problem) if m is mapped else m for m in matches]
            else:
                layout = lay
        rtol, why = _tolerance(conv["dtype"], trace)
        if conv["dtype"] in TORCH_DTYPE:
            say(f"running solution in {conv['dtype']} on the float64 run's inputs (how far its own rounding "
                f"lands) ...")
        worst, at, not_measured = own_rounding(ranks, source, run, _verify_shapes(conv), conv["dtype"], timeout)
        rtol, why = widened(rtol, why, worst, not_measured, conv["dtype"], at)
        plan = ImportPlan(name=name, title=f"{source.stem} (imported PyTorch program)", source=str(source),
                          world=world, world_sizes=sorted(int(w) for w in sizes), convention=conv, sizes=sizes,
                          split_dims=report["split_dims"], trace=trace, summary=summary(trace), patterns=matches,
                          layout=layout, rtol=rtol, tolerance_why=why)
        _plan_manifest(plan)
        if made_parent:
            Path(parent).mkdir(parents=True)
        files = _write(stage, plan, source)
        say("checking the written reference against the float64 run ...")
        problem = _agrees(stage, run, world, plan, ranks)
        if problem and layout.pattern:
            own = program_layout(conv["input_names"], first)
            mapped_match = plan.mapped
            plan.patterns = [replace(m, problem=f"the reference through the pattern's layout disagrees with the "
                                                f"program ({problem})") if m is mapped_match else m for m in matches]
            plan.layout, plan.templates, plan.templates_why, plan.divisible = own, [], "", {}
            _plan_manifest(plan)
            files = _write(stage, plan, source)
            problem = _agrees(stage, run, world, plan, ranks)
        if problem:
            raise WorkloadError(f"the written reference does not reproduce {source.name} on the CPU ({problem}); "
                                f"please report this")
        lines += _pattern_lines(plan)
        stage.rename(root)
        return ImportReport(root, files, tuple(lines))
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        if made_parent:
            shutil.rmtree(parent, ignore_errors=True)
        raise
    finally:
        tmp.cleanup()


def _pattern_layout(mapped: Match, sizes: dict[str, Any], run: Any, world: int, conv: dict[str, Any], n_inputs: int,
                    say: Callable[[str], None]) -> tuple[Layout | None, str]:
    """The layout of a mapped pattern: attention and experts checked on the float64 run's values, the
    matmul patterns from the roles the trace gave."""
    n_verify = len(_verify_shapes(conv))
    if mapped.pattern in ATTENTION_PATTERNS:
        say("checking the program's results against cp_attention's attention (q, k, v found by their values) ...")
        return attention_layout(mapped.pattern, sizes, run, world, n_verify)
    if mapped.pattern == "alltoall_experts":
        say("checking the program's results against a static-routing expert layer ...")
        return experts_layout(sizes, run, world, n_verify)
    return pattern_layout(mapped.pattern, mapped.roles, sizes, n_inputs)


def _plan_manifest(plan: ImportPlan) -> None:
    """split_dims and [divisible]: the program's split dims and the pattern's, each a multiple of the
    world size; for all-gather → matmul, the templates offered and what they need."""
    splits = [plan.layout.manifest_name(d) for d in plan.split_dims]  # the program's, as the manifest names them
    splits += [d for d in PATTERN_SPLITS.get(plan.layout.pattern, ()) if d not in splits and d in plan.dims]
    plan.manifest_splits = splits
    plan.divisible = {d: 1 for d in splits}
    plan.templates, plan.templates_why = [], ""
    plan.flag_dims, plan.libraries = [], []
    if plan.layout.pattern == "allgather_matmul":
        _templates(plan)
    elif plan.layout.pattern in ATTENTION_PATTERNS:
        _attention_templates(plan)
    elif plan.layout.pattern == "alltoall_experts":
        plan.flag_dims = ["BY_SOURCE"]


# cp_attention's templates that run only the harness attention (cuDNN): any S/W (even, for the ones
# that cut the causal chunk in halves) and any D of 8's; the rest run the templates' own blockwise
# kernel too (whole 64-row tiles, D = 64 or 128).
CUDNN_ONLY = ("host_attn", "attn_overlap")
CUDNN_HALVES = ("attn_balance", "balance_overlap")


def _attention_templates(plan: ImportPlan) -> None:
    """cp_attention's templates for an attention pattern: all of them where every shape gives whole
    64-row tiles per rank and D = 64 or 128 at every world size, else those that run only cuDNN."""
    plan.flag_dims, plan.libraries = ["CAUSAL"], ["attention"]
    tiles, halves = "", ""
    for world in plan.world_sizes:
        for shape, dims in plan.layout.derived.items():
            rows = dims["S"] // world
            if not tiles and (rows % 64 or dims["D"] not in (64, 128)):
                tiles = (f"{shape} has S/W={rows} and D={dims['D']} at world {world} (the templates' own kernel "
                         f"takes whole 64-row tiles and D = 64 or 128)")
            if not halves and rows % 2:
                halves = f"{shape} has an odd S/W={rows} at world {world}"
    if not tiles:
        plan.templates = ["all"]
        plan.divisible.update({"S": 64, "D": 64})
        return
    plan.templates = list(CUDNN_ONLY) + ([] if halves else list(CUDNN_HALVES))
    plan.templates_why = (f"Only {', '.join(plan.templates)} are offered: {tiles}"
                          + (f"; and {halves}, which the load-balancing templates cut in halves" if halves else "")
                          + ".")


def _renamed_words(plan: ImportPlan) -> str:
    """"; the program's H is H_prog in the manifest ...": one clause per renamed dim."""
    heads = plan.layout.pattern in ATTENTION_PATTERNS
    return "".join(f"; the program's {d} is {program_name(d)} in the manifest"
                   + (f" (cp_attention's {d} counts the batch's heads)" if heads and d in ("H", "HKV") else "")
                   for d in plan.layout.renamed)


def _pattern_lines(plan: ImportPlan) -> list[str]:
    if not plan.patterns:
        return ["pattern: none the tool knows; the seed is a placeholder (write it, or search with --agent claude)"]
    out = []
    for m in plan.patterns:
        if m.mapped and m.pattern == plan.layout.pattern and m.pattern in ATTENTION_PATTERNS:
            offered = "all of cp_attention" if plan.templates == ["all"] else ", ".join(plan.templates)
            causal = "causal by global position" if plan.layout.derived[plan.convention_verify]["CAUSAL"] else \
                "not causal"
            out.append(f"pattern: {m.description}: mapped (seed = cp_attention's host-driven seed (NCCL + cuDNN "
                       f"attention); templates: {offered}; {layout_words(plan.layout, plan.program_names)}; "
                       f"{causal}{_renamed_words(plan)}; checked on the float64 run)")
            if plan.templates_why:
                out.append(f"  {plan.templates_why}")
        elif m.mapped and m.pattern == plan.layout.pattern:
            what = ("seed = gemm_allgather's host-driven seed (NCCL + cuBLAS)" + (
                f"; templates: {'all of gemm_allgather' if plan.templates == ['all'] else ', '.join(plan.templates)}"
                if plan.templates else "") if m.pattern == "allgather_matmul" else
                f"seed = host-driven NCCL + cuBLAS with knobs {SEED_KNOBS.get(m.pattern, 'kChunks, kNcclMaxCtas')}")
            if "KR" in plan.dims:
                what += "; K per rank (KR) fixed by the program: the total K grows with the world size"
            moved = [b for b in plan.layout.inputs if b.layout in ("transposed", "axes")]
            if moved:
                what += (f"; the program's {plan.program_names[moved[0].index]} is given to candidates transposed "
                         f"({moved[0].name})")
            if m.pattern == "alltoall_experts":
                by = plan.layout.derived[plan.convention_verify]["BY_SOURCE"]
                what += ("; each source's block cut into one part per local expert" if by else
                         "; the arrived rows cut into one part per local expert")
            if m.description == WEIGHT_GATHER:
                what += "; transposed: the weight's shards are gemm_allgather's x, y is the program's output transposed"
            if m.roles.get("epilogue"):
                what += "; the epilogue is a kernel of its own after the pattern's output"
            what += _renamed_words(plan)
            out.append(f"pattern: {m.description}: mapped ({what})")
            if plan.templates_why and plan.templates != ["all"]:
                out.append(f"  {plan.templates_why}")
        else:
            out.append(f"pattern: {m.description}: not mapped ({m.problem})")
    if not plan.layout.pattern:
        out.append("no seed generated: the seed is a placeholder (write it, or search with --agent claude)")
    return out
