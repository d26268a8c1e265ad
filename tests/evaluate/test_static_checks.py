"""L0 static checks: regions, frozen text, forbidden calls and includes, the C ABI, the design line."""

from __future__ import annotations


import pytest

from cuco_tui.core.result import Diagnostic
from cuco_tui.evaluate.static_checks import check_static, is_rejected
from cuco_tui.source.regions import Region, design_of, frozen_hash, split_regions
from repo_paths import REPO

WORKLOAD = REPO / "workloads" / "gemm_allgather"
SEED = (WORKLOAD / "seed.cu").read_text()
LSA = (WORKLOAD / "candidates" / "lsa_allgather.cu").read_text()
SEED_LINES = SEED.split("\n")
DESIGN_LINE = next(i for i, l in enumerate(SEED_LINES, 1) if l.startswith("// cuco-design:"))
INJECT_LINE = DESIGN_LINE + 1  # where `inject` puts the first added line


def line_of(text: str, needle: str) -> int:
    return next(i for i, l in enumerate(text.split("\n"), 1) if needle in l)


def inject(code: str, base: str = SEED) -> str:
    """`base` with `code` (one or more lines) added inside the EVOLVE block, right after the
    design line, so that its first line is line INJECT_LINE."""
    lines = base.split("\n")
    at = next(i for i, l in enumerate(lines) if l.startswith("// cuco-design:")) + 1
    return "\n".join(lines[:at] + code.split("\n") + lines[at:])


def check(text: str) -> list[Diagnostic]:
    return check_static(text, SEED, "cand.cu")


def codes(diags: list[Diagnostic]) -> set[str]:
    return {d.code for d in diags}


def errors(diags: list[Diagnostic], code: str) -> list[Diagnostic]:
    return [d for d in diags if d.code == code and d.severity == "error"]


# ------------------------------------------------------------------ the shipped candidates


def test_seed_passes_against_itself():
    assert check_static(SEED, SEED, "seed.cu") == []


def test_lsa_candidate_passes():
    assert check_static(LSA, SEED, "lsa_allgather.cu") == []
    assert frozen_hash(LSA) == frozen_hash(SEED)


def test_split_regions_of_seed():
    regions = split_regions(SEED)
    assert regions.diagnostics == []
    start, end = line_of(SEED, "EVOLVE-BLOCK-START"), line_of(SEED, "EVOLVE-BLOCK-END")
    assert [(r.kind, r.start_line, r.end_line) for r in regions] == [
        ("frozen", 1, start - 1),
        ("evolve", start + 1, end - 1),
        ("frozen", end + 1, len(SEED.rstrip("\n").split("\n"))),
    ]
    assert all(isinstance(r, Region) for r in regions)
    assert regions[1].text.startswith("// cuco-design:")
    assert "EVOLVE-BLOCK" not in regions[1].text
    assert regions[0].text.endswith('#include "cuco_runtime.cuh"\n')
    assert regions[2].text.startswith("\nCUCO_EXPORT int cuco_init")


def test_split_regions_empty_block_and_markers_at_edges():
    text = "// EVOLVE-BLOCK-START\n// EVOLVE-BLOCK-END\n"
    regions = split_regions(text)
    assert regions.diagnostics == []
    assert [(r.kind, r.start_line, r.end_line, r.text) for r in regions] == [
        ("frozen", 1, 0, ""), ("evolve", 2, 1, ""), ("frozen", 3, 2, "")]


def test_design_of():
    assert design_of(SEED)["backend"] == "nccl_host"
    assert design_of(LSA)["comm_sms"] == "all"


# ------------------------------------------------------------------ frozen regions


def test_edit_inside_block_passes():
    text = SEED.replace("const float alpha = 1.0f, beta = 0.0f;",
                        "const float alpha = 1.0f;\n  const float beta = 0.0f;  // split in two")
    assert text != SEED
    assert check(text) == []
    assert check(inject("constexpr int kUnused = 3;\n\n", LSA)) == []


def test_edit_in_frozen_part_is_rejected_naming_the_line():
    old = "  return candidate_launch(static_cast<Candidate*>(state), stream);"
    new = "  return candidate_launch(reinterpret_cast<Candidate*>(state), stream);"
    text = LSA.replace(old, new)
    diags = check(text)
    assert is_rejected(diags)
    [d] = errors(diags, "frozen-region")
    cand_line, seed_line = line_of(text, new), line_of(SEED, old)
    assert cand_line != seed_line  # the blocks differ in length; both numbers must be right
    assert d.line == cand_line
    assert d.source_line == new
    assert d.column == len("  return candidate_launch(") + 1
    assert f"line {cand_line} differs from the seed" in d.message
    assert f"seed line {seed_line} is `{old.strip()}`" in d.message
    assert "only code between EVOLVE-BLOCK markers may change" in d.message
    assert d.file == "cand.cu" and d.level == 0
    assert frozen_hash(text) != frozen_hash(SEED)


def test_edit_in_header_comment_is_rejected():
    text = SEED.replace("// Everything outside the EVOLVE blocks is frozen", "// Everything outside is frozen")
    [d] = errors(check(text), "frozen-region")
    assert d.line == 4


def test_added_frozen_line_at_end_is_rejected():
    text = SEED.rstrip("\n") + "\nstatic int extra = 0;\n"
    [d] = errors(check(text), "frozen-region")
    assert d.line == len(SEED.rstrip("\n").split("\n")) + 1
    assert "not in the seed" in d.message


def test_whitespace_only_changes_at_line_ends_pass():
    text = "\n".join(l + ("  \t" if i % 2 else " ") for i, l in enumerate(LSA.split("\n"))) + "\n\n\n  \n"
    assert frozen_hash(text) == frozen_hash(SEED)
    assert check(text) == []
    crlf = LSA.replace("\n", "\r\n")
    assert check(crlf) == []
    assert check(LSA.rstrip("\n")) == []  # no final newline


def test_indentation_change_in_frozen_part_is_rejected():
    text = SEED.replace("  Candidate* c = nullptr;", "    Candidate* c = nullptr;")
    assert frozen_hash(text) != frozen_hash(SEED)
    [d] = errors(check(text), "frozen-region")
    assert d.line == line_of(text, "    Candidate* c = nullptr;")


# ------------------------------------------------------------------ markers


def test_missing_end_marker():
    text = SEED.replace("// EVOLVE-BLOCK-END\n", "")
    regions = split_regions(text, "cand.cu")
    [d] = regions.diagnostics
    assert d.code == "markers" and d.line == line_of(SEED, "EVOLVE-BLOCK-START")
    assert "never closed" in d.message
    diags = check(text)
    assert is_rejected(diags)
    assert [x.line for x in errors(diags, "markers")] == [line_of(SEED, "EVOLVE-BLOCK-START")]


def test_nested_start_marker():
    text = inject("// EVOLVE-BLOCK-START")
    [d] = split_regions(text).diagnostics
    assert d.code == "markers" and d.line == INJECT_LINE and "nested" in d.message
    diags = check(text)
    assert is_rejected(diags)
    assert INJECT_LINE in [x.line for x in errors(diags, "markers")]


def test_stray_end_marker():
    text = SEED.replace('#include "cuco_runtime.cuh"\n', '#include "cuco_runtime.cuh"\n// EVOLVE-BLOCK-END\n')
    diags = check(text)
    [d] = errors(diags, "markers")
    assert d.line == 6 and "no matching" in d.message


def test_block_count_must_match_seed():
    text = SEED.rstrip("\n") + "\n// EVOLVE-BLOCK-START\nint x;\n// EVOLVE-BLOCK-END\n"
    diags = check(text)
    [d] = errors(diags, "markers")
    assert "2 EVOLVE blocks but the seed has 1" in d.message
    assert d.line == line_of(text, "int x;") - 1
    assert errors(diags, "frozen-region")  # the new markers are frozen text too


# ------------------------------------------------------------------ forbidden calls and includes

FORBIDDEN_CALLS = [
    # process control
    ('  system("rm -rf /");', "system"),
    ("  std::system(cmd);", "system"),
    ("  FILE* p = popen(cmd, mode);", "popen"),
    ("  if (fork() == 0) {}", "fork"),
    ("  pid_t q = vfork ();", "vfork"),
    ("  execvp(argv[0], argv);", "execvp"),
    ('  execl("/bin/sh", "sh", nullptr);', "execl"),
    ("  posix_spawn(&pid, path, nullptr, nullptr, argv, envp);", "posix_spawn"),
    ("  kill(pid, 9);", "kill"),
    ("  raise(11);", "raise"),
    ("  exit(1);", "exit"),
    ("  std::exit(1);", "exit"),
    ("  ::exit(1);", "exit"),
    ("  std :: exit (1);", "exit"),
    ("  _exit(0);", "_exit"),
    ("  quick_exit(0);", "quick_exit"),
    ("  abort();", "abort"),
    ("  atexit(cleanup);", "atexit"),
    ("  signal(2, handler);", "signal"),
    ("  sigaction(2, &sa, nullptr);", "sigaction"),
    ('  void* h = dlopen("libc.so.6", 2);', "dlopen"),
    ('  void* f = dlsym(h, "system");', "dlsym"),
    ("  ptrace(0, 0, 0, 0);", "ptrace"),
    ('  setenv("NCCL_DEBUG", "INFO", 1);', "setenv"),
    ("  putenv(env);", "putenv"),
    ('  unsetenv("X");', "unsetenv"),
    # sockets
    ("  int fd = socket(2, 1, 0);", "socket"),
    ("  connect(fd, addr, len);", "connect"),
    ("  bind(fd, addr, len);", "bind"),
    ("  listen(fd, 4);", "listen"),
    ("  int c = accept(fd, nullptr, nullptr);", "accept"),
    ("  send(fd, buf, n, 0);", "send"),
    ("  recv(fd, buf, n, 0);", "recv"),
    ("  sendto(fd, buf, n, 0, a, l);", "sendto"),
    ("  recvfrom(fd, buf, n, 0, a, l);", "recvfrom"),
    ('  getaddrinfo("host", "80", nullptr, &res);', "getaddrinfo"),
    ('  gethostbyname("host");', "gethostbyname"),
    # files
    ('  FILE* f = fopen("/tmp/x", "w");', "fopen"),
    ('  freopen("/tmp/x", "w", stdout);', "freopen"),
    ('  int fd = open("/tmp/x", 0);', "open"),
    ('  openat(dirfd, "x", 0);', "openat"),
    ('  creat("/tmp/x", 0644);', "creat"),
    ('  unlink("/tmp/x");', "unlink"),
    ('  remove("/tmp/x");', "remove"),
    ('  std::remove("/tmp/x");', "remove"),
    ('  rename("a", "b");', "rename"),
    ('  mkdir("/tmp/d", 0755);', "mkdir"),
    ('  rmdir("/tmp/d");', "rmdir"),
    ('  chmod("/tmp/x", 0777);', "chmod"),
    ('  truncate("/tmp/x", 0);', "truncate"),
    ("  void* m = mmap(nullptr, n, 3, 1, fd, 0);", "mmap"),
    ("  ioctl(fd, 1, 0);", "ioctl"),
    ('  std::ofstream out("/tmp/x");', "ofstream"),
    ('  std::ifstream in("/tmp/x");', "ifstream"),
    ("  std::fstream io;", "fstream"),
]


@pytest.mark.parametrize("code,name", FORBIDDEN_CALLS, ids=[c for c, _ in FORBIDDEN_CALLS])
def test_forbidden_calls_are_caught_with_line_and_column(code, name):
    text = inject("static void evil() {\n" + code + "\n}")
    diags = check(text)
    assert is_rejected(diags)
    found = errors(diags, "forbidden-call")
    assert len(found) == 1, [d.render() for d in diags]
    d = found[0]
    assert d.line == INJECT_LINE + 1
    assert d.column == code.index(name, code.index("::") + 2 if "::" in code else 0) + 1
    assert d.source_line == code
    assert f"{name}`" in d.message
    assert "candidates may not start processes, open files or sockets" in d.message
    assert "NCCL, LSA or CUDA-IPC" in d.message
    assert codes(diags) == {"forbidden-call"}  # nothing else is wrong with it


def test_forbidden_call_message_names_the_call():
    [d] = check(inject('static void f() { system("ls"); }'))
    assert d.message == ("`system` is not allowed in a candidate: candidates may not start processes, open files "
                         "or sockets; talk to other ranks through NCCL, LSA or CUDA-IPC from cuco_runtime.cuh")
    assert (d.line, d.column) == (INJECT_LINE, len("static void f() { ") + 1)
    assert "cand.cu:%d:%d: error:" % (INJECT_LINE, d.column) in d.render()


def test_qualified_exit_message():
    [d] = check(inject("static void f() { std::exit(1); }"))
    assert d.message.startswith("`std::exit` is not allowed")
    [d] = check(inject("static void f() { ::exit(1); }"))
    assert d.message.startswith("`::exit` is not allowed")


def test_forbidden_call_split_across_lines():
    text = inject("static void f() {\n  system\n    (\"ls\");\n}")
    [d] = check(text)
    assert (d.line, d.column, d.source_line) == (INJECT_LINE + 1, 3, "  system")


def test_line_numbers_survive_stripped_comments_and_strings():
    code = (
        "/* a block comment\n"
        "   over three lines with fork() in it */\n"
        'static const char* kMsg = "multi \\\n'
        'line string with exec";  // and a comment: system("x")\n'
        "static void f() {  /* inline */ int a = 1; fopen(kMsg, kMsg); }"
    )
    [d] = check(inject(code))
    assert d.line == INJECT_LINE + 4
    assert d.column == code.split("\n")[4].index("fopen") + 1


@pytest.mark.parametrize("code", [
    '  asm volatile("syscall" ::: "memory");',
    '  __asm__ __volatile__("mov $60, %eax\\n\\tsyscall");',
    '  asm("int $0x80");',
])
def test_inline_syscall_is_caught(code):
    text = inject("static void f() {\n" + code + "\n}")
    [d] = check(text)
    assert d.code == "forbidden-call" and d.line == INJECT_LINE + 1 and d.column == 3
    assert "inline assembly" in d.message


FORBIDDEN_INCLUDES = [
    "#include <unistd.h>",
    "#include <sys/mman.h>",
    "#include <sys/socket.h>",
    "#include <fstream>",
    "#include <filesystem>",
    "#include <dlfcn.h>",
    "#include <spawn.h>",
    "#include <signal.h>",
    "#include <csignal>",
    "#include <netinet/in.h>",
    "#include <arpa/inet.h>",
    "#include <netdb.h>",
    "#include <fcntl.h>",
    '#include "sys/types.h"',
    '#include "/etc/passwd"',
    "#include </usr/include/stdio.h>",
    '#include "../../secrets.h"',
    '#include "runtime/../cuco_abi.h"',
    "  #  include <unistd.h>",
    "#include_next <unistd.h>",
    "#define EVIL <unistd.h>\n#include EVIL",
]


@pytest.mark.parametrize("code", FORBIDDEN_INCLUDES)
def test_forbidden_includes(code):
    diags = check(inject(code))
    [d] = errors(diags, "forbidden-include")
    last = code.split("\n")[-1]
    assert d.line == INJECT_LINE + code.count("\n")
    assert d.source_line == last
    arg = last.split("include", 1)[1].split("_next", 1)[-1].strip()
    assert d.column == last.index(arg) + 1
    assert "not allowed in a candidate" in d.message
    assert codes(diags) == {"forbidden-include"}


def test_allowed_includes_pass():
    code = ("#include <cublas_v2.h>\n#include <cstdio>\n#include <cstdlib>\n#include <vector>\n"
            "#include <algorithm>\n#include <functional>\n#include \"cuco_runtime.cuh\"\n"
            "#include <cuda/atomic>\n#include <cooperative_groups/reduce.h>\n"
            "// #include <unistd.h>\n/* #include <fstream> */")
    assert check(inject(code)) == []


def test_false_positives_are_not_flagged():
    code = r'''
struct Chan { __device__ void send(int) {} __device__ void sync() {} __device__ void open(int) {} };
static int reopen(int x) { return x; }
static int open_window(int x) { return x; }
static int exit_code = 0;
static int system_ready = 1;  // an identifier that starts with a forbidden word
static void ok(Chan& bar, Chan* x, ncclComm_t comm, cudaStream_t s, void* d, const void* h, size_t n,
               std::vector<int>& v) {
  ncclSend(d, n, ncclFloat, 1, comm, s);
  ncclRecv(d, n, ncclFloat, 1, comm, s);
  cudaMemcpy(d, h, n, cudaMemcpyHostToDevice);
  cudaMemcpyAsync(d, h, n, cudaMemcpyHostToDevice, s);
  printf("exit(1) and system(\"x\") and fork() inside a string\n");
  fprintf(stderr, "kill(%d)\n", 3);
  char buf[64];
  snprintf(buf, sizeof buf, "open(%s)", "f");
  open_window(3);
  bar.sync();
  bar.send(1);
  x->send(2);
  x -> open(3);
  bar . send(4);
  reopen(1);
  v.erase(std::remove_if(v.begin(), v.end(), [](int i) { return i < 0; }), v.end());
  v.erase(std::remove(v.begin(), v.end(), 0), v.end());
  auto g = std::bind(reopen, 1);
  exit_code = 2;
  exit_code= reopen(exit_code);
  int big = 1'000'000;  // a digit separator is not a char literal: system("no")
  char open_paren = '(';
  char quote = '\'';
  const char* raw = R"x(fopen("a", "b"); system("c"))x";
  const char* w = u8"socket(1)";
  // system("rm -rf /"); fork(); exit(1);
  /* execvp(a, b); std::exit(2);
     abort(); */
  asm volatile("membar.sys;" ::: "memory");
  cuco::fail(nullptr, "send(%d) failed", big);
  (void)g; (void)open_paren; (void)quote; (void)raw; (void)w; (void)system_ready;
}
'''
    diags = check(inject(code))
    assert diags == [], "\n".join(d.render() for d in diags)


def test_call_in_a_member_initializer_is_flagged():
    code = 'struct Log {\n  int fd = open("/tmp/log", 1);\n  void send(int);\n};'
    [d] = check(inject(code))
    assert (d.line, d.column) == (INJECT_LINE + 1, len("  int fd = ") + 1)


def test_split_syscall_string_in_asm_is_caught():
    [d] = check(inject('static void f() { asm volatile("sys" "call"); }'))
    assert d.code == "forbidden-call" and "syscall" in d.message


def test_forbidden_calls_after_tricky_literals_still_found():
    code = "static void f() { char q = '\"'; const char* s = \"'\"; abort(); }"
    [d] = check(inject(code))
    assert d.column == code.index("abort") + 1


def test_function_named_like_a_forbidden_call_is_flagged_with_rename_hint():
    [d] = check(inject("__device__ void send(int peer) {}"))
    assert d.code == "forbidden-call" and "rename it" in d.message


def test_all_findings_are_reported():
    code = "#include <unistd.h>\nstatic void f() { fork(); system(\"x\"); }"
    diags = check(inject(code))
    assert [(d.code, d.line) for d in diags] == [
        ("forbidden-include", INJECT_LINE),
        ("forbidden-call", INJECT_LINE + 1),
        ("forbidden-call", INJECT_LINE + 1),
    ]


# ------------------------------------------------------------------ the ABI


def _without_teardown(text: str) -> str:
    start = text.index("CUCO_EXPORT int cuco_teardown")
    return text[:start].rstrip("\n") + "\n"


def test_missing_teardown_reports_abi_and_frozen():
    text = _without_teardown(SEED)
    diags = check(text)
    assert is_rejected(diags)
    assert {"abi", "frozen-region"} <= codes(diags)
    [abi] = errors(diags, "abi")
    assert "`cuco_teardown` is not defined" in abi.message
    assert "CUCO_EXPORT int cuco_teardown(void* state)" in abi.message
    [frozen] = errors(diags, "frozen-region")
    assert "cuco_teardown" in frozen.message  # names the seed line that is missing


def test_abi_without_export_is_rejected():
    text = SEED.replace("CUCO_EXPORT int cuco_launch", "int cuco_launch")
    diags = check(text)
    [abi] = errors(diags, "abi")
    assert "cuco_launch" in abi.message and "C linkage" in abi.message
    assert abi.line == line_of(text, "int cuco_launch(")
    assert errors(diags, "frozen-region")


def test_abi_extern_c_is_accepted():
    text = SEED.replace("CUCO_EXPORT int cuco_launch", 'extern "C" int cuco_launch')
    assert codes(check(text)) == {"frozen-region"}
    block = SEED.replace("CUCO_EXPORT int cuco_init", 'extern "C" {\nint cuco_init').replace(
        "CUCO_EXPORT int cuco_launch", "}\n\nCUCO_EXPORT int cuco_launch")
    assert codes(check(block)) == {"frozen-region"}


def test_abi_wrong_parameters():
    text = SEED.replace("int cuco_launch(void* state, cudaStream_t stream)", "int cuco_launch(void* state)")
    [abi] = errors(check(text), "abi")
    assert "wrong parameters" in abi.message and "cudaStream_t stream" in abi.message


def test_abi_duplicate_definition():
    text = inject('extern "C" int cuco_teardown(void* state) { return 0; }')
    diags = check(text)
    [abi] = errors(diags, "abi")
    assert "defined 2 times" in abi.message
    assert codes(diags) == {"abi"}


def test_abi_wrong_return_type():
    text = SEED.replace("CUCO_EXPORT int cuco_teardown", "CUCO_EXPORT void cuco_teardown")
    assert any("must return int" in d.message for d in errors(check(text), "abi"))


def test_abi_declarations_and_calls_are_not_definitions():
    code = ('extern "C" int cuco_launch(void* state, cudaStream_t stream);\n'
            "static int f() { return cuco_teardown(nullptr); }")
    assert check(inject(code)) == []


# ------------------------------------------------------------------ the design line


def test_missing_design_line_is_a_warning():
    text = "\n".join(l for l in SEED.split("\n") if not l.startswith("// cuco-design:"))
    diags = check(text)
    [d] = diags
    assert d.code == "design" and d.severity == "warning"
    assert not is_rejected(diags)


def test_malformed_design_line_is_a_warning():
    text = SEED.replace("// cuco-design: backend=nccl_host", "// cuco-design: backend nccl_host")
    [d] = check(text)
    assert d.code == "design" and d.severity == "warning" and d.line == DESIGN_LINE


def test_is_rejected():
    warn = Diagnostic(level=0, severity="warning", message="w", code="design")
    err = Diagnostic(level=0, severity="error", message="e", code="abi")
    assert not is_rejected([])
    assert not is_rejected([warn])
    assert is_rejected([warn, err])


# ------------------------------------------------------------------ the size of a candidate


def test_a_source_past_the_size_limit_is_one_finding_before_any_other():
    """The first check (search candidates from an agent come through it, as `cuco eval`'s do):
    a candidate that passes every other check is refused for its size alone, one byte past it."""
    from cuco_tui.evaluate.l0 import check_l0
    from cuco_tui.evaluate.static_checks import MAX_SOURCE_BYTES
    from cuco_tui.workload.manifest import load_workload

    def padded(total: int) -> str:
        bare = inject("// ")
        return inject("// " + "x" * (total - len(bare.encode())))

    at_limit, past = padded(MAX_SOURCE_BYTES), padded(MAX_SOURCE_BYTES + 1)
    assert len(at_limit.encode()) == MAX_SOURCE_BYTES and not is_rejected(check(at_limit))
    found = check(past)
    assert [(d.code, d.severity) for d in found] == [("size", "error")], found
    assert "cand.cu is 1.0 MiB; a candidate may be at most 1 MiB" in found[0].message
    assert len(check("é" * (MAX_SOURCE_BYTES // 2 + 1))) == 1  # bytes are counted, not characters
    verdict = check_l0(past, load_workload("gemm_allgather").seed.read_text(), "cand.cu")
    assert [d.code for d in verdict.diagnostics] == ["size"]
    assert verdict.reason.startswith("rejected by static checks: cand.cu is")
