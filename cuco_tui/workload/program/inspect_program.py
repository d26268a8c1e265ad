"""`python -m cuco_tui.workload.program.inspect_program FILE WORLD OUT.json`: load a program in a
process of its own, check its convention and size every shape (sizing.py) at WORLD and at the usual
world sizes. Writes one JSON object to OUT.json (the program may print what it likes):
{"error": one line} or {"convention", "sizes", "refused", "split_dims"}. The import calls `inspect`
in its rank 0 (gloo_rank), before the CPU run, instead of starting a process for it."""

from __future__ import annotations

import json
import os
import sys
import warnings
from typing import Any


def inspect(path: str, world: int) -> dict[str, Any]:
    try:
        import torch  # noqa: F401
    except ImportError as exc:
        return {"error": f"importing a PyTorch program needs torch ({exc}): pip install -e '.[torch]'"}
    from cuco_tui.workload.program.sizing import size_all, split_dims
    from cuco_tui.workload.program.user_module import ProgramError, load_program

    try:
        module, conv = load_program(path)
        sizes, refused = size_all(module, conv, world)
    except ProgramError as exc:
        return {"error": str(exc)}
    return {"convention": conv.to_json(), "sizes": {str(w): s.to_json() for w, s in sizes.items()},
            "refused": {str(w): why for w, why in refused.items()},
            "split_dims": split_dims(sizes[world], conv.dims)}


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m cuco_tui.workload.program.inspect_program FILE WORLD OUT.json", file=sys.stderr)
        return 2
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    warnings.simplefilter("ignore")  # torch's deprecation notes about the program's calls are not findings
    report = inspect(argv[0], int(argv[1]))
    with open(argv[2], "w") as f:
        json.dump(report, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
