"""Deadlock reports name where the candidate launched the kernel that hangs, without the
candidate naming its waits (issue 32): from the function the trace slot says waits (or, in dumps
made before slots named it, the function that holds the wait's line), through the kernels that
run it, to their launch lines in the candidate's source."""

from cuco_tui.agents.offline import StrategyBook
from cuco_tui.evaluate.launch_sites import find_launch, launch_locator
from cuco_tui.harness.abi import WAIT_FUNCTION_LEN
from cuco_tui.harness.deadlock import LaunchSite, analyze
from cuco_tui.harness.launcher import RankOutcome
from cuco_tui.harness.rank_events import TimedOut, read_events
from cuco_tui.source.model import CandidateSource
from cuco_tui.workload.manifest import load_workload
from repo_paths import DATA

RECORDED = DATA / "runs" / "hang"  # a hang recorded on 2 x H200, and the candidate it ran (hang.cu)


def line_of(source: str, text: str, nth: int = 0) -> int:
    """The 1-based line of the nth line holding `text`."""
    return [i for i, line in enumerate(source.splitlines(), 1) if text in line][nth]


def slot(site, peer, ident=0, function="", kind="flag", expected=1, observed=0, i=0):
    """A waiting block's slot as the watchdog dumps it (no "function" key: a dump made before slots had one)."""
    return {"slot": i, "state": "waiting", "site": site, "kind": kind, "peer": peer, "id": ident, "expected": expected,
            "observed": observed, "completed": 0, **({"function": function} if function else {})}


def hung(rank, trace):
    return RankOutcome(rank, rank, 100 + rank, 124, [TimedOut(rank=rank, phase="verify:verify", limit_s=20.0,
                                                              what="candidate launch (check 1)", message="hung",
                                                              trace=tuple(trace))])


def report(outcomes, source, file="c.cu"):
    return analyze(outcomes, file=file, source=source, locate=launch_locator(source, file))


def test_the_recorded_hang_names_the_launch_of_its_kernel():
    """The dump from the GPU host has no function name: the wait's line says which kernel it is in."""
    source = (RECORDED / "hang.cu").read_text()
    outcomes = [RankOutcome(r, r, 0, 124, read_events(RECORDED / f"rank{r}.jsonl")) for r in range(2)]
    wait, launch = line_of(source, "cuco::wait_geq"), line_of(source, "wait_for_neighbour<<<")
    d = report(outcomes, source, "hang.cu")
    assert d.kind == "cycle"
    assert (f"rank 0 waits on rank 1 (hang.cu:{launch} (in wait_for_neighbour at line {wait}), flag 7: wants 1, "
            f"saw 0)") in d.summary
    details = "\n".join(d.details)
    assert f"hang.cu:{launch}: wait_for_neighbour<<<1, 32, 0, stream>>>(" in details  # the launch and the wait, quoted
    assert f"hang.cu:{wait}: if (threadIdx.x == 0) cuco::wait_geq<unsigned>(" in details
    assert (f"rank 1: waits: 1 block(s) at hang.cu:{launch} (in wait_for_neighbour at line {wait}) wait for flag 7 "
            "from rank 0") in details
    # No hint to name the waits: each is at its one launch.
    assert not any("CUCO_WAIT_SITE" in x for x in d.details)


HELPER = """#include "cuco_runtime.cuh"
__device__ void wait_for(const unsigned* f, int peer, cuco::Trace trace) {
  cuco::wait_geq<unsigned>(trace, CUCO_SITE, peer, 1, f, 1u);
}
__global__ void first(const unsigned* f, int peer, cuco::Trace trace) { wait_for(f, peer, trace); }
__global__ void second(const unsigned* f, int peer, cuco::Trace trace) {
  if (threadIdx.x == 0) wait_for(f + 1, peer, trace);
}
__global__ void twice(const unsigned* f, int peer, cuco::Trace trace) {
  [&] { cuco::wait_geq<unsigned>(trace, CUCO_SITE, peer, 2, f, 1u); }();
}
__global__ void passed(const unsigned* f, int peer, cuco::Trace trace, int site) {
  cuco::wait_geq<unsigned>(trace, site, peer, 3, f, 1u);
}
__device__ void wait_at(const unsigned* f, int peer, cuco::Trace trace, int site) {
  cuco::wait_geq<unsigned>(trace, site, peer, 6, f, 1u);
}
__global__ void hands_its_site(const unsigned* f, int peer, cuco::Trace trace) { wait_at(f, peer, trace, CUCO_SITE); }
__global__ void also_hands_its_site(const unsigned* f, int peer, cuco::Trace trace) {
  wait_at(f, peer, trace, CUCO_SITE);
}
__global__ void a_kernel_whose_name_is_longer_than_a_slot_holds(const unsigned* f, int peer, cuco::Trace trace) {
  cuco::wait_geq<unsigned>(trace, CUCO_SITE, peer, 4, f, 1u);
}
static int candidate_launch(const unsigned* f, int peer, cuco::Trace t, cudaStream_t s) {
  first<<<1, 1, 0, s>>>(f, peer, t);
  second<<<1, 1, 0, s>>>(f, peer, t);
  twice<<<1, 1, 0, s>>>(f, peer, t);
  passed<<<1, 1, 0, s>>>(f, peer, t, CUCO_SITE);
  twice<<<1, 1, 0, s>>>(f, peer,
                        t);
  passed<<<1, 1, 0, s>>>(f, peer, t,
                         CUCO_SITE);
  a_kernel_whose_name_is_longer_than_a_slot_holds<<<1, 1, 0, s>>>(f, peer, t);
  hands_its_site<<<1, 1, 0, s>>>(f, peer, t);
  also_hands_its_site<<<1, 1, 0, s>>>(f, peer, t);
  return 0;
}
"""


def test_a_wait_in_a_device_function_is_at_the_launches_of_every_kernel_that_calls_it():
    wait = line_of(HELPER, "trace, CUCO_SITE, peer, 1")
    site = find_launch(CandidateSource(HELPER), wait, "wait_for")
    assert site == LaunchSite((line_of(HELPER, "first<<<"), line_of(HELPER, "second<<<")), "wait_for", wait)
    assert find_launch(CandidateSource(HELPER), wait, "") == site  # by the wait's line alone, the same


def test_a_kernel_launched_from_two_places_names_both_and_keeps_the_hint():
    wait = line_of(HELPER, "trace, CUCO_SITE, peer, 2")  # in a lambda: the slot says "operator()"
    launches = (line_of(HELPER, "twice<<<"), line_of(HELPER, "twice<<<", 1))
    assert find_launch(CandidateSource(HELPER), wait, "operator()") == LaunchSite(launches, "twice", wait)
    d = report([hung(0, [slot(wait, 1, 2, "operator()"), slot(wait, 1, 5, "operator()", i=1)]),
                hung(1, [slot(wait, 0, 2, "operator()")])], HELPER)
    assert f"(c.cu:{launches[0]} or {launches[1]} (in twice at line {wait}), flag 2: wants 1, saw 0)" in d.summary
    assert any("helper kernel" in x for x in d.details)  # two launches do not tell the two flags apart


def test_a_site_the_host_passes_at_a_launch_is_that_launch():
    first, second = line_of(HELPER, "passed<<<"), line_of(HELPER, "passed<<<", 1)
    model = CandidateSource(HELPER)
    assert find_launch(model, first, "passed") == LaunchSite((first,), "passed")
    assert find_launch(model, second + 1, "passed") == LaunchSite((second,), "passed")  # on the launch's next line
    assert find_launch(model, second + 1, "") == LaunchSite((second,), "passed")


def test_a_site_a_kernel_hands_to_the_device_function_that_waits_is_that_kernels_launch():
    site = line_of(HELPER, "wait_at(f, peer, trace, CUCO_SITE)", 1)  # in also_hands_its_site
    assert find_launch(CandidateSource(HELPER), site, "wait_at") == LaunchSite(
        (line_of(HELPER, "also_hands_its_site<<<"),), "also_hands_its_site", site)


def test_a_name_cut_to_fit_the_slot_still_finds_its_kernel():
    name = "a_kernel_whose_name_is_longer_than_a_slot_holds"
    cut = name[:WAIT_FUNCTION_LEN - 1]
    site = find_launch(CandidateSource(HELPER), line_of(HELPER, "peer, 4, f"), cut)
    assert site is not None and site.lines == (line_of(HELPER, f"{name}<<<"),) and site.function == name


def test_a_wait_nothing_in_the_source_launches_is_reported_as_before():
    model = CandidateSource(HELPER)
    assert find_launch(model, line_of(HELPER, "return 0;"), "a_function_of_another_file") is None
    assert find_launch(model, 99, "") is None
    # A function the source does not define, with a site in a kernel of the candidate (a runtime
    # helper the kernel calls, handed the kernel's CUCO_SITE): the kernel's launches.
    wait = line_of(HELPER, "trace, CUCO_SITE, peer, 1")
    assert find_launch(model, wait, "a_runtime_helper").lines == (line_of(HELPER, "first<<<"), line_of(HELPER, "second<<<"))
    d = report([hung(0, [slot(99, 1, 0, "elsewhere")]), hung(1, [slot(99, 0, 0, "elsewhere")])], HELPER)
    assert "rank 0 waits on rank 1 (line 99, flag 0: wants 1, saw 0)" in d.summary


def test_named_waits_keep_their_launch_line():
    source = HELPER.replace("  return 0;\n}", '  first<<<1, 1, 0, s>>>(f, peer, t, CUCO_WAIT_SITE("go"));\n  return 0;\n}')
    site = line_of(source, 'CUCO_WAIT_SITE("go")')
    d = report([hung(0, [{**slot(site, 1, 7, "first"), "label": "go"}]),
                hung(1, [{**slot(site, 0, 7, "first"), "label": "go"}])], source)
    assert f"rank 0 waits on rank 1 (c.cu:{site}, 'go' (flag 7): wants 1, saw 0)" in d.summary


def _rendered(workload: str, strategy: str) -> str:
    w = load_workload(workload)
    book = StrategyBook.load(w.root, w.seed)
    s = book.get(strategy)
    return book.render(s, s.normalized(s.default_knobs()))


def test_a_wait_inside_the_fused_gemm_is_at_the_candidates_launch_of_it():
    """fused_tile hands the GEMM `s.site = CUCO_SITE` from its init; the wait itself runs in the
    runtime's wait_rows, whose slot says so: the report names the call that launches the GEMM."""
    source = _rendered("gemm_allgather", "fused_tile")
    handed, launch = line_of(source, "s.site = CUCO_SITE"), line_of(source, "c->gemm.launch(stream, e)")
    d = report([hung(0, [slot(handed, 1, c, "wait_rows", expected=2, observed=1, i=c) for c in range(2)]),
                hung(1, [slot(handed, 0, 0, "wait_rows", expected=2, observed=1)])], source, "fused_tile.cu")
    assert (f"rank 0 waits on rank 1 (fused_tile.cu:{launch} (in the fused GEMM's wait_rows), flag 0: wants 2, "
            f"saw 1)") in d.summary
    assert any(x.startswith(f"fused_tile.cu:{launch}: CUCO_TRY_CUDA(ctx, c->gemm.launch(stream, e));")
               for x in d.details)
    assert not any(x.startswith(f"fused_tile.cu:{handed}:") for x in d.details)  # init's line: not a wait's
    assert not any("helper kernel" in x for x in d.details)


def test_a_template_whose_helper_kernel_is_launched_twice_names_both_launches():
    source = _rendered("moe_dispatch_combine", "arrival_pipeline")
    wait = line_of(source, "trace, CUCO_SITE, peer, (uint64_t)(10 * kind + chunk)")
    launches = [i for i, line in enumerate(source.splitlines(), 1) if "wait_flag<<<" in line]
    assert len(launches) == 2
    assert find_launch(CandidateSource(source), wait, "wait_flag") == LaunchSite(tuple(launches), "wait_flag", wait)
