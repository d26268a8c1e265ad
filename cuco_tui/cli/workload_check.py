"""`cuco workload check`: what a workload folder lacks or gets wrong, item by item, before a search
relies on it: the manifest, the reference's contract (probed in a process of its own, without a
GPU), the seed through L0 and L1, its knobs or templates for the offline agent, the task text and
the workload's own notes for agents."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cuco_tui.core.workload import Workload, WorkloadError
from cuco_tui.design.space import BACKENDS
from cuco_tui.evaluate.l0 import check_l0
from cuco_tui.harness.env import child_env
from cuco_tui.source.knobs import KnobError, seed_knobs
from cuco_tui.workload.manifest import load_workload

SCAFFOLD_MARK = "cuco-scaffold:"


@dataclass(frozen=True)
class Finding:
    item: str  # what was checked: "manifest", "reference", "seed L0", ...
    level: str  # "ok" | "warning" | "error"
    detail: str  # one sentence


def _ok(item: str, detail: str) -> Finding:
    return Finding(item, "ok", detail)


def _error(item: str, detail: str) -> Finding:
    return Finding(item, "error", detail)


def _warn(item: str, detail: str) -> Finding:
    return Finding(item, "warning", detail)


def check_workload(path: Path, compile_seed: bool = True, probe_timeout: float = 120.0,
                   on_gpus: Any = None) -> list[Finding]:
    """Every finding about the workload folder at `path`; none at level "error" means a search
    can start on it. `on_gpus` (the cascade's EvalOptions, `--gpu`): also the reference on that
    GPU group against expected() in float64 (evaluate/reference_check.py)."""
    try:
        w = load_workload(Path(path), search=Path(path).parent)
    except WorkloadError as exc:
        return [_error("manifest", str(exc))]
    out = [_ok("manifest", f"{w.name}: dims {', '.join(w.dim_names)}, {len(w.verify_shapes)} verify and "
                           f"{len(w.bench_shapes)} bench shapes, world sizes {', '.join(map(str, w.world_sizes))}")]
    for world in w.world_sizes:
        try:
            w.check_world(world)
        except WorkloadError as exc:
            out.append(_error("shapes", str(exc)))
    out += _reference(w, probe_timeout)
    # The GPU run needs a reference that loads and a group the shapes divide over; a finding the
    # search would refuse (constant inputs, say) does not make the reference's answers unknowable.
    if on_gpus is not None and not any(f.level == "error" and (f.item == "shapes" or "cannot be imported" in f.detail)
                                       for f in out):
        out += _reference_on_gpus(w, on_gpus)
    out += _seed(w, compile_seed)
    out += _offline(w)
    out += _texts(w)
    return out


def _reference(w: Workload, timeout: float) -> list[Finding]:
    try:
        run = subprocess.run([sys.executable, "-m", "cuco_tui.workload.probe", str(w.root)], capture_output=True,
                             text=True, timeout=timeout, env=child_env())
    except subprocess.TimeoutExpired:
        return [_error("reference", f"probing {w.reference.name} took over {timeout:.0f} s (an import or "
                                    f"fill_inputs that never returns?)")]
    try:
        report = json.loads(run.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = (run.stderr.strip().splitlines() or ["no output"])[-1]
        return [_error("reference", f"probing {w.reference.name} failed: {tail}")]
    found = [_error("reference", p) for p in report.get("problems", [])]
    found += [_warn("reference", n) for n in report.get("notes", []) if "no comm_bytes" in n]
    if not found or all(f.level != "error" for f in found):
        found.insert(0, _ok("reference", "; ".join(n for n in report.get("notes", []) if "probed" in n)
                            or "io_spec, fill_inputs, expected and Reference are there"))
    return found


def _reference_on_gpus(w: Workload, options: Any) -> list[Finding]:
    from cuco_tui.evaluate.reference_check import check_reference

    result = check_reference(w, options)
    # What the reference said weakens it there (a program given copies of inputs it writes into, a
    # missing library it falls back from): the same words an evaluation carries.
    return [(_ok if result.ok else _error)("reference on GPU", result.summary())] + \
        [_warn("reference on GPU", f"the reference says: {m}") for m in result.warnings]


def _seed(w: Workload, compile_seed: bool) -> list[Finding]:
    from cuco_tui.workload.program.record import NO_SEED_MARK

    source = w.seed.read_text()
    l0 = check_l0(source, source, w.seed.name)  # the cascade's own L0
    out = [(_error if d.severity == "error" else _warn)("seed L0", f"{d.file}:{d.line}: {d.message}")
           for d in l0.diagnostics]
    if not l0.rejected:
        out.insert(0, _ok("seed L0", "EVOLVE blocks, the C ABI and the calls it makes pass the static checks"))
    if NO_SEED_MARK in source:
        out.append(_warn("seed", "a placeholder that fails at cuco_init: `cuco workload import` mapped no pattern of "
                                 "program.py onto a seed; write its host-driven version (task.md), or search with "
                                 "--agent claude"))
    if compile_seed and not l0.rejected:
        out.append(_compile(w))
    return out


def _compile(w: Workload) -> Finding:
    from cuco_tui.toolchain import compile_candidate
    from cuco_tui.toolchain.toolchain import discover

    toolchain = discover()
    if not toolchain.can_compile:
        return _warn("seed L1", "not compiled: " + ("; ".join(toolchain.problems) or "no CUDA toolchain")
                     + " (`cuco doctor`)")
    build = compile_candidate(w.seed, toolchain)
    if build.ok:
        return _ok("seed L1", f"compiles for sm_90a in {build.seconds:.1f} s")
    first = next((d for d in build.diagnostics if d.severity == "error"), None)
    where = f"{Path(first.file).name}:{first.line}: " if first and first.line else ""
    return _error("seed L1", f"does not compile: {where}{first.message if first else 'see the build log'}")


def _offline(w: Workload) -> list[Finding]:
    templates = w.root / "templates" / "strategies.py"
    try:
        knobs = seed_knobs(w.seed.read_text())
    except KnobError as exc:
        return [_error("seed knobs", str(exc))]
    if templates.is_file():
        from cuco_tui.agents.offline.strategy import StrategyBook, StrategyError

        try:
            book = StrategyBook.load(w.root, w.seed)
        except (StrategyError, Exception) as exc:  # the workload's own module: report, do not crash
            return [_error("templates", f"templates/strategies.py cannot be loaded: {exc}")]
        bad = []
        for s in book.strategies:
            try:
                source = book.render(s, s.default_knobs())
            except Exception as exc:
                bad.append(f"{s.name} does not render: {exc}")
                continue
            if check_l0(source, w.seed.read_text(), f"{s.name}.cu").rejected:
                bad.append(f"{s.name} fails L0 at its default knobs")
        if bad:
            return [_error("templates", b) for b in bad]
        return [_ok("templates", f"{len(book.strategies)} strategies render and pass L0 at their defaults")]
    if knobs:
        return [_ok("seed knobs", ", ".join(f"{k.name} in {{{', '.join(k.values)}}}" for k in knobs)
                    + " (the offline agent searches these)")]
    from cuco_tui.workload.program.record import unmapped_message

    return [_warn("offline agent", unmapped_message(w.root, w.name) or
                  "the seed declares no knobs and there are no templates: only the Claude agent can search this "
                  "workload (docs/workloads.md, 'Knobs')")]


def _texts(w: Workload) -> list[Finding]:
    out = []
    task = w.task.read_text().strip()
    if not task:
        out.append(_error("task", f"{w.task.name} is empty: agents are told nothing about the workload"))
    elif SCAFFOLD_MARK in task:
        out.append(_warn("task", f"{w.task.name} still holds the scaffold's example text (the `{SCAFFOLD_MARK}` "
                                 f"line): describe your computation"))
    else:
        out.append(_ok("task", f"{w.task.name}: {len(task.split())} words"))
    notes = w.design_notes
    if not notes.is_dir():
        out.append(_warn("notes", "no design/ folder: agents get no word on this workload's baseline "
                                  "(design/common.md, `## Baseline`)"))
        return out
    for f in sorted(notes.glob("*.md")):
        text = f.read_text()
        if f.stem == "common":
            heading = "## Baseline"
        elif f.stem in BACKENDS:
            heading = "## Strategy"
        else:
            out.append(_warn("notes", f"design/{f.name} names no backend ({', '.join(BACKENDS)}) and is not "
                                      f"common.md: no prompt will carry it"))
            continue
        if heading not in text:
            out.append(_warn("notes", f"design/{f.name} has no `{heading}` section: its text reaches no prompt"))
        elif SCAFFOLD_MARK in text:
            out.append(_warn("notes", f"design/{f.name} still holds the scaffold's example text"))
    if not any(f.level != "ok" for f in out[1:]):
        out.append(_ok("notes", f"{len(list(notes.glob('*.md')))} file(s) in design/"))
    return out
