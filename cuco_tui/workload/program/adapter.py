"""The reference of an imported program, as the reference contract asks (docs/workloads.md): the
written reference.py is a few lines that call a ProgramReference made from the folder's
program.json and program.py.

- io_spec: the buffers of layout.py, sized from the shapes `cuco workload import` recorded for
  every shape, world size and rank (make_inputs and solution on the meta device);
- fill_inputs: the program's make_inputs at the workload's dtype, on the CPU (NumPy buffers) or on
  the rank's GPU and stream (CuPy buffers), with torch's generator seeded from the harness's seed
  and the rank, copied into the buffers in the harness's layout;
- expected: the program on the CPU in float64 under gloo, W processes (gloo_run), on the very
  inputs given, read through the program's views of them (layout.to_program), on the ranks it is
  handed (the import's) or on processes of its own;
- Reference (on_rank): the program on the GPU under torch.distributed with NCCL, on the harness's
  stream, its outputs copied into the harness's buffers. The ranks' torch process group is made
  beside the harness's own NCCL group: rank 0 opens a TCPStore on a free port of this host (the
  ranks of an evaluation share one node) and sends the port to the others through the harness's
  communicator; it is made once per process and kept for every shape.

torch is imported only inside these calls; without it they fail with one line saying so."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

from cuco_tui.workload.program.attention_map import ATTENTION_PATTERNS
from cuco_tui.workload.program.inplace import InputGuard
from cuco_tui.workload.program.layout import Layout, harness_shape, to_harness, to_program
from cuco_tui.workload.program.record import RECORD
TORCH_DTYPES = {"bf16": "bfloat16", "f16": "float16", "f32": "float32", "i32": "int32", "i64": "int64", "u8": "uint8"}
FLOATS = ("bf16", "f16", "f32")


def require_torch(program: str = "program.py") -> Any:
    try:
        import torch
    except ImportError:
        raise RuntimeError(f"this workload's reference is the PyTorch program {program}, and torch is not installed "
                           f"in this Python: pip install -e '.[torch]' (a CUDA build of torch on a GPU host)") from None
    return torch


def as_torch(torch: Any, array: Any, dtype: str) -> Any:
    """A torch view of a harness buffer (NumPy or CuPy; bf16 and f16 buffers may hold uint16 bits)."""
    t = torch.from_numpy(array) if type(array).__module__.startswith("numpy") else torch.from_dlpack(array)
    want = getattr(torch, TORCH_DTYPES[dtype])
    return t.view(want) if t.dtype != want else t


class ProgramReference:
    """One imported program's reference contract, read from its folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.record = json.loads((self.folder / RECORD).read_text())
        self.layout = Layout.from_json(self.record["layout"])
        self.program = self.folder / self.record["program"]
        self.dims = tuple(self.record["dims"])
        self.loaded: Any = None  # the program's module, loaded on first use (it imports torch)
        self.cp_module: Any = None  # cp_attention's reference module, for an attention pattern

    # -- shapes -----------------------------------------------------------------------------
    def entry(self, dims: dict[str, int], world: int) -> dict[str, Any]:
        """The recorded sizes of the shape with these dims at this world size."""
        sizes = self.record["sizes"].get(str(world))
        if sizes is None:
            raise ValueError(f"{self.program.name} was sized for world sizes {', '.join(self.record['sizes'])}, "
                             f"not {world}")
        mine = self.program_dims(dims)
        for entry in sizes["shapes"]:
            if entry["dims"] == mine:
                return entry
        raise ValueError(f"{mine} is not a shape `cuco workload import` sized for {self.program.name}; change "
                         f"SHAPES in the program and import it again")

    def program_dims(self, dims: dict[str, int]) -> dict[str, int]:
        """The program's own dims (make_inputs' keywords) from the manifest's, which may rename some."""
        return {d: int(dims[self.layout.manifest_name(d)]) for d in self.dims}

    def io_spec(self, dims: dict[str, int], world: int, rank: int = 0) -> dict[str, list[tuple[str, tuple, str]]]:
        r = self.entry(dims, world)["ranks"][rank]
        return {"inputs": [(b.name, tuple(harness_shape(r["inputs"][b.index][0], b.layout, b.axes)), b.dtype)
                           for b in self.layout.inputs],
                "outputs": [(b.name, tuple(harness_shape(r["outputs"][b.index][0], b.layout, b.axes)), b.dtype)
                            for b in self.layout.outputs]}

    def flops(self, dims: dict[str, int], world: int) -> int:
        if self.layout.pattern in ATTENTION_PATTERNS:
            return int(self.cp_attention().flops(dims, world))
        return int(self.entry(dims, world)["flops"])

    def comm_bytes(self, dims: dict[str, int], world: int) -> int:
        if self.layout.pattern in ATTENTION_PATTERNS:
            return int(self.cp_attention().comm_bytes(dims, world))
        return int(self.entry(dims, world)["comm_bytes"])

    def cp_attention(self) -> Any:
        """cp_attention's reference module, loaded once: an attention pattern's work (its busiest rank's
        FLOPs, the K/V bytes a rank receives) and bound parts are cp_attention's, the function the
        candidates compute, whatever way the program itself exchanges (a Ulysses all-to-all moves
        other bytes)."""
        if self.cp_module is None:
            from cuco_tui.core.reference import reference_module
            from cuco_tui.workload.manifest import REPO_WORKLOADS

            self.cp_module = reference_module(REPO_WORKLOADS / "cp_attention" / "reference.py")
        return self.cp_module

    def _module(self) -> Any:
        if self.loaded is None:
            require_torch(self.program.name)
            from cuco_tui.workload.program.user_module import load_module

            self.loaded = load_module(str(self.program))
        return self.loaded

    # -- inputs -----------------------------------------------------------------------------
    def fill_inputs(self, xp: Any, inputs: dict[str, Any], dims: dict[str, int], world: int, rank: int,
                    seed: int) -> None:
        torch = require_torch(self.program.name)
        module = self._module()
        on_gpu = xp.__name__ == "cupy"
        device = f"cuda:{xp.cuda.runtime.getDevice()}" if on_gpu else "cpu"
        stream = torch.cuda.stream(torch.cuda.ExternalStream(xp.cuda.get_current_stream().ptr)) if on_gpu else None
        dtype = getattr(torch, self.record["dtype"])
        mine = self.program_dims(dims)
        with torch.no_grad(), (stream if stream is not None else _Nothing()):
            torch.manual_seed(seed * 7919 + rank)
            made = module.make_inputs(rank, world, **mine, dtype=dtype, device=device)
            made = (made,) if isinstance(made, torch.Tensor) else tuple(made)
            for b in self.layout.inputs:
                dst = as_torch(torch, inputs[b.name], b.dtype)
                src = to_harness(made[b.index], b) if b.layout != "as_is" else made[b.index].reshape(dst.shape)
                dst.copy_(src)

    # -- the float64 answer -----------------------------------------------------------------
    def expected(self, all_inputs: list[dict[str, Any]], dims: dict[str, int], world: int,
                 ranks: Any = None) -> list[dict[str, Any]]:
        """`ranks`: a gloo_run.GlooRanks of `world` processes to run on (the import's); else ranks of its own."""
        import numpy as np

        from cuco_tui.workload.program.gloo_run import run_gloo, temporary_folder

        entry = self.entry(dims, world)
        with temporary_folder() as tmp:
            folder = Path(tmp)
            for rank, inputs in enumerate(all_inputs):
                for b in self.layout.inputs:  # floating-point inputs in float64; integers stay integers
                    np.save(folder / f"in_0_{rank}_{b.index}.npy", to_float64(inputs[b.name], b.dtype)
                            if b.dtype in FLOATS else np.asarray(inputs[b.name]))
            order = sorted(self.layout.inputs, key=lambda b: b.index)
            # Each rank's own shapes: a program's ranks may hold inputs of different shapes (a scatter's root)
            specs = [[program_spec(b, entry["ranks"][rank]["inputs"][b.index]) for b in order]
                     for rank in range(world)]
            shapes = {entry["shape"]: entry["dims"]}
            if ranks is not None and ranks.world != world:
                raise ValueError(f"expected() at world {world} was handed {ranks.world} ranks")
            run = (ranks.run(self.program, shapes, folder, mode="files", inputs=specs) if ranks is not None
                   else run_gloo(self.program, world, shapes, folder, mode="files", inputs=specs))
            return [{b.name: np.ascontiguousarray(to_harness(
                run.output(0, rank, b.index).reshape(entry["ranks"][rank]["outputs"][b.index][0]), b))
                for b in self.layout.outputs} for rank in range(world)]

    def on_rank(self, env: Any) -> "RankProgram":
        return RankProgram(self, env)


def program_spec(b: Any, sized: list[Any]) -> dict[str, Any]:
    """How the program sees harness buffer `b` (layout.to_program): `sized` is [shape, torch dtype name]
    of the program's input as recorded at import."""
    return {"layout": b.layout, "shape": sized[0], "dtype": sized[1], "axes": list(b.axes)}


def to_float64(array: Any, dtype: str) -> Any:
    import numpy as np

    a = np.asarray(array)
    if dtype == "bf16" and a.dtype == np.uint16:  # bf16 bits are the high half of a float32's
        return (a.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)
    if dtype == "f16" and a.dtype == np.uint16:
        return a.view(np.float16).astype(np.float64)
    return a.astype(np.float64)


class _Nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def join_process_group(env: Any, torch: Any) -> None:
    """The ranks' torch.distributed group with NCCL, once per process (see the module's docstring)."""
    import datetime

    import torch.distributed as dist

    if dist.is_initialized():
        if (dist.get_rank(), dist.get_world_size()) != (env.rank, env.world):
            raise RuntimeError(f"a torch process group of rank {dist.get_rank()} of {dist.get_world_size()} exists "
                               f"already; this rank is {env.rank} of {env.world}")
        return
    from cupy.cuda import nccl

    cp = env.cupy
    store = dist.TCPStore("127.0.0.1", 0, env.world, True, wait_for_workers=False) if env.rank == 0 else None
    with env.stream:
        port = cp.full(1, store.port if store is not None else 0, dtype=cp.int32)
    env.comm.broadcast(port.data.ptr, port.data.ptr, 1, nccl.NCCL_INT32, 0, env.stream.ptr)
    env.stream.synchronize()
    if store is None:
        store = dist.TCPStore("127.0.0.1", int(port.get()[0]), env.world, False,
                              timeout=datetime.timedelta(seconds=120))
    device = torch.device("cuda", cp.cuda.runtime.getDevice())
    dist.init_process_group("nccl", store=store, rank=env.rank, world_size=env.world, device_id=device)
    warm = torch.zeros(1, device=device)
    dist.all_reduce(warm)  # the communicator is made here, not inside the first timed call
    torch.cuda.synchronize(device)


class RankProgram:
    """The program on one rank's GPU at one shape: what the rank worker's Reference(env) drives."""

    def __init__(self, ref: ProgramReference, env: Any) -> None:
        torch = require_torch(ref.program.name)
        self.torch, self.ref, self.env = torch, ref, env
        self.warnings: list[str] = []
        torch.cuda.set_device(env.cupy.cuda.runtime.getDevice())
        self.stream = torch.cuda.ExternalStream(env.stream.ptr)
        join_process_group(env, torch)
        self.module = ref._module()
        self.entry = ref.entry(env.dims, env.world)
        from cuco_tui.workload.program.user_module import bound_solution

        self.solve = bound_solution(self.module, self.entry["dims"])  # the dims it takes by keyword
        shapes = self.entry["ranks"][env.rank]["inputs"]
        self.specs = {b.name: program_spec(b, shapes[b.index]) for b in ref.layout.inputs}
        self.order = sorted(ref.layout.inputs, key=lambda b: b.index)
        self.scratch: dict[str, Any] = {}
        self.pattern_ref: Any = None  # cp_attention's reference, for an attention pattern's parts
        self.guard = InputGuard(torch, [b.name for b in self.order])

    def _args(self, inputs: dict[str, Any]) -> list[Any]:
        """The program's inputs: views of the harness's buffers; a buffer held in another axis order
        ("axes") copied into the program's own layout first, so that the program gets what its
        make_inputs gives (contiguous) and is not timed making the copy itself (`.contiguous()` on
        a permuted view), a copy at HBM bandwidth counted in its time, as its outputs' copy is."""
        args = []
        for b in self.order:
            view = to_program(as_torch(self.torch, inputs[b.name], b.dtype), self.specs[b.name])
            if b.layout == "axes":
                own = self.scratch.get(b.name)
                if own is None:
                    own = self.scratch[b.name] = self.torch.empty(view.shape, dtype=view.dtype, device=view.device)
                own.copy_(view)
                view = own
            args.append(view)
        return args

    def run(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> None:
        torch = self.torch
        with torch.cuda.stream(self.stream):  # solution sets its own grad mode (as under gloo)
            out = self.guard.call(self.solve, self._args(inputs))
            outs = (out,) if isinstance(out, torch.Tensor) else tuple(out)
            for b in self.ref.layout.outputs:
                dst = as_torch(torch, outputs[b.name], b.dtype)
                dst.copy_(to_harness(outs[b.index], b) if b.layout != "as_is" else outs[b.index].reshape(dst.shape))
        note = self.guard.warning()
        if note and note not in self.warnings:
            self.warnings.append(note)

    def parts(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> dict[str, Callable[[], None]]:
        """For a mapped pattern, its compute and its collective alone (torch's cuBLAS and NCCL; for
        attention, cp_attention's NCCL all-gather and cuDNN attention), whose times are the ceilings the
        bound is made of; none without one. The program whole is not a part: the baseline times it as
        the reference, and a part not named as communication counts as compute (evaluate/baseline.py),
        which would put the program's own time into the bound."""
        parts: dict[str, Callable[[], None]] = {}
        pattern = self.ref.layout.pattern
        if not pattern:
            return parts
        if pattern in ATTENTION_PATTERNS:
            return self._attention_parts(inputs, outputs)
        if pattern == "alltoall_experts":
            return self._expert_parts(inputs, outputs)
        import torch.distributed as dist

        torch, W = self.torch, self.env.world
        d = self.ref.layout.derived[self.entry["shape"]]
        M, K, N = d["M"], d["K"], d["N"]
        x = as_torch(torch, inputs["x"], "bf16")
        b = as_torch(torch, inputs["b"], "bf16")
        y = as_torch(torch, outputs["y"], "bf16")
        with torch.cuda.stream(self.stream):
            if pattern == "allgather_matmul":
                full = torch.empty(M, K, dtype=torch.bfloat16, device=x.device)
                comm = lambda: dist.all_gather_into_tensor(full, x.reshape(M // W, K))  # noqa: E731
                mm = lambda: torch.mm(full, b, out=y.reshape(M, N // W))  # noqa: E731
                name = "allgather"
            else:
                partial = torch.empty(M, N, dtype=torch.bfloat16, device=x.device)
                mm = lambda: torch.mm(x.reshape(M, K // W), b, out=partial)  # noqa: E731
                if pattern == "matmul_reducescatter":
                    comm = lambda: dist.reduce_scatter_tensor(y.reshape(M // W, N), partial)  # noqa: E731
                    name = "comm"  # counted as communication by the baseline
                else:
                    comm = lambda: dist.all_reduce(partial)  # noqa: E731
                    name = "allreduce"

        def on_stream(fn: Callable[[], Any]) -> Callable[[], None]:
            def call() -> None:
                with torch.no_grad(), torch.cuda.stream(self.stream):
                    fn()
            return call

        parts.update({"gemm": on_stream(mm), name: on_stream(comm)})
        return parts

    def _attention_parts(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> dict[str, Callable[[], None]]:
        """cp_attention's reference parts on these buffers (they are its q, k, v, o, its dims derived):
        NCCL's all-gather of K and V, and the harness attention (cuDNN) over the visible keys. Their
        times are the bound's, as for cp_attention, whatever way the program itself exchanges."""
        if self.pattern_ref is None:
            self.pattern_ref = self.ref.cp_attention().Reference(self.env)
            self.warnings += [w for w in self.pattern_ref.warnings if w not in self.warnings]
        ref = self.pattern_ref
        return {"allgather": lambda: ref.allgather(inputs), "attention": lambda: ref.attention(inputs, outputs)}

    def _expert_parts(self, inputs: dict[str, Any], outputs: dict[str, Any]) -> dict[str, Callable[[], None]]:
        """The static-routing expert layer's three steps alone (expert_map.py): the tokens' all-to-all,
        the experts' GEMMs (one batched matmul over the parts) and the results' all-to-all."""
        import torch.distributed as dist

        torch, W = self.torch, self.env.world
        d = self.ref.layout.derived[self.entry["shape"]]
        T, H, F, EL = d["T"], d["H"], d["F"], d["E"] // W
        groups = W if d["BY_SOURCE"] else 1
        x = as_torch(torch, inputs["x"], "bf16")
        w = as_torch(torch, inputs["w"], "bf16")
        y = as_torch(torch, outputs["y"], "bf16")
        with torch.cuda.stream(self.stream):
            arrived = torch.empty(T, H, dtype=torch.bfloat16, device=x.device)
            result = torch.empty(T, F, dtype=torch.bfloat16, device=x.device)

        def on_stream(fn: Callable[[], Any]) -> Callable[[], None]:
            def call() -> None:
                with torch.no_grad(), torch.cuda.stream(self.stream):
                    fn()
            return call

        rows = T // (groups * EL)
        parts_in, parts_out, weights = arrived.view(groups, EL, rows, H), result.view(groups, EL, rows, F), \
            w.reshape(EL, H, F)

        def experts() -> None:
            # One batched GEMM per group: a matmul broadcasting w over the groups would copy it G times.
            for g in range(groups):
                torch.bmm(parts_in[g], weights, out=parts_out[g])

        return {"dispatch": on_stream(lambda: dist.all_to_all_single(arrived, x.reshape(T, H))),
                "experts": on_stream(experts),
                "combine": on_stream(lambda: dist.all_to_all_single(y.reshape(T, F), result))}

    def comm_bytes(self) -> int:
        return self.ref.comm_bytes(self.env.dims, self.env.world)
