"""Evaluate gemm_allgather's seed N times through one set of kept rank workers on GPUs 0,1, then N
times in fresh workers, and print per evaluation its wall seconds, the workers' plan counts and
every reason they gave for leaving: whether a group is kept on this host, and what keeping it saves
(issue 34, kept workers).   python3 benchmarks/kept_probe.py [N]"""

import sys
import time

from cuco_tui.evaluate.cascade import EvalOptions, evaluate
from cuco_tui.harness.kept import KeptWorkers
from cuco_tui.harness.rank_events import Joined, Leaving
from cuco_tui.workload.manifest import load_workload


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    w = load_workload("gemm_allgather")
    options = EvalOptions(gpus=[0, 1], world=2, shapes=("short-seq",))
    for label, kept in (("kept", KeptWorkers()), ("fresh", None)):
        seconds = []
        try:
            for i in range(n):
                events: list = []
                start = time.monotonic()
                r = evaluate(w.seed, w, options, events_out=events, kept=kept)
                seconds.append(time.monotonic() - start)
                print(f"{label} {i}: {seconds[-1]:.2f} s, {r.status.value}: {r.reason}; plans before "
                      f"{sorted({e.plans for e in events if isinstance(e, Joined)})}; left: "
                      f"{[e.reason for e in events if isinstance(e, Leaving)]}")
        finally:
            if kept is not None:
                kept.close()
        rest = sorted(seconds[1:])
        print(f"{label}: first {seconds[0]:.2f} s, later median {rest[len(rest) // 2]:.2f} s "
              f"(min {rest[0]:.2f}, max {rest[-1]:.2f})")


if __name__ == "__main__":
    main()
