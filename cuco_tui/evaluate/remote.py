"""One evaluation on a node of a cluster: `python -m cuco_tui.evaluate.remote JOBDIR` runs the
cascade (`evaluate`) on the candidate that JOBDIR/request.json names, on the GPUs the job was
given (CUDA_VISIBLE_DEVICES, renumbered from 0 as CUDA sees them), and writes the result into
JOBDIR for the search, which watches the folder over a shared filesystem:

- progress.jsonl: one line per cascade step ({"level": 2, "message": "verify square-8k"});
- result.json: the CascadeResult, written whole (a temporary file renamed) once it is known;
- error.json: instead of a result, when the evaluator itself raised (the traceback's tail).

The candidate was compiled ahead on the search's host into the build cache the job shares
(CUCO_CACHE_DIR), so the cascade's L1 finds the library there. The rank workers are started on
this node by the harness's launcher, one process per rank, as for a local evaluation."""

from __future__ import annotations

import json
import os
import signal
import sys
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping

from cuco_tui.evaluate.cascade import EvalOptions, Progress, evaluate, make_plan, run_deadline
from cuco_tui.core.workload import Workload

REQUEST = "request.json"
PROGRESS = "progress.jsonl"
RESULT = "result.json"
ERROR = "error.json"

# Beyond the launcher's deadline for the run itself: starting Python, the static checks, the
# compile found in the cache, the harness libraries, and the launcher's wait for the GPUs to be
# released (30 s).
START_AND_RELEASE_S = 120.0


def evaluation_limit_s(workload: Workload, options: EvalOptions) -> float:
    """The longest one evaluation of `workload` may take once it runs: what the job's time
    limit and the search's own kill are set from. Each launch has a tighter limit of its own
    (the ranks' watchdogs); this is the backstop when something past them hangs."""
    return run_deadline(make_plan(workload, None, options, "evaluate")) + START_AND_RELEASE_S


def write_json(path: Path, data: Any) -> None:
    """Written whole or not at all: a reader on another node never sees half a file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


@dataclass(frozen=True)
class RemoteRequest:
    """What the job evaluates: the candidate's file, the workload's folder, the cascade's
    options (without GPUs: the job's own are used)."""

    candidate: str
    workload: str
    options: dict[str, Any]

    @classmethod
    def of(cls, candidate: Path, workload: Workload, options: EvalOptions) -> "RemoteRequest":
        fields = asdict(options)
        fields.pop("gpus")
        fields["run_root"] = str(options.run_root) if options.run_root is not None else None
        fields["shapes"] = list(options.shapes)
        return cls(str(candidate), str(workload.root), fields)

    def eval_options(self, gpus: list[int] | None) -> EvalOptions:
        fields = dict(self.options)
        fields["run_root"] = Path(fields["run_root"]) if fields.get("run_root") else None
        fields["shapes"] = tuple(fields.get("shapes") or ())
        return EvalOptions(gpus=gpus, **fields)

    def write(self, jobdir: Path) -> None:
        write_json(jobdir / REQUEST, asdict(self))

    @classmethod
    def read(cls, jobdir: Path) -> "RemoteRequest":
        return cls(**json.loads((jobdir / REQUEST).read_text()))


def visible_gpus(env: Mapping[str, str], world: int | None) -> list[int] | None:
    """The GPUs the job was given, as CUDA numbers them inside it (0, 1, ...): the first `world`
    of them. None when the job was given no GPU list (the cascade then looks for itself)."""
    listed = [g for g in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
    if not listed:
        return None
    n = len(listed) if world is None else min(world, len(listed))
    return list(range(n))


class ProgressFile:
    """Appends each step as a JSON line; the file is opened and closed for each, so that a
    reader on another host (NFS: close-to-open consistency) sees every line once it is closed."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __call__(self, p: Progress) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps({"level": int(p.level), "message": p.message}) + "\n")


def _terminated(signum: int, frame: object) -> None:
    # scancel (or the time limit) sends SIGTERM: leaving through SystemExit runs the launcher's
    # cleanup, which kills every rank's process group before Slurm's SIGKILL comes.
    raise SystemExit(128 + signum)


def run(jobdir: Path) -> int:
    from cuco_tui.workload.manifest import load_workload

    try:
        request = RemoteRequest.read(jobdir)
        workload = load_workload(request.workload)
        options = request.eval_options(visible_gpus(os.environ, request.options.get("world")))
        result = evaluate(Path(request.candidate), workload, options, progress=ProgressFile(jobdir / PROGRESS))
    except Exception as exc:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        write_json(jobdir / ERROR, {"error": f"{type(exc).__name__}: {exc}", "traceback": text[-8000:]})
        print(text, file=sys.stderr)
        return 1
    write_json(jobdir / RESULT, result.to_dict())
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 1 or not (Path(argv[0]) / REQUEST).is_file():
        print("usage: python -m cuco_tui.evaluate.remote JOBDIR (a folder holding request.json)", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _terminated)
    return run(Path(argv[0]))


if __name__ == "__main__":
    sys.exit(main())
