"""The source model every static analysis reads (cuco_tui.source): arguments, integer
expressions, constants, functions, kernel launches, calls, declarations and namespaces, loops and
ifs, assignments, and the two views of a candidate (the whole file, the EVOLVE blocks), on small
CUDA snippets."""

from __future__ import annotations


import pytest

from cuco_tui.source.arguments import read_call, split_args
from cuco_tui.source.assignments import read_assignments, target_before
from cuco_tui.source.calls import read_calls
from cuco_tui.source.constants import read_constants
from cuco_tui.source.declarations import read_declarations, read_namespaces
from cuco_tui.source.expressions import evaluate, last_name
from cuco_tui.source.functions import enclosing, read_functions
from cuco_tui.source.launches import read_launches
from cuco_tui.source.lexer import SourceText, closing_bracket, expression_end, matching_angle
from cuco_tui.source.model import CandidateSource
from cuco_tui.source.statements import read_ifs, read_loops, statement_end
from repo_paths import REPO

LSA = (REPO / "workloads" / "gemm_allgather" / "candidates"
       / "lsa_allgather.cu").read_text()


def blank(text: str) -> str:
    return SourceText(text).code


def texts(args) -> list[str]:
    return [a.text for a in args]


# ---------------------------------------------------------------------------- lexer helpers


def test_brackets_match_by_kind_and_ignore_comments_and_strings():
    code = blank('f(a, "(", g[1], /* ) */ {x}) + 1')
    assert code[closing_bracket(code, 1)] == ")" and code[closing_bracket(code, 1) + 1:] == " + 1"
    assert closing_bracket("f(a]", 1) == -1  # the wrong kind closes first
    assert closing_bracket("f(a", 1) == -1
    assert closing_bracket("abc", 0) == -1  # not a bracket


def test_matching_angle_both_ways_and_not_across_statements():
    code = "k<Foo<int>, 4><<<1, 2>>>(x);"
    assert matching_angle(code, 1) == code.index("><<<")
    assert matching_angle(code, code.index("><<<")) == 1
    assert matching_angle("if (a < b) { c; } d > e", 5) == -1


def test_expression_end_stops_at_depth_zero():
    code = "x = f(a, b), y = 2; z"
    assert code[expression_end(code, 4, ";,")] == ","
    assert code[expression_end(code, 4, ";")] == ";"
    assert expression_end("g(a + b)", 2, ";,") == len("g(a + b")  # the enclosing ')'
    assert expression_end("a + b", 0) == 5


# ---------------------------------------------------------------------------- arguments


def test_arguments_split_on_top_level_commas_only():
    code = "f(a, g(b, c), s[i, j], {1, 2}, std::min<int>(x, y), Pair<A, B>{}, p->q < r)"
    call = read_call(code, 1)
    assert call is not None and code[call.close_at] == ")" and call.close_at == len(code) - 1
    assert call.texts == ["a", "g(b, c)", "s[i, j]", "{1, 2}", "std::min<int>(x, y)", "Pair<A, B>{}", "p->q < r"]
    assert [code[a.start:a.start + len(a.text)] for a in call.args] == call.texts  # offsets point at the text


def test_empty_and_trailing_arguments():
    assert split_args("f( )", 2, 3) == []
    assert texts(split_args("f(a, )", 2, 5)) == ["a", ""]
    assert read_call("f(a, b", 1) is None


def test_a_comparison_is_not_a_template():
    code = "f(i < n, j, k > 2, p->q)"
    assert read_call(code, 1).texts == ["i < n", "j", "k > 2", "p->q"]


# ---------------------------------------------------------------------------- integer expressions


@pytest.mark.parametrize("expr,value", [
    ("4", 4), (" 4 ", 4), ("2 * kBlocks", 128), ("(kBlocks + 1) / 2", 32), ("kBlocks % 5", 4),
    ("1 << 5", 32), ("256 >> 2", 64), ("-7 / 2", -3), ("-7 % 2", -1), ("+3", 3),
    ("0x10", 16), ("0x10u", 16), ("64u", 64), ("3UL * 2", 6), ("(int)kBlocks", 64), ("(unsigned int)(3)", 3),
    ("static_cast<int>(kBlocks) + 1", 65), ("4\n  + 2", 6),
])
def test_integer_expressions(expr, value):
    assert evaluate(expr, {"kBlocks": 64}) == value


@pytest.mark.parametrize("expr", [
    "", "unknown", "ambiguous", "f(3)", "a < b", "c->M / 16", "2**3", "7 / 0", "7 % 0", "1.5", "1e3",
    "True", "1 << 100", "x ? 1 : 2", "sizeof(int)", "dim3(2, 2)",
])
def test_what_is_not_an_integer_constant(expr):
    assert evaluate(expr, {"ambiguous": None}) is None


def test_last_name():
    assert last_name("c->copy_stream") == "copy_stream"
    assert last_name("streams[i % 2]") == "streams"
    assert last_name("(cudaStream_t)s") == "s"
    assert last_name("0") == "0"


# ---------------------------------------------------------------------------- constants


CONSTANTS = """
#define kPeers 8
#define kBytes (kPeers * 1024)  // comments do not count
#define SQUARE(x) ((x) * (x))
constexpr int kBlocks = 2 * kPeers;
static constexpr unsigned kThreads{256};
const long long kBig = 1ull << 40;
const int kA = 1, kB = 2;
constexpr int kTwice = 4;
__device__ void f() { constexpr int kTwice = 8; const int kSame = 3; }
void g() { const int kSame = 3; int notConst = 5; }
dim3 grid(kBlocks, 2);
dim3 block{kThreads};
const char* kName = "constexpr int kFake = 1;";
"""


def test_constants_from_constexpr_const_and_defines():
    c = read_constants(blank(CONSTANTS))
    assert c.values["kPeers"] == 8 and c.values["kBytes"] == 8192
    assert c.values["kBlocks"] == 16 and c.values["kThreads"] == 256 and c.values["kBig"] == 1 << 40
    assert c.values["kA"] == 1
    assert c.values["kSame"] == 3  # defined twice, the same value
    assert "SQUARE" not in c.values and "notConst" not in c.values and "kFake" not in c.values


def test_a_constant_defined_twice_with_different_values_is_unknown():
    c = read_constants(blank(CONSTANTS))
    assert "kTwice" in c.values and c.values["kTwice"] is None
    assert c.value("kTwice * 2") is None
    assert len([d for d in c.definitions if d.name == "kTwice"]) == 2


def test_block_counts_of_launch_dimensions():
    c = read_constants(blank(CONSTANTS))
    assert c.extents == {"grid": 32, "block": 256}
    assert c.blocks("grid") == 32 and c.blocks("dim3(kPeers, 4)") == 32 and c.blocks("dim3(4)") == 4
    assert c.blocks("kBlocks") == 16 and c.blocks("n") is None
    assert c.value("grid") is None  # a dim3 is not an integer


# ---------------------------------------------------------------------------- functions


FUNCTIONS = r"""
// a comment with a brace { and a fake __global__ void fake() {
struct Chan {
  __device__ int get(int i) const { return i; }
};
template <int kN = 4, typename T = float>
__global__ void __launch_bounds__(256, 1) scale(T* __restrict__ out, const T* in, int n) {
  const char* s = "}{";
  if (n > 0) { out[0] = in[0] * kN; }
}
__device__ __forceinline__ float twice(float x) { return 2.f * x; }
__host__ __device__ inline int both(int a) { return a; }
void host_only(int, float* p = nullptr);
static int host_fn(int a[4], float& b) noexcept {
  int x = host_only(1);
  auto f = [&](int k) { return k; };
  return f(a[0]);
}
auto trailing(int a) -> int { return a; }
"""


def test_functions_with_kinds_params_and_bodies():
    code = blank(FUNCTIONS)
    funcs = {f.name: f for f in read_functions(code)}
    assert set(funcs) == {"get", "scale", "twice", "both", "host_fn", "trailing"}
    assert funcs["scale"].kind == "global" and funcs["scale"].is_kernel
    assert funcs["get"].kind == "device" and funcs["twice"].kind == "device" and funcs["both"].kind == "device"
    assert funcs["host_fn"].kind == "host" and funcs["trailing"].kind == "host"
    assert funcs["scale"].params == ("out", "in", "n")
    assert funcs["host_fn"].params == ("a", "b")
    body = code[funcs["scale"].body_start:funcs["scale"].body_end + 1]
    assert body.startswith("{") and body.endswith("}") and "out[0] = in[0] * kN" in body


def test_enclosing_function():
    code = blank(FUNCTIONS)
    funcs = read_functions(code)
    assert enclosing(funcs, code.index("out[0] =")).name == "scale"
    assert enclosing(funcs, code.index("return k;")).name == "host_fn"
    assert enclosing(funcs, code.index("struct Chan")) is None


# ---------------------------------------------------------------------------- launches


LAUNCHES = r"""
#define GRID (kBlocks * 2)
constexpr int kBlocks = 4;
void run(cudaStream_t stream, float* p, int n) {
  simple<<<kBlocks, 256, 0, stream>>>(p, n);
  tiled<Tile<64, 64>, 4><<<GRID, dim3(32, 4), smem, stream>>>(p, std::min<int>(n, 8));
  cuco::detail::copy<<<std::max<int>(1, n / 256), 128>>>(p);
  // commented<<<1, 1>>>(p);
  const char* s = "fake<<<1, 1>>>(p)";
  void* args[] = {&p, &n};
  cudaLaunchKernel((void*)simple, dim3(2), dim3(64), args, 0, stream);
  no_args<<<1, 1>>>;
}
"""


def test_launches_with_templates_namespaces_and_the_api_form():
    code = blank(LAUNCHES)
    launches = read_launches(code)
    assert [(k.kernel, k.via) for k in launches] == [
        ("simple", "chevrons"), ("tiled", "chevrons"), ("copy", "chevrons"), ("simple", "api"),
        ("no_args", "chevrons")]
    simple, tiled, copy, api, bare = launches
    assert texts(simple.config) == ["kBlocks", "256", "0", "stream"] and texts(simple.args) == ["p", "n"]
    assert simple.grid == "kBlocks" and simple.block == "256" and simple.stream == "stream"
    assert code[simple.at:].startswith("simple<<<") and code[simple.config_at:].startswith("<<<")
    assert texts(tiled.config) == ["GRID", "dim3(32, 4)", "smem", "stream"]
    assert texts(tiled.args) == ["p", "std::min<int>(n, 8)"]
    assert code[tiled.at:].startswith("tiled<Tile<64, 64>, 4><<<")
    assert texts(copy.config) == ["std::max<int>(1, n / 256)", "128"] and copy.stream == ""
    assert texts(api.config) == ["dim3(2)", "dim3(64)", "0", "stream"] and texts(api.args) == ["args"]
    assert bare.args is None
    assert [k.qualifier for k in launches] == ["", "", "cuco::detail", "", ""]
    [api_ns] = read_launches(blank("cudaLaunchKernel((void*)tg::k<Cfg>, g, b, args, 0, s);"))
    assert (api_ns.kernel, api_ns.qualifier) == ("k", "tg")


def test_grid_block_counts_through_constants_and_macros():
    src = CandidateSource(LAUNCHES)
    blocks = [src.whole.constants.blocks(k.grid) for k in src.whole.launches]
    assert blocks == [4, 8, None, 2, 1]


# ---------------------------------------------------------------------------- calls, declarations, namespaces


CALLS = """
namespace tg = cuco::tile_gemm;
using namespace other;
struct Candidate { tg::FusedGemm<tg::Config<128, 256>> gemm; tg::FlagWriter writer; int n; };
int run(Candidate* c, cudaStream_t stream, const tg::RowLayout& l) {
  auto layout = tg::make_row_layout(1, 2, 3, 4, 5, kChunks, 128);
  CUCO_TRY_CUDA(ctx, c->gemm.launch(stream, e));
  unsigned long long* flags = (unsigned long long*)c->flags.peers[p];
  const size_t bytes = (size_t)c->layout.flag_count() * sizeof(unsigned long long);
  for (int k = 0; k < l.chunks; ++k) x = std::min<int>(a, b) + ::abs(k);
  if (k < n) k<<<1, 2>>>(p);
  return 0;
}
"""


def test_calls_with_qualifiers_receivers_and_template_arguments():
    code = blank(CALLS)
    calls = {c.qualified: c for c in read_calls(code)}
    assert "if" not in calls and "for" not in calls and "sizeof" not in calls and "k" not in calls
    made = calls["tg::make_row_layout"]
    assert (made.name, made.qualifier, made.receiver) == ("make_row_layout", "tg", "")
    assert made.texts[5] == "kChunks" and code[made.at:].startswith("make_row_layout(")
    launch = next(c for c in read_calls(code) if c.name == "launch")
    assert (launch.receiver, launch.texts) == ("c->gemm", ["stream", "e"])
    flag_count = next(c for c in read_calls(code) if c.name == "flag_count")
    assert flag_count.receiver == "c->layout"  # the cast applies to the call's result
    assert (calls["std::min"].template, calls["std::min"].texts) == ("int", ["a", "b"])
    assert calls["abs"].qualifier == "::"
    assert calls["run"].texts[0] == "Candidate* c"  # a definition reads as a call; the view drops it


def test_the_view_leaves_definitions_out_of_its_calls():
    view = CandidateSource(CALLS).whole
    assert "run" not in {c.name for c in view.calls} and "launch" in {c.name for c in view.calls}


def test_declarations_of_members_variables_and_parameters():
    decls = read_declarations(blank(CALLS))
    by_name = {d.name: d for d in decls}
    gemm = by_name["gemm"]
    assert (gemm.type, gemm.type_name, gemm.type_qualifier) == ("tg::FusedGemm<tg::Config<128, 256>>", "FusedGemm", "tg")
    assert (by_name["writer"].type_name, by_name["n"].type) == ("FlagWriter", "int")
    assert (by_name["l"].type, by_name["c"].type, by_name["stream"].type) == ("tg::RowLayout", "Candidate", "cudaStream_t")
    assert by_name["flags"].type == "unsigned long long" and by_name["bytes"].type == "size_t"
    assert by_name["layout"].type == "auto" and by_name["k"].type == "int"
    assert "long" not in by_name and "return" not in {d.type for d in decls}  # sizeof(...) and statements


def test_namespace_aliases_and_using_directives():
    ns = read_namespaces(blank(CALLS + "using namespace tg;"))
    assert ns.aliases == {"tg": "cuco::tile_gemm"} and ns.used == ("other", "cuco::tile_gemm")
    assert ns.resolve("tg") == ns.resolve("::cuco::tile_gemm") == "cuco::tile_gemm"
    assert ns.names("tg", "cuco::tile_gemm") and ns.names("", "cuco::tile_gemm")
    assert not ns.names("std", "cuco::tile_gemm")
    only_cuco = read_namespaces(blank("using namespace cuco;"))
    assert only_cuco.names("tile_gemm", "cuco::tile_gemm") and not only_cuco.names("", "cuco::tile_gemm")


# ---------------------------------------------------------------------------- loops, ifs, statements


STATEMENTS = """
constexpr int kChunks = 4;
void host(int W, int rank) {
  for (int c = 0; c < kChunks; ++c) { send(c); }
  for (int i = 1; i <= 3; i++) one(i);
  for (int p = 0; p < W; ++p) peer(p);
  while (spin()) { }
  for (;;) break;
  if (rank == 0) { a(); } else c();
  if (rank == 1) b(); else { c(); }
  if (x) y();
}
"""


def test_loops_and_their_trip_counts():
    code = blank(STATEMENTS)
    loops = read_loops(code, read_constants(code))
    assert [(lp.keyword, lp.count, lp.bound.strip()) for lp in loops] == [
        ("for", 4, "kChunks"), ("for", 3, "3"), ("for", None, "W"), ("while", None, "spin()"), ("for", None, "")]
    first = loops[0]
    assert code[first.body_start:first.body_end + 1].strip() == "{ send(c); }"
    assert [(lp.first, lp.inclusive) for lp in loops[:3]] == [("0", False), ("1", True), ("0", False)]
    constants = read_constants(code)
    assert loops[2].count_to(8, constants) == 8 and loops[1].count_to(5, constants) == 5  # 1..5
    assert loops[3].count_to(8, constants) is None  # a `while`: not counted
    assert code[loops[1].body_start:loops[1].body_end + 1].strip() == "one(i);"
    assert first.holds(code.index("send(c)")) and not first.holds(code.index("one(i)"))


def test_ifs_with_and_without_else():
    code = blank(STATEMENTS)
    ifs = read_ifs(code)
    assert len(ifs) == 3
    first, second, plain = ifs
    assert code[first.cond_open + 1:first.cond_close] == "rank == 0"
    assert code[first.cond_close + 1:first.then_end].strip() == "{ a(); }"
    assert code[first.else_start:first.else_end].strip() == "c();"
    assert code[second.cond_close + 1:second.then_end].strip() == "b();"
    assert code[second.else_start:second.else_end].strip() == "{ c(); }"
    assert plain.else_start == -1 and code[plain.cond_close + 1:plain.then_end].strip() == "y();"


def test_statement_end():
    code = "x = f(a; b); { y; } z"
    assert code[:statement_end(code, 0)] == "x = f(a; b);"[:statement_end(code, 0)]
    assert statement_end("  { y; } z", 0) == len("  { y; }")
    assert statement_end("{ never closed", 0) == -1
    assert statement_end("a + b)", 0) == len("a + b")


# ---------------------------------------------------------------------------- assignments


def test_assignments_targets_values_and_operators():
    code = blank("""
    const bool last = dc.lsaRank == W - 1;
    float* dst = bufs.peers[p], *src = nullptr;
    c->rank = r;
    flags[i] += 1;
    x <<= 2;
    ++count; hits--;
    if (a == b || a <= b || a >= b || a != b) {}
    auto f = [&]() { return rank; };
    """)
    got = [(a.op, a.target.strip(), a.name, a.expr) for a in read_assignments(code)]
    assert got == [
        ("=", "last", "last", "dc.lsaRank == W - 1"),
        ("=", "float* dst", "dst", "bufs.peers[p]"),
        ("=", "*src", "src", "nullptr"),
        ("=", "c->rank", "", "r"),
        ("+=", "flags[i]", "", "1"),
        ("<<=", "x", "x", "2"),
        ("++", "count", "count", ""),
        ("--", "hits", "hits", ""),
        ("=", "f", "f", "[&]() { return rank"),
    ]


def test_target_before():
    code = "c->flags[i] = 1; *p = 2; s.a.b = 3;"
    assert target_before(code, code.index(" = 1")) == "c->flags[i]"
    assert target_before(code, code.index(" = 2")) == "*p"
    assert target_before(code, code.index(" = 3")) == "s.a.b"


# ---------------------------------------------------------------------------- the candidate


def test_evolve_view_keeps_offsets_and_blanks_the_frozen_lines():
    src = CandidateSource(LSA, "lsa.cu")
    whole, evolve = src.whole.code, src.evolve.code
    assert len(whole) == len(evolve) == len(LSA)
    assert whole.count("\n") == evolve.count("\n")
    start = next(r for r in src.regions if r.kind == "evolve").start_line
    abi = LSA.index("cuco_teardown(void* state)")
    assert evolve[abi:abi + 13].strip() == "" and whole[abi:abi + 13] == "cuco_teardown"
    assert {f.name for f in src.evolve.functions} < {f.name for f in src.whole.functions}
    kernel = next(f for f in src.evolve.functions if f.is_kernel)
    assert src.evolve.line(kernel.at) == LSA[:kernel.at].count("\n") + 1 > start


def test_candidate_source_reads_once_and_is_reused():
    src = CandidateSource(LSA, "lsa.cu")
    assert src.whole.functions is src.whole.functions
    assert CandidateSource.of(src, "lsa.cu") is src
    other = CandidateSource.of(src, "other.cu")
    assert other is not src and other.text == src.text and other.file_name == "other.cu"
    assert CandidateSource.of(LSA).text == LSA
    assert src.design == {k: v for k, v in (t.split("=") for t in LSA.split("// cuco-design:")[1].split("\n")[0].split())}
    assert src.line(1) == LSA.split("\n")[0]


def test_garbage_does_not_raise():
    for text in ["", "{{{", "}}}", "f(<<<", ">>>(", "a = = ;", "for (", "if (x", "#define", "k<<<1, 2>>>(",
                 "template <", "\"unterminated", "/* open", "dim3 g(;", "constexpr int x = ;"]:
        src = CandidateSource(text)
        for view in (src.whole, src.evolve):
            view.functions, view.launches, view.constants, view.loops, view.ifs, view.assignments
            view.calls, view.declarations, view.namespaces


def test_the_analyses_share_one_parse():
    from cuco_tui.design.classify import check_declaration, classify
    from cuco_tui.evaluate.static_checks import check_static
    from cuco_tui.evaluate.sync_checks import check_sync

    seed = (REPO / "workloads" / "gemm_allgather" / "seed.cu").read_text()
    bad = LSA.replace("lsa_devcomm_create(ctx, c->comm, kCopyBlocks,", "lsa_devcomm_create(ctx, c->comm, 16,")
    src = CandidateSource(bad, "c.cu")
    assert check_static(src, seed, "c.cu") == check_static(bad, seed, "c.cu")
    assert check_sync(src, "c.cu") == check_sync(bad, "c.cu") != []
    assert check_declaration(src, "c.cu") == check_declaration(bad, "c.cu")
    assert classify(src) == classify(bad)
    functions = src.whole.functions
    check_sync(src, "c.cu")
    assert src.whole.functions is functions  # read once, not again by the second check
