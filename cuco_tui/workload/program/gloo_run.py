"""Running a program on the CPU in float64 under gloo, W processes (no torch in this process):
`run_gloo` writes the job into a temporary folder (the processes meet through a FileStore there),
starts `gloo_rank` W times, waits for all of them, and returns each rank's report with the
outputs it saved; any rank's failure comes back as one ProgramRunError line."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cuco_tui.harness.env import child_env

# Words of a rank that failed only because a peer went away: the peer's own error says why.
_SECONDARY = ("Connection closed by peer", "Connection reset", "Timed out", "timed out", "Broken pipe",
              "closed by remote", "SIGTERM")


class ProgramRunError(RuntimeError):
    """The program failed (or hung) under gloo; the message is one line."""


@dataclass
class GlooRun:
    folder: Path  # the job's files: in_/out_ .npy per shape index, rank, buffer
    ranks: list[dict[str, Any]]  # each rank's report (gloo_rank)

    def output(self, shape_index: int, rank: int, j: int) -> Any:
        import numpy as np

        return np.load(self.folder / f"out_{shape_index}_{rank}_{j}.npy")

    def input(self, shape_index: int, rank: int, i: int) -> Any:
        import numpy as np

        return np.load(self.folder / f"in_{shape_index}_{rank}_{i}.npy")


def run_gloo(program: Path, world: int, shapes: dict[str, dict[str, int]], folder: Path, *, mode: str = "make",
             inputs: list[list[dict[str, Any]]] | None = None, trace: bool = False,
             timeout: float = 600.0) -> GlooRun:
    """Run `program`'s solution at `shapes` on `world` CPU processes in `folder` (which must exist).
    mode "make": inputs from make_inputs (float64, CPU); "files": from in_*.npy the caller wrote, in
    the harness's layout, with `inputs` each rank's layout specs (layout.to_program)."""
    job = {"program": str(Path(program).resolve()), "world": world, "shapes": shapes, "mode": mode,
           "inputs": inputs or [], "trace": trace, "collective_timeout_s": max(30.0, timeout / 2)}
    (folder / "job.json").write_text(json.dumps(job))
    # CPU only: no rank of this run may touch a GPU (nor, then, NVLink multicast); one thread a rank.
    env = child_env({"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "TORCH_CPP_LOG_LEVEL": "ERROR"})
    # Each rank's output goes to a file: a program that prints much must not block on a full pipe
    # while its peers wait for it in a collective.
    logs = [open(folder / f"rank{r}.log", "w") for r in range(world)]
    procs = [subprocess.Popen([sys.executable, "-m", "cuco_tui.workload.program.gloo_rank", str(folder), str(r)],
                              stdout=logs[r], stderr=subprocess.STDOUT, env=env)
             for r in range(world)]
    deadline = time.monotonic() + timeout
    try:
        for p in procs:
            left = max(deadline - time.monotonic(), 0.1)
            try:
                p.wait(timeout=left)
            except subprocess.TimeoutExpired:
                raise ProgramRunError(
                    f"the program did not finish within {timeout:.0f} s on {world} CPU processes under gloo "
                    f"(does every rank call the same collectives in the same order?)") from None
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for log in logs:
            log.close()
    reports = []
    for r in range(world):
        f = folder / f"rank{r}.json"
        if not f.exists():
            tail = ((folder / f"rank{r}.log").read_text(errors="replace").strip().splitlines() or ["no output"])[-1]
            raise ProgramRunError(f"rank {r} of the CPU run ended without a report: {tail}")
        reports.append(json.loads(f.read_text()))
    errors = [(r, rep) for r, rep in enumerate(reports) if "error" in rep]
    if errors:
        # The rank that failed first says why; the others only saw it leave (inside the program's
        # collective too: such an error is the program's, and still not the cause).
        primary = [e for e in errors if not any(w in e[1]["error"] for w in _SECONDARY)]
        r, rep = (primary or errors)[0]
        raise ProgramRunError(rep["error"] if rep.get("program_error") else f"rank {r}: {rep['error']}")
    return GlooRun(folder, reports)


def temporary_folder() -> tempfile.TemporaryDirectory:
    return tempfile.TemporaryDirectory(prefix="cuco-program-")
