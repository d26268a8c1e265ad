"""The harness attention library (cuco_attn.h): finding cuDNN, building the library once per machine,
the manifest's `libraries`, the cascade's harness_libraries, and a candidate that includes the header.
Most of it runs anywhere; the real build needs cuDNN and the frontend (`pip install '.[attention]'`)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cuco_tui.toolchain import BuildCache, compile_candidate
from cuco_tui.toolchain import attention as attn
from cuco_tui.toolchain.attention import AttentionLibrary, ensure_library, find_cudnn, uses_attention
from cuco_tui.toolchain.toolchain import discover
from cuco_tui.evaluate import cascade
from cuco_tui.evaluate.cascade import evaluate, harness_libraries
from cuco_tui.core.result import Level, Status
from cuco_tui.harness.gpus import inventory
from cuco_tui.core.workload import WorkloadError
from cuco_tui.workload.manifest import REPO_WORKLOADS, load_workload
from cudnn_helpers import fake_cudnn
from repo_paths import REPO

TOOLCHAIN = discover()
needs_nvcc = pytest.mark.skipif(TOOLCHAIN.nvcc is None, reason="needs nvcc")
needs_toolchain = pytest.mark.skipif(not TOOLCHAIN.can_compile,
                                     reason="; ".join(TOOLCHAIN.problems) or "needs nvcc, NCCL and cuBLAS headers")
EXTRA = "cuco-tui[attention]"


def quiet(_progress) -> None:
    pass


# ---------------------------------------------------------------- uses_attention


@pytest.mark.parametrize("source, uses", [
    ('#include "cuco_attn.h"\n', True),
    ("#include <cuco_attn.h>\n", True),
    ('int x;\n  #  include "cuco_attn.h"\n', True),
    ('// #include "cuco_attn.h"\n', False),
    ('#include "cuco_runtime.cuh"\n#include <cudnn.h>\n', False),
    ('#include "my_cuco_attn.h"\n', False),
])
def test_uses_attention(source, uses):
    assert uses_attention(source) is uses


# ---------------------------------------------------------------- finding cuDNN


@pytest.fixture
def nothing_installed(monkeypatch, tmp_path):
    """No pip packages, no include roots, CUDA_HOME an empty folder (/usr/local/cuda is still searched)."""
    monkeypatch.setattr(attn, "package_dir", lambda name: None)
    monkeypatch.setattr(attn, "_include_roots", lambda: [])
    cuda = tmp_path / "cuda"
    cuda.mkdir()
    return {"CUDA_HOME": str(cuda)}


def test_nothing_found_names_the_pip_extra(nothing_installed):
    cudnn = find_cudnn(nothing_installed)
    assert cudnn.problem
    if Path("/usr/local/cuda/include/cudnn.h").exists():
        pytest.skip("this machine has cuDNN in /usr/local/cuda: the cudnn.h message cannot be seen")
    assert cudnn.include is None and cudnn.version == ""
    assert EXTRA in cudnn.problem and "CUCO_CUDNN_HOME" in cudnn.problem


def test_ensure_library_without_cudnn_reports_the_problem(nothing_installed, tmp_path):
    cache = BuildCache(tmp_path / "cache")
    lib = ensure_library(TOOLCHAIN, cache, env=nothing_installed)
    assert not lib.ok and lib.path is None and lib.preload() == []
    assert lib.problem == find_cudnn(nothing_installed).problem
    assert not cache.root.exists() or not list(cache.root.glob("libcuco_attn-*"))


def test_environment_variables_name_cudnn_and_the_frontend(nothing_installed, tmp_path):
    env = fake_cudnn(tmp_path)
    cudnn = find_cudnn(env)
    assert cudnn.include == Path(env["CUCO_CUDNN_HOME"]) / "include"
    assert cudnn.lib == Path(env["CUCO_CUDNN_HOME"]) / "lib"
    assert cudnn.frontend == Path(env["CUCO_CUDNN_FRONTEND_INCLUDE"])
    assert (cudnn.version, cudnn.frontend_version) == ("9.10.2", "1.13.0")
    assert cudnn.nvrtc == Path(env["CUDA_HOME"]) / "lib64" / "libnvrtc.so.13"
    assert cudnn.problem == ""


def test_frontend_missing_is_its_own_problem(nothing_installed, tmp_path):
    env = fake_cudnn(tmp_path)
    del env["CUCO_CUDNN_FRONTEND_INCLUDE"]
    cudnn = find_cudnn(env)
    assert cudnn.version == "9.10.2" and cudnn.frontend is None
    assert "cudnn_frontend.h" in cudnn.problem and "CUCO_CUDNN_FRONTEND_INCLUDE" in cudnn.problem
    assert EXTRA in cudnn.problem


# ---------------------------------------------------------------- building


@needs_nvcc
def test_a_failed_build_is_a_problem_with_the_compiler_output(nothing_installed, tmp_path):
    env = fake_cudnn(tmp_path)
    cache = BuildCache(tmp_path / "cache")
    lib = ensure_library(TOOLCHAIN, cache, env=env)
    assert not lib.ok and lib.path is None and lib.preload() == []
    first, _, tail = lib.problem.partition("\n")
    assert first.startswith("building the attention library failed (exit ")
    assert "cuDNN 9.10.2, frontend 1.13.0" in first
    assert "error" in tail  # the compiler's own words
    assert list(cache.root.glob("*.so")) == [] and list(cache.root.glob("*.tmp")) == []
    # Remembered: the next evaluation gets the same answer at once, not another build.
    again = ensure_library(TOOLCHAIN, cache, env=env)
    assert not again.ok and again.cached and again.problem == lib.problem


@pytest.mark.parametrize("cudnn,frontend,named", [((9, 6, 0), (1, 13, 0), "9.7"), ((9, 10, 2), (1, 12, 1), "1.13")])
def test_too_old_cudnn_or_frontend_is_named(tmp_path, cudnn, frontend, named):
    found = find_cudnn(fake_cudnn(tmp_path, cudnn, frontend))
    assert f"older than {named}" in found.problem and EXTRA in found.problem


_REAL = find_cudnn()


# Slow: the first call compiles the cudnn-frontend templates (about 75 s on 4 cores).
@pytest.mark.skipif(TOOLCHAIN.nvcc is None or bool(_REAL.problem),
                    reason=f"needs nvcc and cuDNN with the frontend ({_REAL.problem or 'no nvcc'})")
def test_the_real_library_builds_once_and_loads(tmp_path):
    from cuco_tui.harness.attention import AttentionError, Plan, loaded

    cache = BuildCache(tmp_path / "cache")
    built = ensure_library(TOOLCHAIN, cache)
    assert built.ok, built.problem
    assert not built.cached and built.seconds > 0 and built.path.parent == cache.root
    preload = built.preload()
    assert [Path(p).name for p in preload] == ["libnvrtc.so.13", "libcudnn.so.9", built.path.name]

    lib = loaded(preload)
    assert lib is not None
    assert lib.cuco_attn_cudnn_version() > 90000
    with pytest.raises(AttentionError, match="heads"):
        Plan.create(lib, heads_q=6, heads_kv=4, head_dim=64, rows_q=128, rows_kv=128)
    if inventory().count:  # a GPU host: a valid shape makes a plan
        Plan.create(lib, heads_q=8, heads_kv=2, head_dim=64, rows_q=128, rows_kv=128).close()
    else:
        with pytest.raises(AttentionError, match="cuco_attn_create: .+"):
            Plan.create(lib, heads_q=8, heads_kv=2, head_dim=64, rows_q=128, rows_kv=128)

    again = ensure_library(TOOLCHAIN, cache)  # a second evaluation finds it in the cache
    assert again.ok and again.path == built.path and again.preload() == preload
    assert again.cached and again.problem == "" and again.seconds == pytest.approx(built.seconds)


# ---------------------------------------------------------------- the manifest


def test_manifest_libraries():
    assert load_workload("cp_attention").libraries == ("attention",)
    assert load_workload("gemm_allgather").libraries == ()


def test_an_unknown_library_is_a_workload_error(tmp_path):
    root = shutil.copytree(REPO_WORKLOADS / "cp_attention", tmp_path / "cp_attention")
    manifest = root / "manifest.toml"
    text = manifest.read_text()
    assert 'libraries = ["attention"]' in text
    manifest.write_text(text.replace('libraries = ["attention"]', 'libraries = ["nope"]'))
    with pytest.raises(WorkloadError, match="`libraries`.*'nope'"):
        load_workload(root)


# ---------------------------------------------------------------- the cascade


INCLUDES = '#include "cuco_runtime.cuh"\n#include "cuco_attn.h"\n'
PLAIN = '#include "cuco_runtime.cuh"\n'


@pytest.fixture
def missing_library(monkeypatch):
    calls = []

    def fake(toolchain, cache):
        calls.append(toolchain)
        return AttentionLibrary(None, None, problem="x missing")

    monkeypatch.setattr(cascade, "ensure_library", fake)
    return calls


def test_a_candidate_that_includes_the_header_needs_the_library(missing_library):
    gemm = load_workload("gemm_allgather")
    assert harness_libraries(gemm, INCLUDES, TOOLCHAIN, BuildCache(), quiet) == ([], "x missing", "")
    assert len(missing_library) == 1


def test_a_workload_that_lists_the_library_does_without_it(missing_library):
    cp = load_workload("cp_attention")
    note = "the harness attention library is missing: x missing"  # carried into the results
    assert harness_libraries(cp, PLAIN, TOOLCHAIN, BuildCache(), quiet) == ([], "", note)
    assert len(missing_library) == 1  # the reference may use it: it was tried


def test_nothing_asks_for_the_library(monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("ensure_library was called")

    monkeypatch.setattr(cascade, "ensure_library", never)
    gemm = load_workload("gemm_allgather")
    assert harness_libraries(gemm, PLAIN, TOOLCHAIN, BuildCache(), quiet) == ([], "", "")
    assert harness_libraries(gemm, None, TOOLCHAIN, BuildCache(), quiet) == ([], "", "")


def test_a_built_library_is_preloaded(monkeypatch, tmp_path):
    ok = AttentionLibrary(tmp_path / "libcuco_attn-x.so", tmp_path / "libcudnn.so.9", tmp_path / "libnvrtc.so.13")
    monkeypatch.setattr(cascade, "ensure_library", lambda toolchain, cache: ok)
    gemm = load_workload("gemm_allgather")
    preload, problem, note = harness_libraries(gemm, INCLUDES, TOOLCHAIN, BuildCache(), quiet)
    assert problem == note == "" and preload == ok.preload()
    assert preload == [str(tmp_path / n) for n in ("libnvrtc.so.13", "libcudnn.so.9", "libcuco_attn-x.so")]


def attention_candidate(tmp_path: Path) -> Path:
    """gemm_allgather's seed, including cuco_attn.h and calling it in its init (inside EVOLVE)."""
    text = load_workload("gemm_allgather").seed.read_text()
    include, init = "#include <cublas_v2.h>\n", "  c->ctx = ctx;\n"
    assert include in text and init in text
    text = text.replace(include, include + '#include "cuco_attn.h"\n')
    text = text.replace(init, init + "  if (cuco_attn_cudnn_version() < 90000) return 1;\n")
    path = tmp_path / "attn_cand.cu"
    path.write_text(text)
    return path


@needs_toolchain
def test_a_candidate_including_the_header_compiles_without_cudnn(tmp_path):
    source = attention_candidate(tmp_path)
    build = compile_candidate(source, TOOLCHAIN, BuildCache(tmp_path / "cache"))
    assert build.ok, build.log[-2000:]
    assert build.library is not None and build.library.is_file()


@needs_toolchain
def test_a_candidate_including_the_header_stops_at_no_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("CUCO_NO_GPU", "1")
    monkeypatch.setattr(cascade, "ensure_library", lambda *a, **k: pytest.fail("built without GPUs"))
    r = evaluate(attention_candidate(tmp_path), load_workload("gemm_allgather"))
    assert r.status == Status.NO_GPU and r.level == Level.COMPILE, r.reason
    assert not [d for d in r.diagnostics if d.severity == "error"]


def test_the_descriptor_is_the_same_in_the_header_the_emulator_and_ctypes():
    """Three spellings of cuco_attn_desc (the C header, the CPU emulator's stand-in, the ctypes
    binding): a field added to one and not the others would pass every CPU test and fail on a GPU."""
    import re

    from cuco_tui.harness.attention import Desc

    root = REPO

    def fields(path: Path) -> list[str]:
        body = re.search(r"typedef struct cuco_attn_desc \{(.*?)\} cuco_attn_desc;", path.read_text(), re.S).group(1)
        names = []
        for decl in re.sub(r"//[^\n]*", "", body).split(";"):
            names += [n.strip().split()[-1] for n in decl.split(",") if n.strip()]
        return names

    header = fields(root / "cuco_tui" / "harness" / "runtime" / "cuco_attn.h")
    stub = fields(root / "workloads" / "cp_attention" / "emulator" / "stubs" / "cuco_attn.h")
    assert header == stub == [name for name, _ in Desc._fields_]
