"""Verification in a rank: one check's outputs compared with the reference's, each output
reported, and the back-to-back check (two launches with no host wait between them), which
rank_steps.PerturbedRounds runs again under perturbed schedules (perturb.py: the candidate's
ordering points held back on their streams, a rank started late)."""

from __future__ import annotations

from typing import Callable

from cuco_tui.core.reference import RankReference, Reference
from cuco_tui.harness.candidate_calls import CandidateCalls
from cuco_tui.harness.plan import BACK_TO_BACK_CHECK, ShapePlan
from cuco_tui.harness.rank_events import Launched, Verified
from cuco_tui.harness.rank_group import RankGroup
from cuco_tui.harness.timing import Timing
from cuco_tui.harness.verify import compare, poison


class RankChecks:
    def __init__(self, group: RankGroup, reference: Reference, candidate: CandidateCalls, timing: Timing) -> None:
        self.group = group
        self.plan = group.plan
        self.reference = reference
        self.candidate = candidate
        self.timing = timing

    def verify(self, shape: ShapePlan, check: int, outputs: dict, expected: dict, dtypes: dict[str, str],
               label: str = "", perturb_seed: int | None = None) -> bool:
        g = self.group
        ok = True
        rtol, floor = self.plan.rtol, self.plan.floor
        with g.stream:
            for name, got in outputs.items():
                c = compare(g.cupy, got, expected[name], dtypes[name], floor=floor)
                passed = c.passed(rtol)
                ok = ok and passed
                g.log.emit(Verified(
                    shape=shape.name, level=shape.level, check=check, output=name, ok=passed,
                    elements=c.elements, unwritten=c.unwritten, nonfinite=c.nonfinite,
                    max_rel_error=c.max_rel_error, sum_sq_diff=c.sum_sq_diff, sum_sq_ref=c.sum_sq_ref,
                    worst_index=tuple(c.worst_index), worst_got=c.worst_got, worst_want=c.worst_want, rtol=rtol,
                    floor=floor, l2_rel_error=c.l2_rel_error, label=label, perturb_seed=perturb_seed,
                ))
        return ok

    def back_to_back(self, shape: ShapePlan, launch: Callable[[], None], reference: RankReference, inputs: dict,
                     outputs: dict, expected: dict, dtypes: dict[str, str], label: str = "back to back",
                     check: int | None = None, input_seed: int | None = None,
                     late: Callable[[], None] = lambda: None, perturb_seed: int | None = None) -> bool:
        """Two launches with the inputs replaced and the outputs poisoned in stream order between
        them, and no host wait: as in the timed loop, but with the inputs changing (the contract
        says they may). Each launch's outputs are copied in stream order right after it and both
        are checked: a launch that reads its inputs (or a peer's) before its stream gets there,
        or whose work lands after the stream has moved on, fails here; the checks above, each
        launch alone after a host wait, cannot see it. `late` runs on the host right before each
        launch's work is enqueued (a perturbed round holds a late rank's stream back there)."""
        g = self.group
        check = shape.checks if check is None else check
        seed = self.plan.seed(shape, BACK_TO_BACK_CHECK) if input_seed is None else input_seed
        dims = shape.dims

        def fill(s: int) -> None:
            with g.stream:
                self.reference.fill_inputs(g.cupy, inputs, dims, g.world, g.rank, s)

        def poison_outputs() -> None:
            with g.stream:
                for name, arr in outputs.items():
                    poison(g.cupy, arr, dtypes[name])

        fill(seed)
        poison_outputs()
        g.barrier()
        g.log.emit(Launched(shape=shape.name, check=check, limit_s=self.timing.limit(shape), back_to_back=True,
                            label=label))
        late()
        launch()
        with g.stream:
            first = {name: arr.copy() for name, arr in outputs.items()}
        late()
        fill(seed + 1)
        poison_outputs()
        launch()
        what = "two candidate launches back to back" + ("" if label == "back to back" else f" ({label})")
        g.wait_stream(what, 2 * self.timing.limit(shape))
        self.candidate.check_cuda(f"after {what}")
        g.barrier()  # every rank's second launch done before the reference's collectives
        ok = True
        for s, got, nth in ((seed + 1, outputs, "2nd"), (seed, first, "1st")):
            fill(s)
            reference.run(inputs, expected)
            g.wait_stream("the reference", 120.0)
            ok = g.all_ok(self.verify(shape, check, got, expected, dtypes, label=f"{label}, {nth}",
                                      perturb_seed=perturb_seed)) and ok
            check += 1
        return ok
