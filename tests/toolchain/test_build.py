"""L1 build: nvcc output parsing (recorded samples), the build cache, and real nvcc compiles."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest

from cuco_tui.toolchain import BuildCache, BuildResult, compile_candidate, parse_nvcc_output
from cuco_tui.toolchain.nvcc import nvcc_flags
from cuco_tui.harness.env import NO_MULTICAST
from cuco_tui.toolchain.toolchain import Library, Toolchain, discover
from repo_paths import REPO

WORKLOAD = REPO / "workloads" / "gemm_allgather"
SEED = WORKLOAD / "seed.cu"
TOOLCHAIN = discover()
needs_nvcc = pytest.mark.skipif(not TOOLCHAIN.can_compile, reason="; ".join(TOOLCHAIN.problems) or "no toolchain")


def write_source(path: Path, lines: dict[int, str], total: int = 40) -> Path:
    """A file whose line N (1-based) is lines[N]; other lines are filler comments."""
    text = [lines.get(i, f"// line {i}") for i in range(1, max(total, max(lines)) + 1)]
    path.write_text("\n".join(text) + "\n")
    return path


def col_of(line: str, needle: str) -> int:
    return line.index(needle) + 1


# ---------------------------------------------------------------- parsing recorded output

MACRO_LINE = "  CUCO_TRY_CUDA(ctx, cudaMalloc(&c->gathered, (size_t)c->M * c->K * bogus_bytes));"
# cudafe++ echoes the *preprocessed* line: the macro is expanded and its argument stringified.
EDG_MACRO = """\
{path}(30): error: identifier "bogus_bytes" is undefined
    do {{ if (int cuco_rc_ = ::cuco::check_cuda((ctx), (cudaMalloc(&c->gathered, (size_t)c->M * c->K * bogus_bytes)), "cudaMalloc(&c->gathered, (size_t)c->M * c->K * bogus_bytes)", 30)) return cuco_rc_; }} while (0);
                                                                                                      ^

1 error detected in the compilation of "{path}".
"""


def test_edg_error_in_macro_maps_caret_to_real_line(tmp_path):
    src = write_source(tmp_path / "cand.cu", {30: MACRO_LINE})
    diags = parse_nvcc_output(EDG_MACRO.format(path=src), src, "my_candidate.cu")
    assert len(diags) == 1  # the "1 error detected" summary is not a diagnostic
    d = diags[0]
    assert (d.level, d.severity, d.code) == (1, "error", "nvcc")
    assert d.message == 'identifier "bogus_bytes" is undefined'
    assert (d.file, d.line) == ("my_candidate.cu", 30)
    assert d.source_line == MACRO_LINE  # the real line, not the expanded echo
    assert d.column == col_of(MACRO_LINE, "bogus_bytes")


def test_edg_plain_error_and_warning_with_template_context(tmp_path):
    l13 = "template <typename T> __global__ void k(T* p) { p[threadIdx.x] = nothere(p); }"
    l14 = "static void use_k(float* p) { k<<<1, 32>>>(p); }"
    src = write_source(tmp_path / "e2.cu", {13: l13, 14: l14})
    out = """\
e2.cu(13): error: identifier "nothere" is undefined
  template <typename T> __attribute__((global)) void k(T* p) { p[threadIdx.x] = nothere(p); }
                                                                                ^
          detected during instantiation of "void k(T *) [with T=float]" at line 14

e2.cu(14): warning #177-D: function "use_k" was declared but never referenced
  static void use_k(float* p) { k<<<1, 32>>>(p); }
              ^

Remark: The warnings can be suppressed with "-diag-suppress <warning-number>"

1 error detected in the compilation of "e2.cu".
"""
    err, warn = parse_nvcc_output(out, src)
    assert (err.severity, err.file, err.line, err.column) == ("error", "e2.cu", 13, col_of(l13, "nothere"))
    assert err.source_line == l13
    assert err.message.splitlines()[0] == 'identifier "nothere" is undefined'
    assert 'detected during instantiation of "void k(T *) [with T=float]" at line 14' in err.message
    assert (warn.severity, warn.line, warn.column, warn.code) == ("warning", 14, col_of(l14, "use_k"), "nvcc")
    assert "declared but never referenced" in warn.message and "177" in warn.message


def test_edg_tabs_in_source_are_squeezed_in_the_echo(tmp_path):
    line = "\tint\tx = \tundefined_tab;"
    src = write_source(tmp_path / "t.cu", {32: line})
    out = 't.cu(32): error: identifier "undefined_tab" is undefined\n   int x = undefined_tab;\n           ^\n'
    (d,) = parse_nvcc_output(out, src)
    assert d.column == col_of(line, "undefined_tab") == 11
    assert d.source_line == line


def test_edg_error_in_header_keeps_header_and_folds_notes_and_context(tmp_path):
    header = tmp_path / "include" / "cuco_runtime.cuh"
    header.parent.mkdir()
    hline = "  for (uint32_t polls = 1; seen < expected; ++polls) {"
    write_source(header, {245: hline}, total=250)
    src = write_source(tmp_path / "e9.cu", {14: "// uses wait_geq"})
    out = f"""\
{header}(245): error: no operator "<" matches these operands
            operand types are: Opaque < Opaque
    for (uint32_t polls = 1; seen < expected; ++polls) {{
                                  ^
/usr/local/cuda-13.0/bin/../targets/x86_64-linux/include/cuda_bf16.hpp(358): note #3326-D: function "operator<(const __nv_bfloat162 &, const __nv_bfloat162 &)" does not match because argument #1 does not match parameter
                                               bool operator<(const __nv_bfloat162 &lh, const __nv_bfloat162 &rh) {{ return __hblt2(lh, rh); }}
                                                    ^
          detected during:
            instantiation of "T cuco::wait_geq(cuco::Trace, int, int, uint64_t, const T *, T) [with T=Opaque]" at line 14 of {src}
            instantiation of "T relay(const T *) [with T=Opaque]" at line 15 of {src}

1 error detected in the compilation of "{src}".
"""
    (d,) = parse_nvcc_output(out, src)
    assert (d.file, d.line, d.severity) == ("cuco_runtime.cuh", 245, "error")
    assert d.source_line == hline
    assert d.column == col_of(hline, "<")
    lines = d.message.splitlines()
    assert lines[0] == 'no operator "<" matches these operands'
    assert "operand types are: Opaque < Opaque" in lines[1]
    assert any("note:" in ln and "cuda_bf16.hpp" in ln for ln in lines)
    assert any("detected during:" in ln for ln in lines)
    assert any(f"at line 14 of {src}" in ln for ln in lines)


def test_header_that_cannot_be_read_uses_the_echoed_line(tmp_path):
    src = write_source(tmp_path / "c.cu", {1: "//"})
    out = ('/nowhere/include/nccl_device/core.h(77): error: expected a ";"\n'
           '    int x = 1\n'
           '             ^\n')
    (d,) = parse_nvcc_output(out, src)
    assert (d.file, d.line, d.column) == ("core.h", 77, 12)
    assert d.source_line == "  int x = 1"


def test_gcc_messages_with_context_and_display_columns(tmp_path):
    l14 = "static int fcall() {\tforbidden(); return 1; }"
    src = write_source(tmp_path / "e7.cu", {13: '#include "does_not_exist.h"', 14: l14})
    out = f"""\
In function ‘int fcall()’,
    inlined from ‘void __static_initialization_and_destruction_0(int, int)’ at e7.cu:15:23:
e7.cu:14:34: error: call to ‘forbidden’ declared with attribute error: do not call me
   14 | static int fcall() {{	forbidden(); return 1; }}
      |                             ~~~~~~~~~^~
{src}:13:10: fatal error: does_not_exist.h: No such file or directory
   13 | #include "does_not_exist.h"
      |          ^~~~~~~~~~~~~~~~~~
compilation terminated.
gcc: error: unrecognized command-line option ‘-fbogus’
"""
    call, inc, flag = parse_nvcc_output(out, src)
    # gcc counts display columns (a tab reaches the next multiple of 8): 34 is "(" here.
    assert (call.code, call.file, call.line, call.column) == ("host-compiler", "e7.cu", 14, l14.index("(", 25) + 1)
    assert call.source_line == l14
    assert "In function ‘int fcall()’" in call.message
    assert (inc.severity, inc.line, inc.column) == ("error", 13, 10)
    assert inc.message == "does_not_exist.h: No such file or directory"
    assert flag.code == "host-compiler" and "-fbogus" in flag.message


def test_assembler_ptxas_linker_nvlink(tmp_path):
    src = write_source(tmp_path / "k.cu", {13: 'static void h() { asm("nope"); }'})
    gas = "k.cu: Assembler messages:\nk.cu:13: Error: no such instruction: `nope'\n"
    (g,) = parse_nvcc_output(gas, src)
    assert (g.code, g.line, g.severity) == ("host-compiler", 13, "error") and "no such instruction" in g.message
    assert g.source_line.startswith("static void h()")

    ptx = ("ptxas /tmp/tmpxft_00001f5a_00000000-6_k.ptx, line 26; error   : Unknown modifier '.instr'\n"
           "ptxas warning : Value of threads per SM for entry _Z5heavyPf is out of range. .minnctapersm will be ignored\n"
           "ptxas info    : 0 bytes gmem\n"
           "ptxas fatal   : Ptx assembly aborted due to errors\n")
    err, warn = parse_nvcc_output(ptx, src, "shown.cu")
    assert (err.code, err.severity, err.file) == ("ptxas", "error", "shown.cu")
    assert "Unknown modifier '.instr'" in err.message and "line 26" in err.message
    assert (warn.code, warn.severity) == ("ptxas", "warning") and "_Z5heavyPf" in warn.message
    (fatal,) = parse_nvcc_output("ptxas fatal   : Unresolved extern function '_Z7ext_devi'\n", src)
    assert (fatal.code, fatal.severity) == ("ptxas", "error") and "Unresolved extern function" in fatal.message

    ld = ("/usr/bin/ld: /tmp/tmpxft_000020ec_00000000-11_k.o: in function `cuco_launch':\n"
          "tmpxft_000020ec_00000000-6_k.cudafe1.cpp:(.text+0x31a): undefined reference to `not_defined_anywhere'\n"
          "tmpxft_000020ec_00000000-6_k.cudafe1.cpp:(.text+0x3aa): undefined reference to `not_defined_anywhere'\n"
          "collect2: error: ld returned 1 exit status\n")
    (u,) = parse_nvcc_output(ld, src)  # one per symbol; collect2's summary dropped
    assert (u.code, u.severity) == ("link", "error")
    assert "undefined reference to `not_defined_anywhere'" in u.message and "cuco_launch" in u.message

    missing = "/usr/bin/ld: cannot find -l:libnotthere.so.7: No such file or directory\ncollect2: error: ld returned 1 exit status\n"
    (c,) = parse_nvcc_output(missing, src)
    assert c.code == "link" and c.message.startswith("cannot find -l:libnotthere.so.7")

    (nl,) = parse_nvcc_output("nvlink error   : Undefined reference to '_Z7ext_devi' in '/tmp/x.o'\n", src)
    assert (nl.code, nl.severity) == ("link", "error") and "_Z7ext_devi" in nl.message

    (nv,) = parse_nvcc_output("nvcc fatal   : Unsupported gpu architecture 'compute_999'\n", src)
    assert (nv.code, nv.severity) == ("nvcc", "error") and "compute_999" in nv.message


def test_unrecognized_failure_still_gives_an_error(tmp_path):
    src = write_source(tmp_path / "x.cu", {1: "//"})
    noise = "\n".join(f"step {i}" for i in range(40)) + "\nSegmentation fault (core dumped)\n"
    (d,) = parse_nvcc_output(noise, src, failed=True)
    assert d.severity == "error" and d.code == "nvcc"
    assert "Segmentation fault" in d.message and "step 39" in d.message and "step 5\n" not in d.message
    assert parse_nvcc_output(noise, src) != []  # guessed from the text
    assert parse_nvcc_output("", src, failed=True)[0].severity == "error"
    assert parse_nvcc_output("ptxas info    : 0 bytes gmem\n", src, failed=False) == []
    # A failed run whose only recognized message is a warning still gets an error.
    warn_only = "nvcc warning : something odd\n"
    diags = parse_nvcc_output(warn_only, src, failed=True)
    assert [d.severity for d in diags] == ["warning", "error"]


# ---------------------------------------------------------------- compile_candidate without nvcc


def fake_toolchain(tmp_path: Path, script: str) -> Toolchain:
    """A toolchain whose "nvcc" is a shell script; the libraries are empty stand-ins."""
    libs = []
    for name, soname in (("nccl", "libnccl.so.2"), ("cublas", "libcublas.so.13")):
        root = tmp_path / name
        (root / "include").mkdir(parents=True)
        (root / "lib").mkdir()
        (root / "lib" / soname).write_bytes(b"")
        libs.append(Library(name, root / "include", root / "lib", soname))
    nvcc = tmp_path / "fake-nvcc"
    nvcc.write_text("#!/bin/bash\n" + script)
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IEXEC)
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    return Toolchain(nvcc, "fake 1.0", libs[0], libs[1], runtime)


def test_missing_toolchain_is_a_diagnostic(tmp_path):
    broken = Toolchain(None, "", Library("nccl", None, None, "libnccl.so.2"),
                       Library("cublas", None, None, "libcublas.so.13"),
                       problems=("nvcc was not found: install the CUDA toolkit 13",))
    r = compile_candidate(SEED, broken, BuildCache(tmp_path / "cache"))
    assert not r.ok and r.library is None and not r.cached
    (d,) = r.diagnostics
    assert (d.code, d.severity) == ("toolchain", "error") and "nvcc was not found" in d.message


def test_child_env_output_move_and_bad_arch(tmp_path, monkeypatch):
    # The fake nvcc records its environment and writes the library named after -o.
    script = ('out=""; while [ $# -gt 0 ]; do if [ "$1" = -o ]; then out="$2"; fi; shift; done\n'
              'env > "$(dirname "$0")/env.txt"; echo built > "$out"\n')
    tc = fake_toolchain(tmp_path, script)
    src = write_source(tmp_path / "cand.cu", {1: "// fine"})
    cache = BuildCache(tmp_path / "cache")
    r = compile_candidate(src, tc, cache)
    assert r.ok and r.library == cache.library_path(r.key) and r.library.read_text() == "built\n"
    env = dict(ln.split("=", 1) for ln in (tmp_path / "env.txt").read_text().splitlines() if "=" in ln)
    for k, v in NO_MULTICAST.items():
        assert env[k] == v
    assert not [p for p in cache.root.iterdir() if p.name.startswith(".")]  # no temp files left
    assert r.command[0] == str(tc.nvcc) and r.command[-2:] == ["-o", str(r.library)]
    assert "-gencode=arch=compute_90a,code=sm_90a" in r.command

    monkeypatch.setenv("CUCO_CUDA_ARCH", "100a")
    assert "-gencode=arch=compute_100a,code=sm_100a" in nvcc_flags(tc)
    monkeypatch.setenv("CUCO_CUDA_ARCH", "hopper")
    bad = compile_candidate(src, tc, cache)
    assert not bad.ok and bad.diagnostics[0].code == "toolchain" and "CUCO_CUDA_ARCH" in bad.diagnostics[0].message


def test_timeout_is_a_diagnostic_not_an_exception(tmp_path):
    tc = fake_toolchain(tmp_path, "sleep 30 &\nwait\n")  # a child that would hold the pipe open
    src = write_source(tmp_path / "slow.cu", {1: "//"})
    cache = BuildCache(tmp_path / "cache")
    started = time.monotonic()
    r = compile_candidate(src, tc, cache, timeout=0.5)
    assert time.monotonic() - started < 10
    assert not r.ok and r.library is None
    (d,) = r.diagnostics
    assert (d.code, d.severity) == ("timeout", "error") and "did not finish within" in d.message
    assert cache.load(r.key) is None  # timeouts are not cached


def test_default_cache_folder_follows_env(tmp_path, monkeypatch):
    monkeypatch.setenv("CUCO_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert BuildCache().root == tmp_path / "elsewhere"
    monkeypatch.delenv("CUCO_CACHE_DIR")
    assert BuildCache().root == Path.home() / ".cache" / "cuco-tui" / "build"


# ---------------------------------------------------------------- real nvcc


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("build-cache")


@pytest.fixture(scope="module")
def seed_build(cache_dir) -> BuildResult:
    return compile_candidate(SEED, TOOLCHAIN, BuildCache(cache_dir))


def broken_seed() -> tuple[str, int, int, str]:
    """The seed with an undefined identifier on a known line of the EVOLVE block, once in plain
    code and once inside a CUCO_TRY_CUDA macro argument."""
    lines = SEED.read_text().split("\n")
    plain = next(i for i, ln in enumerate(lines) if 'c->K = cuco::dim(ctx, "K");' in ln)
    macro = next(i for i, ln in enumerate(lines) if "cudaMalloc(&c->gathered" in ln)
    start = next(i for i, ln in enumerate(lines) if "EVOLVE-BLOCK-START" in ln)
    end = next(i for i, ln in enumerate(lines) if "EVOLVE-BLOCK-END" in ln)
    assert start < plain < macro < end
    lines[plain] = '  c->K = cuco::dim(ctx, "K") + not_declared_k;'
    lines[macro] = lines[macro].replace("* 2)", "* bogus_bytes)")
    return "\n".join(lines), plain + 1, macro + 1, lines[macro]


@pytest.fixture(scope="module")
def broken(tmp_path_factory, cache_dir):
    text, plain, macro, _ = broken_seed()
    src = tmp_path_factory.mktemp("broken") / "broken.cu"
    src.write_text(text)
    return src, plain, macro, compile_candidate(src, TOOLCHAIN, BuildCache(cache_dir))


@needs_nvcc
def test_seed_compiles_and_exports_the_abi(seed_build):
    r = seed_build
    assert r.ok, "\n".join(d.render() for d in r.diagnostics) + r.log
    assert not r.cached and r.library is not None and r.library.is_file()
    assert r.library.suffix == ".so"
    assert not [d for d in r.diagnostics if d.severity == "error"]
    nm = shutil.which("nm")
    assert nm, "nm (binutils) is needed to check the exports"
    exported = subprocess.run([nm, "-D", "--defined-only", str(r.library)], capture_output=True, text=True,
                              check=True).stdout
    symbols = {ln.split()[-1] for ln in exported.splitlines() if ln.strip()}
    assert {"cuco_init", "cuco_launch", "cuco_teardown"} <= symbols
    record = json.loads(Path(str(r.library)[:-3] + ".json").read_text())
    assert record["ok"] and record["key"] == r.key and "library" not in record


@needs_nvcc
def test_second_compile_is_a_fast_cache_hit(seed_build, cache_dir):
    started = time.monotonic()
    again = compile_candidate(SEED, TOOLCHAIN, BuildCache(cache_dir))
    elapsed = time.monotonic() - started
    assert again.cached and again.ok and again.library == seed_build.library
    assert again.key == seed_build.key and again.seconds == seed_build.seconds
    assert again.diagnostics == seed_build.diagnostics
    assert elapsed < min(1.0, seed_build.seconds / 4)


@needs_nvcc
def test_compile_error_points_at_the_line(broken):
    src, plain, macro, r = broken
    assert not r.ok and r.library is None and not r.cached
    errors = [d for d in r.diagnostics if d.severity == "error"]
    assert len(errors) == 2, "\n".join(d.render() for d in r.diagnostics)
    real = src.read_text().split("\n")
    by_line = {d.line: d for d in errors}
    first = by_line[plain]
    assert (first.level, first.code, first.file) == (1, "nvcc", "broken.cu")
    assert first.message == 'identifier "not_declared_k" is undefined'
    assert first.source_line == real[plain - 1]
    assert first.column == col_of(real[plain - 1], "not_declared_k")
    second = by_line[macro]
    assert second.message == 'identifier "bogus_bytes" is undefined'
    assert second.source_line == real[macro - 1]  # the line as written, not the macro expansion
    assert second.column == col_of(real[macro - 1], "bogus_bytes")
    assert "error" in r.log and str(src) in r.log


@needs_nvcc
def test_failed_build_is_cached_with_its_diagnostics(broken, cache_dir):
    src, _, _, first = broken
    cache = BuildCache(cache_dir)
    assert cache.record_path(first.key).is_file() and not cache.library_path(first.key).exists()
    started = time.monotonic()
    again = compile_candidate(src, TOOLCHAIN, cache)
    assert time.monotonic() - started < 1.0
    assert again.cached and not again.ok and again.library is None
    assert again.diagnostics == first.diagnostics and again.log == first.log and again.seconds == first.seconds


@needs_nvcc
def test_one_byte_changes_the_key(broken, cache_dir, tmp_path):
    src, plain, _, first = broken
    text = src.read_text()
    changed = tmp_path / "broken.cu"
    changed.write_text(text.replace("// gemm_allgather candidate", "// gemm_allgather candidatf", 1))
    assert len(changed.read_bytes()) == len(src.read_bytes())
    r = compile_candidate(changed, TOOLCHAIN, BuildCache(cache_dir))
    assert not r.cached and r.key != first.key
    assert [(d.line, d.column, d.message) for d in r.diagnostics] == [
        (d.line, d.column, d.message) for d in first.diagnostics]


def test_the_build_pool_says_each_build_queued_then_started_with_the_count_of_that_moment(tmp_path):
    """One builder, eight builds (each fails at once: a toolchain without nvcc): every build is
    reported queued before started, and each count is the queue's at that moment, whatever
    order the threads ran in."""
    from cuco_tui.toolchain import BuildPool

    broken = Toolchain(None, "", Library("nccl", None, None, "libnccl.so.2"),
                       Library("cublas", None, None, "libcublas.so.13"), problems=("nvcc was not found",))
    pool = BuildPool(1, toolchain=broken, cache=BuildCache(tmp_path / "cache"))
    heard: list[tuple[str, str, int]] = []
    try:
        futures = [pool.submit(SEED, queued=lambda n, i=i: heard.append(("queued", f"b{i}", n)),
                               started=lambda n, i=i: heard.append(("started", f"b{i}", n))) for i in range(8)]
        assert all(not f.result(timeout=60).ok for f in futures)
    finally:
        pool.shutdown()
    waiting = 0
    for what, _, n in heard:
        waiting += 1 if what == "queued" else -1
        assert n == waiting, heard
    at = {(what, build): i for i, (what, build, _) in enumerate(heard)}
    assert all(at[("queued", f"b{i}")] < at[("started", f"b{i}")] for i in range(8)), heard
    assert len(heard) == 16 and waiting == 0 and pool.waiting == 0


# ---------------------------------------------------------------- cuBLASLt

LT_CALL = "// cuco-design: x\nstatic void f() { cublasLtMatmul(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0); }\n"


def test_a_candidate_that_calls_cublaslt_links_it_from_cublas_folder(tmp_path):
    """libcublasLt.so.13 beside libcublas.so.13 is linked (and its folder is on the rpath) for a
    candidate that calls cuBLASLt; the others keep the link line they had."""
    tc = fake_toolchain(tmp_path, 'out=""; while [ $# -gt 0 ]; do if [ "$1" = -o ]; then out="$2"; fi; shift; done\n'
                                  'echo built > "$out"\n')
    (tc.cublas.lib / "libcublasLt.so.13").write_bytes(b"")
    cache = BuildCache(tmp_path / "cache")
    lt = compile_candidate(write_source(tmp_path / "lt.cu", {1: LT_CALL}), tc, cache)
    assert lt.ok and "-l:libcublasLt.so.13" in lt.command
    assert f"-L{tc.cublas.lib}" in lt.command and f"-rpath={tc.cublas.lib}" in lt.command
    plain = compile_candidate(write_source(tmp_path / "plain.cu", {1: "// cublas_v2 only"}), tc, cache)
    assert plain.ok and not any("cublasLt" in w for w in plain.command)


def test_cublaslt_missing_beside_cublas_is_one_line_and_nothing_is_built(tmp_path):
    tc = fake_toolchain(tmp_path, "echo ran > \"$(dirname \"$0\")/ran.txt\"\n")
    cache = BuildCache(tmp_path / "cache")
    r = compile_candidate(write_source(tmp_path / "lt.cu", {1: LT_CALL}), tc, cache)
    assert not r.ok and r.library is None
    (d,) = r.diagnostics
    assert (d.code, d.severity) == ("toolchain", "error") and "\n" not in d.message
    assert "libcublasLt.so.13" in d.message and str(tc.cublas.lib) in d.message
    assert not (tmp_path / "ran.txt").exists()  # nvcc was never started


@needs_nvcc
def test_a_cublaslt_candidate_needs_the_library_it_calls(tmp_path):
    """A real build: the library records libcublasLt.so.13 as needed (a shared library may leave a
    symbol undefined at link time; without the flag it would rest on libcublas loading it)."""
    src = tmp_path / "lt.cu"
    src.write_text(SEED.read_text().replace(
        "// EVOLVE-BLOCK-END", "#include <cublasLt.h>\nint lt_probe() { cublasLtHandle_t h; "
        "return (int)cublasLtCreate(&h); }\n// EVOLVE-BLOCK-END", 1))
    r = compile_candidate(src, TOOLCHAIN, BuildCache(tmp_path / "cache"))
    assert r.ok, "\n".join(d.render() for d in r.diagnostics) + r.log
    dynamic = subprocess.run(["readelf", "-d", str(r.library)], capture_output=True, text=True, check=True).stdout
    assert "[libcublasLt.so.13]" in dynamic
