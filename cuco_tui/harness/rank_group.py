"""A rank's place in the harness's own NCCL group: joining it, waiting on its stream under the
watchdog, barriers, collective decisions, the candidate's fresh NCCL id, and closing it.

Decisions that end a run are taken collectively (an all-reduce of a flag), so no rank tears
down while another still launches into a shared collective."""

from __future__ import annotations

import ctypes
import json
import os
import time
from pathlib import Path
from typing import Any

from cuco_tui.harness import abi
from cuco_tui.harness.plan import SETTLE_US, RunPlan
from cuco_tui.harness.rank_events import CloseWarning, EventLog, Joined
from cuco_tui.harness.watchdog import TraceMemory, Watchdog

CLOSE_LIMIT_S = 30.0  # closing the harness's NCCL group after the results (normally well under 1 s)

# One thread reading the global nanosecond timer: the same pause on every rank, whatever its clocks.
SETTLE_NAME = "cuco_settle"
SETTLE_KERNEL = r"""
extern "C" __global__ void cuco_settle(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
}
"""


class RankGroup:
    """One rank's device, communicator and stream, with the memory every step uses: the wait
    trace slots and the scratch buffer timing.py writes to flush the L2."""

    def __init__(self, cupy: Any, nccl: Any, plan: RunPlan, rank: int, log: EventLog,
                 watchdog: Watchdog) -> None:
        self.cupy = cupy
        self.nccl = nccl
        self.plan = plan
        self.rank = rank
        self.world = plan.world
        self.rundir = Path(plan.rundir)
        self.log = log
        self.watchdog = watchdog
        self.device = plan.gpus[rank]
        self._settle: Any = None  # the pause kernel of align_on_device, compiled when joining
        self._paused: Any = None  # an event after that pause, made at its first use

    def join(self) -> None:
        self.watchdog.phase = "setup"
        self.watchdog.arm(self.plan.limits.setup_timeout_s, "joining the NCCL group")
        self.cupy.cuda.Device(self.device).use()
        uid_file = self.rundir / "nccl_uid.json"
        if self.rank == 0:
            # CuPy returns the id as bytes or as a tuple of signed chars, depending on version.
            uid = bytes(v % 256 for v in self.nccl.get_unique_id())
            tmp = uid_file.with_suffix(".tmp")
            tmp.write_text(json.dumps(list(uid)))
            os.replace(tmp, uid_file)
        else:
            while not uid_file.exists():
                time.sleep(0.01)
            uid = bytes(json.loads(uid_file.read_text()))
        self.comm = self.nccl.NcclCommunicator(self.world, uid, self.rank)
        self.stream = self.cupy.cuda.Stream(non_blocking=True)
        with self.stream:
            self.flag = self.cupy.zeros(1, dtype=self.cupy.float32)
        self.trace = TraceMemory(self.cupy, self.plan.trace_slots)
        self.watchdog.trace = self.trace
        self.watchdog.cupy = self.cupy
        self.watchdog.device = self.device
        l2 = self.cupy.cuda.runtime.getDeviceProperties(self.device)["l2CacheSize"]
        self.scratch = self.cupy.empty(max(4 * l2, 1 << 20), dtype=self.cupy.uint8)  # to flush L2
        # Compiled here, not at its first use: that would fall between an aligning all-reduce and
        # a timed start, and take each rank a different time.
        self._settle = self.cupy.RawKernel(SETTLE_KERNEL, SETTLE_NAME)
        self._settle.compile()
        self.wait_stream("first collective", 60.0)
        self.barrier(60.0)
        self.watchdog.disarm()
        props = self.cupy.cuda.runtime.getDeviceProperties(self.device)
        self.name = props["name"].decode()
        self.log.emit(Joined(device=self.device, name=self.name, pid=os.getpid()))

    def follow(self, plan: RunPlan, log: EventLog) -> None:
        """A kept worker's next plan (the same GPUs and group): its run folder and event file."""
        self.plan, self.log, self.rundir = plan, log, Path(plan.rundir)

    def rejoin(self, plans: int) -> None:
        """The start of a kept worker's next plan: the group already joined, the wait trace
        emptied (a deadlock report must not show the last candidate's waits), every rank here."""
        self.watchdog.phase = "setup"
        self.watchdog.device = self.device  # the health probe, off while the worker waited
        if self.trace.host_ptr:
            ctypes.memset(self.trace.host_ptr, 0, self.trace.bytes)
        self.barrier(60.0)
        self.log.emit(Joined(device=self.device, name=self.name, pid=os.getpid(), plans=plans))

    def wait_stream(self, what: str, limit: float) -> None:
        """Wait for the stream with a time limit, polling so the watchdog can act."""
        self.watchdog.arm(limit, what)
        event = self.stream.record()
        while not event.done:
            time.sleep(0.0001)
        self.watchdog.disarm()

    def align_on_device(self, settle_us: int = SETTLE_US, mark: Any = None) -> bool:
        """Line the ranks' streams up without the host: a pause of `settle_us` on the GPU, during
        which this rank's host enqueues the rest, then an all-reduce, which every rank leaves within
        a few µs of the others: what is timed next starts there on every rank. (A host barrier alone
        releases the ranks' hosts up to a poll interval and a launch latency apart, and a candidate
        that waits for a peer's data counts the gap. With the all-reduce first and the pause after,
        the rank whose host arrived last at the all-reduce started its pause a Python launch later
        than the others, and so its timed call, every repetition.)
        `mark`: a CUDA event recorded after the all-reduce, where the ranks are lined up.
        True when this host reached the all-reduce after its pause had run out: the other ranks
        waited there for it, and the timed call starts only as its host gets to it."""
        if self._paused is None:
            self._paused = self.cupy.cuda.Event(disable_timing=True)
        self._settle((1,), (1,), (self.cupy.uint64(settle_us * 1000),), stream=self.stream)
        self._paused.record(self.stream)
        late = self._paused.done
        self._reduce_flag()
        if mark is not None:
            mark.record(self.stream)
        return late

    def _reduce_flag(self) -> None:
        """The one-float all-reduce of `flag` on the harness's stream, not waited for."""
        self.comm.allReduce(self.flag.data.ptr, self.flag.data.ptr, 1, self.nccl.NCCL_FLOAT32, self.nccl.NCCL_SUM,
                            self.stream.ptr)

    def barrier(self, limit: float = 30.0) -> None:
        self._reduce_flag()
        self.wait_stream("harness barrier", limit)

    def all_ok(self, ok: bool, limit: float = 60.0) -> bool:
        """True when every rank says ok (a collective: every rank must call it)."""
        with self.stream:
            self.flag.fill(0.0 if ok else 1.0)
        self._reduce_flag()
        self.wait_stream("agreeing on the outcome", limit)
        return float(self.flag.get()[0]) == 0.0

    def fresh_nccl_id(self) -> bytes:
        """A new unique id for the candidate's own communicator, broadcast from rank 0."""
        cp = self.cupy
        with self.stream:
            if self.rank == 0:
                buf = cp.asarray([v % 256 for v in self.nccl.get_unique_id()], dtype=cp.uint8)
            else:
                buf = cp.zeros(abi.NCCL_ID_BYTES, dtype=cp.uint8)
        self.comm.broadcast(buf.data.ptr, buf.data.ptr, abi.NCCL_ID_BYTES, self.nccl.NCCL_UINT8, 0, self.stream.ptr)
        self.wait_stream("sharing the candidate's NCCL id", 60.0)
        return bytes(buf.get(stream=self.stream).tolist())

    def close(self) -> None:
        # Where a transport hands a send to a proxy thread (sockets, as when ranks share a GPU;
        # the network between hosts), the last barrier can complete here before a peer has our
        # part: exiting at once would leave that peer waiting forever. Destroying the
        # communicator flushes what is in flight first. The results are in by now, so trouble
        # here is a warning (the watchdog's "close" phase), never the candidate's failure.
        self.watchdog.phase = "close"
        self.watchdog.device = None  # no health probe: a sticky error now would mislabel the results
        self.watchdog.arm(CLOSE_LIMIT_S, "closing the harness's NCCL group")
        try:
            self.comm.destroy()
        except Exception as exc:  # noqa: BLE001 - any failure here is reported, not raised
            self.log.emit(CloseWarning(message=f"closing the harness's NCCL group: {type(exc).__name__}: {exc}"))
        self.watchdog.disarm()
