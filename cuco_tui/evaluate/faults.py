"""`cuco selftest --faults`: every deliberately broken candidate of a workload's `faults/`
folder must get its expected status and diagnosis, within its time limit plus 5 s, and the
GPUs must pass the seed's verification right after each. A race fault (`race = true`) that fails
in one of L2's perturbed schedules must fail again when that seed alone is replayed (within three
tries); one that the ordinary checks catch first (its race showed by itself, as it may on real
concurrency) is noted."""

from __future__ import annotations

import time
import tomllib
from dataclasses import dataclass, replace
from typing import Callable

from cuco_tui.evaluate.cascade import EvalOptions, choose_gpus, evaluate
from cuco_tui.core.result import CascadeResult, Status
from cuco_tui.core.workload import Workload
from cuco_tui.harness.rank_events import Failed, Launched, RankEvent, TimedOut, Verified

DETECTION_SLACK_S = 5.0
# A seed replays its holds exactly, but a race can also show by chance under a seed that does not
# aim at its window (a busy machine, real concurrency); such a failure may need a few tries.
REPLAY_TRIES = 3


@dataclass(frozen=True)
class FaultCheck:
    name: str
    expected: str
    got: str
    says: tuple[str, ...]
    reason: str
    report: str
    detection_s: float | None  # from the launch to the failure report, when it was a launch
    limit_s: float | None
    healthy_after: bool
    problems: tuple[str, ...]
    skipped: str = ""  # why the fault was not run (it needs more ranks than this run has)
    perturb_seed: int | None = None  # the perturbation seed it failed under (race faults)
    replayed: str = ""  # the status when that seed alone was replayed
    note: str = ""

    @property
    def ok(self) -> bool:
        return not self.problems


def _detection(result: CascadeResult, rundir_events: list[RankEvent]) -> tuple[float | None, float | None]:
    launches = [e for e in rundir_events if isinstance(e, Launched)]
    ends = [e for e in rundir_events if isinstance(e, (TimedOut, Failed))]
    if not launches or not ends:
        return None, None
    return min(e.t for e in ends) - launches[-1].t, launches[-1].limit_s


def failed_perturb_seed(events: list[RankEvent]) -> int | None:
    """The seed of the first perturbed round whose verification failed on some rank."""
    seeds = []
    for event in events:
        match event:
            case Verified(perturb_seed=int(seed)) if not event.ok:
                seeds.append(seed)
    return min(seeds) if seeds else None


def load_expectations(workload: Workload) -> dict[str, dict]:
    path = workload.root / "faults" / "expected.toml"
    if not path.exists():
        raise FileNotFoundError(f"{workload.name} has no faults/expected.toml")
    return tomllib.loads(path.read_text())


def _replay(path, workload: Workload, options: EvalOptions, want: str,
            say: Callable[[str], None]) -> tuple[CascadeResult, int, bool]:
    """(the last try's result, the tries made, whether it failed as expected: `want`, naming the
    seed): seed `options.perturb_seed` alone, until it fails so or REPLAY_TRIES have passed."""
    for tries in range(1, REPLAY_TRIES + 1):
        say(f"{path.stem}: replaying perturbation seed {options.perturb_seed} (try {tries} of {REPLAY_TRIES})")
        again = evaluate(path, workload, options)
        if again.status.value == want and f"seed {options.perturb_seed}" in again.reason:
            return again, tries, True
    return again, REPLAY_TRIES, False


def run_fault_suite(workload: Workload, options: EvalOptions, only: tuple[str, ...] = (),
                    say: Callable[[str], None] = lambda s: None) -> list[FaultCheck]:
    expectations = load_expectations(workload)
    checks = []
    verify_only = EvalOptions(**{**options.__dict__, "bench": False})
    world = len(choose_gpus(workload, options)[0])
    for name, want in expectations.items():
        if only and name not in only:
            continue
        if world and world < int(want.get("min_world", 1)):
            why = f"it needs {want['min_world']} ranks at least and this run has {world}"
            say(f"{name}: skipped, {why}")
            checks.append(FaultCheck(name, want["status"], "skipped", tuple(want.get("says", [])), why, "",
                                     None, None, True, (), skipped=why))
            continue
        path = workload.root / "faults" / f"{name}.cu"
        say(f"{name}: evaluating")
        t0 = time.monotonic()
        events: list[RankEvent] = []
        result = evaluate(path, workload, verify_only, events_out=events)
        detection, limit = _detection(result, events)
        text = " ".join([result.reason, result.deadlock_report] + [d.message for d in result.diagnostics]
                        + [d.source_line for d in result.diagnostics]).lower()
        problems = []
        if result.status.value != want["status"]:
            problems.append(f"status {result.status.value}, expected {want['status']}")
        for words in want.get("says", []):
            if words.lower() not in text:
                problems.append(f"the diagnosis does not say {words!r}")
        if detection is not None and limit is not None and result.status in (Status.DEADLOCK, Status.RUNTIME_ERROR):
            if detection > limit + DETECTION_SLACK_S:
                problems.append(f"detected after {detection:.1f} s, more than {limit:.0f} s + {DETECTION_SLACK_S:.0f} s")
        seed, replayed, note = None, "", ""
        if want.get("race"):
            seed = failed_perturb_seed(events)
            if seed is None and result.status.value == want["status"]:
                note = "caught by the ordinary checks: the race showed without a perturbed schedule"
            elif seed is None and not options.perturb:
                problems.append("a race fault needs the perturbed schedules, which this run turned off")
            elif seed is not None:
                again, tries, failed_again = _replay(path, workload, replace(verify_only, perturb_seed=seed,
                                                                             perturb_rounds=1), want["status"], say)
                replayed = again.status.value
                if not failed_again:
                    problems.append(f"seed {seed} passed all {tries} replays (last: {replayed}: {again.reason[:200]})")
                elif tries > 1:
                    note = f"failed again on replay try {tries} of {REPLAY_TRIES}"
        healthy = True
        if result.level >= 2:
            after = evaluate(workload.seed, workload, verify_only)
            healthy = after.status in (Status.VERIFIED, Status.MEASURED)
            if not healthy:
                problems.append(f"the seed failed on the same GPUs right after: {after.reason}")
        verdict = (f" ({note})" if note else "") + ("" if not problems else " PROBLEM: " + "; ".join(problems))
        say(f"{name}: {result.status.value} in {time.monotonic() - t0:.1f} s{verdict}")
        checks.append(FaultCheck(name, want["status"], result.status.value, tuple(want.get("says", [])),
                                 result.reason, result.deadlock_report, detection, limit, healthy, tuple(problems),
                                 perturb_seed=seed, replayed=replayed, note=note))
    return checks
