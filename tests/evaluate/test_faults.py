"""The fault suite's candidates: each has an expectation, each passes L0 and (but one) compiles,
so that on a GPU host each fails for the reason it was written for."""

import pytest

from cuco_tui.core.result import Status
from cuco_tui.toolchain import BuildCache, compile_candidate
from cuco_tui.toolchain.toolchain import discover
from cuco_tui.evaluate.faults import load_expectations
from cuco_tui.evaluate.static_checks import check_static, is_rejected
from cuco_tui.harness.rank_events import Verified
from cuco_tui.workload.manifest import load_workload

W = load_workload("gemm_allgather")
FAULTS = sorted((W.root / "faults").glob("*.cu"))


def test_every_fault_has_an_expectation_and_back():
    expected = load_expectations(W)
    assert sorted(expected) == sorted(p.stem for p in FAULTS)
    assert len(FAULTS) >= 10
    kinds = {v["status"] for v in expected.values()}
    assert kinds == {"rejected", "compile_error", "incorrect", "runtime_error", "deadlock"}


@pytest.mark.parametrize("path", FAULTS, ids=[p.stem for p in FAULTS])
def test_fault_passes_static_checks(path):
    assert not is_rejected(check_static(path.read_text(), W.seed.read_text(), path.name))


@pytest.mark.skipif(not discover().can_compile, reason="needs nvcc, NCCL and cuBLAS headers")
@pytest.mark.parametrize("path", FAULTS, ids=[p.stem for p in FAULTS])
def test_fault_compiles_unless_it_is_the_compile_error(path, tmp_path_factory):
    cache = BuildCache(tmp_path_factory.getbasetemp() / "fault-cache")
    r = compile_candidate(path, discover(), cache)
    assert r.ok == (path.stem != "compile_error"), "\n".join(d.render() for d in r.diagnostics)


def test_a_fault_that_needs_more_ranks_is_skipped_and_said_so(monkeypatch):
    from cuco_tui.evaluate import faults as selftest
    from cuco_tui.evaluate.cascade import EvalOptions

    assert load_expectations(W)["cycle_of_three"]["min_world"] == 3
    monkeypatch.setattr(selftest, "choose_gpus", lambda workload, options: ([0, 1], ""))

    def never(*args, **kwargs):
        raise AssertionError("a fault that needs 3 ranks was evaluated on 2")

    monkeypatch.setattr(selftest, "evaluate", never)
    said = []
    checks = selftest.run_fault_suite(W, EvalOptions(world=2), only=("cycle_of_three",), say=said.append)
    assert said == ["cycle_of_three: skipped, it needs 3 ranks at least and this run has 2"]
    assert [(c.name, c.got, c.skipped) for c in checks] == [
        ("cycle_of_three", "skipped", "it needs 3 ranks at least and this run has 2")]


def test_a_fault_that_needs_more_ranks_runs_when_there_are_enough(monkeypatch):
    from cuco_tui.evaluate import faults as selftest
    from cuco_tui.evaluate.cascade import EvalOptions

    class Evaluated(Exception):
        pass

    def evaluate(path, *args, **kwargs):
        raise Evaluated(path.name)

    monkeypatch.setattr(selftest, "choose_gpus", lambda workload, options: ([0, 0, 0, 0], ""))
    monkeypatch.setattr(selftest, "evaluate", evaluate)
    with pytest.raises(Evaluated, match="cycle_of_three.cu"):
        selftest.run_fault_suite(W, EvalOptions(world=4, share_gpu=True), only=("cycle_of_three",))


RACES = ("early_arrival", "reuse_before_read", "stale_pull")


def test_the_race_faults_are_listed_with_their_expectation():
    expected = load_expectations(W)
    for name in RACES:
        assert expected[name] == {"status": "incorrect", "says": ["wrong output"], "race": True}
        assert "FAULT (race" in (W.root / "faults" / f"{name}.cu").read_text()


def test_each_race_fault_is_one_ordering_away_from_a_correct_candidate():
    """The correct parents (candidates/) and the faults differ only in the ordering they drop."""
    import difflib

    for name, parent in (("early_arrival", "ce_overlap"), ("reuse_before_read", "ce_overlap"),
                         ("stale_pull", "ce_pull")):
        a = (W.root / "candidates" / f"{parent}.cu").read_text().splitlines()
        b = (W.root / "faults" / f"{name}.cu").read_text().splitlines()
        changed = [line for line in difflib.unified_diff(a, b, lineterm="", n=0)
                   if line[:1] in "+-" and not line.startswith(("+++", "---")) and not line[1:].lstrip().startswith("//")]
        assert 1 <= len(changed) <= 4, (name, changed)


def _suite_with(monkeypatch, first, replay=None):
    """run_fault_suite over the race faults, with `first(options)` standing in for a GPU evaluation of
    a fault (it returns the status, the reason and the events the ranks would report) and `replay`
    for the evaluation of one seed alone; the seed passes after each. Returns (checks, calls)."""
    from cuco_tui.core.result import CascadeResult, Level
    from cuco_tui.evaluate import faults as selftest
    from cuco_tui.evaluate.cascade import EvalOptions

    calls = []

    def evaluate(path, workload, options, events_out=None, **kwargs):
        calls.append((path.name, options))
        if path.name == "seed.cu":
            status, reason, events = "measured", "verified", []
        elif options.perturb_rounds == 1 and replay is not None:
            status, reason, events = replay(options)
        else:
            status, reason, events = first(options)
        if events_out is not None:
            events_out.extend(events)
        return CascadeResult(str(path), workload.name, Status(status), Level.VERIFY, reason)

    monkeypatch.setattr(selftest, "choose_gpus", lambda workload, options: ([0, 0], ""))
    monkeypatch.setattr(selftest, "evaluate", evaluate)
    return selftest.run_fault_suite(W, EvalOptions(world=2, share_gpu=True), only=RACES), calls


def _verified(ok, perturb_seed):
    """A rank's report of one check (only `ok` and the seed matter to the suite)."""
    return Verified(rank=1, shape="verify", level="verify", check=0, output="y", ok=ok, elements=4, unwritten=0,
                    nonfinite=0, max_rel_error=0.0 if ok else 1.0, sum_sq_diff=0.0, sum_sq_ref=1.0, worst_index=(0,),
                    worst_got=0.0, worst_want=0.0, rtol=0.02, perturb_seed=perturb_seed)


def _failed_under(seed):
    return [_verified(True, None), _verified(False, seed)]


def test_a_race_fault_that_fails_under_a_seed_is_replayed_with_that_seed_alone(monkeypatch):
    checks, calls = _suite_with(
        monkeypatch, lambda o: ("incorrect", "race: wrong output under a perturbed schedule (seed 41, ...)",
                                _failed_under(41)),
        replay=lambda o: ("incorrect", f"race: wrong output under a perturbed schedule (seed {o.perturb_seed}, ...)",
                          _failed_under(o.perturb_seed)))
    assert [(c.name, c.perturb_seed, c.replayed, c.ok, c.note) for c in checks] == [(n, 41, "incorrect", True, "")
                                                                                   for n in RACES]
    replays = [o for name, o in calls if name != "seed.cu" and o.perturb_rounds == 1]
    assert len(replays) == 3 and all(o.perturb_seed == 41 and not o.bench for o in replays)


def test_a_replay_that_passes_every_try_is_a_problem(monkeypatch):
    checks, calls = _suite_with(monkeypatch, lambda o: ("incorrect", "race: ... (seed 9, ...)", _failed_under(9)),
                                replay=lambda o: ("measured", "verified", []))
    assert all(not c.ok and any("seed 9 passed all 3 replays (last: measured" in p for p in c.problems)
               for c in checks)
    assert len([o for name, o in calls if name != "seed.cu" and o.perturb_rounds == 1]) == 3 * len(RACES)


def test_a_replay_that_fails_again_on_a_later_try_is_a_replayed_race(monkeypatch):
    """A race may also show by chance under a seed that does not aim at its window (a busy machine):
    the seed's holds replay exactly, the chance does not, so the suite gives the replay three tries."""
    tries = []

    def replay(o):
        tries.append(o.perturb_seed)
        if len(tries) % 2:
            return "measured", "verified", []
        return "incorrect", f"race: wrong output under a perturbed schedule (seed {o.perturb_seed}, ...)", []

    checks, _ = _suite_with(monkeypatch, lambda o: ("incorrect", "race: wrong output under a perturbed schedule "
                                                                 "(seed 9, ...)", _failed_under(9)),
                            replay=replay)
    assert all(c.ok and c.replayed == "incorrect" and "failed again on replay try 2 of 3" in c.note for c in checks)
    assert tries == [9, 9] * len(RACES)


def test_a_race_the_ordinary_checks_caught_is_noted_not_replayed(monkeypatch):
    checks, calls = _suite_with(monkeypatch, lambda o: ("incorrect", "wrong output at verify #1: ...",
                                                        [_verified(False, None)]))
    assert all(c.ok and c.perturb_seed is None and "ordinary checks" in c.note for c in checks)
    assert not [o for name, o in calls if name != "seed.cu" and o.perturb_rounds == 1]


def test_a_race_fault_that_passes_everything_fails_the_suite(monkeypatch):
    checks, _ = _suite_with(monkeypatch, lambda o: ("measured", "verified", []))
    assert all(not c.ok and "status measured, expected incorrect" in c.problems for c in checks)
