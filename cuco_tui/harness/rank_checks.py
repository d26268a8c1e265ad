"""Verification in a rank: one check's outputs compared with the reference's, each output
reported, and the back-to-back check (two launches with no host wait between them)."""

from __future__ import annotations

from typing import Any, Callable

from cuco_tui.harness.candidate_calls import CandidateCalls
from cuco_tui.harness.rank_group import RankGroup
from cuco_tui.harness.timing import Timing
from cuco_tui.harness.verify import compare, poison


class RankChecks:
    def __init__(self, group: RankGroup, ref_module: Any, candidate: CandidateCalls, timing: Timing) -> None:
        self.group = group
        self.plan = group.plan
        self.ref_module = ref_module
        self.candidate = candidate
        self.timing = timing

    def verify(self, shape: dict, check: int, outputs: dict, expected: dict, dtypes: dict[str, str],
               label: str = "") -> bool:
        g = self.group
        ok = True
        rtol, floor = float(self.plan["rtol"]), float(self.plan.get("floor", 0.0))
        with g.stream:
            for name, got in outputs.items():
                c = compare(g.cupy, got, expected[name], dtypes[name], floor=floor)
                passed = c.passed(rtol)
                ok = ok and passed
                g.log.emit(
                    "verify", shape=shape["name"], level=shape["level"], check=check, output=name, ok=passed,
                    elements=c.elements, unwritten=c.unwritten, nonfinite=c.nonfinite,
                    max_rel_error=c.max_rel_error, sum_sq_diff=c.sum_sq_diff, sum_sq_ref=c.sum_sq_ref,
                    worst_index=list(c.worst_index), worst_got=c.worst_got, worst_want=c.worst_want, rtol=rtol,
                    floor=floor, l2_rel_error=c.l2_rel_error, label=label,
                )
        return ok

    def back_to_back(self, shape: dict[str, Any], launch: Callable[[], None], reference: Any, inputs: dict,
                     outputs: dict, expected: dict, dtypes: dict[str, str]) -> bool:
        """Two launches with the inputs replaced and the outputs poisoned in stream order between
        them, and no host wait: as in the timed loop, but with the inputs changing (the contract
        says they may). Each launch's outputs are copied in stream order right after it and both
        are checked: a launch that reads its inputs (or a peer's) before its stream gets there,
        or whose work lands after the stream has moved on, fails here; the checks above, each
        launch alone after a host wait, cannot see it."""
        g = self.group
        check = int(shape["checks"])
        seed = int(self.plan["nonce"]) * 1000 + shape["index"] * 10 + 8
        dims = shape["dims"]

        def fill(s: int) -> None:
            with g.stream:
                self.ref_module.fill_inputs(g.cupy, inputs, dims, g.world, g.rank, s)

        fill(seed)
        g.barrier()
        g.log.emit("launch", shape=shape["name"], check=check, limit_s=self.timing.limit(shape), back_to_back=True)
        launch()
        with g.stream:
            first = {name: arr.copy() for name, arr in outputs.items()}
        fill(seed + 1)
        with g.stream:
            for name, arr in outputs.items():
                poison(g.cupy, arr, dtypes[name])
        launch()
        g.wait_stream("two candidate launches back to back", 2 * self.timing.limit(shape))
        self.candidate.check_cuda("after two candidate launches back to back")
        g.barrier()  # every rank's second launch done before the reference's collectives
        ok = True
        for s, got, label in ((seed + 1, outputs, "back to back, 2nd"), (seed, first, "back to back, 1st")):
            fill(s)
            reference.run(inputs, expected)
            g.wait_stream("the reference", 120.0)
            ok = g.all_ok(self.verify(shape, check, got, expected, dtypes, label=label)) and ok
            check += 1
        return ok
