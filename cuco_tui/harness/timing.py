"""Timing in a rank: before each repetition the L2 is flushed and the ranks are aligned (an
all-reduce and a host wait, then, unless the plan says "host", a fixed pause and an all-reduce on
the GPU: RankGroup.align_on_device); CUDA events bracket only the timed call. Also the step limits that
follow from the reference's time, the trace on/off comparison and the copy-engine ceiling."""

from __future__ import annotations

from typing import Callable

from cuco_tui.harness import abi
from cuco_tui.harness.plan import ShapePlan
from cuco_tui.harness.rank_events import TraceTimed
from cuco_tui.harness.rank_group import RankGroup


# What time_pair times, by name: the keys of Timing.late.
REFERENCE, CANDIDATE = "the reference", "candidate launch"


class Timing:
    def __init__(self, group: RankGroup) -> None:
        self.group = group
        self.plan = group.plan
        self.ref_median: float | None = None  # of the last bench shape's warm reference runs, in ms
        # what the last time_pair timed -> repetitions that started before it was enqueued
        self.late: dict[str, int] = {}

    def limit(self, shape: ShapePlan) -> float:
        """The time limit of a candidate launch after the first."""
        floor = self.plan.limits.timeout_floor_s
        factor = self.plan.limits.timeout_factor
        ref = self.ref_median
        return max(floor, factor * ref / 1000.0) if ref else floor

    def time(self, fn: Callable[[], None], what: str, limit: float, repetitions: int | None = None) -> list[float]:
        for _ in range(self.plan.warmup):
            fn()
        self.group.wait_stream(f"{what} (warm-up)", limit * self.plan.warmup)
        return [self.time_once(fn, what, limit) for _ in range(repetitions or self.plan.repetitions)]

    def time_pair(self, reference: Callable[[], None], candidate: Callable[[], None], limit: float,
                  names: tuple[str, str] = (REFERENCE, CANDIDATE)) -> tuple[list[float], list[float]]:
        """Reference and candidate repetitions interleaved, the first of each pair alternating,
        so that both see the same clocks and temperatures (a GEMM-heavy loop heats the GPU and
        lowers its clocks: whatever is timed second would pay for it)."""
        for _ in range(self.plan.warmup):
            reference()
            candidate()
        self.group.wait_stream("warm-up", limit * 2 * self.plan.warmup)
        self.late = {}
        ref_times, cand_times = [], []
        for i in range(self.plan.repetitions):
            order = [(reference, ref_times, names[0]), (candidate, cand_times, names[1])]
            for fn, times, what in order if i % 2 == 0 else order[::-1]:
                times.append(self.time_once(fn, what, limit))
        return ref_times, cand_times

    def time_once(self, fn: Callable[[], None], what: str, limit: float) -> float:
        """One repetition: L2 flushed, ranks aligned, events around `fn` alone."""
        g = self.group
        cp = g.cupy
        start, end, lined_up = cp.cuda.Event(), cp.cuda.Event(), cp.cuda.Event()  # made before the pause
        with g.stream:
            g.scratch.fill(0)  # evict the inputs from L2: each repetition reads from HBM
        g.barrier()  # no rank's host runs ahead into the next repetition
        aligned = self.plan.device_aligned
        late = g.align_on_device(mark=lined_up) if aligned else False
        start.record(g.stream)
        # Late: the stream had already passed the lined-up point when this host recorded `start`,
        # so it idled there for this host and the timed call began after the other ranks' (or this
        # host came to the all-reduce after its pause ran out, and the others waited for it there).
        # Asked on the host before fn: after it, a launch that waits on the host for its own work (MoE's
        # counts) would read late; and not on the GPU's clock, where two events recorded back to
        # back by a late host are as close as by one on time.
        if aligned and (late or lined_up.done):
            self.late[what] = self.late.get(what, 0) + 1
        fn()
        end.record(g.stream)
        g.wait_stream(what, limit)
        return cp.cuda.get_elapsed_time(start, end)

    def time_trace_ab(self, shape: ShapePlan, ctx: abi.CContext, launch: Callable[[], None]) -> None:
        """What the wait trace points cost, in this process: the candidate timed with tracing on
        and off, interleaved like reference and candidate, by switching the context's trace
        pointer between launches. Separate processes per setting differ by more (about 4 %) than
        the effect. Valid for candidates that read cuco::trace_of(ctx) at launch time, as every
        template does; one that keeps its Trace from cuco_init would time tracing on twice."""
        slots, pointer = ctx.trace_slots, ctx.trace

        def traced(on: bool) -> Callable[[], None]:
            def run() -> None:
                ctx.trace, ctx.trace_slots = (pointer, slots) if on else (None, 0)
                launch()
            return run

        try:
            on_ms, off_ms = self.time_pair(traced(True), traced(False), self.limit(shape),
                                           ("candidate launch, tracing on", "candidate launch, tracing off"))
        finally:
            ctx.trace, ctx.trace_slots = pointer, slots
        self.group.log.emit(TraceTimed(shape=shape.name, on_ms=tuple(on_ms), off_ms=tuple(off_ms)))

    def peer_copy_times(self, nbytes: int) -> list[float]:
        """Copy-engine ceiling: every rank copies `nbytes` into the next rank's memory at once
        (cudaMemcpyAsync on CUDA-IPC pointers), as an all-gather step would."""
        g = self.group
        cp = g.cupy
        rt = cp.cuda.runtime
        if g.world < 2 or nbytes <= 0:
            return []
        recv = rt.malloc(nbytes)
        send = cp.empty(nbytes, dtype=cp.uint8)
        handle = rt.ipcGetMemHandle(recv)
        with g.stream:
            mine = cp.asarray(list(handle), dtype=cp.uint8)
            handles = cp.empty(len(handle) * g.world, dtype=cp.uint8)
        g.comm.allGather(mine.data.ptr, handles.data.ptr, len(handle), g.nccl.NCCL_UINT8, g.stream.ptr)
        g.wait_stream("sharing IPC handles", 60.0)
        host = handles.get().tobytes()
        peer = (g.rank + 1) % g.world
        peer_ptr = rt.ipcOpenMemHandle(host[peer * len(handle):(peer + 1) * len(handle)])
        times = self.time(lambda: rt.memcpyAsync(peer_ptr, send.data.ptr, nbytes, rt.memcpyDeviceToDevice,
                                                 g.stream.ptr), "peer copy", 60.0)
        g.barrier()
        rt.ipcCloseMemHandle(peer_ptr)
        rt.free(recv)
        return times
