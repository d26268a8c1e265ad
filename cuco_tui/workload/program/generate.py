"""The files of an imported program's workload folder, as text (the importer writes them): the
manifest, the reference adapter, the seed (the pattern's host-driven NCCL + cuBLAS seed, or a
placeholder), the task text, the notes for agents and, for all-gather → matmul and attention, the
strategies that reuse gemm_allgather's or cp_attention's templates. Rendered from skeleton/; no torch."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

from cuco_tui.workload.manifest import REPO_WORKLOADS
from cuco_tui.workload.program.attention_map import ATTENTION_PATTERNS, layout_words
from cuco_tui.workload.program.expert_map import layout_words as expert_words
from cuco_tui.workload.program.weight_gather_map import DESCRIPTION as WEIGHT_GATHER
from cuco_tui.workload.program.layout import HARNESS_DTYPES, BufferMap, Layout, harness_shape
from cuco_tui.workload.program.patterns import Match
from cuco_tui.workload.program.trace_graph import epilogue_words

SKELETON = Path(__file__).resolve().parent / "skeleton"
SHIPPED_AG = REPO_WORKLOADS / "gemm_allgather" / "templates"
# cp_attention's error floor (its manifest says why): an attention output averages values that can
# cancel, so its rms is far below the values themselves over long sequences.
CP_FLOOR = 0.25
HOST_DESIGN = ("// cuco-design: backend=nccl_host placement=before sync=global issuer=host chunk=full streams=1 "
               "comm_sms=0")
SHIPPED_CP = REPO_WORKLOADS / "cp_attention"
PATTERN_SPLITS = {"allgather_matmul": ("M", "N"), "matmul_reducescatter": ("K", "M"), "matmul_allreduce": ("K",),
                  "allgather_k_matmul": ("K",), "matmul_allgather": ("N",), "allgather_attention": ("S",),
                  "alltoall_attention": ("S",), "alltoall_experts": ("E",)}


@dataclass
class ImportPlan:
    name: str
    title: str
    source: str  # the file imported, as given
    world: int
    world_sizes: list[int]
    convention: dict[str, Any]  # user_module.Convention.to_json()
    sizes: dict[str, Any]  # world (str) -> sizing JSON
    split_dims: dict[str, str]  # dim -> evidence
    trace: dict[str, Any]
    summary: str
    patterns: list[Match]
    layout: Layout
    rtol: float
    tolerance_why: str
    manifest_splits: list[str] = field(default_factory=list)  # the manifest's split_dims
    divisible: dict[str, int] = field(default_factory=dict)  # the manifest's [divisible]
    templates: list[str] = field(default_factory=list)  # the shipped workload's strategies offered
    templates_why: str = ""
    flag_dims: list[str] = field(default_factory=list)  # the manifest's flag_dims (dims that may be 0)
    libraries: list[str] = field(default_factory=list)  # the manifest's harness libraries

    @property
    def convention_verify(self) -> str:
        return next(s for s in self.convention["shapes"] if s.startswith("verify"))

    @property
    def program_names(self) -> list[str]:
        """The program's names of its inputs: solution's parameters, else in0, in1, ..."""
        n = len(self.sizes[str(self.world)]["shapes"][0]["ranks"][0]["inputs"])
        names = list(self.convention["input_names"])
        return names if len(names) == n else [f"in{i}" for i in range(n)]

    @property
    def mapped(self) -> Match | None:
        return next((m for m in self.patterns if m.mapped and m.pattern == self.layout.pattern), None)

    @property
    def dims(self) -> list[str]:
        """The manifest's dims: the program's (renamed where a pattern's dim of that name differs),
        then the pattern's it lacks."""
        own = [self.layout.manifest_name(d) for d in self.convention["dims"]]
        pattern = next(iter(self.layout.derived.values()), {})  # M, K, N (or M, KR, N)
        return own + [d for d in pattern if d not in own]

    def shape_dims(self, shape: str) -> dict[str, int]:
        dims = {self.layout.manifest_name(d): v for d, v in self.convention["shapes"][shape].items()}
        dims.update(self.layout.derived.get(shape, {}))
        return {d: dims[d] for d in self.dims}


def _env() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(str(SKELETON)), undefined=jinja2.StrictUndefined,
                              keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)


def _extents(plan: ImportPlan, shapes: list[tuple[dict[str, int], list[int]]]) -> str:
    """`M/W, K`: each axis of a buffer as the dim (or dim/W) it equals at every shape, else its size
    at the first shape. `shapes`: (the shape's dims, the buffer's extents there) for every shape."""
    world, out = plan.world, []
    for axis, first in enumerate(shapes[0][1]):
        name = next((f"{d}{suffix}" for suffix, div in (("", 1), ("/W", world)) for d in shapes[0][0]
                     if all(ext[axis] * div == dims[d] for dims, ext in shapes)), str(first))
        out.append(name)
    return ", ".join(out)


def _buffer_shapes(plan: ImportPlan, kind: str, index: int, transposed: bool = False,
                   buffer: BufferMap | None = None) -> str:
    """A program buffer's extents by name (transposed, or in `buffer`'s layout, as the harness holds it)."""
    rows = []
    for e in plan.sizes[str(plan.world)]["shapes"]:
        dims = {plan.layout.manifest_name(d): v for d, v in e["dims"].items()}
        dims.update(plan.layout.derived.get(e["shape"], {}))
        ext = e["ranks"][0][kind][index][0]
        if buffer is not None:
            ext = harness_shape(ext, buffer.layout, buffer.axes)
        rows.append((dims, ext[::-1] if transposed else ext))
    return _extents(plan, rows)


def _attention(plan: ImportPlan) -> bool:
    return plan.layout.pattern in ATTENTION_PATTERNS


def _tensors(plan: ImportPlan, kind: str, names: list[str]) -> str:
    first = plan.sizes[str(plan.world)]["shapes"][0]["ranks"][0][kind]
    items = []
    for i, (_, dt) in enumerate(first):
        label = f"`{names[i]}`" if i < len(names) else ("one" if len(first) == 1 else f"output {i}")
        items.append(f"{label} [{_buffer_shapes(plan, kind, i)}] ({dt})")
    return ", ".join(items)


def _role_words(plan: ImportPlan) -> dict[str, Any]:
    lay = plan.layout
    names = plan.program_names
    words: dict[str, Any] = {"bias": None, "residual": None, "transposed": "", "mapping": ""}
    # The epilogue's steps in the program's order (adds of the bias and residual, activations).
    words["steps"] = list(plan.mapped.roles.get("epilogue", [])) if plan.mapped else []
    for b in lay.inputs:
        if b.role in ("bias", "residual"):
            words[b.role] = names[b.index]
        if b.layout == "transposed":
            held = _buffer_shapes(plan, "inputs", b.index)
            given = _buffer_shapes(plan, "inputs", b.index, transposed=True)
            words["transposed"] = (f"The program holds `{names[b.index]}` as nn.Linear holds a weight, [{held}]; the "
                                   f"candidate is given it transposed, as `b` [{given}] row-major, and the reference "
                                   f"hands the program a transposed view of that same memory.")
    pairs = [f"`{b.name}` = program's `{names[b.index]}`{' (transposed)' if b.layout != 'as_is' else ''}"
             for b in lay.inputs]
    words["mapping"] = "Buffers: " + ", ".join(pairs) + "; `y` = its output." if lay.pattern else ""
    if lay.pattern in ATTENTION_PATTERNS:
        words["mapping"] = "Buffers: " + layout_words(lay, names) + "."
    elif lay.pattern == "alltoall_experts":
        words["mapping"] = "Buffers: " + expert_words(lay, names) + "."
    return words


def _harness_buffers(plan: ImportPlan) -> str:
    if _attention(plan):
        return ("cp_attention's: inputs `q` [S/W, H, D], `k` and `v` [S/W, HKV, D], output `o` [S/W, H, D] (this "
                "rank's positions r*S/W .. (r+1)*S/W - 1, position-major; a program's batch is folded into the "
                "heads: batch b's head h is head b x (the program's heads) + h). "
                + layout_words(plan.layout, plan.program_names)
                + "; the reference hands the program views of these buffers in its own layout")
    parts = [f"input `{b.name}` [{_buffer_shapes(plan, 'inputs', b.index, buffer=b)}]" for b in plan.layout.inputs]
    parts += [f"output `{b.name}` [{_buffer_shapes(plan, 'outputs', b.index)}]" for b in plan.layout.outputs]
    return ", ".join(parts)


FAST = {
    "allgather_matmul": "The program gathers every rank's rows of x, then runs one GEMM{epi}. The all-gather moves "
                        "(W-1)/W x M x K x 2 bytes to each rank; the GEMM is 2 x M x K x N/W FLOPs. Overlap the "
                        "gather with the GEMM: multiply rows as they land (gemm_allgather's templates host_chunked, "
                        "peer_pipeline, fused_tile, which the offline agent renders into the first EVOLVE block)"
                        "{fold}.",
    "matmul_reducescatter": "The program multiplies its K/W slice ([M, N] partial sums, 2 x M x K/W x N FLOPs), then "
                            "reduce-scatters them ((W-1) x M/W x N x 2 bytes to each rank){epi}. Overlap the "
                            "reduce-scatter of one block of rows with the GEMM of the next (kChunks), cap NCCL's SMs "
                            "so the GEMM keeps its own (kNcclMaxCtas){fold}.",
    "matmul_allreduce": "The program multiplies its K/W slice ([M, N] partial sums, 2 x M x K/W x N FLOPs), then "
                        "all-reduces them (2 (W-1)/W x M x N x 2 bytes to each rank){epi}. Overlap the all-reduce of "
                        "one block of rows with the GEMM of the next (kChunks), cap NCCL's SMs so the GEMM keeps its "
                        "own (kNcclMaxCtas){fold}.",
    "allgather_k_matmul": "The program gathers every rank's K/W columns of x (M x K/W x 2 bytes from each peer), "
                          "rebuilds x [M, K] with a concatenation, then runs one GEMM (2 x M x K x N FLOPs, the same "
                          "on every rank). The seed skips the rebuild: each rank gathers its slice transposed, so "
                          "the gathered buffer is x^T and one GEMM reads it as it lands (kPerPeer = 0). Overlap the "
                          "exchange with the GEMM: multiply the own K block at once and each peer's K block as it "
                          "arrives, summed in fp32 (kPerPeer = 1); cap NCCL's SMs (kNcclMaxCtas).",
    "alltoall_experts": "The program sends row block j of its tokens x [T, H] to rank j (an all-to-all moving (W-1) "
                        "x T/W x H x 2 bytes each way), multiplies the arrived rows by its E/W experts (2 x T x H x F "
                        "FLOPs), and sends the results back ((W-1) x T/W x F x 2 bytes). Overlap the exchange with "
                        "the GEMMs: the own block's GEMMs need no exchange at all, and each peer's block can be "
                        "multiplied as it lands and its results sent back as its GEMMs finish (kPerPeer = 2, on a "
                        "return stream with a communicator of its own; kPerPeer = 1 sends them on the arrivals' "
                        "stream once every block has landed); cap NCCL's SMs (kNcclMaxCtas).",
    "matmul_allgather": "The program multiplies x [M, K] by its N/W columns of the weight (2 x M x K x N/W FLOPs), "
                        "then all-gathers the outputs ((W-1) x M x N/W x 2 bytes to each rank) and concatenates "
                        "them along dim 1. Overlap the gather of one block of rows with the GEMM of the next "
                        "(kChunks); the interleave into [M, N] rides on the communication stream; cap NCCL's SMs "
                        "(kNcclMaxCtas).",
}
ATTENTION_FAST = (
    "The program {how}; its result is cp_attention's (checked on the float64 run), so cp_attention's seed and "
    "templates compute it. Each rank needs every other rank's K and V ((W-1) x S/W x HKV x D x 4 bytes) and "
    "computes about 4 x S/W x S x H x D FLOPs (half that, unevenly spread over the ranks, when causal). The seed "
    "all-gathers K and V with NCCL and makes one call of the harness attention (cuDNN's fused SDPA) over the keys "
    "the rank's queries see. Overlap the exchange with the attention of the keys already held (the own chunk "
    "first, each peer's as it lands, merged by log-sum-exp: attn_overlap, ring, ipc_pull), and when causal give "
    "every rank the same work (attn_balance, balance_overlap): the templates the offline agent renders. "
    "workloads/cp_attention/design/ holds what was measured there.")
ATTENTION_HOW = {"allgather_attention": "all-gathers K and V and attends its queries over the whole sequence",
                 "alltoall_attention": "trades its sequence slice of every head for the whole sequence of W-th of "
                                       "the heads (all-to-all), attends, and trades back (Ulysses)"}


def _fast(plan: ImportPlan, words: dict[str, Any]) -> str:
    pattern = plan.layout.pattern
    if pattern in ATTENTION_PATTERNS:
        return ATTENTION_FAST.format(how=ATTENTION_HOW[pattern])
    if plan.mapped is not None and plan.mapped.description == WEIGHT_GATHER:
        return ("The program gathers the shards of its weight (FSDP) and multiplies its own tokens by the whole of "
                "it. Transposed, that is gemm_allgather's problem: y^T = AllGather(w) @ x^T, the weight's shards "
                "gathered as gemm_allgather gathers rows. " + FAST["allgather_matmul"].format(epi="", fold=""))
    if not pattern:
        return ("No pattern was mapped, so there is no seed to start from: the time to beat is the program's own. "
                f"Its trace ({plan.summary}) says where the time goes; write the host-driven version first.")
    steps = words["steps"]
    epi_words = f", then its epilogue (y{epilogue_words(steps)}: a kernel of its own in the seed)" if steps else ""
    fold = "; the epilogue can move into the GEMM's or the collective's last step" if steps else ""
    return FAST[pattern].format(epi=epi_words, fold=fold)


def _strategy(plan: ImportPlan) -> str:
    pattern = plan.layout.pattern
    if pattern in ATTENTION_PATTERNS:
        offered = "all of them" if plan.templates == ["all"] else ", ".join(plan.templates)
        return ("The seed is cp_attention's: NCCL all-gathers of K and V, then one call of the harness attention "
                "(cuco_attn.h, cuDNN's SDPA) over every visible key, a bottom-right causal mask when CAUSAL = 1. "
                f"The offline agent renders cp_attention's templates ({offered}) into its EVOLVE block. "
                + (plan.templates_why + " " if plan.templates_why else "")
                + "workloads/cp_attention/design/ holds what was measured there.")
    if pattern == "allgather_matmul":
        return ("The seed is gemm_allgather's: NCCL all-gather, then one cuBLAS GEMM. "
                + (f"The offline agent renders gemm_allgather's templates "
                   f"({'all of them' if plan.templates == ['all'] else ', '.join(plan.templates)}) into the first "
                   f"EVOLVE block. " if plan.templates else "")
                + (plan.templates_why + " " if plan.templates_why else "")
                + "workloads/gemm_allgather/design/ holds what was measured there.")
    if pattern == "alltoall_experts":
        return ("The seed is the program in C: NCCL send/recv for each all-to-all and one cuBLAS GEMM per expert "
                "part (kPerPeer = 0), or the exchange by ring steps on a communication stream, the own block's "
                "GEMMs at once and each peer block's as it lands, the results sent back once every block has "
                "landed, each as its GEMMs finish (kPerPeer = 1), or each block's results sent back as its GEMMs "
                "finish on a return stream with a communicator of its own (kPerPeer = 2). Knobs: kPerPeer (0 1 2), "
                "kNcclMaxCtas (0 8 16 32: NCCL's SMs, 0 = NCCL's choice).")
    if pattern == "allgather_k_matmul":
        return ("The seed gathers the ranks' slices transposed (x^T blocks: the gathered buffer is A^T) and runs one "
                "cuBLAS GEMM over the whole K (kPerPeer = 0), or exchanges the slices peer by peer with NCCL "
                "send/recv on a second stream while the own K block's GEMM runs, each peer's K block's GEMM "
                "(beta = 1, fp32) as its slice lands (kPerPeer = 1). Knobs: kPerPeer (0 1), kNcclMaxCtas "
                "(0 8 16 32: NCCL's SMs, 0 = NCCL's choice).")
    return ("The seed runs the GEMM and the collective in kChunks row blocks on two streams; at kChunks = 1 it is "
            "the program. Knobs: kChunks (1 2 4 8), kNcclMaxCtas (0 8 16 32: NCCL's SMs, 0 = NCCL's choice).")


def _pattern_block(plan: ImportPlan) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(SHIPPED_AG)), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)
    return env.get_template("host_sequential.cu.j2").render(design_line=HOST_DESIGN).rstrip("\n")


def _copies(plan: ImportPlan) -> str:
    moved = [f"`{b.name}`" for b in plan.layout.inputs if b.layout == "axes"]
    if not moved:
        return ""
    return (f" The harness holds {', '.join(moved)} in the candidates' axis order; before each call the reference "
            f"copies them into the program's own layout (contiguous, as make_inputs gives them), a copy at HBM "
            f"bandwidth counted in the program's time.")


def render(plan: ImportPlan) -> dict[str, str]:
    """Relative path -> text of every generated file (program.py and program.json aside)."""
    env = _env()
    words = _role_words(plan)
    pattern = plan.layout.pattern
    epilogue = bool(words["steps"])
    own = {plan.layout.manifest_name(d) for d in plan.convention["dims"]}
    derived = ", ".join(d for d in plan.dims if d not in own)
    names = plan.program_names
    common = {
        "name": plan.name, "title": plan.title, "source": plan.source, "world": plan.world,
        "summary": plan.summary, "rtol": plan.rtol, "tolerance_why": plan.tolerance_why, "derived": derived,
        "dim_list": ", ".join(plan.dims), "dtype": plan.convention["dtype"],
        "input_list": ", ".join(f'"{b.name}"' for b in plan.layout.inputs),
        "output_list": ", ".join(f'"{b.name}"' for b in plan.layout.outputs),
        "description": plan.mapped.description if plan.mapped else "", "pattern": pattern,
        "bias": words["bias"], "residual": words["residual"], "epilogue": epilogue, "steps": words["steps"],
        "epilogue_text": epilogue_words(words["steps"]), "mapping": words["mapping"],
    }
    kernel = env.get_template("epilogue_kernel.cu.j2").render(**common).rstrip("\n") if epilogue else ""
    if pattern in ATTENTION_PATTERNS:
        seed = env.get_template("seed_attention.cu.j2").render(
            **common, layout_words=layout_words(plan.layout, names),
            shipped=(SHIPPED_CP / "seed.cu").read_text())
    elif pattern == "allgather_matmul":
        seed = env.get_template("seed_allgather_matmul.cu.j2").render(
            **common, pattern_block=_pattern_block(plan), epilogue_kernel=kernel)
    elif pattern in ("allgather_k_matmul", "matmul_allgather", "alltoall_experts"):
        seed = env.get_template(f"seed_{pattern}.cu.j2").render(**common)
    elif pattern:
        seed = env.get_template("seed_matmul_collective.cu.j2").render(
            **common, epilogue_kernel=kernel, per_rank_k="KR" in plan.dims)
    else:
        seed = env.get_template("seed_unmapped.cu.j2").render(**common)
    files = {
        "manifest.toml": env.get_template("manifest.toml.j2").render(
            **common, world_sizes=json.dumps(plan.world_sizes), dims=json.dumps(plan.dims),
            harness_dtype=HARNESS_DTYPES[plan.convention["dtype"]],
            split_dims=json.dumps(plan.manifest_splits), divisible=plan.divisible,
            flag_dims=json.dumps(plan.flag_dims) if plan.flag_dims else "",
            libraries=json.dumps(plan.libraries) if plan.libraries else "",
            floor=CP_FLOOR if _attention(plan) else 0,
            verify=[{"name": s, "dims": plan.shape_dims(s)} for s in plan.convention["shapes"]
                    if s.startswith("verify")],
            bench=[{"name": s, "dims": plan.shape_dims(s)} for s in plan.convention["shapes"]
                   if not s.startswith("verify")]),
        "reference.py": env.get_template("reference.py.j2").render(
            **common, buffers=", ".join(b.name for b in plan.layout.inputs + plan.layout.outputs)),
        "seed.cu": seed,
        "task.md": env.get_template("task.md.j2").render(
            **common, trace_shape=plan.trace["shape"], patterns=plan.patterns,
            program_inputs=_tensors(plan, "inputs", names), program_outputs=_tensors(plan, "outputs", []),
            harness_buffers=_harness_buffers(plan), transposed=words["transposed"], fast=_fast(plan, words)),
        "design/common.md": env.get_template("common.md.j2").render(
            **common, baseline=(f"It is {plan.mapped.description}." if plan.mapped else
                                "No pattern was mapped: there is no seed to start from yet.") + _copies(plan)),
    }
    if pattern:
        files["design/nccl_host.md"] = env.get_template("nccl_host.md.j2").render(**common, strategy=_strategy(plan))
    if _attention(plan) and plan.templates:
        files["templates/strategies.py"] = env.get_template("strategies_attention.py.j2").render(
            **common, names=json.dumps(sorted(plan.templates)), every=plan.templates == ["all"],
            why_these=plan.templates_why or "every shape meets the templates' needs, so all of them are offered.")
    if pattern == "allgather_matmul" and plan.templates:
        files["templates/strategies.py"] = env.get_template("strategies_allgather.py.j2").render(
            **common, names=json.dumps(sorted(plan.templates)), every=plan.templates == ["all"],
            why_these=plan.templates_why or
            "every shape meets the templates' divisibility, so all of them are offered.")
    return files
