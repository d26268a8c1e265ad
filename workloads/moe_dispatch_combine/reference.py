"""Reference for moe_dispatch_combine: the strongest plain host-driven version, in the style of
Megatron-LM's all-to-all token dispatcher, written as a careful engineer would write it in C
(the seed is that) but driven from Python: nothing is allocated, no host sync but the one the
counts need, and no Python loop of launches on the timed path. On each rank:

  dispatch  a stable counting sort of the T*8 (token, expert) pairs by expert (three small
            kernels: counts per block, one scan, slots handed out in pair order) and one row copy
            into the send buffer, whose segment p holds the rows for rank p's experts, by expert;
            the per-expert counts exchanged (NCCL send/recv of E/W int32 to every rank, one
            group), copied into pinned host memory and read there (the one host sync: NCCL and
            cuBLAS need sizes on the host; the plan built from them is cached by their bytes);
            the rows moved (NCCL send/recv to every rank, one group) and regrouped by local expert
            (one kernel for the segment starts, one row copy);
  experts   per projection ([n_e, H] @ [H, 2I], gate and up together; then [n_e, I] @ [I, H]; bf16
            in and out, fp32 accumulation) over every local expert: by default (gemm="cutlass" where
            the harness loaded the prebuilt grouped GEMM, cuco_grouped_gemm_lib.h, 128x256 tiles)
            one CUTLASS ptr-array grouped launch per projection, its sizes and pointers written on
            the device by one small kernel from the counts; 1.02-1.33x faster than cuBLAS's best way
            on rank 0's expert phase at the bench shapes (1 x H100, benchmarks/moe_grouped.py).
            Without the library (with a warning: speedups against it overstate) or with
            gemm="auto", whichever cuBLAS way is faster for the plan's rows: one cublasGemmEx per
            expert when the experts average at least PER_EXPERT_MIN_ROWS rows, else one cuBLAS
            grouped GEMM (cublasGemmGroupedBatchedEx, one problem per expert; the pointer arrays it
            reads on the device written by one small kernel from the counts). One silu(gate) * up
            kernel over all rows between the projections. Launched as one CUDA graph, captured the
            second time a routing is seen and replayed after (eager when capture fails, with a
            warning). `gemm="auto"`, `"grouped"` or `"per_expert"` (or CUCO_MOE_REF_GEMM) forces a
            cuBLAS way, for comparison;
  combine   the results put back in arrival order (one row copy), sent back (one group), and
            each token's 8 results summed with its router weights (one kernel).

Per iteration: 8 kernel launches, 3 NCCL groups, 1 device-to-host copy, 1 host sync, and the
expert phase (one graph launch; eager, 4 launches grouped or 2 * (experts with rows) + 1 per expert;
auto is one or the other for a given routing).

`expected` (the float64 CPU answer the tests check everything against), `simulate` (this pipeline
in NumPy) and the routing generator live in reference_cpu.py beside this file; this module exports
them, so the harness and the tests see one module.

Buffers per rank: inputs "x" [T, H] bf16, "topk_idx" [T, 8] int32, "topk_w" [T, 8] float32,
"w13" [E/W, H, 2I] bf16 (gate | up), "w2" [E/W, I, H] bf16; output "out" [T, H] bf16."""

from __future__ import annotations

import ctypes
import importlib.util
import os
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable

import numpy as np


def _sibling(name: str) -> Any:
    """A module beside this file: the harness loads this one by its path, not from a package."""
    path = Path(__file__).with_name(name)
    spec = importlib.util.spec_from_file_location(f"{__name__}_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_cpu = _sibling("reference_cpu.py")
TOPK, MAX_EXPERTS = _cpu.TOPK, _cpu.MAX_EXPERTS
check_dims, local_experts, capacity, io_spec = _cpu.check_dims, _cpu.local_experts, _cpu.capacity, _cpu.io_spec
flops, comm_bytes = _cpu.flops, _cpu.comm_bytes
zipf_exponent, popularity, routing = _cpu.zipf_exponent, _cpu.popularity, _cpu.routing
token_inputs, fill_inputs, expected, _silu = _cpu.token_inputs, _cpu.fill_inputs, _cpu.expected, _cpu._silu
dispatch_order, Layout, simulate = _cpu.dispatch_order, _cpu.Layout, _cpu.simulate

CUDA_R_16BF = 14
CUBLAS_COMPUTE_32F = 68
CUBLAS_GEMM_DEFAULT = -1
CUBLAS_OP_N = 0
GEMM_MODES = ("cutlass", "auto", "grouped", "per_expert")
# The prebuilt grouped GEMM's configuration the reference calls (toolchain/grouped_gemm_lib.py's
# REFERENCE_CONFIG, preloaded by the harness for a manifest with libraries = ["grouped_gemm"]).
CUTLASS_ENTRY = "cuco_grouped_gemm_128x256_1x1"
# auto's rule: one cublasGemmEx per expert when a projection's experts average at least this many
# rows, else the grouped GEMM. Measured on one H100 with cuBLAS 13.1 (benchmarks/moe_grouped.py,
# rank 0's expert phase at W=2, graphs on; docs/performance.md, 2026-11-24, sixth session):
# per-expert GEMMs took 0.44x the grouped call's time at prefill-4k (960-1075 rows an expert) and
# prefill-4k-hot (391-2944), 0.51x at prefill-4k-e256 (226-293), but 1.05x at decode-1k-e256-hot
# (17-619 rows, 65 on average): cuBLAS's grouped kernels are far below its per-GEMM ones on Hopper
# once an expert has hundreds of rows, and only win (slightly) with tens. 128 lies between the
# decode mean (65) and the smallest prefill mean (255), with room on both sides.
PER_EXPERT_MIN_ROWS = 128


# ---------------------------------------------------------------------------- the GPU reference: kernels

ROUTE_PAIRS = 256  # (token, choice) pairs per block of route_count and route_place, at least
ROUTE_MAX_BLOCKS = 256  # route_scan scans experts x blocks counters in one block
ROUTE_THREADS = 256  # route_count
SCAN_THREADS = 1024  # route_scan: its block-wide scan assumes exactly 32 warps
PLACE_THREADS = 128  # route_place
COPY_THREADS = 128  # row copies (16 bytes a thread and load) and weighted_combine

# The kernels live beside this file (CuPy compiles them with NVRTC when the Reference is built).
_KERNELS = Path(__file__).with_name("reference_kernels.cu").read_text()


def route_grid(pairs: int) -> tuple[int, int]:
    """Blocks and pairs per block (chunk) of route_count and route_place: the pairs split evenly
    over blocks of at most ROUTE_PAIRS, but no more than ROUTE_MAX_BLOCKS blocks (route_scan's one
    block scans experts x blocks counters); blocks * chunk covers every pair, no block is empty."""
    blocks = max(1, min(ROUTE_MAX_BLOCKS, -(-pairs // ROUTE_PAIRS)))
    return blocks, max(1, -(-pairs // blocks))


# ---------------------------------------------------------------------------- the GPU reference: host plans


class LRU:
    """A dict of at most `capacity` entries that drops the least recently used one."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.items: OrderedDict[Any, Any] = OrderedDict()

    def get(self, key: Any, make: Callable[[], Any]) -> Any:
        item = self.items.get(key)
        if item is None:
            item = self.items[key] = make()
            while len(self.items) > self.capacity:
                self.items.popitem(last=False)
        else:
            self.items.move_to_end(key)
        return item


class Plan:
    """What the host needs of one iteration once it holds the counts: the layout, and the NCCL
    and GEMM arguments as plain ints. Cached by the counts' bytes (`key`): the routing is an
    input, so a benchmark repeats one routing and only its first repetition builds a plan."""

    def __init__(self, key: bytes, layout: Layout) -> None:
        self.key = key
        self.layout = layout
        self.rows = layout.rows
        # (offset, rows) per rank, in rows: the send layout's segments and the arrival layout's.
        self.send_parts = [(int(o), int(n)) for o, n in zip(layout.send_off[:-1], layout.send_n)]
        self.recv_parts = [(int(o), int(n)) for o, n in zip(layout.recv_off[:-1], layout.recv_n)]
        # (local expert, first row, rows) of the experts that received rows: one GEMM pair each.
        self.experts = [(e, int(o), int(n)) for e, (o, n) in enumerate(zip(layout.expert_off[:-1], layout.expert_n))
                        if n]
        # The two grouped GEMMs' host arrays (gate/up, down), made by the Reference that uses them.
        self.grouped: tuple[GroupedCall, GroupedCall] | None = None
        # auto's way of running each projection: both see the same experts and rows, so one choice.
        way = auto_gemm([n for _, _, n in self.experts])
        self.auto: tuple[str, str] = (way, way)


def auto_gemm(rows: list[int]) -> str:
    """How auto runs one projection over experts with `rows` rows each (all > 0): "per_expert"
    when they average at least PER_EXPERT_MIN_ROWS rows, else "grouped" (see PER_EXPERT_MIN_ROWS)."""
    return "per_expert" if rows and sum(rows) >= PER_EXPERT_MIN_ROWS * len(rows) else "grouped"


def plan_from_counts(host_counts: np.ndarray, world: int) -> Plan:
    """host_counts: int32 [2E], the rows this rank sends per global expert, then the rows it
    receives per (source rank, local expert), as the counts exchange leaves them."""
    experts = len(host_counts) // 2
    counts = np.array(host_counts[:experts])
    recv_counts = np.array(host_counts[experts:]).reshape(world, experts // world)
    return Plan(np.ascontiguousarray(host_counts).tobytes(), Layout(counts, recv_counts))


# ---------------------------------------------------------------------------- the GPU reference: CUDA graphs


def launch_mode(enabled: bool, earlier_runs: int, captured: bool) -> str:
    """How to launch a rank-local sequence for one key: 'eager' the first time (it also warms
    cuBLAS's heuristics and workspace outside a capture, and a routing seen once, as in
    verification, never pays for a capture), 'capture' the second time, 'replay' after."""
    if not enabled:
        return "eager"
    if captured:
        return "replay"
    return "capture" if earlier_runs >= 1 else "eager"


class GraphSlot:
    def __init__(self) -> None:
        self.runs = 0
        self.graph: Any = None
        # What was captured, kept as long as its graph: the plan whose host arrays cuBLAS read.
        self.launches: Callable[[], None] | None = None


class GraphCache:
    """CUDA graphs of a launch sequence, one per key, the most recent `capacity` of them.
    `capture(launches)` records `launches` into a graph without running them (and raises if it
    cannot); `replay(graph)` launches one. A failed capture turns graphs off for good: the
    sequence then runs eagerly, and `warnings` says why."""

    def __init__(self, capture: Callable[[Callable[[], None]], Any], replay: Callable[[Any], None], enabled: bool,
                 capacity: int = 4) -> None:
        self.capture = capture
        self.replay = replay
        self.enabled = enabled
        self.slots = LRU(capacity)
        self.warnings: list[str] = []

    def run(self, key: Any, launches: Callable[[], None], what: str) -> str:
        """Runs `launches` once, one way or the other; returns the way ('eager', 'capture', 'replay')."""
        slot = self.slots.get(key, GraphSlot)
        mode = launch_mode(self.enabled, slot.runs, slot.graph is not None)
        slot.runs += 1
        if mode == "capture":
            try:
                slot.graph = self.capture(launches)
                slot.launches = launches
            except Exception as exc:  # any failure: run eagerly from now on, never crash the run
                self.disable(f"CUDA graph capture of {what} failed ({type(exc).__name__}: {exc}); "
                             f"running {what} eagerly from now on")
                mode = "eager"
        if mode == "eager":
            launches()
        else:
            self.replay(slot.graph)
        return mode

    def disable(self, why: str) -> None:
        self.enabled = False
        self.slots = LRU(self.slots.capacity)
        self.warnings.append(why)
        warnings.warn(why, RuntimeWarning, stacklevel=3)


def graphs_wanted() -> bool:
    """CUDA graphs for the expert GEMMs unless CUCO_MOE_REF_GRAPHS=0 (to time the eager path)."""
    return os.environ.get("CUCO_MOE_REF_GRAPHS", "1") != "0"


def gemm_wanted() -> str | None:
    """The expert phase's GEMMs as CUCO_MOE_REF_GEMM names them, or None (unset: the fastest way
    this process has, see Reference)."""
    mode = os.environ.get("CUCO_MOE_REF_GEMM") or None
    if mode is not None and mode not in GEMM_MODES:
        raise ValueError(f"CUCO_MOE_REF_GEMM={mode!r}: use one of {', '.join(GEMM_MODES)}")
    return mode


# ---------------------------------------------------------------------------- the GPU reference


def raw_cublas() -> ctypes.CDLL:
    """The process's libcublas through ctypes. CuPy's cuBLAS bindings refuse to run while a stream
    captures (NotImplementedError) though cuBLAS itself supports graph capture, and have no grouped
    GEMM, so the expert GEMMs call cublasGemmGroupedBatchedEx (cuBLAS 12.5 and later; the
    signature of cublas_api.h in nvidia-cublas 13) and cublasGemmEx directly. The library CuPy
    loaded is found by its soname, or else by its path in /proc/self/maps."""
    try:
        lib = ctypes.CDLL("libcublas.so.13")
    except OSError:
        with open("/proc/self/maps") as maps:
            paths = [line.split()[-1] for line in maps if "libcublas.so" in line and "libcublasLt" not in line]
        if not paths:
            raise
        lib = ctypes.CDLL(paths[0])
    vp, i32 = ctypes.c_void_p, ctypes.c_int
    lib.cublasGemmEx.argtypes = [vp, i32, i32, i32, i32, i32, vp, vp, i32, i32, vp, i32, i32, vp, vp, i32, i32,
                                 i32, i32]
    lib.cublasGemmEx.restype = i32
    lib.cublasSetStream_v2.argtypes = [vp, vp]
    lib.cublasSetStream_v2.restype = i32
    if hasattr(lib, "cublasGemmGroupedBatchedEx"):
        # handle; transa[], transb[], m[], n[], k[], alpha[] (host); Aarray (device), Atype, lda[];
        # Barray, Btype, ldb[]; beta[]; Carray, Ctype, ldc[]; group_count, group_size[]; computeType
        lib.cublasGemmGroupedBatchedEx.argtypes = [vp, vp, vp, vp, vp, vp, vp, vp, i32, vp, vp, i32, vp, vp, vp, i32,
                                                   vp, i32, vp, i32]
        lib.cublasGemmGroupedBatchedEx.restype = i32
    return lib


class GroupedUnsupported(RuntimeError):
    """cuBLAS refused a grouped GEMM (an old library or an unsupported GPU)."""


def _check_cublas(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"{what} returned cuBLAS status {status}")


class GroupedCall:
    """The host-side arrays of one cublasGemmGroupedBatchedEx over a plan's experts: problem j
    (a group of one: the row counts differ) is row-major out[n_j, m] = rows[n_j, k] @ W_j[k, m],
    which cuBLAS sees column-major as out^T = W_j^T rows^T. cuBLAS reads these at the call (and
    a capture bakes them into the graph); they live as long as the plan."""

    def __init__(self, m: int, k: int, rows: np.ndarray) -> None:
        g = len(rows)
        self.count = g
        self.ops = np.full(g, CUBLAS_OP_N, dtype=np.int32)
        self.m = np.full(g, m, dtype=np.int32)
        self.n = np.ascontiguousarray(rows, dtype=np.int32)
        self.k = np.full(g, k, dtype=np.int32)
        self.sizes = np.ones(g, dtype=np.int32)
        self.alpha = np.ones(g, dtype=np.float32)
        self.beta = np.zeros(g, dtype=np.float32)

    def call(self, lib: Any, handle: int, a: int, b: int, c: int) -> int:
        """The grouped GEMM on device pointer arrays a (weights), b (rows in), c (rows out)."""
        p = lambda v: v.ctypes.data  # noqa: E731 (lda = m, ldb = k, ldc = m)
        return lib.cublasGemmGroupedBatchedEx(
            handle, p(self.ops), p(self.ops), p(self.m), p(self.n), p(self.k), p(self.alpha),
            a, CUDA_R_16BF, p(self.m), b, CUDA_R_16BF, p(self.k), p(self.beta), c, CUDA_R_16BF, p(self.m),
            self.count, p(self.sizes), CUBLAS_COMPUTE_32F)


class Reference:
    """Host-driven dispatch, expert GEMMs and combine on the harness's NCCL communicator and
    CuPy's cuBLAS handle, all on env.stream, with one host sync (for the counts) an iteration.
    Every buffer is allocated here, once per shape; an iteration allocates nothing.
    `gemm`: "cutlass" (the prebuilt grouped GEMM, one launch per projection; the library must be
    loaded), "auto" (per plan, per-expert cuBLAS GEMMs for many rows an expert, else cuBLAS's
    grouped GEMM: auto_gemm), "grouped" (one cuBLAS grouped GEMM per projection) or "per_expert"
    (two cuBLAS GEMMs per expert); None reads CUCO_MOE_REF_GEMM, and when it is unset takes
    cutlass where the library is loaded, else auto with a warning. Where libcublas has no grouped
    GEMM, auto and grouped become per_expert with a warning."""

    def __init__(self, env: Any, graphs: bool | None = None, cublas: Any = None, gemm: str | None = None) -> None:
        import cupy
        import cupyx

        self.env = env
        self.cupy = cupy
        d = env.dims
        check_dims(d, env.world)
        self.T, self.H, self.E, self.I = d["T"], d["H"], d["E"], d["I"]
        self.el = local_experts(d, env.world)
        self.pairs = self.T * TOPK
        self.route_blocks, self.route_chunk = route_grid(self.pairs)
        rows = env.world * capacity(d, env.world)  # the most rows this rank can receive
        u16 = cupy.uint16
        with env.stream:
            self.send = cupy.empty((self.pairs, self.H), dtype=u16)  # send layout
            self.comb = cupy.empty((self.pairs, self.H), dtype=u16)  # results, in send layout
            self.recv = cupy.empty((rows, self.H), dtype=u16)  # arrival layout (rows, then results)
            self.xe = cupy.empty((rows, self.H), dtype=u16)  # expert layout
            self.h13 = cupy.empty((rows, 2 * self.I), dtype=u16)
            self.h = cupy.empty((rows, self.I), dtype=u16)
            self.y = cupy.empty((rows, self.H), dtype=u16)
            self.pos = cupy.empty(self.pairs, dtype=cupy.int32)  # send slot of each (token, choice)
            self.hist = cupy.empty(self.E * self.route_blocks, dtype=cupy.int32)
            # [0, E): rows this rank sends per global expert; [E, 2E): rows it receives per
            # (source rank, local expert). Side by side: one copy to the host.
            self.counts = cupy.empty(2 * self.E, dtype=cupy.int32)
            self.segments = cupy.empty(2 * self.E + 1, dtype=cupy.int64)
            self.gemm_ptrs = cupy.empty(6 * self.el, dtype=cupy.int64)  # see grouped_pointers
        # Views made once (a view costs host time too): the received counts, and the segments'
        # starts in the arrival layout [E + 1] and in the expert layout [E].
        self.recv_counts = self.counts[self.E:]
        self.arrival_starts, self.expert_starts = self.segments[:self.E + 1], self.segments[self.E + 1:]
        self.host_counts = cupyx.empty_pinned(2 * self.E, dtype=np.int32)  # pinned: an async copy
        module = cupy.RawModule(code=_KERNELS)
        for name in ("route_count", "route_scan", "route_place", "permute_rows", "segment_offsets", "regroup_rows",
                     "silu_mul", "weighted_combine", "grouped_pointers", "cutlass_problems"):
            setattr(self, name, module.get_function(name))
        self.handle = cupy.cuda.device.get_cublas_handle()
        self.lib = cublas if cublas is not None else raw_cublas()  # tests pass a fake
        self.alpha = np.ones(1, dtype=np.float32)
        self.beta = np.zeros(1, dtype=np.float32)
        self.alpha_ptr, self.beta_ptr = self.alpha.ctypes.data, self.beta.ctypes.data
        self.i32 = {k: np.int32(v) for k, v in (("pairs", self.pairs), ("chunk", self.route_chunk), ("E", self.E),
                                                  ("blocks", self.route_blocks), ("vecs", self.H // 8),
                                                  ("world", env.world), ("local", self.el), ("half", self.I // 2))}
        wanted = gemm_wanted() if gemm is None else gemm
        if wanted is not None and wanted not in GEMM_MODES:
            raise ValueError(f"gemm={wanted!r}: use one of {', '.join(GEMM_MODES)}")
        self.gemm_warnings: list[str] = []
        self.cutlass = None
        if wanted in (None, "cutlass"):
            why = self._cutlass_init(cupy)
            if not why:
                wanted = "cutlass"
            elif wanted == "cutlass":
                raise RuntimeError(f"gemm=cutlass, but {why}")
            else:
                wanted = "auto"
                message = (f"{why}: the expert phase runs cuBLAS, 1.02-1.33x slower on the bench shapes, so speedups "
                           "against this reference overstate (`cuco doctor` says what the library needs)")
                self.gemm_warnings.append(message)
                warnings.warn(message, RuntimeWarning, stacklevel=2)
        self.gemm = wanted
        if self.gemm in ("auto", "grouped") and not hasattr(self.lib, "cublasGemmGroupedBatchedEx"):
            self._per_expert_from_now("this libcublas has no cublasGemmGroupedBatchedEx (cuBLAS 12.5 or later)")
        self.plans = LRU(16)
        self.graphs = GraphCache(self._capture, lambda g: g.launch(stream=env.stream),
                                 graphs_wanted() if graphs is None else graphs)
        self.plan: Plan | None = None

    def _cutlass_init(self, cupy: Any) -> str:
        """The grouped GEMM (its workspace for every local expert, released with this Reference)
        and its two launches' arrays, fixed for this Reference: cutlass_problems rewrites their
        contents from the counts on the device, so one set of kernel parameters serves every
        routing, captured graphs included. "" when ready, else why not."""
        import weakref

        from cuco_tui.harness import grouped_gemm as harness_grouped

        if self.H % 8 or self.I % 8:  # 16-byte TMA rows; with sizes on the device CUTLASS checks nothing
            return f"the prebuilt grouped GEMM needs H and I multiples of 8 (H={self.H}, I={self.I})"
        api = harness_grouped.loaded(CUTLASS_ENTRY)
        if api is None:
            return "the prebuilt grouped GEMM library (cuco_grouped_gemm_lib.h, 128x256 tiles) is not loaded"
        el = self.el
        try:
            self.cutlass = harness_grouped.GroupedGemm.create(api, el, device=cupy.cuda.Device().id)
        except harness_grouped.GroupedGemmError as exc:
            return f"the prebuilt grouped GEMM library refused this GPU ({exc})"
        weakref.finalize(self, self.cutlass.release)
        with self.env.stream:
            self.cg_shapes = cupy.empty(2 * el * 3, dtype=cupy.int32)  # all written by cutlass_problems
            self.cg_strides = cupy.empty(2 * 3 * el, dtype=cupy.int64)
            self.cg_ptrs = cupy.empty(2 * 3 * el, dtype=cupy.int64)
        self.cg_problems = []
        for q in range(2):
            strides, ptrs = self.cg_strides.data.ptr + q * 3 * el * 8, self.cg_ptrs.data.ptr + q * 3 * el * 8
            self.cg_problems.append(harness_grouped.Problems(
                el, 0, self.cg_shapes.data.ptr + q * el * 3 * 4, strides, ptrs, ptrs + el * 8, ptrs + 2 * el * 8, None))
        return ""

    @property
    def layout(self) -> Layout | None:
        return self.plan.layout if self.plan else None

    @property
    def warnings(self) -> list[str]:
        """Why this reference runs slower than it could (a failed graph capture, no grouped GEMM),
        for the log."""
        return self.gemm_warnings + self.graphs.warnings

    def _cublas_from_now(self, why: str) -> None:
        self.gemm = "auto"
        message = f"the expert phase runs cuBLAS (auto): {why}"
        self.gemm_warnings.append(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)
        if not hasattr(self.lib, "cublasGemmGroupedBatchedEx"):
            self._per_expert_from_now("this libcublas has no cublasGemmGroupedBatchedEx (cuBLAS 12.5 or later)")

    def _per_expert_from_now(self, why: str) -> None:
        self.gemm = "per_expert"
        message = f"the expert phase runs two cublasGemmEx per expert: {why}"
        self.gemm_warnings.append(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)

    # -- the three parts

    def dispatch(self, inputs: dict[str, Any]) -> None:
        env = self.env
        self._route(inputs)
        self._exchange_counts()
        key = self.host_counts.tobytes()
        plan = self.plan = self.plans.get(key, lambda: plan_from_counts(self.host_counts, env.world))
        self._all_to_all(self.send, plan.send_parts, self.recv, plan.recv_parts)
        if plan.rows:
            a = self.i32
            with env.stream:
                self.segment_offsets((1,), (32,), (self.recv_counts, a["world"], a["local"], self.arrival_starts,
                                                   self.expert_starts))
                self._regroup(plan, self.xe, self.recv, to_expert=True)

    def experts(self, inputs: dict[str, Any]) -> None:
        if self.plan is None:
            self.dispatch(inputs)
        plan = self.plan
        if not plan.rows:
            return
        w13, w2 = inputs["w13"].data.ptr, inputs["w2"].data.ptr
        # Outside any capture: the GEMMs then launch on (and are captured from) env.stream.
        _check_cublas(self.lib.cublasSetStream_v2(self.handle, self.env.stream.ptr), "cublasSetStream")
        # One graph launch instead of 4 (or 2 * E/W + 1) from Python: the shapes, and auto's way of
        # running them, depend on the counts only (the plan), so a routing seen again replays them.
        self.graphs.run((plan.key, w13, w2), lambda: self._expert_launches(plan, w13, w2), "the expert GEMMs")

    def combine(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        if self.plan is None:
            self.experts(inputs)
        env, plan = self.env, self.plan
        if plan.rows:
            with env.stream:
                self._regroup(plan, self.recv, self.y, to_expert=False)
        self._all_to_all(self.recv, plan.recv_parts, self.comb, plan.send_parts)
        with env.stream:
            self.weighted_combine((self.T,), (COPY_THREADS,), (self.comb, self.pos, inputs["topk_w"], outputs["out"],
                                                               self.i32["vecs"]))

    # -- the steps

    def _route(self, inputs: dict[str, Any]) -> None:
        """Counts per expert and send slots (the stable counting sort), then the rows into the
        send layout: four launches, no host work."""
        a, B = self.i32, self.route_blocks
        idx = inputs["topk_idx"]
        with self.env.stream:
            self.route_count((B,), (ROUTE_THREADS,), (idx, a["pairs"], a["chunk"], a["E"], self.hist))
            self.route_scan((1,), (SCAN_THREADS,), (self.hist, a["blocks"], a["E"], self.counts))
            self.route_place((B,), (PLACE_THREADS,), (idx, a["pairs"], a["chunk"], a["E"], self.hist, self.pos))
            self.permute_rows((self.pairs,), (COPY_THREADS,), (inputs["x"], self.pos, self.send, a["vecs"]))

    def _exchange_counts(self) -> None:
        """Every rank learns the rows it receives per (source, local expert), and the host reads
        both count vectors: NCCL and cuBLAS take sizes from the host. The iteration's one sync."""
        from cupy.cuda import nccl

        env, el, cp = self.env, self.el, self.cupy
        base, sp = self.counts.data.ptr, env.stream.ptr
        nccl.groupStart()
        for p in range(env.world):
            env.comm.send(base + p * el * 4, el, nccl.NCCL_INT32, p, sp)
            env.comm.recv(base + (self.E + p * el) * 4, el, nccl.NCCL_INT32, p, sp)
        nccl.groupEnd()
        cp.cuda.runtime.memcpyAsync(self.host_counts.ctypes.data, base, self.host_counts.nbytes,
                                    cp.cuda.runtime.memcpyDeviceToHost, sp)
        env.stream.synchronize()

    def _all_to_all(self, src: Any, src_parts: list[tuple[int, int]], dst: Any,
                    dst_parts: list[tuple[int, int]]) -> None:
        """One NCCL group: part p of src (offset, rows) to rank p, part p of dst from rank p. Empty
        parts are skipped (the peer skips the matching call: it knows the same counts)."""
        from cupy.cuda import nccl

        env, H, row = self.env, self.H, self.H * 2
        s, d, sp = src.data.ptr, dst.data.ptr, env.stream.ptr
        nccl.groupStart()
        for p in range(env.world):
            off, n = src_parts[p]
            if n:
                env.comm.send(s + off * row, n * H, nccl.NCCL_BFLOAT16, p, sp)
            off, n = dst_parts[p]
            if n:
                env.comm.recv(d + off * row, n * H, nccl.NCCL_BFLOAT16, p, sp)
        nccl.groupEnd()

    def _regroup(self, plan: Plan, dst: Any, src: Any, to_expert: bool) -> None:
        """Rows between the arrival layout and the expert layout (the caller holds env.stream)."""
        self.regroup_rows((plan.rows,), (COPY_THREADS,), (dst, src, self.arrival_starts, self.expert_starts,
                                                          self.i32["E"], self.i32["vecs"], np.int32(to_expert)))

    def ways(self, plan: Plan) -> tuple[str, str]:
        """How the expert phase runs the plan's two projections (gate/up, down) in this mode:
        each "cutlass" (the prebuilt grouped GEMM), "grouped" (one cuBLAS grouped GEMM) or
        "per_expert" (one cuBLAS GEMM per expert with rows)."""
        return plan.auto if self.gemm == "auto" else (self.gemm, self.gemm)

    def _expert_launches(self, plan: Plan, w13: int, w2: int) -> None:
        """The projections in this mode; where a grouped way fails, the next way down from then on
        (cutlass -> cuBLAS auto -> per expert, which has nothing to fail over to), said in a warning."""
        from cuco_tui.harness.grouped_gemm import GroupedGemmError

        while True:
            try:
                self._projections(plan, w13, w2, self.ways(plan))
                return
            except (GroupedGemmError, GroupedUnsupported) as exc:
                if self.env.stream.is_capturing():
                    raise  # the capture fails; the graph cache runs this again eagerly
                if isinstance(exc, GroupedGemmError):
                    self._cublas_from_now(f"the prebuilt grouped GEMM failed: {exc}")
                else:
                    self._per_expert_from_now(str(exc))

    def _projections(self, plan: Plan, w13: int, w2: int, ways: tuple[str, str]) -> None:
        """Gate/up [n_e, H] @ [H, 2I] over the experts with rows, silu * up over all rows (one
        kernel), down [n_e, I] @ [I, H]; a projection is one grouped GEMM or one GEMM per expert
        (`ways`), and the pointer arrays of the grouped ones come from the counts (one kernel
        before them). Grouped: 4 launches; per expert: 2 * (experts with rows) + 1."""
        if "grouped" in ways and plan.grouped is None:
            rows = np.array([n for _, _, n in plan.experts], dtype=np.int32)
            plan.grouped = (GroupedCall(2 * self.I, self.H, rows), GroupedCall(self.H, self.I, rows))
        with self.env.stream:
            if "cutlass" in ways:
                a, i64 = self.i32, np.int64
                self.cutlass_problems((1,), (1024,), (
                    self.recv_counts, a["world"], a["local"], i64(w13), i64(w2), i64(self.xe.data.ptr),
                    i64(self.h13.data.ptr), i64(self.h.data.ptr), i64(self.y.data.ptr), i64(self.H), i64(self.I),
                    self.cg_shapes, self.cg_strides, self.cg_ptrs))
            if "grouped" in ways:
                a, i64 = self.i32, np.int64
                self.grouped_pointers((1,), (1024,), (
                    self.recv_counts, a["world"], a["local"], i64(w13), i64(w2), i64(self.xe.data.ptr),
                    i64(self.h13.data.ptr), i64(self.h.data.ptr), i64(self.y.data.ptr), i64(self.H), i64(self.I),
                    self.gemm_ptrs))
            self._projection(plan, 0, ways[0], w13)
            self._silu(plan)
            self._projection(plan, 1, ways[1], w2)

    def _projection(self, plan: Plan, j: int, way: str, weights: int) -> None:
        """Projection j (0: gate/up from xe into h13, 1: down from h into y), row-major
        out[n_e, m] = rows[n_e, k] @ W_e[k, m] per expert, which cuBLAS sees column-major as
        out^T = W_e^T rows^T; grouped_pointers wrote its pointer arrays at 3j, 3j + 1, 3j + 2."""
        m, k = (2 * self.I, self.H) if j == 0 else (self.H, self.I)
        if way == "cutlass":
            self.cutlass.launch(self.cg_problems[j], self.env.stream.ptr)
            return
        if way == "grouped":
            step = self.el * 8
            ptrs = self.gemm_ptrs.data.ptr + 3 * j * step
            status = plan.grouped[j].call(self.lib, self.handle, ptrs, ptrs + step, ptrs + 2 * step)
            if status != 0:
                raise GroupedUnsupported(f"cublasGemmGroupedBatchedEx returned cuBLAS status {status}")
            return
        src, dst = (self.xe, self.h13) if j == 0 else (self.h, self.y)
        a, b = src.data.ptr, dst.data.ptr
        for e, r0, n in plan.experts:
            self._gemm(m, n, k, weights + e * k * m * 2, a + r0 * k * 2, b + r0 * m * 2)

    def _silu(self, plan: Plan) -> None:
        blocks = min(4096, (plan.rows * self.I // 2 + 255) // 256)
        self.silu_mul((blocks,), (256,), (self.h13, self.h, np.int64(plan.rows), self.i32["half"]))

    def _gemm(self, m: int, n: int, k: int, a: int, b: int, c: int) -> None:
        """Column-major C[m, n] = A[m, k] B[k, n] on device pointers (bf16, fp32 accumulation), on
        the stream `experts` bound the handle to."""
        _check_cublas(self.lib.cublasGemmEx(
            self.handle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k,
            self.alpha_ptr, a, CUDA_R_16BF, m, b, CUDA_R_16BF, k, self.beta_ptr, c, CUDA_R_16BF, m,
            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT,
        ), "cublasGemmEx")

    def _capture(self, launches: Callable[[], None]) -> Any:
        """`launches` recorded into a CUDA graph on env.stream (nothing runs). Only rank-local work
        is captured: NCCL calls stay eager, so a capture that fails on one rank cannot leave the
        ranks' communicator out of step. The stream leaves capture mode whatever happens."""
        stream = self.env.stream
        try:
            with stream:
                stream.begin_capture()
                try:
                    launches()
                finally:
                    graph = stream.end_capture()
            return graph
        except Exception:
            try:
                if stream.is_capturing():
                    stream.end_capture()
            except Exception:
                pass
            raise

    # -- the harness's interface

    def run(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        self.dispatch(inputs)
        self.experts(inputs)
        self.combine(inputs, outputs)

    def parts(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> dict[str, Callable[[], None]]:
        """Each stage alone (experts and combine reuse the last dispatch's plan): their times are
        the ceilings, max(experts, dispatch + combine) being what perfect overlap would take."""
        return {
            "dispatch": lambda: self.dispatch(inputs),
            "experts": lambda: self.experts(inputs),
            "combine": lambda: self.combine(inputs, outputs),
        }

    def comm_bytes(self) -> int:
        """Bytes this rank receives from other ranks in one iteration (dispatch + combine)."""
        if self.plan is None:
            return 0
        return self.plan.layout.received_bytes(self.env.rank, self.H)
