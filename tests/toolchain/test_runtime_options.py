"""The runtime header's heavy parts come in only for the candidates that name them: libcu++'s
<cuda/atomic>, cooperative groups and NCCL's device API each cost about 2.5 s of nvcc a compile.
Its own flag signals (store_release, atomic_add_release, load_acquire) emit what cuda::atomic_ref
does, so the templates use them and compile without libcu++."""

from __future__ import annotations

import re
import subprocess

import pytest

from cuco_tui.toolchain.nvcc import nvcc_flags, runtime_defines
from cuco_tui.toolchain.toolchain import discover
from repo_paths import REPO

TOOLCHAIN = discover()
needs_nvcc = pytest.mark.skipif(not TOOLCHAIN.can_compile, reason="; ".join(TOOLCHAIN.problems) or "no toolchain")
SEEDS = sorted((REPO / "workloads").glob("*/seed.cu"))
HEAVY = {"-DCUCO_WITH_LIBCUDACXX", "-DCUCO_WITH_COOPERATIVE_GROUPS", "-DCUCO_WITH_NCCL_DEVICE"}
TEMPLATES = sorted((REPO / "workloads").glob("*/templates/*.cu.j2"))


def test_each_heavy_header_is_asked_for_by_the_names_it_declares():
    assert runtime_defines('#include "cuco_runtime.cuh"\n__global__ void k(int* p) { p[0] = 1; }') == []
    assert runtime_defines("cuda::atomic_ref<int, cuda::thread_scope_system> r(*p);") == ["-DCUCO_WITH_LIBCUDACXX"]
    assert runtime_defines("namespace cg = cooperative_groups;") == ["-DCUCO_WITH_COOPERATIVE_GROUPS"]
    assert runtime_defines("auto g = this_grid(); g.sync();") == ["-DCUCO_WITH_COOPERATIVE_GROUPS"]
    assert runtime_defines("ncclDevComm dc; ncclLsaBarrierSession<ncclCoopCta> bar(...);") == [
        "-DCUCO_WITH_NCCL_DEVICE"]
    assert runtime_defines("cuco::lsa_devcomm_create(ctx, comm, 4, &dc);") == ["-DCUCO_WITH_NCCL_DEVICE"]
    assert runtime_defines("ncclSymPtr<float> p; ncclLLA2AHandle h;") == ["-DCUCO_WITH_NCCL_DEVICE"]
    assert runtime_defines("using namespace cuda;") == ["-DCUCO_WITH_LIBCUDACXX"]
    assert runtime_defines("ncclGetUniqueId(&id); ncclGetErrorString(rc);") == []  # the host API is in nccl.h
    assert runtime_defines("cuStreamWriteValue64(s, (CUdeviceptr)f, 1, 0);") == ["-DCUCO_WITH_DRIVER_API"]
    lsa = (REPO / "workloads" / "gemm_allgather" / "candidates" / "lsa_allgather.cu").read_text()
    assert set(runtime_defines(lsa)) == {"-DCUCO_WITH_LIBCUDACXX", "-DCUCO_WITH_COOPERATIVE_GROUPS",
                                         "-DCUCO_WITH_NCCL_DEVICE"}


def test_the_seeds_and_the_flag_templates_need_none_of_them():
    assert len(SEEDS) >= 6
    assert {p.parent.name: runtime_defines(p.read_text()) for p in SEEDS} == {p.parent.name: [] for p in SEEDS}
    # Only the LSA template uses the device API (and its memory orders); every other template
    # signals through the runtime's helpers.
    heavy = {p.name for p in TEMPLATES if set(runtime_defines(p.read_text())) & HEAVY}
    assert heavy == {"lsa_gather.cu.j2"}, heavy
    # The driver API (cheap: <cuda.h>) for the templates that write stream memory operations.
    assert {p.name for p in TEMPLATES if "-DCUCO_WITH_DRIVER_API" in runtime_defines(p.read_text())} == {
        "fused_tile.cu.j2", "ce_push.cu.j2", "ce_fold.cu.j2"}


@needs_nvcc
def test_a_seed_is_compiled_without_libcudacxx_and_the_device_api():
    """(A candidate that names them builds: the LSA template does, in the agents' template tests.)"""
    flags = [f for f in nvcc_flags(TOOLCHAIN) if f != "-shared"]
    seed = REPO / "workloads" / "gemm_allgather" / "seed.cu"
    pre = subprocess.run([str(TOOLCHAIN.nvcc), *flags, *runtime_defines(seed.read_text()), "-E", "-x", "cu",
                          str(seed), "-o", "-"], capture_output=True, text=True, check=True).stdout
    assert "cuda/atomic" not in pre and "nccl_device" not in pre and "cooperative_groups.h" not in pre


FLAG_OPS = re.compile(r"^\s*((?:st|ld|atom|red|fence|membar)\.(?!param|global\.u)[^;]*);", re.M)


def _kernels(body) -> str:
    return "".join(body(ty, suffix, name) for ty, suffix, name in
                   (("unsigned long long", "ull", "k64"), ("unsigned", "u", "k32")))


@needs_nvcc
def test_the_runtimes_flag_signals_emit_the_same_ptx_as_cuda_atomic_ref(tmp_path):
    libcu = "#include <cuda/atomic>\n" + _kernels(lambda ty, suffix, name: (
        f"__global__ void {name}({ty}* f, {ty}* g, {ty}* out) {{\n"
        f"  cuda::atomic_ref<{ty}, cuda::thread_scope_system> a(*f);\n"
        f"  a.store(5{suffix}, cuda::memory_order_release);\n"
        f"  cuda::atomic_ref<{ty}, cuda::thread_scope_system> b(*g);\n"
        f"  out[0] = b.fetch_add(1{suffix}, cuda::memory_order_release);\n"
        f"  cuda::atomic_ref<const {ty}, cuda::thread_scope_system> c(*f);\n"
        f"  out[1] = c.load(cuda::memory_order_acquire);\n}}\n"))
    ours = '#include "cuco_runtime.cuh"\n' + _kernels(lambda ty, suffix, name: (
        f"__global__ void {name}({ty}* f, {ty}* g, {ty}* out) {{\n"
        f"  cuco::store_release(f, 5{suffix});\n"
        f"  out[0] = cuco::atomic_add_release(g, 1{suffix});\n"
        f"  out[1] = cuco::load_acquire((const {ty}*)f);\n}}\n"))
    ops = {}
    flags = [f for f in nvcc_flags(TOOLCHAIN) if f not in ("-shared", "-cudart", "shared")]
    for name, text in (("libcu", libcu), ("ours", ours)):
        (tmp_path / f"{name}.cu").write_text(text)
        subprocess.run([str(TOOLCHAIN.nvcc), *flags, "-ptx", str(tmp_path / f"{name}.cu"), "-o",
                        str(tmp_path / f"{name}.ptx")], check=True, capture_output=True)
        ptx = (tmp_path / f"{name}.ptx").read_text()
        ops[name] = [re.sub(r"%\w+", "R", re.sub(r"\s+", "", m)) for m in FLAG_OPS.findall(ptx)]
    assert ops["ours"] == ops["libcu"]
    assert [op.split("R")[0] for op in ops["ours"]] == [
        "st.release.sys.b64[", "atom.add.release.sys.u64", "ld.acquire.sys.b64",
        "st.release.sys.b32[", "atom.add.release.sys.u32", "ld.acquire.sys.b32"]
