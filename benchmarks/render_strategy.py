"""Render one offline-agent strategy of a workload with given knobs into a .cu file.

  python benchmarks/render_strategy.py gemm_allgather peer_pipeline OUT.cu mover=ipc chunks=4
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from cuco_tui.agents.offline.strategy import StrategyBook, StrategyError
from cuco_tui.workload.manifest import load_workload


def _value(text: str):
    try:
        return int(text)
    except ValueError:
        return text


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description="Render one strategy of a workload with given knobs into a .cu file.")
    ap.add_argument("workload")
    ap.add_argument("strategy")
    ap.add_argument("out", type=Path)
    ap.add_argument("knobs", nargs="*", metavar="KNOB=VALUE", help="knobs changed from the strategy's defaults")
    args = ap.parse_args(argv)
    w = load_workload(args.workload)
    book = StrategyBook.load(w.root, w.seed)
    try:
        s = book.get(args.strategy)
    except StrategyError:
        ap.error(f"{args.workload} has no strategy {args.strategy!r} (it has "
                 f"{', '.join(x.name for x in book.strategies)})")
    bad = [p for p in args.knobs if "=" not in p]
    if bad:
        ap.error(f"a knob is KNOB=VALUE, not {bad[0]!r}")
    given = {k: _value(v) for k, v in (p.split("=", 1) for p in args.knobs)}
    unknown = sorted(set(given) - set(s.knobs))
    if unknown:
        ap.error(f"{args.strategy} has no knob {unknown[0]!r} (it has {', '.join(s.knobs) or 'none'})")
    args.out.write_text(book.render(s, s.normalized({**s.default_knobs(), **given})))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
