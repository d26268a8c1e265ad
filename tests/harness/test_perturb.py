"""The schedule perturber (harness/perturb_lib): it builds and is cached, its C API draws the policy
of cuco_perturb.h, and as an interposer it holds a stream back before the calls it stands in front
of, passing each call on unchanged. Kernels cannot run here: the holds are checked against a
stand-in CUDA runtime that logs what it is asked (built here, with the real one's soname and
symbol versions), and the binding against the real shared runtime by counting the calls it saw.

Every library is loaded in a child process: an interposer loaded into the test process would stand
in front of whatever CUDA library a later test loads."""

import json
import shutil
import subprocess
import sys
import textwrap

import pytest

from cuco_tui.harness import perturb
from cuco_tui.toolchain import BuildCache
from cuco_tui.toolchain.nvcc import nvcc_flags
from cuco_tui.toolchain.perturb import ensure_perturb_library
from cuco_tui.toolchain.toolchain import discover

TC = discover()
needs_nvcc = pytest.mark.skipif(TC.nvcc is None, reason="needs nvcc")
needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    if TC.nvcc is None:
        pytest.skip("needs nvcc")
    lib = ensure_perturb_library(TC, BuildCache(tmp_path_factory.mktemp("perturb-cache")))
    assert lib.ok, lib.problem
    return lib.path


def child(code: str) -> dict:
    """Run `code` in a fresh Python (this tree on its path); it prints one JSON object."""
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120,
                       env={"PYTHONPATH": ":".join(sys.path), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@needs_nvcc
def test_it_builds_once_per_machine_and_is_cached(library, tmp_path):
    cache = BuildCache(tmp_path / "cache")
    first = ensure_perturb_library(TC, cache)
    again = ensure_perturb_library(TC, cache)
    assert first.ok and not first.cached and first.seconds > 0
    assert again.ok and again.cached and again.path == first.path
    assert first.path.name.startswith("libcuco_perturb-") and first.path.stat().st_size > 0


def test_without_nvcc_it_says_why(tmp_path):
    from dataclasses import replace

    lib = ensure_perturb_library(replace(TC, nvcc=None), BuildCache(tmp_path))
    assert not lib.ok and "nvcc was not found" in lib.problem


def test_a_library_that_is_not_the_perturber_is_refused(tmp_path):
    with pytest.raises(perturb.PerturbError, match="cannot load the schedule perturber"):
        perturb.PerturbLibrary(tmp_path / "missing.so")


@needs_nvcc
def test_the_c_api_draws_the_policy_of_each_kind(library):
    got = child(f"""
        import json
        from pathlib import Path
        from cuco_tui.harness.perturb import PerturbLibrary, OP_CLASSES
        p = PerturbLibrary(Path({str(library)!r}))
        out = {{}}
        for seed in range(8):
            for rank in range(2):
                c = p.configure(seed, rank, 2, 1000)
                draws = [p.draw(op) for op in OP_CLASSES for _ in range(3)]
                out[f"{{seed}}/{{rank}}"] = dict(kind=c.kind, target=c.target, start=c.start_delay_us,
                                                 description=c.description, draws=draws, stats=p.stats().__dict__)
        c = p.configure(1, 0, 2, 1000)
        out["budget"] = sum(p.draw("copy") for _ in range(100))
        p.configure(3, 1, 2, 1000)
        out["scatter_again"] = [p.draw("kernel") for _ in range(40)]
        p.configure(3, 1, 2, 1000)
        out["scatter_again"] += [p.draw("kernel") for _ in range(40)]
        print(json.dumps(out))
    """)
    unit = 1000
    for seed in range(8):
        kind, target = perturb.kind_of(seed), perturb.target_of(seed, 2)
        for rank in range(2):
            d = got[f"{seed}/{rank}"]
            assert (d["kind"], d["target"]) == (kind, target)
            draws = dict(zip(perturb.OP_CLASSES, zip(*[iter(d["draws"])] * 3)))
            mine = rank == target
            if kind == "copies_late":
                assert draws == {op: (2 * unit if mine and op == "copy" else 0,) * 3 for op in perturb.OP_CLASSES}
                assert d["start"] == 0 and d["description"] == f"rank {target}'s copies each held back 2.0 ms"
            elif kind == "rank_late":
                assert draws == {op: (unit if mine else 0,) * 3 for op in perturb.OP_CLASSES}
                assert d["start"] == (2 * unit if mine else 0)
                assert d["description"] == (f"rank {target} started 2.0 ms late and each of its ordering points held "
                                            f"back 1.0 ms")
            elif kind == "compute_late":
                assert draws == {op: (2 * unit if mine and op in ("kernel", "gemm") else 0,) * 3
                                 for op in perturb.OP_CLASSES}
            else:
                assert all(0 <= x <= 2 * unit for x in d["draws"])
                assert d["description"].startswith("every rank's ordering points held back at random, up to 2.0 ms")
            st = d["stats"]
            assert st["calls"] == 15 and st["per_class"] == {op: 3 for op in perturb.OP_CLASSES}
            assert st["delayed"] == sum(1 for x in d["draws"] if x) and st["delayed_us"] == sum(d["draws"])
    # The same description on every rank: the one sentence a failure reports.
    assert all(got[f"{s}/0"]["description"] == got[f"{s}/1"]["description"] for s in range(8))
    # Scatter draws per rank and call, the same again for the same seed; about half hold.
    assert got["3/0"]["draws"] != got["3/1"]["draws"]
    assert got["scatter_again"][:40] == got["scatter_again"][40:]
    assert 8 < sum(1 for x in got["scatter_again"][:40] if x) < 32
    assert got["budget"] == 32 * unit  # CUCO_PERTURB_BUDGET_UNITS


FAKE_CUDART = r"""
#include <stdio.h>
#include <string.h>
#include <stdint.h>
typedef struct { unsigned x, y, z; } dim3;
typedef void (*host_fn)(void*);
static char log_[8192];
static int pending_error = 0;
static void say(const char* s) { strncat(log_, s, sizeof log_ - strlen(log_) - 2); strcat(log_, ";"); }
const char* fake_log(void) { return log_; }
void fake_reset(int error) { log_[0] = 0; pending_error = error; }
int cudaPeekAtLastError(void) { return pending_error; }
int cudaGetLastError(void) { int e = pending_error; pending_error = 0; return e; }
int cudaStreamIsCapturing(void* s, int* status) { *status = (uintptr_t)s == 0xCA7 ? 1 : 0; return 0; }
int cudaLaunchHostFunc(void* s, host_fn fn, void* us) {
  char b[64]; snprintf(b, sizeof b, "hold %lx %lu", (unsigned long)(uintptr_t)s, (unsigned long)(uintptr_t)us);
  say(b); fn(us); return 0;
}
int cudaMemcpyAsync(void* d, const void* s, size_t n, int kind, void* st) {
  char b[96]; snprintf(b, sizeof b, "memcpy %lx %lx %zu %d %lx", (unsigned long)(uintptr_t)d,
                       (unsigned long)(uintptr_t)s, n, kind, (unsigned long)(uintptr_t)st); say(b); return 0;
}
int cudaMemcpyBatchAsync(void* const* d, const void* const* s, const size_t* n, size_t count, void* attrs,
                         size_t* idx, size_t nattrs, void* st) {
  char b[96]; snprintf(b, sizeof b, "batch %zu %lx %zu %zu %lx", count, (unsigned long)(uintptr_t)d[0], n[0], nattrs,
                       (unsigned long)(uintptr_t)st); (void)s; (void)attrs; (void)idx; say(b); return 0;
}
int cudaMemcpy3DBatchAsync(size_t n, void* ops, unsigned long long flags, void* st) {
  char b[96]; snprintf(b, sizeof b, "batch3d %zu %llu %lx", n, flags, (unsigned long)(uintptr_t)st); (void)ops; say(b);
  return 0;
}
void fake_say(const char* s) { say(s); }
int cudaEventRecord(void* e, void* st) { (void)e; (void)st; say("record"); return 0; }
int cudaStreamWaitEvent(void* st, void* e, unsigned f) { (void)e; (void)st; (void)f; say("wait"); return 0; }
int __cudaLaunchKernel(void* k, dim3 g, dim3 b, void** a, size_t sm, void* st) {
  char m[64]; snprintf(m, sizeof m, "kernel %u %u %zu", g.x, b.x, sm); (void)k; (void)a; (void)st; say(m); return 0;
}
"""

FAKE_CANDIDATE = r"""
#include <stddef.h>
typedef struct { unsigned x, y, z; } dim3;
int cudaMemcpyAsync(void*, const void*, size_t, int, void*);
int cudaMemcpyBatchAsync(void* const*, const void* const*, const size_t*, size_t, void*, size_t*, size_t, void*);
int cudaMemcpy3DBatchAsync(size_t, void*, unsigned long long, void*);
int cudaEventRecord(void*, void*);
int cudaStreamWaitEvent(void*, void*, unsigned);
int __cudaLaunchKernel(void*, dim3, dim3, void**, size_t, void*);
int run(void* stream) {
  dim3 g = {7, 1, 1}, b = {128, 1, 1};
  void* dst[1] = {(void*)0x50};
  const void* src[1] = {(void*)0x60};
  size_t size[1] = {32}, first = 0;
  int rc = cudaMemcpyAsync((void*)0x10, (void*)0x20, 64, 3, stream);
  rc |= cudaMemcpyBatchAsync(dst, src, size, 1, 0, &first, 1, stream);
  rc |= cudaMemcpy3DBatchAsync(1, (void*)0x70, 0, stream);
  rc |= cudaEventRecord((void*)0x30, stream);
  rc |= cudaStreamWaitEvent(stream, (void*)0x30, 0);
  rc |= __cudaLaunchKernel((void*)0x40, g, b, 0, 96, stream);
  return rc;
}
"""


@needs_nvcc
@needs_cc
def test_it_holds_the_stream_before_each_call_and_passes_the_call_on(library, tmp_path):
    """A stand-in runtime with the real one's soname and symbol version, a 'candidate' linked to it:
    while enabled, each call is preceded by a hold (a host function) on the same stream, of the
    policy's length; the call itself reaches the runtime with its arguments; nothing while disabled,
    nothing on a stream being captured, nothing while a CUDA error is pending."""
    (tmp_path / "cudart.c").write_text(FAKE_CUDART)
    (tmp_path / "cudart.map").write_text("libcudart.so.13 { global: *; };\n")
    (tmp_path / "cand.c").write_text(FAKE_CANDIDATE)
    subprocess.run(["cc", "-shared", "-fPIC", "-Wl,-soname,libcudart.so.13", f"-Wl,--version-script={tmp_path}/cudart.map",
                    str(tmp_path / "cudart.c"), "-o", str(tmp_path / "libcudart.so.13")], check=True)
    subprocess.run(["cc", "-shared", "-fPIC", str(tmp_path / "cand.c"), "-o", str(tmp_path / "cand.so"),
                    f"-L{tmp_path}", "-l:libcudart.so.13", f"-Wl,-rpath,{tmp_path}", "-Wl,--disable-new-dtags"],
                   check=True)
    got = child(f"""
        import ctypes, json, time
        from pathlib import Path
        from cuco_tui.harness.perturb import PerturbLibrary
        p = PerturbLibrary(Path({str(library)!r}))       # first, as the rank worker loads it
        cand = ctypes.CDLL({str(tmp_path / "cand.so")!r})  # RTLD_LOCAL, as abi.CandidateLibrary
        rt = ctypes.CDLL({str(tmp_path / "libcudart.so.13")!r})
        rt.fake_log.restype = ctypes.c_char_p
        p.bind(cand._handle)
        out = {{}}
        cfg = p.configure(1, 0, 2, 1500)  # rank_late, aimed at rank 0: every ordering point held 1.5 ms
        for name, stream, enabled, error in (("on", 0xABC, True, 0), ("off", 0xABC, False, 0),
                                             ("capturing", 0xCA7, True, 0), ("error", 0xABC, True, 7)):
            rt.fake_reset(error)
            p.enable(enabled)
            t0 = time.monotonic()
            rc = cand.run(ctypes.c_void_p(stream))
            out[name] = dict(rc=rc, log=rt.fake_log().decode(), seconds=time.monotonic() - t0)
            p.enable(False)
        out["stats"] = p.stats().__dict__
        rt.fake_reset(0)
        out["hold"] = p.hold(0xABC, 2000)
        out["hold_log"] = rt.fake_log().decode()
        out["start"] = cfg.start_delay_us
        print(json.dumps(out))
    """)
    calls = ["memcpy 10 20 64 3 abc", "batch 1 50 32 1 abc", "batch3d 1 0 abc", "record", "wait", "kernel 7 128 96"]
    assert got["on"]["rc"] == 0
    assert got["on"]["log"].split(";")[:-1] == [x for c in calls for x in ("hold abc 1500", c)]
    assert got["on"]["seconds"] >= 6 * 1.5e-3  # the stand-in runs each host function at once
    assert got["off"]["log"].split(";")[:-1] == calls
    assert got["capturing"]["log"].split(";")[:-1] == [c.replace("abc", "ca7") for c in calls]
    assert got["error"]["log"].split(";")[:-1] == calls  # the candidate's pending error is left alone
    st = got["stats"]
    assert st["calls"] == 18 and st["delayed"] == 18 and st["delayed_us"] == 18 * 1500
    assert st["skipped"] == 12 and st["errors"] == 0
    assert st["per_class"] == {"copy": 9, "event": 6, "kernel": 3, "nccl": 0, "gemm": 0}
    assert got["hold"] is True and got["hold_log"] == "hold abc 2000;" and got["start"] == 3000


# cuBLASLt's matmul (ce_fold's fold of gemm_reducescatter): a stand-in libcublasLt.so.13 with the
# real one's symbol version, logging into the stand-in runtime's log, and a candidate calling it.
FAKE_CUBLASLT = r"""
#include <stdio.h>
#include <stdint.h>
void fake_say(const char*);
int cublasLtMatmul(void* h, void* desc, const void* alpha, const void* a, void* ad, const void* b, void* bd,
                   const void* beta, const void* c, void* cd, void* d, void* dd, const void* algo, void* ws,
                   size_t ws_bytes, void* st) {
  char m[96]; snprintf(m, sizeof m, "ltmatmul %lx %lx %zu %lx", (unsigned long)(uintptr_t)c,
                       (unsigned long)(uintptr_t)d, ws_bytes, (unsigned long)(uintptr_t)st);
  (void)h; (void)desc; (void)alpha; (void)a; (void)ad; (void)b; (void)bd; (void)beta; (void)cd; (void)dd; (void)algo;
  (void)ws; fake_say(m); return 0;
}
"""

LT_CANDIDATE = r"""
#include <stddef.h>
int cublasLtMatmul(void*, void*, const void*, const void*, void*, const void*, void*, const void*, const void*,
                   void*, void*, void*, const void*, void*, size_t, void*);
int run(void* stream) { return cublasLtMatmul(0, 0, 0, 0, 0, 0, 0, 0, (void*)0xC0, 0, (void*)0xD0, 0, 0, 0, 64, stream); }
"""


@needs_nvcc
@needs_cc
def test_a_cublaslt_matmul_is_held_as_a_gemm(library, tmp_path):
    """A candidate's cublasLtMatmul (its stream is its last argument) is held before it like a cuBLAS
    GEMM, class gemm, only while enabled, and reaches cuBLASLt with its arguments."""
    (tmp_path / "cudart.c").write_text(FAKE_CUDART)
    (tmp_path / "cudart.map").write_text("libcudart.so.13 { global: *; };\n")
    (tmp_path / "lt.c").write_text(FAKE_CUBLASLT)
    (tmp_path / "lt.map").write_text("libcublasLt.so.13 { global: *; };\n")
    (tmp_path / "cand.c").write_text(LT_CANDIDATE)
    link = [f"-L{tmp_path}", f"-Wl,-rpath,{tmp_path}", "-Wl,--disable-new-dtags"]
    subprocess.run(["cc", "-shared", "-fPIC", "-Wl,-soname,libcudart.so.13", f"-Wl,--version-script={tmp_path}/cudart.map",
                    str(tmp_path / "cudart.c"), "-o", str(tmp_path / "libcudart.so.13")], check=True)
    subprocess.run(["cc", "-shared", "-fPIC", "-Wl,-soname,libcublasLt.so.13", f"-Wl,--version-script={tmp_path}/lt.map",
                    str(tmp_path / "lt.c"), "-o", str(tmp_path / "libcublasLt.so.13"), *link, "-l:libcudart.so.13"],
                   check=True)
    subprocess.run(["cc", "-shared", "-fPIC", str(tmp_path / "cand.c"), "-o", str(tmp_path / "cand.so"), *link,
                    "-l:libcublasLt.so.13", "-l:libcudart.so.13"], check=True)
    got = child(f"""
        import ctypes, json
        from pathlib import Path
        from cuco_tui.harness.perturb import PerturbLibrary
        p = PerturbLibrary(Path({str(library)!r}))
        cand = ctypes.CDLL({str(tmp_path / "cand.so")!r})
        rt = ctypes.CDLL({str(tmp_path / "libcudart.so.13")!r})
        rt.fake_log.restype = ctypes.c_char_p
        p.bind(cand._handle)
        p.configure(2, 0, 2, 100)  # compute_late, aimed at rank 0: kernels and GEMMs held 2 units
        out = {{}}
        for name, enabled in (("on", True), ("off", False)):
            rt.fake_reset(0)
            p.enable(enabled)
            out[name] = dict(rc=cand.run(ctypes.c_void_p(0xABC)), log=rt.fake_log().decode())
            p.enable(False)
        out["stats"] = p.stats().__dict__
        print(json.dumps(out))
    """)
    call = "ltmatmul c0 d0 64 abc"
    assert got["on"]["rc"] == 0 and got["on"]["log"].split(";")[:-1] == ["hold abc 200", call]
    assert got["off"]["log"].split(";")[:-1] == [call]
    assert got["stats"]["per_class"]["gemm"] == 1 and got["stats"]["delayed"] == 1


@needs_nvcc
def test_a_candidate_built_by_the_harness_calls_the_real_runtime_through_it(library, tmp_path):
    """With the flags candidates are built with (the shared CUDA runtime), their kernel launches and
    copies bind to the perturber, whatever symbol versions the real runtime gives them. No GPU here:
    the calls fail in the runtime, after the perturber has seen them."""
    if TC.cudart is None:
        pytest.skip("the shared CUDA runtime was not found")
    src = tmp_path / "k.cu"
    src.write_text('#include <cuda_runtime.h>\n__global__ void k(int* p) { *p = 1; }\n'
                   'extern "C" int go(int* p, cudaStream_t s) {\n  k<<<1, 1, 0, s>>>(p);\n'
                   '  return (int)cudaMemcpyAsync(p, p, 4, cudaMemcpyDeviceToDevice, s);\n}\n')
    subprocess.run([str(TC.nvcc), *nvcc_flags(TC), str(src), "-o", str(tmp_path / "k.so")], check=True,
                   capture_output=True)
    got = child(f"""
        import ctypes, json
        from pathlib import Path
        from cuco_tui.harness.perturb import PerturbLibrary
        p = PerturbLibrary(Path({str(library)!r}))
        k = ctypes.CDLL({str(tmp_path / "k.so")!r})
        p.bind(k._handle)
        p.configure(4, 0, 2, 1000)  # copies_late, aimed at rank 1: nothing held on rank 0
        p.enable(True)
        k.go(None, None)
        p.enable(False)
        print(json.dumps(p.stats().__dict__))
    """)
    assert got["calls"] == 2 and got["per_class"]["kernel"] == 1 and got["per_class"]["copy"] == 1


FAKE_NCCL = r"""
#include <stddef.h>
#include <string.h>
static char log_[1024];
const char* fake_nccl_log(void) { return log_; }
int ncclGetVersion(int* v) { strcat(log_, WHO " version;"); *v = 22809; return 0; }
int ncclAllGather(const void* s, void* r, size_t n, int t, void* comm, void* stream) {
  (void)s; (void)r; (void)n; (void)t; (void)comm; (void)stream; strcat(log_, WHO " allgather;"); return 0;
}
"""

FAKE_NCCL_CANDIDATE = r"""
#include <stddef.h>
int ncclGetVersion(int*);
int ncclAllGather(const void*, void*, size_t, int, void*, void*);
int run(void* stream) { int v; return ncclGetVersion(&v) | ncclAllGather(0, 0, 8, 0, 0, stream); }
"""


def _fake_nccl(tmp_path):
    """Two NCCL stand-ins of one soname in two folders (A: the one CuPy loads, B: the one the
    candidate was linked against) and a candidate that calls both a function the perturber stands in
    front of (ncclAllGather) and one it does not (ncclGetVersion)."""
    for who in ("A", "B"):
        (tmp_path / who).mkdir()
        (tmp_path / "nccl.c").write_text(FAKE_NCCL)
        subprocess.run(["cc", "-shared", "-fPIC", f'-DWHO="{who}"', "-Wl,-soname,libnccl.so.2",
                        str(tmp_path / "nccl.c"), "-o", str(tmp_path / who / "libnccl.so.2")], check=True)
    (tmp_path / "cand.c").write_text(FAKE_NCCL_CANDIDATE)
    subprocess.run(["cc", "-shared", "-fPIC", str(tmp_path / "cand.c"), "-o", str(tmp_path / "cand.so"),
                    f"-L{tmp_path / 'B'}", "-l:libnccl.so.2", f"-Wl,-rpath,{tmp_path / 'B'}",
                    "-Wl,--disable-new-dtags"], check=True)


@needs_nvcc
@needs_cc
@pytest.mark.parametrize("order", ["nccl first", "perturber first"])
def test_a_candidates_nccl_calls_are_held_only_when_the_perturber_is_loaded_before_nccl(library, tmp_path, order):
    """CuPy's NCCL module puts libnccl in the process's global scope (seen on the H100 host). Loaded
    before the perturber, it takes the candidate's ncclAllGather: the perturbed rounds never hold an
    NCCL call (the cp_attention seed's rounds reached nothing). Loaded after it, every call goes
    through the perturber, and on to the NCCL the candidate's other calls use: the one CuPy loaded
    (A), which the candidate's own `libnccl.so.2` resolves to (one soname, one library), never a
    second copy (B) with communicators of its own."""
    _fake_nccl(tmp_path)
    got = child(f"""
        import ctypes, json
        from pathlib import Path
        from cuco_tui.harness.perturb import PerturbLibrary
        nccl_first = {order == "nccl first"}
        if nccl_first:
            a = ctypes.CDLL({str(tmp_path / "A" / "libnccl.so.2")!r}, mode=ctypes.RTLD_GLOBAL)
        p = PerturbLibrary(Path({str(library)!r}))
        if not nccl_first:
            a = ctypes.CDLL({str(tmp_path / "A" / "libnccl.so.2")!r}, mode=ctypes.RTLD_GLOBAL)
        cand = ctypes.CDLL({str(tmp_path / "cand.so")!r})  # RTLD_LOCAL, as abi.CandidateLibrary
        b = ctypes.CDLL({str(tmp_path / "B" / "libnccl.so.2")!r})
        a.fake_nccl_log.restype = b.fake_nccl_log.restype = ctypes.c_char_p
        p.bind(cand._handle)
        p.configure(1, 0, 2, 1000)  # rank_late, aimed at rank 0: every ordering point drawn for
        p.enable(True)
        rc = cand.run(ctypes.c_void_p(0xABC))
        p.enable(False)
        print(json.dumps(dict(rc=rc, a=a.fake_nccl_log().decode(), b=b.fake_nccl_log().decode(),
                              nccl=p.stats().per_class["nccl"])))
    """)
    assert got["rc"] == 0 and got["b"] == ""  # the candidate's calls all reach the global NCCL
    assert got["a"] == "A version;A allgather;"
    assert got["nccl"] == (0 if order == "nccl first" else 1)


FAKE_CUPY = """
from pathlib import Path
maps = Path("/proc/self/maps").read_text()
Path({out!r}).write_text("perturber loaded" if "libcuco_perturb" in maps else "perturber not loaded")
raise ImportError("the stand-in CuPy stops the rank here")
"""


@needs_nvcc
def test_the_rank_worker_loads_the_perturber_before_cupy(library, tmp_path):
    """The order the test above asks for, in the rank worker itself: a stand-in `cupy` package first
    on the path notes whether the perturber is mapped when the worker imports it."""
    (tmp_path / "cupy").mkdir()
    (tmp_path / "cupy" / "__init__.py").write_text(FAKE_CUPY.format(out=str(tmp_path / "seen")))
    (tmp_path / "run").mkdir()
    got = child(f"""
        import json, sys
        sys.path.insert(0, {str(tmp_path)!r})
        from cuco_tui.harness.plan import PerturbPlan, RunPlan
        from cuco_tui.harness.worker import Rank
        plan = RunPlan(mode="evaluate", workload="w", reference="reference.py", library="candidate.so", shapes=(),
                       rtol=0.02, floor=0.0, warmup=1, repetitions=1, nonce=1, rundir={str(tmp_path / "run")!r},
                       perturb=PerturbPlan({str(library)!r}, seed=1, rounds=1, unit_us=1000))
        try:
            Rank(plan, 0)
        except ImportError as exc:
            print(json.dumps(dict(stopped=str(exc))))
    """)
    assert got["stopped"] == "the stand-in CuPy stops the rank here"
    assert (tmp_path / "seen").read_text() == "perturber loaded"
