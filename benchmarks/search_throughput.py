"""Where a search's seconds go (issue 34, item 1): per session, the evaluations it made in the wall
time it ran, and per evaluation the build and run seconds its result records.

    python3 benchmarks/search_throughput.py NAME=WALL_S=SESSION_OR_BUNDLE ... [--json FILE]

WALL_S is the search's whole wall time as its caller measured it (start to exit, the session's
bounds and the stop included): evaluations per minute are evaluations / (WALL_S / 60). A candidate
counts as an evaluation as benchmarks/search_vs_random.py counts it (not pending, unreviewed, an
exhausted agent's placeholder, or turned away before evaluation). Build seconds of a cached build
are the cache's lookup; a fused_tile candidate that links a prebuilt GEMM library pays the
library's build once per configuration, inside the first candidate's build seconds."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from search_vs_random import is_evaluation  # noqa: E402

from cuco_tui.lineage import SessionError, open_session_or_bundle  # noqa: E402


@dataclass(frozen=True)
class Throughput:
    name: str
    wall_s: float
    evaluations: int
    measured: int
    per_minute: float
    build_s_median: float
    build_s_sum: float
    run_s_median: float
    run_s_sum: float
    statuses: dict[str, int]

    def line(self) -> str:
        return (f"| {self.name} | {self.wall_s:.0f} | {self.evaluations} ({self.measured} measured) | "
                f"{self.per_minute:.2f} | {self.build_s_median:.1f} / {self.build_s_sum:.0f} | "
                f"{self.run_s_median:.1f} / {self.run_s_sum:.0f} | "
                + ", ".join(f"{k} {v}" for k, v in sorted(self.statuses.items())) + " |")


def throughput(name: str, wall_s: float, path: Path) -> Throughput:
    with open_session_or_bundle(path) as repo:
        records = [r for r in repo.records() if is_evaluation(r)]
    builds = [float((r.result or {}).get("build_seconds", 0.0)) for r in records]
    runs = [float((r.result or {}).get("run_seconds", 0.0)) for r in records]
    statuses: dict[str, int] = {}
    for r in records:
        statuses[r.status.value] = statuses.get(r.status.value, 0) + 1
    return Throughput(name, wall_s, len(records), sum(r.speedup is not None for r in records),
                      len(records) / (wall_s / 60.0) if wall_s > 0 else 0.0,
                      statistics.median(builds) if builds else 0.0, sum(builds),
                      statistics.median(runs) if runs else 0.0, sum(runs), statuses)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("sessions", nargs="+", metavar="NAME=WALL_S=PATH")
    p.add_argument("--json", help="write the figures as JSON here too")
    args = p.parse_args(argv)
    rows = []
    for spec in args.sessions:
        try:
            name, wall, path = spec.split("=", 2)
            rows.append(throughput(name, float(wall), Path(path)))
        except ValueError:
            print(f"search_throughput: {spec!r} is not NAME=WALL_S=PATH", file=sys.stderr)
            return 2
        except SessionError as exc:
            print(f"search_throughput: {spec}: {exc}", file=sys.stderr)
            return 2
    print("| search | wall s | evaluations | per minute | build s median / sum | run s median / sum | statuses |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print(row.line())
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
