"""One rank of an evaluation: `python -m cuco_tui.harness.worker --plan PLAN.json --rank R`.

The launcher starts one per GPU. Each joins the harness's NCCL group, then for every
shape of the plan: builds the workload's buffers, initializes the candidate, verifies it
against the reference on fresh random inputs with poisoned outputs, and (bench shapes)
times candidate and reference with CUDA events, all ranks starting each repetition
together. Everything it learns goes, one JSON object a line, to `rank{R}.jsonl` in the
run folder; the launcher reads nothing else.

Decisions that end a run are taken collectively (an all-reduce of a flag), so no rank
tears down while another still launches into a shared collective. A watchdog thread
enforces each step's time limit: on expiry, or when the launcher asks by creating the
`abort` file, it dumps this rank's wait trace and ends the process at once."""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from cuco_tui.harness import abi
from cuco_tui.harness.verify import compare, poison

EXIT_OK = 0
EXIT_FAILED = 2  # the candidate failed (init error, CUDA error, wrong answer): reported
EXIT_TIMEOUT = 124
EXIT_ABORTED = 125
CLOSE_LIMIT_S = 30.0  # closing the harness's NCCL group after the results (normally well under 1 s)
TRACE_SLOT_COUNT = 4096


class EventLog:
    def __init__(self, path: Path, rank: int) -> None:
        self.file = open(path, "a", buffering=1)
        self.rank = rank
        self.lock = threading.Lock()

    def emit(self, event: str, **fields: Any) -> None:
        record = {"event": event, "rank": self.rank, "t": time.time(), **fields}
        with self.lock:
            self.file.write(json.dumps(record) + "\n")
            self.file.flush()
            os.fsync(self.file.fileno())


class TraceMemory:
    """Pinned, mapped host memory for the candidate's wait slots: the device writes it, and
    this process reads it even while a kernel hangs."""

    def __init__(self, cupy: Any, slots: int) -> None:
        self.slots = slots
        self.bytes = slots * ctypes.sizeof(abi.CWaitSlot)
        self.host_ptr = 0
        if slots > 0:  # 0 slots: tracing off (to measure what it costs); the helpers then skip it
            self.host_ptr = cupy.cuda.runtime.hostAlloc(self.bytes, cupy.cuda.runtime.hostAllocMapped)
            ctypes.memset(self.host_ptr, 0, self.bytes)
        # Unified addressing: memory from cudaHostAlloc(mapped) has the same address on the device.
        self.device_ptr = self.host_ptr

    def records(self) -> list[dict[str, Any]]:
        if not self.host_ptr:
            return []
        return [r.__dict__ for r in abi.decode_slots(ctypes.string_at(self.host_ptr, self.bytes))]



class Watchdog(threading.Thread):
    """Ends the process when the armed step overruns, or when the launcher asks."""

    def __init__(self, log: EventLog, abort_file: Path) -> None:
        super().__init__(daemon=True)
        self.log = log
        self.abort_file = abort_file
        self.deadline: float | None = None
        self.what = ""
        self.limit = 0.0
        self.trace: TraceMemory | None = None
        self.phase = ""
        self.device: int | None = None  # set once the rank has joined: enables the health probe
        self.cupy: Any = None

    def arm(self, seconds: float, what: str) -> None:
        self.what, self.limit = what, seconds
        self.deadline = time.monotonic() + seconds

    def disarm(self) -> None:
        self.deadline = None

    def run(self) -> None:
        ticks = 0
        while True:
            time.sleep(0.02)
            ticks += 1
            if self.abort_file.exists():
                if self.phase == "close":
                    self.log.emit("close_warning", message="the launcher stopped the group while this rank closed it")
                    os._exit(EXIT_OK)
                self._die("aborted", EXIT_ABORTED, "the launcher stopped the group after another rank failed")
            deadline = self.deadline
            if deadline is not None and time.monotonic() > deadline:
                if self.phase == "close":  # every result is in: say so and leave
                    self.log.emit("close_warning", message=f"{self.what} did not finish within {self.limit:.1f} s")
                    os._exit(EXIT_OK)
                self._die("timeout", EXIT_TIMEOUT, f"{self.what} did not finish within {self.limit:.1f} s")
            if ticks % 10 == 0 and self.device is not None:
                self._probe_health()

    def _probe_health(self) -> None:
        """A kernel fault (illegal address, ...) poisons the context at once, but event and
        stream queries can go on answering 'not ready' for as long as the faulted kernel's
        stream looks busy (seen on H200 VMs: never, within 45 s). cudaMemGetInfo reports
        the sticky error at once, so the watchdog asks it five times a second."""
        try:
            with self.cupy.cuda.Device(self.device):
                self.cupy.cuda.runtime.memGetInfo()
        except self.cupy.cuda.runtime.CUDARuntimeError as exc:
            self.log.emit("error", kind="cuda", phase=self.phase,
                          message=f"{exc} (during {self.what or self.phase})",
                          trace=self.trace.records() if self.trace else [])
            os._exit(EXIT_FAILED)

    def _die(self, event: str, code: int, message: str) -> None:
        trace = self.trace.records() if self.trace else []
        self.log.emit(event, phase=self.phase, what=self.what, limit_s=self.limit, message=message, trace=trace)
        os._exit(code)


@dataclass
class Env:
    """What a workload reference sees."""

    cupy: Any
    comm: Any
    stream: Any
    world: int
    rank: int
    dims: dict[str, int]


class CandidateFailed(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def load_reference(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"cuco_reference_{path.parent.name}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Rank:
    def __init__(self, plan: dict[str, Any], rank: int) -> None:
        import cupy
        from cupy.cuda import nccl

        self.cupy = cupy
        self.nccl = nccl
        self.plan = plan
        self.rank = rank
        self.world = int(plan["world"])
        self.rundir = Path(plan["rundir"])
        self.log = EventLog(self.rundir / f"rank{rank}.jsonl", rank)
        self.watchdog = Watchdog(self.log, self.rundir / "abort")
        self.watchdog.start()
        self.device = int(plan["gpus"][rank])
        self.ref_module = load_reference(Path(plan["reference"]))
        self.reference_notes: set[str] = set()
        try:
            abi.preload(list(plan.get("preload") or []))
        except abi.AbiError as exc:
            # Not fatal here: a candidate that needs the library fails to load with a message that
            # names it, and a reference that can do without it falls back and says so.
            self.reference_notes.add(str(exc))
            self.log.emit("reference_warning", message=f"{exc}; the run goes on without it")
        for note in plan.get("notes") or []:  # what the launching side found weakening the reference
            self.reference_notes.add(str(note))
            self.log.emit("reference_warning", message=str(note))
        self.library = abi.CandidateLibrary(Path(plan["library"])) if plan.get("library") else None
        self.contexts: list[abi.CContext] = []  # kept alive until teardown

    # ------------------------------------------------------------------ group plumbing

    def join(self) -> None:
        self.watchdog.phase = "setup"
        self.watchdog.arm(float(self.plan.get("setup_timeout_s", 120.0)), "joining the NCCL group")
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
        self.trace = TraceMemory(self.cupy, int(self.plan.get("trace_slots", TRACE_SLOT_COUNT)))
        self.watchdog.trace = self.trace
        self.watchdog.cupy = self.cupy
        self.watchdog.device = self.device
        l2 = self.cupy.cuda.runtime.getDeviceProperties(self.device)["l2CacheSize"]
        self.scratch = self.cupy.empty(max(4 * l2, 1 << 20), dtype=self.cupy.uint8)  # to flush L2
        self.wait_stream("first collective", 60.0)
        self.barrier(60.0)
        self.watchdog.disarm()
        props = self.cupy.cuda.runtime.getDeviceProperties(self.device)
        self.log.emit("joined", device=self.device, name=props["name"].decode(), pid=os.getpid())

    def wait_stream(self, what: str, limit: float) -> None:
        """Wait for the stream with a time limit, polling so the watchdog can act."""
        self.watchdog.arm(limit, what)
        event = self.stream.record()
        while not event.done:
            time.sleep(0.0001)
        self.watchdog.disarm()

    def barrier(self, limit: float = 30.0) -> None:
        self.comm.allReduce(self.flag.data.ptr, self.flag.data.ptr, 1, self.nccl.NCCL_FLOAT32, self.nccl.NCCL_SUM,
                            self.stream.ptr)
        self.wait_stream("harness barrier", limit)

    def all_ok(self, ok: bool) -> bool:
        """True when every rank says ok (a collective: every rank must call it)."""
        with self.stream:
            self.flag.fill(0.0 if ok else 1.0)
        self.comm.allReduce(self.flag.data.ptr, self.flag.data.ptr, 1, self.nccl.NCCL_FLOAT32, self.nccl.NCCL_SUM,
                            self.stream.ptr)
        self.wait_stream("agreeing on the outcome", 60.0)
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

    # ------------------------------------------------------------------ buffers and candidate

    def buffers(self, dims: dict[str, int]) -> tuple[dict, dict, dict, dict[str, str]]:
        spec = self.ref_module.io_spec(dims, self.world, self.rank)
        cp = self.cupy
        kinds = {"bf16": cp.uint16, "f32": cp.float32, "f16": cp.uint16, "i32": cp.int32, "i64": cp.int64, "u8": cp.uint8}
        inputs = {n: cp.empty(s, dtype=kinds[d]) for n, s, d in spec["inputs"]}
        outputs = {n: cp.empty(s, dtype=kinds[d]) for n, s, d in spec["outputs"]}
        expected = {n: cp.empty(s, dtype=kinds[d]) for n, s, d in spec["outputs"]}
        dtypes = {n: d for n, _, d in spec["inputs"] + spec["outputs"]}
        return inputs, outputs, expected, dtypes

    def context(self, dims: dict[str, int], inputs: dict, outputs: dict, dtypes: dict[str, str]) -> abi.CContext:
        ctx = abi.CContext()
        ctx.abi_version = abi.ABI_VERSION
        ctx.rank, ctx.world, ctx.device = self.rank, self.world, self.device
        for field, arrays in (("inputs", inputs), ("outputs", outputs)):
            slots = getattr(ctx, field)
            for i, (name, arr) in enumerate(arrays.items()):
                b = slots[i]
                b.ptr = arr.data.ptr
                b.bytes = arr.nbytes
                b.ndim = arr.ndim
                for j, extent in enumerate(arr.shape):
                    b.shape[j] = extent
                b.dtype = abi.DTYPES[dtypes[name]]
                b.name = name.encode()
        ctx.n_inputs, ctx.n_outputs = len(inputs), len(outputs)
        ctx.n_dims = len(dims)
        for i, (name, value) in enumerate(dims.items()):
            ctx.dim_names[i].value = name.encode()
            ctx.dims[i] = value
        ctx.nccl_id[:] = list(self.fresh_nccl_id())
        ctx.trace = self.trace.device_ptr or None
        ctx.trace_slots = self.trace.slots
        self.contexts.append(ctx)
        return ctx

    def check_cuda(self, what: str) -> None:
        try:
            self.stream.synchronize()
        except self.cupy.cuda.runtime.CUDARuntimeError as exc:
            raise CandidateFailed("cuda", f"{what}: {exc}") from exc

    # ------------------------------------------------------------------ the plan

    def run(self) -> int:
        self.join()
        self.log.emit("plan", shapes=[s["name"] for s in self.plan["shapes"]], mode=self.plan["mode"])
        for shape in self.plan["shapes"]:
            self.watchdog.phase = f"{shape['level']}:{shape['name']}"
            if self.plan["mode"] == "baseline":
                self.baseline_shape(shape)
                continue
            if not self.candidate_shape(shape):
                break
        self.log.emit("done")
        self.close_group()
        return EXIT_OK

    def close_group(self) -> None:
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
            self.log.emit("close_warning", message=f"closing the harness's NCCL group: {type(exc).__name__}: {exc}")
        self.watchdog.disarm()

    def candidate_shape(self, shape: dict[str, Any]) -> bool:
        """Verify (and for bench shapes, time) the candidate at one shape. False: stop the run."""
        dims = shape["dims"]
        env = Env(self.cupy, self.comm, self.stream, self.world, self.rank, dims)
        inputs, outputs, expected, dtypes = self.buffers(dims)
        reference = self.ref_module.Reference(env)
        self.log.emit("shape_start", shape=shape["name"], level=shape["level"], dims=dims)
        ctx = self.context(dims, inputs, outputs, dtypes)
        state = self.candidate_init(ctx, shape)
        first_limit = float(self.plan.get("first_launch_timeout_s", 20.0))
        launch = lambda: self.candidate_launch(ctx, state)  # noqa: E731
        ok = True
        for check in range(int(shape["checks"])):
            seed = int(self.plan["nonce"]) * 1000 + shape["index"] * 10 + check
            with self.stream:
                self.ref_module.fill_inputs(self.cupy, inputs, dims, self.world, self.rank, seed)
                for name, arr in outputs.items():
                    poison(self.cupy, arr, dtypes[name])
            reference.run(inputs, expected)
            self.wait_stream("the reference", 120.0)
            self.report_reference(reference)
            self.barrier()
            limit = first_limit if check == 0 else self.limit(shape)
            self.log.emit("launch", shape=shape["name"], check=check, limit_s=limit)
            launch()
            self.wait_stream(f"candidate launch (check {check + 1})", limit)
            self.check_cuda(f"after candidate launch (check {check + 1})")
            verdict = self.verify(shape, check, outputs, expected, dtypes)
            if not self.all_ok(verdict):
                ok = False
                break
        if ok and shape["level"] == "verify":
            ok = self.back_to_back(shape, launch, reference, inputs, outputs, expected, dtypes)
        if ok and shape["level"] == "bench":
            run_reference = lambda: reference.run(inputs, expected)  # noqa: E731
            warm = self.time(run_reference, "the reference", 120.0, repetitions=3)
            self.ref_median = sorted(warm)[1]
            ref_times, cand_times = self.time_pair(run_reference, launch, self.limit(shape))
            self.check_cuda("after timing")
            self.log.emit("timing", shape=shape["name"], dims=dims, candidate_ms=cand_times, reference_ms=ref_times)
            if self.plan.get("trace_ab") and self.trace is not None and self.trace.slots:
                self.time_trace_ab(shape, ctx, launch)
        # Every rank's last launch done before any rank frees: a peer's final signal or copy may
        # still be on its way into this rank's IPC buffers (seen in a CPU emulation of kv_transfer).
        self.barrier()
        self.candidate_teardown(state, ctx)
        self.barrier()
        return ok

    def back_to_back(self, shape: dict[str, Any], launch: Callable[[], None], reference: Any, inputs: dict,
                     outputs: dict, expected: dict, dtypes: dict[str, str]) -> bool:
        """Two launches with the inputs replaced and the outputs poisoned in stream order between
        them, and no host wait: as in the timed loop, but with the inputs changing (the contract
        says they may). Each launch's outputs are copied in stream order right after it and both
        are checked: a launch that reads its inputs (or a peer's) before its stream gets there,
        or whose work lands after the stream has moved on, fails here; the checks above, each
        launch alone after a host wait, cannot see it."""
        check = int(shape["checks"])
        seed = int(self.plan["nonce"]) * 1000 + shape["index"] * 10 + 8
        dims = shape["dims"]

        def fill(s: int) -> None:
            with self.stream:
                self.ref_module.fill_inputs(self.cupy, inputs, dims, self.world, self.rank, s)

        fill(seed)
        self.barrier()
        self.log.emit("launch", shape=shape["name"], check=check, limit_s=self.limit(shape), back_to_back=True)
        launch()
        with self.stream:
            first = {name: arr.copy() for name, arr in outputs.items()}
        fill(seed + 1)
        with self.stream:
            for name, arr in outputs.items():
                poison(self.cupy, arr, dtypes[name])
        launch()
        self.wait_stream("two candidate launches back to back", 2 * self.limit(shape))
        self.check_cuda("after two candidate launches back to back")
        self.barrier()  # every rank's second launch done before the reference's collectives
        ok = True
        for s, got, label in ((seed + 1, outputs, "back to back, 2nd"), (seed, first, "back to back, 1st")):
            fill(s)
            reference.run(inputs, expected)
            self.wait_stream("the reference", 120.0)
            ok = self.all_ok(self.verify(shape, check, got, expected, dtypes, label=label)) and ok
            check += 1
        return ok

    def time_trace_ab(self, shape: dict[str, Any], ctx: abi.CContext, launch: Callable[[], None]) -> None:
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
        self.log.emit("trace_ab", shape=shape["name"], on_ms=on_ms, off_ms=off_ms)

    def limit(self, shape: dict[str, Any]) -> float:
        floor = float(self.plan.get("timeout_floor_s", 5.0))
        factor = float(self.plan.get("timeout_factor", 50.0))
        ref = getattr(self, "ref_median", None)
        return max(floor, factor * ref / 1000.0) if ref else floor

    def candidate_init(self, ctx: abi.CContext, shape: dict[str, Any]) -> ctypes.c_void_p:
        self.watchdog.arm(float(self.plan.get("init_timeout_s", 120.0)), "cuco_init")
        rc, state = self.library.init(ctx)
        self.watchdog.disarm()
        if rc != 0:
            raise CandidateFailed("init", f"cuco_init returned {rc}: {ctx.error.decode(errors='replace') or 'no message'}")
        self.check_cuda("after cuco_init")
        return state

    def candidate_launch(self, ctx: abi.CContext, state: ctypes.c_void_p) -> None:
        rc = self.library.launch(state, self.stream.ptr)
        if rc != 0:
            raise CandidateFailed("launch", f"cuco_launch returned {rc}: {ctx.error.decode(errors='replace') or 'no message'}")

    def candidate_teardown(self, state: ctypes.c_void_p, ctx: abi.CContext) -> None:
        self.watchdog.arm(60.0, "cuco_teardown")
        rc = self.library.teardown(state)
        self.watchdog.disarm()
        if rc != 0:
            raise CandidateFailed("teardown", f"cuco_teardown returned {rc}: {ctx.error.decode(errors='replace')}")
        self.check_cuda("after cuco_teardown")

    def verify(self, shape: dict, check: int, outputs: dict, expected: dict, dtypes: dict[str, str],
               label: str = "") -> bool:
        ok = True
        rtol, floor = float(self.plan["rtol"]), float(self.plan.get("floor", 0.0))
        with self.stream:
            for name, got in outputs.items():
                c = compare(self.cupy, got, expected[name], dtypes[name], floor=floor)
                passed = c.passed(rtol)
                ok = ok and passed
                self.log.emit(
                    "verify", shape=shape["name"], level=shape["level"], check=check, output=name, ok=passed,
                    elements=c.elements, unwritten=c.unwritten, nonfinite=c.nonfinite,
                    max_rel_error=c.max_rel_error, sum_sq_diff=c.sum_sq_diff, sum_sq_ref=c.sum_sq_ref,
                    worst_index=list(c.worst_index), worst_got=c.worst_got, worst_want=c.worst_want, rtol=rtol,
                    floor=floor, l2_rel_error=c.l2_rel_error, label=label,
                )
        return ok

    def time(self, fn: Callable[[], None], what: str, limit: float, repetitions: int | None = None) -> list[float]:
        for _ in range(int(self.plan["warmup"])):
            fn()
        self.wait_stream(f"{what} (warm-up)", limit * int(self.plan["warmup"]))
        return [self.time_once(fn, what, limit) for _ in range(repetitions or int(self.plan["repetitions"]))]

    def time_pair(self, reference: Callable[[], None], candidate: Callable[[], None], limit: float,
                  names: tuple[str, str] = ("the reference", "candidate launch")) -> tuple[list[float], list[float]]:
        """Reference and candidate repetitions interleaved, the first of each pair alternating,
        so that both see the same clocks and temperatures (a GEMM-heavy loop heats the GPU and
        lowers its clocks: whatever is timed second would pay for it)."""
        for _ in range(int(self.plan["warmup"])):
            reference()
            candidate()
        self.wait_stream("warm-up", limit * 2 * int(self.plan["warmup"]))
        ref_times, cand_times = [], []
        for i in range(int(self.plan["repetitions"])):
            order = [(reference, ref_times, names[0]), (candidate, cand_times, names[1])]
            for fn, times, what in order if i % 2 == 0 else order[::-1]:
                times.append(self.time_once(fn, what, limit))
        return ref_times, cand_times

    def time_once(self, fn: Callable[[], None], what: str, limit: float) -> float:
        """One repetition: L2 flushed, ranks aligned, events around `fn` alone."""
        cp = self.cupy
        with self.stream:
            self.scratch.fill(0)  # evict the inputs from L2: each repetition reads from HBM
        self.barrier()
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record(self.stream)
        fn()
        end.record(self.stream)
        self.wait_stream(what, limit)
        return cp.cuda.get_elapsed_time(start, end)

    # ------------------------------------------------------------------ baseline and ceilings

    def baseline_shape(self, shape: dict[str, Any]) -> None:
        dims = shape["dims"]
        env = Env(self.cupy, self.comm, self.stream, self.world, self.rank, dims)
        inputs, outputs, expected, _ = self.buffers(dims)
        with self.stream:
            self.ref_module.fill_inputs(self.cupy, inputs, dims, self.world, self.rank, int(self.plan["nonce"]))
        reference = self.ref_module.Reference(env)
        record: dict[str, Any] = {"shape": shape["name"], "dims": dims}
        record["reference_ms"] = self.time(lambda: reference.run(inputs, outputs), "the reference", 120.0)
        for name, part in reference.parts(inputs, outputs).items():
            record[f"{name}_ms"] = self.time(part, name, 120.0)
        self.report_reference(reference)
        if hasattr(reference, "comm_bytes"):
            record["comm_bytes"] = reference.comm_bytes()
            record["peer_copy_ms"] = self.peer_copy_times(reference.comm_bytes() // max(self.world - 1, 1))
        self.log.emit("baseline", **record)

    def report_reference(self, reference: Any) -> None:
        """What the reference says makes it weaker than it should be (a failed graph capture, a
        fallback to a slower attention), once per message: a weak reference inflates speedups,
        so the result must carry it."""
        for message in getattr(reference, "warnings", None) or []:
            if message not in self.reference_notes:
                self.reference_notes.add(message)
                self.log.emit("reference_warning", message=str(message))

    def peer_copy_times(self, nbytes: int) -> list[float]:
        """Copy-engine ceiling: every rank copies `nbytes` into the next rank's memory at once
        (cudaMemcpyAsync on CUDA-IPC pointers), as an all-gather step would."""
        cp = self.cupy
        rt = cp.cuda.runtime
        if self.world < 2 or nbytes <= 0:
            return []
        recv = rt.malloc(nbytes)
        send = cp.empty(nbytes, dtype=cp.uint8)
        handle = rt.ipcGetMemHandle(recv)
        with self.stream:
            mine = cp.asarray(list(handle), dtype=cp.uint8)
            handles = cp.empty(len(handle) * self.world, dtype=cp.uint8)
        self.comm.allGather(mine.data.ptr, handles.data.ptr, len(handle), self.nccl.NCCL_UINT8, self.stream.ptr)
        self.wait_stream("sharing IPC handles", 60.0)
        host = handles.get().tobytes()
        peer = (self.rank + 1) % self.world
        peer_ptr = rt.ipcOpenMemHandle(host[peer * len(handle):(peer + 1) * len(handle)])
        times = self.time(lambda: rt.memcpyAsync(peer_ptr, send.data.ptr, nbytes, rt.memcpyDeviceToDevice,
                                                 self.stream.ptr), "peer copy", 60.0)
        self.barrier()
        rt.ipcCloseMemHandle(peer_ptr)
        rt.free(recv)
        return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one rank of a cuco evaluation (started by the launcher)")
    parser.add_argument("--plan", required=True, type=Path)
    parser.add_argument("--rank", required=True, type=int)
    args = parser.parse_args(argv)
    plan = json.loads(args.plan.read_text())
    log = EventLog(Path(plan["rundir"]) / f"rank{args.rank}.jsonl", args.rank)
    try:
        return Rank(plan, args.rank).run()
    except CandidateFailed as exc:
        log.emit("error", kind=exc.kind, message=str(exc))
        return EXIT_FAILED
    except abi.AbiError as exc:
        log.emit("error", kind="abi", message=str(exc))
        return EXIT_FAILED
    except Exception as exc:  # a CUDA error surfacing anywhere, or a bug of ours: report both
        kind = "cuda" if "CUDARuntimeError" in type(exc).__name__ or "cuda" in type(exc).__module__ else "harness"
        log.emit("error", kind=kind, message=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
        return EXIT_FAILED


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # os._exit: a rank whose kernel faulted must not hang in CUDA's exit handlers.
    os._exit(code)
