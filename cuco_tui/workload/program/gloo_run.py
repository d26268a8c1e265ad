"""Running a program on the CPU in float64 under gloo, W processes (no torch in this process).

`GlooRanks` starts W `gloo_rank` processes once and hands them jobs one after the other over pipes:
each rank imports torch once (most of a job's CPU time), then loads the program afresh for every
job and joins a gloo group of that job's own (a FileStore in the job's folder), so a job runs as it
would in fresh processes. Rank 0 can also inspect the program (inspect_program) before the first
job, so that `cuco workload import` starts W processes in all. `run_gloo` is one job on ranks of its
own. Any rank's failure comes back as one ProgramRunError line, and ends the ranks (a later job
starts fresh ones): a group whose peer failed mid-collective is not one to reuse."""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cuco_tui.harness.env import child_env

# Words of a rank that failed only because a peer went away: the peer's own error says why.
_SECONDARY = ("Connection closed by peer", "Connection reset", "Timed out", "timed out", "Broken pipe",
              "closed by remote", "SIGTERM")


RUN_TIMEOUT_S = 600.0  # the default limit of a job: a large program's float64 run on the CPU takes minutes


class ProgramRunError(RuntimeError):
    """The program failed (or hung) under gloo; the message is one line."""


class ProgramTimeout(ProgramRunError):
    """The program ran past its time limit (`limit`, in seconds): the caller may say how to give it more."""

    def __init__(self, message: str, limit: float) -> None:
        super().__init__(message)
        self.limit = limit


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


@dataclass(frozen=True)
class Inspection:
    """What rank 0 said of the program (inspect_program's report), or why it said nothing."""
    report: dict[str, Any] | None  # None: rank 0 ended without one, or ran past the timeout
    timed_out: bool
    stderr_tail: str  # the last line rank 0 wrote to stderr while inspecting ("no output")


@dataclass
class _Rank:
    proc: subprocess.Popen
    jobs: int  # write end of the pipe the rank reads its jobs from, one JSON line each
    replies: int  # read end of the pipe the rank answers on, one JSON line a job
    log: Path  # what the rank prints outside a job (torch's import); a job's output goes to its folder
    pending: bytes = field(default=b"")

    def send(self, request: dict[str, Any]) -> None:
        try:
            os.write(self.jobs, (json.dumps(request) + "\n").encode())
        except BrokenPipeError:
            pass  # the rank has ended: its reply pipe says so


class GlooRanks:
    """W CPU processes for a program's runs under gloo, started on the first job and reused for the
    next ones; `close` (or leaving the `with`) kills them."""

    def __init__(self, world: int) -> None:
        self.world = world
        self._control = tempfile.TemporaryDirectory(prefix="cuco-ranks-")
        self._ranks: list[_Rank] = []

    def __enter__(self) -> GlooRanks:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
        self._control.cleanup()

    def close(self) -> None:
        """Kill the ranks (a job's reports are in hand by then: nothing is lost) and reap them."""
        for rank in self._ranks:
            if rank.proc.poll() is None:
                rank.proc.kill()
            rank.proc.wait()
            os.close(rank.jobs)
            os.close(rank.replies)
        self._ranks = []

    def _start(self) -> None:
        if self._ranks:
            return
        # CPU only: no rank may touch a GPU (nor, then, NVLink multicast); one thread a rank.
        env = child_env({"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "TORCH_CPP_LOG_LEVEL": "ERROR"})
        control = Path(self._control.name)
        for r in range(self.world):
            job_read, job_write = os.pipe()
            reply_read, reply_write = os.pipe()
            log = control / f"rank{r}.log"
            # Output to a file: a program that prints much must not block on a full pipe while its
            # peers wait for it in a collective.
            with open(log, "w") as out:
                proc = subprocess.Popen([sys.executable, "-m", "cuco_tui.workload.program.gloo_rank", str(r),
                                         str(job_read), str(reply_write)], stdin=subprocess.DEVNULL, stdout=out,
                                        stderr=subprocess.STDOUT, env=env, pass_fds=(job_read, reply_write))
            os.close(job_read)
            os.close(reply_write)  # the rank holds the only write end: its end is this pipe's end of file
            self._ranks.append(_Rank(proc, job_write, reply_read, log))

    def _exchange(self, requests: dict[int, dict[str, Any]], timeout: float) -> tuple[dict[int, Any], bool]:
        """Hand each rank named its request; wait until each has answered or ended, at most `timeout`
        seconds. Gives the answers by rank and whether the time ran out."""
        self._start()
        for r, request in requests.items():
            self._ranks[r].send(request)
        waiting = {self._ranks[r].replies: r for r in requests}
        answers: dict[int, Any] = {}
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as selector:
            for fd in waiting:
                selector.register(fd, selectors.EVENT_READ)
            while waiting:
                left = deadline - time.monotonic()
                if left <= 0:
                    return answers, True
                for key, _ in selector.select(left):
                    r = waiting[key.fd]
                    rank = self._ranks[r]
                    chunk = os.read(key.fd, 1 << 20)
                    rank.pending += chunk
                    if b"\n" in chunk:
                        line, rank.pending = rank.pending.split(b"\n", 1)
                        answers[r] = json.loads(line)
                    elif chunk:
                        continue  # more of the answer to come
                    selector.unregister(key.fd)  # answered, or ended without an answer
                    del waiting[key.fd]
        return answers, False

    def _tail(self, r: int, job_log: Path | None) -> str:
        log = job_log if job_log is not None and job_log.exists() else self._ranks[r].log
        return (log.read_text(errors="replace").strip().splitlines() or ["no output"])[-1]

    def inspect(self, program: Path, timeout: float) -> Inspection:
        """Rank 0 loads the program, checks its convention and sizes every shape at this world size and
        the usual ones (inspect_program), before any job."""
        folder = Path(self._control.name) / "inspect"
        folder.mkdir(exist_ok=True)
        request = {"kind": "inspect", "program": str(Path(program).resolve()), "world": self.world,
                   "stdout": str(folder / "stdout"), "stderr": str(folder / "stderr")}
        answers, timed_out = self._exchange({0: request}, timeout)
        err = folder / "stderr"
        tail = ((err.read_text(errors="replace").strip().splitlines() if err.exists() else []) or ["no output"])[-1]
        if timed_out or 0 not in answers:
            self.close()
        return Inspection(None if timed_out else answers.get(0), timed_out, tail)

    def run(self, program: Path, shapes: dict[str, dict[str, int]], folder: Path, *, mode: str = "make",
            inputs: list[list[dict[str, Any]]] | None = None, trace: bool = False,
            timeout: float = RUN_TIMEOUT_S, cast: str = "") -> GlooRun:
        """Run `program`'s solution at `shapes` on the W ranks in `folder` (which must exist).
        mode "make": inputs from make_inputs (float64, CPU); "files": from in_*.npy the caller wrote, in
        the harness's layout, with `inputs` each rank's layout specs (layout.to_program), and with
        `cast` (a torch dtype's name) their floating inputs rounded to it first, the outputs saved in
        float64."""
        job = {"program": str(Path(program).resolve()), "world": self.world, "shapes": shapes, "mode": mode,
               "inputs": inputs or [], "trace": trace, "collective_timeout_s": max(30.0, timeout / 2), "cast": cast}
        (folder / "store").unlink(missing_ok=True)  # the job's FileStore starts empty
        request = {"kind": "run", "folder": str(folder), "job": job}
        answers, timed_out = self._exchange({r: request for r in range(self.world)}, timeout)
        try:
            if timed_out:
                raise ProgramTimeout(
                    f"the program did not finish within {timeout:g} s on {self.world} CPU processes under gloo "
                    f"(does every rank call the same collectives in the same order?)", timeout)
            for r in range(self.world):
                if r not in answers:
                    raise ProgramRunError(f"rank {r} of the CPU run ended without a report: "
                                          f"{self._tail(r, folder / f'rank{r}.log')}")
            reports = [answers[r] for r in range(self.world)]
            errors = [(r, rep) for r, rep in enumerate(reports) if "error" in rep]
            if errors:
                # The rank that failed first says why; the others only saw it leave (inside the
                # program's collective too: such an error is the program's, and still not the cause).
                primary = [e for e in errors if not any(w in e[1]["error"] for w in _SECONDARY)]
                r, rep = (primary or errors)[0]
                raise ProgramRunError(rep["error"] if rep.get("program_error") else f"rank {r}: {rep['error']}")
        except ProgramRunError:
            self.close()
            raise
        return GlooRun(folder, reports)


def run_gloo(program: Path, world: int, shapes: dict[str, dict[str, int]], folder: Path, *, mode: str = "make",
             inputs: list[list[dict[str, Any]]] | None = None, trace: bool = False,
             timeout: float = RUN_TIMEOUT_S) -> GlooRun:
    """One run (GlooRanks.run) on W processes of its own, ended with it."""
    with GlooRanks(world) as ranks:
        return ranks.run(program, shapes, folder, mode=mode, inputs=inputs, trace=trace, timeout=timeout)


def temporary_folder() -> tempfile.TemporaryDirectory:
    return tempfile.TemporaryDirectory(prefix="cuco-program-")
