"""The Reference class of moe_dispatch_combine, run on W threads against fakes of CuPy (arrays are
NumPy arrays, kernels run on the CPU-built kernels of moe_emulator.py, graphs record launches and
replay them), cuBLAS (GEMMs in NumPy, float32 accumulation, bf16 results) and NCCL (grouped
send/recv matched between the rank threads)."""

import sys

import numpy as np

from cuco_tui.harness.bf16 import from_bf16_bits
from moe_common import REF, _inputs


class _FakeArray(np.ndarray):
    """A NumPy array with CuPy's `.data.ptr`."""

    @property
    def data(self):
        from types import SimpleNamespace

        return SimpleNamespace(ptr=self.ctypes.data)


class _FakeGPU:
    """The fake CuPy/cuBLAS/NCCL world of W rank threads, with per-rank event counts."""

    BF16, INT32 = 9, 2
    SIZES = {BF16: 2, INT32: 4}

    def __init__(self, emu, world):
        import threading
        from types import ModuleType, SimpleNamespace

        self.emu, self.world = emu, world
        self.tls = threading.local()
        self.emu_lock = threading.Lock()  # the emulator runs one launch at a time
        self.barrier = threading.Barrier(world, timeout=60)
        self.box = {}  # (source, destination) -> bytes of one grouped send
        gpu = self

        class Stream:
            def __init__(self):
                self.recording = None
                self.ptr = id(self)

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

            def synchronize(self):
                gpu.count("sync")

            def begin_capture(self):
                assert self.recording is None
                self.recording = []

            def end_capture(self):
                work, self.recording = self.recording, None
                return Graph(work)

            def is_capturing(self):
                return self.recording is not None

        class Graph:
            def __init__(self, work):
                self.work = work

            def launch(self, stream=None):
                gpu.count("graph_launch")
                for fn in self.work:
                    fn()

        class RawModule:
            def __init__(self, code):
                assert code == REF._KERNELS

            def get_function(self, name):
                return gpu.kernel(name)

        def empty(shape, dtype):
            gpu.count("alloc")
            return np.empty(shape, dtype=dtype).view(_FakeArray)

        def memcpy_async(dst, src, size, kind, stream):
            assert kind == 2  # device to host
            gpu.count("memcpy")
            gpu.enqueue(lambda: ctypes.memmove(dst, src, size))

        import ctypes

        cupy = ModuleType("cupy")
        cupy.uint16, cupy.int32, cupy.int64 = np.uint16, np.int32, np.int64
        cupy.empty, cupy.RawModule = empty, RawModule
        cupy.cuda = ModuleType("cupy.cuda")
        cupy.cuda.Stream = Stream
        cupy.cuda.device = SimpleNamespace(get_cublas_handle=lambda: 0)
        cupy.cuda.Device = lambda *a: SimpleNamespace(id=0)
        cupy.cuda.runtime = SimpleNamespace(memcpyAsync=memcpy_async, memcpyDeviceToHost=2)
        # The Reference calls libcublas itself (CuPy's bindings refuse stream capture).
        self.cublas = SimpleNamespace(cublasGemmEx=self.gemm_ex, cublasSetStream_v2=self.set_stream,
                                      cublasGemmGroupedBatchedEx=self.gemm_grouped)
        cupy.cuda.nccl = ModuleType("cupy.cuda.nccl")
        cupy.cuda.nccl.NCCL_BFLOAT16, cupy.cuda.nccl.NCCL_INT32 = self.BF16, self.INT32
        cupy.cuda.nccl.groupStart, cupy.cuda.nccl.groupEnd = self.group_start, self.group_end
        cupyx = ModuleType("cupyx")
        cupyx.empty_pinned = lambda shape, dtype: np.empty(shape, dtype=dtype)
        self.modules = {"cupy": cupy, "cupy.cuda": cupy.cuda, "cupy.cuda.nccl": cupy.cuda.nccl, "cupyx": cupyx}
        self.Stream = Stream
        self.counts = [dict() for _ in range(world)]

    # -- per rank thread

    def count(self, what, n=1):
        c = self.counts[self.tls.rank]
        c[what] = c.get(what, 0) + n

    def enqueue(self, fn):
        """Run now, or record when the rank's stream is capturing."""
        stream = self.tls.stream
        if stream.recording is not None:
            stream.recording.append(fn)
        else:
            fn()

    def kernel(self, name):
        import ctypes

        fn = getattr(self.emu, "emu_" + name)

        def arg(a):
            if isinstance(a, _FakeArray):
                return ctypes.c_void_p(a.ctypes.data)
            if isinstance(a, np.int32):
                return ctypes.c_int(int(a))
            if isinstance(a, np.int64):
                return ctypes.c_longlong(int(a))
            raise TypeError(f"{name}: a kernel argument CuPy would not pass as its C type: {a!r}")

        def launch(grid, block, args, shared_mem=0):
            (g,), (b,) = grid, block
            cargs = [arg(a) for a in args]
            self.count("kernel")

            def run():
                with self.emu_lock:
                    fn(g, b, *cargs)
            self.enqueue(run)
        return launch

    def set_stream(self, handle, stream_ptr):
        assert self.tls.stream.recording is None, "cublasSetStream inside a capture"
        self.tls.blas_stream = stream_ptr
        return 0

    def gemm_ex(self, handle, ta, tb, m, n, k, alpha, a, at, lda, b, bt, ldb, beta, c, ct, ldc, compute, algo):
        import ctypes


        # cuBLAS launches on the stream its handle was bound to, not on CuPy's current stream.
        assert getattr(self.tls, "blas_stream", None) == self.tls.stream.ptr, "GEMM on an unbound stream"
        assert (ta, tb, at, bt, ct, lda, ldb, ldc) == (0, 0, 14, 14, 14, m, k, m)
        assert ctypes.c_float.from_address(alpha).value == 1.0 and ctypes.c_float.from_address(beta).value == 0.0
        self.count("gemm")
        self.enqueue(lambda: self.gemm_now(m, n, k, a, b, c))
        return 0  # CUBLAS_STATUS_SUCCESS

    @staticmethod
    def gemm_now(m, n, k, a, b, c):
        """Column-major C[m, n] = A[m, k] B[k, n] in bf16, float32 accumulation, now."""
        import ctypes

        from cuco_tui.harness.bf16 import to_bf16_bits

        def view(ptr, rows, cols):  # column-major [cols, rows] is row-major [rows, cols]
            return np.ctypeslib.as_array((ctypes.c_uint16 * (rows * cols)).from_address(ptr)).reshape(rows, cols)

        # row-major C[n, m] = B[n, k] @ A[k, m]
        prod = from_bf16_bits(np, view(b, n, k)) @ from_bf16_bits(np, view(a, k, m))
        view(c, n, m)[...] = to_bf16_bits(np, prod.astype(np.float32))

    def gemm_grouped(self, handle, ta, tb, m, n, k, alpha, a, at, lda, b, bt, ldb, beta, c, ct, ldc, count, sizes,
                     compute):
        """cuBLAS's grouped GEMM: the size arrays are read on the host at the call, the pointer
        arrays on the device when the stream runs it (so they must be written before, in stream order)."""
        import ctypes

        def host(ptr, ctype=ctypes.c_int32):
            return np.ctypeslib.as_array((ctype * count).from_address(ptr)).copy()

        assert getattr(self.tls, "blas_stream", None) == self.tls.stream.ptr, "GEMM on an unbound stream"
        ta, tb, m, n, k, lda, ldb, ldc, sizes = (host(v) for v in (ta, tb, m, n, k, lda, ldb, ldc, sizes))
        alpha, beta = host(alpha, ctypes.c_float), host(beta, ctypes.c_float)
        assert count > 0 and (at, bt, ct, compute) == (14, 14, 14, 68)
        assert (ta == 0).all() and (tb == 0).all() and (sizes == 1).all() and (n > 0).all()
        assert (lda == m).all() and (ldb == k).all() and (ldc == m).all()
        assert (alpha == 1.0).all() and (beta == 0.0).all()
        self.count("gemm")

        def run():
            pa, pb, pc = (host(v, ctypes.c_int64) for v in (a, b, c))
            for j in range(count):
                self.gemm_now(int(m[j]), int(n[j]), int(k[j]), int(pa[j]), int(pb[j]), int(pc[j]))
        self.enqueue(run)
        return 0

    def grouped_library(self):
        """The prebuilt grouped GEMM as cuco_tui.harness.grouped_gemm presents it (`loaded`,
        `GroupedGemm`): its launch reads the device arrays when the stream runs it, as the kernel
        does (so cutlass_problems must have written them, in stream order), one GEMM per group
        with rows, row-major d[m, n] = a[m, k] @ b[k, n]."""
        import ctypes

        gpu = self

        class FakeGroupedGemm:
            launches = 0

            @classmethod
            def create(cls, api, max_groups, sms=0, device=None):
                assert api == "fake-api" and max_groups > 0
                g = cls()
                g.max_groups, g.prepared = max_groups, set()
                return g

            def release(self):
                pass

            def launch(self, problems, stream):
                assert stream == gpu.tls.stream.ptr, "the grouped GEMM on another stream"
                # The library builds a set of arrays' kernel parameters (host work) at its first launch:
                # that must not happen inside a capture, which would record nothing of it.
                key = (problems.shapes, problems.strides, problems.a, problems.b, problems.d)
                assert key in self.prepared or gpu.tls.stream.recording is None, "first launch inside a capture"
                self.prepared.add(key)
                g = problems.groups
                assert 0 < g <= self.max_groups
                gpu.count("gemm")

                def array(ptr, n, ctype):
                    return np.ctypeslib.as_array((ctype * n).from_address(ptr)).copy()

                def run():
                    shapes = array(problems.shapes, 3 * g, ctypes.c_int32).reshape(g, 3)
                    strides = array(problems.strides, 3 * g, ctypes.c_int64).reshape(3, g)
                    a, b, d = (array(v, g, ctypes.c_int64) for v in (problems.a, problems.b, problems.d))
                    for i, (m, n, k) in enumerate(shapes):
                        assert (strides[:, i] == (k, n, n)).all(), "the library takes dense rows"
                        if m:  # gemm_now is column-major: d^T [n, m] = b^T [n, k] a^T [k, m]
                            gpu.gemm_now(int(n), int(m), int(k), int(b[i]), int(a[i]), int(d[i]))
                gpu.enqueue(run)

        return FakeGroupedGemm

    def group_start(self):
        assert self.tls.group is None
        self.tls.group = []

    def group_end(self):
        import ctypes

        assert self.tls.stream.recording is None, "NCCL stays out of the graphs"
        group, self.tls.group = self.tls.group, None
        me = self.tls.rank
        self.count("nccl_group")
        for kind, ptr, nbytes, peer in group:
            if kind == "send":
                assert (me, peer) not in self.box
                self.box[(me, peer)] = ctypes.string_at(ptr, nbytes)
        self.barrier.wait()
        for kind, ptr, nbytes, peer in group:
            if kind == "recv":
                data = self.box.pop((peer, me))
                assert len(data) == nbytes, (peer, me, len(data), nbytes)
                ctypes.memmove(ptr, data, nbytes)
        self.barrier.wait()
        assert not self.box, f"sends nobody received: {list(self.box)}"
        self.barrier.wait()

    def comm(self, rank):
        gpu = self

        class Comm:
            def send(self, ptr, count, dtype, peer, stream):
                gpu.tls.group.append(("send", ptr, count * gpu.SIZES[dtype], peer))

            def recv(self, ptr, count, dtype, peer, stream):
                gpu.tls.group.append(("recv", ptr, count * gpu.SIZES[dtype], peer))
        return Comm()

    def run_ranks(self, fn):
        """fn(rank) on W threads at once; the first exception is re-raised."""
        import threading

        errors = []

        def main(rank):
            self.tls.rank, self.tls.group, self.tls.stream = rank, None, self.Stream()
            try:
                fn(rank)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
                self.barrier.abort()

        threads = [threading.Thread(target=main, args=(r,)) for r in range(self.world)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]


def _fake_run(emu, monkeypatch, dims, world, runs, inputs=None, graphs=True, gemm="grouped", cublas=None,
              library=None):
    """Each rank builds a Reference on the fakes and calls runs(rank, ref, inputs, outputs, gpu).
    cublas(fake cuBLAS) -> the cuBLAS the Reference gets (default: the fake itself). library: whether
    the harness loaded the prebuilt grouped GEMM (a fake of it; default: for gemm="cutlass")."""
    from types import SimpleNamespace

    from cuco_tui.harness import grouped_gemm

    gpu = _FakeGPU(emu, world)
    for name, module in gpu.modules.items():
        monkeypatch.setitem(sys.modules, name, module)
    if library == "fails":  # created, but its launches fail
        fake = gpu.grouped_library()

        def fail(self, problems, stream):
            raise grouped_gemm.GroupedGemmError("the grouped GEMM's launch returned CUDA error 98")

        monkeypatch.setattr(fake, "launch", fail)
        monkeypatch.setattr(grouped_gemm, "loaded", lambda entry, paths=None: "fake-api")
        monkeypatch.setattr(grouped_gemm, "GroupedGemm", fake)
    elif library == "refuses":  # loaded, but its create fails (a GPU it was not built for)
        def refuse(api, max_groups, sms=0, device=None):
            raise grouped_gemm.GroupedGemmError("grouped GEMM: 232448 bytes of shared memory: invalid argument")

        monkeypatch.setattr(grouped_gemm, "loaded", lambda entry, paths=None: "fake-api")
        monkeypatch.setattr(grouped_gemm.GroupedGemm, "create", refuse)
    elif library if library is not None else gemm == "cutlass":
        monkeypatch.setattr(grouped_gemm, "loaded", lambda entry, paths=None: "fake-api")
        monkeypatch.setattr(grouped_gemm, "GroupedGemm", gpu.grouped_library())
    else:
        monkeypatch.setattr(grouped_gemm, "loaded", lambda entry, paths=None: None)
    all_inputs = inputs or _inputs(dims, world)
    outs = [None] * world

    def rank_main(rank):
        env = SimpleNamespace(comm=gpu.comm(rank), stream=gpu.tls.stream, world=world, rank=rank, dims=dims)
        ins = {k: np.ascontiguousarray(v).view(_FakeArray) for k, v in all_inputs[rank].items()}
        out = {"out": np.full((dims["T"], dims["H"]), 0x7FC1, dtype=np.uint16).view(_FakeArray)}
        ref = REF.Reference(env, graphs=graphs, cublas=cublas(gpu.cublas) if cublas else gpu.cublas, gemm=gemm)
        runs(rank, ref, ins, out, gpu)
        outs[rank] = np.asarray(out["out"]).copy()

    gpu.run_ranks(rank_main)
    return all_inputs, outs, gpu
