"""Render one offline-agent strategy of a workload with given knobs into a .cu file.

  python benchmarks/render_strategy.py gemm_allgather peer_pipeline OUT.cu mover=ipc chunks=4
"""

from __future__ import annotations

import sys
from pathlib import Path

from cuco_tui.agents.offline.strategy import StrategyBook
from cuco_tui.workload.manifest import load_workload


def _value(text: str):
    try:
        return int(text)
    except ValueError:
        return text


def main(argv: list[str]) -> int:
    workload, name, out, *pairs = argv
    w = load_workload(workload)
    book = StrategyBook.load(w.root, w.seed)
    s = book.get(name)
    knobs = {**s.default_knobs(), **{k: _value(v) for k, v in (p.split("=", 1) for p in pairs)}}
    Path(out).write_text(book.render(s, s.normalized(knobs)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
