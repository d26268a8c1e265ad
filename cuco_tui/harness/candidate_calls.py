"""The candidate's lifecycle in a rank, through ctypes (abi.py): its context, then cuco_init,
cuco_launch and cuco_teardown, each checked for its return code and for CUDA errors."""

from __future__ import annotations

import ctypes

from cuco_tui.harness import abi
from cuco_tui.harness.rank_group import RankGroup


class CandidateFailed(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class CandidateCalls:
    """The calls into one rank's candidate library (None in baseline runs, which make none)."""

    def __init__(self, group: RankGroup, library: abi.CandidateLibrary | None) -> None:
        self.group = group
        self.library = library
        self.contexts: list[abi.CContext] = []  # kept alive until teardown

    def context(self, dims: dict[str, int], inputs: dict, outputs: dict, dtypes: dict[str, str]) -> abi.CContext:
        g = self.group
        ctx = abi.CContext()
        ctx.abi_version = abi.ABI_VERSION
        ctx.rank, ctx.world, ctx.device = g.rank, g.world, g.device
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
        ctx.nccl_id[:] = list(g.fresh_nccl_id())
        ctx.trace = g.trace.device_ptr or None
        ctx.trace_slots = g.trace.slots
        self.contexts.append(ctx)
        return ctx

    def check_cuda(self, what: str) -> None:
        try:
            self.group.stream.synchronize()
        except self.group.cupy.cuda.runtime.CUDARuntimeError as exc:
            raise CandidateFailed("cuda", f"{what}: {exc}") from exc

    def init(self, ctx: abi.CContext) -> ctypes.c_void_p:
        watchdog = self.group.watchdog
        watchdog.arm(self.group.plan.limits.init_timeout_s, "cuco_init")
        rc, state = self.library.init(ctx)
        watchdog.disarm()
        if rc != 0:
            raise CandidateFailed("init", f"cuco_init returned {rc}: {ctx.error.decode(errors='replace') or 'no message'}")
        self.check_cuda("after cuco_init")
        return state

    def launch(self, ctx: abi.CContext, state: ctypes.c_void_p) -> None:
        rc = self.library.launch(state, self.group.stream.ptr)
        if rc != 0:
            raise CandidateFailed("launch", f"cuco_launch returned {rc}: {ctx.error.decode(errors='replace') or 'no message'}")

    def teardown(self, state: ctypes.c_void_p, ctx: abi.CContext) -> None:
        watchdog = self.group.watchdog
        watchdog.arm(60.0, "cuco_teardown")
        rc = self.library.teardown(state)
        watchdog.disarm()
        if rc != 0:
            raise CandidateFailed("teardown", f"cuco_teardown returned {rc}: {ctx.error.decode(errors='replace')}")
        self.check_cuda("after cuco_teardown")
