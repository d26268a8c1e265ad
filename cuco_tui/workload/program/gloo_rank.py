"""One rank of a program's runs on the CPU in float64 under torch.distributed's gloo backend:
`python -m cuco_tui.workload.program.gloo_rank RANK JOBS_FD REPLIES_FD` (gloo_run.GlooRanks starts W
of them; needs torch). The rank imports torch once, then serves the jobs it reads from JOBS_FD, one
JSON line each, answering each with one JSON line on REPLIES_FD, until that pipe ends.

A run job names the program, the world size, the shapes and its folder. Inputs come from make_inputs
(asked for float64 on the CPU, which it must honour) or, for `expected`, from .npy files in the
harness's layout, turned into the program's views by layout.to_program. Each shape's outputs go to
.npy files; rank 0 records one call's ops (tracing.OpRecorder) at the first shape. The answer is the
result or the one-line error. Every job starts as in a fresh process: the program's module loaded
again (its module-level state new), torch's generator, default dtype and grad mode as torch starts
them, a gloo group of its own. What the program imports besides stays imported, as torch does.
An inspect job (rank 0, before any run) is inspect_program's report on the program."""

from __future__ import annotations

import datetime
import json
import os
import sys
import traceback
import warnings
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
    if getattr(gather, "cuco_stacked", False):
        return  # handed on already (an earlier job of this process)

    def all_gather_into_tensor(output_tensor: Any, input_tensor: Any, *args: Any, **kwargs: Any) -> Any:
        stacked = (output_tensor.dim() == input_tensor.dim() + 1 and input_tensor.dim() > 0
                   and tuple(output_tensor.shape[1:]) == tuple(input_tensor.shape) and output_tensor.is_contiguous())
        if stacked:
            output_tensor = output_tensor.view(-1, *input_tensor.shape[1:])
        return gather(output_tensor, input_tensor, *args, **kwargs)

    all_gather_into_tensor.cuco_stacked = True  # type: ignore[attr-defined]
    dist.all_gather_into_tensor = all_gather_into_tensor


class _Finished:
    """The handle of a collective that ran to its end before returning (what async_op asked for)."""

    def wait(self, *args: Any, **kwargs: Any) -> bool:
        return True

    def is_completed(self) -> bool:
        return True


def _all_to_all_as_nccl_does(dist: Any) -> None:
    """all_to_all of tensor lists runs under NCCL; the gloo of some torch versions (2.11) refuses
    it ("Backend gloo does not support alltoall") while it takes all_to_all_single. A refused call
    is handed on as one all_to_all_single of the inputs flattened and laid end to end, each peer's
    part its own split, the received parts copied into the program's output tensors."""
    all_to_all = dist.all_to_all
    if getattr(all_to_all, "cuco_single", False):
        return

    def by_single(output_tensor_list: Any, input_tensor_list: Any, group: Any = None, async_op: bool = False) -> Any:
        import torch

        try:
            return all_to_all(output_tensor_list, input_tensor_list, group=group, async_op=async_op)
        except RuntimeError as exc:
            if "does not support alltoall" not in str(exc):
                raise
        sent = torch.cat([t.reshape(-1) for t in input_tensor_list])
        sizes = [t.numel() for t in output_tensor_list]
        got = torch.empty(sum(sizes), dtype=sent.dtype, device=sent.device)
        dist.all_to_all_single(got, sent, sizes, [t.numel() for t in input_tensor_list], group=group)
        for part, out in zip(got.split(sizes), output_tensor_list):
            out.copy_(part.view(out.shape))
        return _Finished() if async_op else None

    by_single.cuco_single = True  # type: ignore[attr-defined]
    dist.all_to_all = by_single


def _reduce_as_nccl_does(dist: Any) -> None:
    """dist.reduce defines the result on the destination rank only. NCCL (the reference's backend)
    leaves the tensor of every other rank as it was; gloo leaves partial sums there. A program that
    returns that tensor on every rank (ParallelKernelBench's 4_reduce) would differ from its own
    float64 run on those ranks: here the other ranks get their tensor back as it was, as under NCCL."""
    import inspect

    import torch
    from torch.utils._python_dispatch import _disable_current_modes

    reduce = dist.reduce
    if getattr(reduce, "cuco_root_only", False):
        return
    signature = inspect.signature(reduce)

    def root_only(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        given = bound.arguments
        group = given.get("group")
        if given.get("group_dst") is not None:
            mine = dist.get_rank(group) == given["group_dst"]
        else:
            mine = dist.get_rank() == given.get("dst")
        if mine:
            return reduce(*args, **kwargs)
        tensor = given["tensor"]
        # The keeping is the backend's, not the program's: out of the op recorder's trace.
        with _disable_current_modes(), torch.no_grad():
            kept = tensor.clone()
        work = reduce(*args, **kwargs)
        if work is not None:
            work.wait()
        with _disable_current_modes(), torch.no_grad():
            tensor.copy_(kept)
        return _Finished() if given.get("async_op") else None

    root_only.cuco_root_only = True  # type: ignore[attr-defined]
    dist.reduce = root_only


def _run(job: dict[str, Any], jobdir: Path, rank: int) -> dict[str, Any]:
    import numpy as np
    import torch
    import torch.distributed as dist

    from cuco_tui.workload.program.layout import to_program
    from cuco_tui.workload.program.tracing import OpRecorder
    from cuco_tui.workload.program.user_module import (ProgramError, as_tuple, bound_solution, check_inputs, failure,
                                                       load_program)

    torch.set_num_threads(1)
    world = int(job["world"])
    _gather_stacked_as_nccl_does(dist)  # before the program is loaded: it may import the function by name
    _all_to_all_as_nccl_does(dist)
    _reduce_as_nccl_does(dist)
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
                if job.get("cast"):  # the program in its own dtype, on these inputs rounded to it
                    inputs = tuple(t.to(getattr(torch, job["cast"])) if t.is_floating_point() else t for t in inputs)
            recorder = OpRecorder(dataflow=True) if job.get("trace") and rank == 0 and index == 0 else None
            try:  # in the grad mode solution sets itself (@torch.no_grad(), or its own autograd: a gradient step)
                solve = bound_solution(module, dims)
                if recorder is not None:
                    with recorder:
                        start = recorder.start(inputs)
                        out = solve(*inputs)
                else:
                    out = solve(*inputs)
            except Exception as exc:
                raise failure(f"solution at {shape} (rank {rank} of {world}, {job.get('cast') or 'float64'} on the CPU "
                              f"under gloo)", exc, conv.path) from None
            outputs = as_tuple(out, "solution")
            for j, t in enumerate(outputs):
                if job.get("cast") and t.is_floating_point():
                    t = t.to(torch.float64)
                elif t.is_floating_point() and t.dtype != torch.float64:
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


class _Output:
    """The process's stdout and stderr sent to files for one job, then back to the rank's own log."""

    def __init__(self, stdout: str, stderr: str) -> None:
        self.paths = (stdout, stderr)
        self.saved: list[int] = []

    def __enter__(self) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        self.saved = [os.dup(1), os.dup(2)]
        opened: dict[str, int] = {}  # one file for both when they share a path (as stderr=STDOUT does)
        for path in self.paths:
            if path not in opened:
                opened[path] = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        for target, path in zip((1, 2), self.paths):
            os.dup2(opened[path], target)
        for fd in opened.values():
            os.close(fd)

    def __exit__(self, *exc: Any) -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        for target, fd in zip((1, 2), self.saved):
            os.dup2(fd, target)
            os.close(fd)


class _FreshTorch:
    """torch's process-wide settings a program may change, as they are when torch starts: each job
    starts from them, as in a process of its own (the earlier job's group left, too)."""

    def __init__(self) -> None:
        try:
            import torch
        except ImportError:  # the inspect job says so in its one line
            self.torch = None
            return
        self.torch = torch
        self.rng = torch.get_rng_state()
        self.dtype = torch.get_default_dtype()

    def restore(self) -> None:
        torch = self.torch
        if torch is None:
            return
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()  # the fake group of a sizing that stopped at the program's error
        torch.set_rng_state(self.rng)
        torch.set_default_dtype(self.dtype)
        torch.set_grad_enabled(True)


def _run_job(request: dict[str, Any], rank: int) -> dict[str, Any]:
    jobdir = Path(request["folder"])
    log = str(jobdir / f"rank{rank}.log")
    with _Output(log, log):
        try:
            return _run(request["job"], jobdir, rank)
        except Exception as exc:  # the program's failure, said in one line for the parent
            from cuco_tui.workload.program.user_module import ProgramError

            text = str(exc) if isinstance(exc, ProgramError) else f"{type(exc).__name__}: {exc}".splitlines()[0]
            return {"error": text, "program_error": isinstance(exc, ProgramError)}


def _inspect_job(request: dict[str, Any]) -> dict[str, Any]:
    from cuco_tui.workload.program.inspect_program import inspect

    with _Output(request["stdout"], request["stderr"]), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's deprecation notes about the program's calls are not findings
        try:
            return inspect(request["program"], int(request["world"]))
        except Exception:  # ours: the parent says "loading ... failed" with its last line, as before
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)


def main(argv: list[str]) -> int:
    rank, jobs_fd, replies_fd = int(argv[0]), int(argv[1]), int(argv[2])
    for fd in (jobs_fd, replies_fd):
        os.set_inheritable(fd, False)  # not to the program's own subprocesses
    fresh = _FreshTorch()  # torch imported here, once, while the parent prepares the first job
    with os.fdopen(jobs_fd, "r") as jobs, os.fdopen(replies_fd, "w") as replies:
        for line in jobs:
            request = json.loads(line)
            fresh.restore()
            answer = _inspect_job(request) if request["kind"] == "inspect" else _run_job(request, rank)
            replies.write(json.dumps(answer) + "\n")
            replies.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
