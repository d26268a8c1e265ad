"""One rank of a program run on the CPU in float64 under torch.distributed's gloo backend:
`python -m cuco_tui.workload.program.gloo_rank JOB_DIR RANK` (gloo_run starts W of them; needs torch).

The job (JOB_DIR/job.json) names the program, the world size and the shapes. Inputs come from
make_inputs (asked for float64 on the CPU, which it must honour) or, for `expected`, from .npy files
in the harness's layout, turned into the program's views by layout.to_program. Each shape's outputs
go to .npy files; rank 0 records one call's ops (tracing.OpRecorder) at the first shape. The result,
or the one-line error, goes to JOB_DIR/rank{R}.json."""

from __future__ import annotations

import datetime
import json
import os
import sys
from pathlib import Path
from typing import Any

# One thread a rank: W ranks share the machine's cores.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")


def _gather_stacked_as_nccl_does(dist: Any) -> None:
    """all_gather_into_tensor takes a stacked output, [W, *input.shape], beside the concatenated one
    under NCCL; gloo takes only the concatenated one. The program's call is handed on with the same
    memory seen as concatenated (a view: what the program reads after it is the same)."""
    gather = dist.all_gather_into_tensor

    def all_gather_into_tensor(output_tensor: Any, input_tensor: Any, *args: Any, **kwargs: Any) -> Any:
        stacked = (output_tensor.dim() == input_tensor.dim() + 1 and input_tensor.dim() > 0
                   and tuple(output_tensor.shape[1:]) == tuple(input_tensor.shape) and output_tensor.is_contiguous())
        if stacked:
            output_tensor = output_tensor.view(-1, *input_tensor.shape[1:])
        return gather(output_tensor, input_tensor, *args, **kwargs)

    dist.all_gather_into_tensor = all_gather_into_tensor


def _run(job: dict[str, Any], jobdir: Path, rank: int) -> dict[str, Any]:
    import numpy as np
    import torch
    import torch.distributed as dist

    from cuco_tui.workload.program.layout import to_program
    from cuco_tui.workload.program.tracing import OpRecorder
    from cuco_tui.workload.program.user_module import ProgramError, as_tuple, check_inputs, failure, load_program

    torch.set_num_threads(1)
    world = int(job["world"])
    _gather_stacked_as_nccl_does(dist)  # before the program is loaded: it may import the function by name
    module, conv = load_program(job["program"])
    names = list(conv.input_names)
    store = dist.FileStore(str(jobdir / "store"), world)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=float(job.get("collective_timeout_s", 120))))
    result: dict[str, Any] = {"shapes": {}}
    try:
        for index, (shape, dims) in enumerate(job["shapes"].items()):
            if job["mode"] == "make":
                torch.manual_seed(1000 * index + 7 * rank + int(job.get("seed", 0)))
                call = f"make_inputs({rank}, {world}, {shape}, dtype=torch.float64, device='cpu')"
                try:
                    inputs = as_tuple(module.make_inputs(rank, world, **dims, dtype=torch.float64, device="cpu"),
                                      "make_inputs")
                except ProgramError:
                    raise
                except Exception as exc:
                    raise failure(call, exc, conv.path) from None
                check_inputs(inputs, torch.float64, "cpu", names)
                for i, t in enumerate(inputs):
                    np.save(jobdir / f"in_{index}_{rank}_{i}.npy", t.detach().contiguous().numpy())
            else:
                specs = job["inputs"][rank]
                inputs = tuple(to_program(torch.from_numpy(np.load(jobdir / f"in_{index}_{rank}_{i}.npy")), spec)
                               for i, spec in enumerate(specs))
            recorder = OpRecorder(dataflow=True) if job.get("trace") and rank == 0 and index == 0 else None
            try:  # in the grad mode solution sets itself (@torch.no_grad(), or its own autograd: a gradient step)
                if recorder is not None:
                    with recorder:
                        start = recorder.start(inputs)
                        out = module.solution(*inputs)
                else:
                    out = module.solution(*inputs)
            except Exception as exc:
                raise failure(f"solution at {shape} (rank {rank} of {world}, float64 on the CPU under gloo)", exc,
                              conv.path) from None
            outputs = as_tuple(out, "solution")
            for j, t in enumerate(outputs):
                if t.is_floating_point() and t.dtype != torch.float64:
                    raise ProgramError(f"solution returns output {j} as {t.dtype} from float64 inputs: compute in the "
                                       f"dtype of the inputs (the tool checks against float64)")
                np.save(jobdir / f"out_{index}_{rank}_{j}.npy", t.detach().contiguous().numpy())
            result["shapes"][shape] = {"inputs": [[list(t.shape), str(t.dtype).removeprefix("torch.")]
                                                  for t in inputs],
                                       "outputs": [[list(t.shape), str(t.dtype).removeprefix("torch.")]
                                                   for t in outputs]}
            if recorder is not None:
                result["trace"] = {"shape": shape, "inputs": start, "outputs": recorder.finish(outputs),
                                   "ops": recorder.ops}
    finally:
        dist.destroy_process_group()
    return result


def main(argv: list[str]) -> int:
    jobdir, rank = Path(argv[0]), int(argv[1])
    job = json.loads((jobdir / "job.json").read_text())
    try:
        result = _run(job, jobdir, rank)
    except Exception as exc:  # the program's failure, said in one line for the parent
        from cuco_tui.workload.program.user_module import ProgramError

        text = str(exc) if isinstance(exc, ProgramError) else f"{type(exc).__name__}: {exc}".splitlines()[0]
        result = {"error": text, "program_error": isinstance(exc, ProgramError)}
    tmp = jobdir / f"rank{rank}.json.tmp"
    tmp.write_text(json.dumps(result))
    os.replace(tmp, jobdir / f"rank{rank}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
