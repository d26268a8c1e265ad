"""The column "reference against float64 on GPU" of docs/parallelkernelbench.md, read back from the
folder of a device call of benchmarks/runs/pkb_refcheck.sh (its $OUT): per imported problem and
world size, `cuco workload check FOLDER --gpu --json` (reference_ID_wW.json): the program run under
torch.distributed (NCCL) on the GPU as the harness runs a reference, its outputs compared with the
same program in float64 under gloo on the same inputs, by the test a candidate passes.

A file that is missing or cannot be read gives a "not run" cell with the reason, never an error:
a call cut off by its time limit leaves some out."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ITEM = "reference on GPU"  # the finding of `cuco workload check --gpu`


@dataclass(frozen=True)
class ReferenceOnGpu:
    id: int
    world: int
    device: str
    state: str  # "verified" | "differs" | "failed" | "not run"
    detail: str  # the finding's sentence, or why not run

    def cell(self) -> str:
        word = {"verified": "yes", "differs": "no", "failed": "no"}.get(self.state, "not run")
        return f"{word} (W={self.world}: {self.detail})"


def _device(folder: Path) -> str:
    run = folder / "run.txt"
    for line in (run.read_text(errors="replace").splitlines() if run.is_file() else []):
        key, _, value = line.partition(":")
        if key.strip() == "device":
            return value.strip()
    return "a GPU host"


def read_reference_run(folder: Path) -> list[ReferenceOnGpu]:
    """Every problem of the call: those with a JSON file and those the call's log names. Raises
    ValueError with one line when the folder is no such call's."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"{folder}: no such folder")
    device = _device(folder)
    found: dict[tuple[int, int], ReferenceOnGpu] = {}
    for path in sorted(folder.glob("reference_*_w*.json")):
        m = re.fullmatch(r"reference_(\d+)_w(\d+)\.json", path.name)
        if not m:
            continue
        pid, world = int(m.group(1)), int(m.group(2))
        found[(pid, world)] = _read_one(path, pid, world, device)
    log = folder / "refcheck.log"
    for m in re.finditer(r"^pkb(\d+)_w(\d+) rc=(\d+)", log.read_text(errors="replace") if log.is_file() else "",
                         re.MULTILINE):
        key = (int(m.group(1)), int(m.group(2)))
        if key not in found:
            found[key] = ReferenceOnGpu(key[0], key[1], device, "not run", f"no findings (exit status {m.group(3)})")
    if not found:
        raise ValueError(f"{folder}: no reference_ID_wW.json or refcheck.log of benchmarks/runs/pkb_refcheck.sh")
    return [found[k] for k in sorted(found)]


def _read_one(path: Path, pid: int, world: int, device: str) -> ReferenceOnGpu:
    err = path.with_suffix(".err")
    tail = (err.read_text(errors="replace").strip().splitlines() or [""])[-1] if err.is_file() else ""
    try:
        findings = json.loads(path.read_text(errors="replace"))
    except ValueError:
        return ReferenceOnGpu(pid, world, device, "not run", f"no findings ({tail or 'the check printed none'})")
    if not isinstance(findings, list):
        return ReferenceOnGpu(pid, world, device, "not run", "no findings (not a list)")
    gpu = next((f for f in findings if isinstance(f, dict) and f.get("item") == ITEM), None)
    if gpu is None:
        first = next((f for f in findings if isinstance(f, dict) and f.get("level") == "error"), None)
        why = f"{first['item']}: {first['detail']}" if first else "the check made no GPU finding"
        return ReferenceOnGpu(pid, world, device, "not run", why)
    detail = str(gpu.get("detail", ""))
    if gpu.get("level") == "ok":
        return ReferenceOnGpu(pid, world, device, "verified", detail)
    return ReferenceOnGpu(pid, world, device, "differs" if detail.startswith("differs") else "failed", detail)


def store_reference(results: dict[str, Any], rows: list[ReferenceOnGpu]) -> None:
    """Adds a call's rows to results.json's "gpu_reference" ({world: {id: ...}}): calls add up, and a
    row the new call did not run keeps what an earlier call found."""
    kept = results.setdefault("gpu_reference", {})
    for r in rows:
        old = kept.setdefault(str(r.world), {}).get(str(r.id))
        if old is None or r.state != "not run" or old["state"] == "not run":
            kept[str(r.world)][str(r.id)] = asdict(r)


def load_reference(results: dict[str, Any]) -> dict[int, dict[int, ReferenceOnGpu]]:
    out: dict[int, dict[int, ReferenceOnGpu]] = {}
    for world, rows in (results.get("gpu_reference") or {}).items():
        for pid, d in rows.items():
            out.setdefault(int(pid), {})[int(world)] = ReferenceOnGpu(**d)
    return out


def reference_cell(entries: dict[int, ReferenceOnGpu]) -> str:
    return "; ".join(entries[w].cell() for w in sorted(entries)) or "not run"


def reference_text(rows: dict[int, dict[int, ReferenceOnGpu]]) -> str:
    """The paragraph on the column: where it comes from and what it shows."""
    flat = [r for entries in rows.values() for r in entries.values()]
    by_state: dict[str, list[str]] = {}
    for r in sorted(flat, key=lambda r: (r.world, r.id)):
        by_state.setdefault(r.state, []).append(f"{r.id} (W={r.world})")
    devices = sorted({r.device for r in flat})
    counts = "; ".join(f"{state}: {len(ids)}" + (f" ({', '.join(ids)})" if state != "verified" else "")
                       for state, ids in sorted(by_state.items()))
    return ("*Reference against float64 on GPU*: `cuco workload check FOLDER --gpu --share-gpu --world W` "
            "(benchmarks/runs/pkb_refcheck.sh) runs the imported program as the harness runs a reference (under "
            "torch.distributed with NCCL, the ranks sharing one GPU), saves every rank's inputs and outputs at the "
            "verify shape, and compares the outputs with the same program in float64 under gloo on those inputs, "
            "by the test a candidate passes (the workload's rtol). Device: " + "; ".join(devices)
            + f". Of {len(flat)} folders: {counts}.")
