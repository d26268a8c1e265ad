"""L2's perturbed schedules on one GPU, ranks sharing it (issue 25): the fault suite's race and hang
faults, the race faults without perturbation, and a summary with the correct candidates' check.

  python benchmarks/race_check.py build --out DIR                 # the faults and the perturber, in parallel
  python benchmarks/race_check.py faults --out DIR --world 2 [--only a,b]
  python benchmarks/race_check.py luck --out DIR --worlds 2,4     # the race faults, perturbation off
  python benchmarks/race_check.py summary --out DIR [--check DIR/check/shared_gpu_check.json]

`faults` runs `cuco selftest --faults`'s own code (evaluate/faults.py) with every rank on one GPU:
a race fault must fail under a perturbed schedule that names its seed and fail again when that
seed alone is replayed; a hang must be diagnosed with its wait's name and launch line. `luck`
evaluates the race faults with the perturbed schedules off: what today's checks say of them.
`summary` prints one table of everything under DIR and writes DIR/races.json; with --check, the
correct candidates verified under perturbation by benchmarks/shared_gpu_check.py, and the time the
perturbed rounds added to each evaluation.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path

from cuco_tui.evaluate.cascade import EvalOptions, evaluate
from cuco_tui.evaluate.faults import load_expectations, run_fault_suite
from cuco_tui.toolchain import BuildCache, compile_candidate
from cuco_tui.toolchain.perturb import ensure_perturb_library
from cuco_tui.toolchain.toolchain import discover
from cuco_tui.workload.manifest import load_workload

W = load_workload("gemm_allgather")
HANGS = {2: ("hang", "missing_signal"), 4: ("cycle_of_three",)}


def races() -> list[str]:
    return [name for name, want in load_expectations(W).items() if want.get("race")]


def cmd_build(args: argparse.Namespace) -> int:
    toolchain, cache = discover(), BuildCache()
    t0 = time.monotonic()
    faults = sorted((W.root / "faults").glob("*.cu"))
    with ThreadPoolExecutor(args.jobs) as pool:
        perturber = pool.submit(ensure_perturb_library, toolchain, cache)
        built = list(pool.map(lambda p: (p.stem, compile_candidate(p, toolchain, cache).ok), faults))
        lib = perturber.result()
    bad = [n for n, ok in built if not ok and n != "compile_error"]
    print(f"faults built: {len(built) - len(bad)} of {len(built)} ({', '.join(bad) or 'all as expected'}); perturber: "
          f"{lib.path if lib.ok else lib.problem}; {time.monotonic() - t0:.0f} s")
    return 0 if lib.ok and not bad else 1


def cmd_faults(args: argparse.Namespace) -> int:
    only = tuple(args.only.split(",")) if args.only else tuple(races()) + HANGS.get(args.world, ())
    options = EvalOptions(gpus=[args.gpu], world=args.world, share_gpu=True, first_launch_timeout_s=10.0)
    t0 = time.monotonic()
    checks = run_fault_suite(W, options, only, say=lambda s: print(f"  {time.monotonic() - t0:6.1f} s  {s}", flush=True))
    rows = [asdict(c) | {"world": args.world, "ok": c.ok} for c in checks]
    out = args.out / f"faults-w{args.world}.json"
    out.write_text(json.dumps({"world": args.world, "seconds": round(time.monotonic() - t0, 1), "checks": rows},
                              indent=1))
    print(f"{sum(c.ok for c in checks)} of {len(checks)} as expected at W={args.world}; {out}")
    return 0 if all(c.ok for c in checks) else 1


def cmd_luck(args: argparse.Namespace) -> int:
    jobs = [(name, w) for w in (int(x) for x in args.worlds.split(",")) for name in races()]

    def run(job: tuple[str, int]) -> dict:
        name, world = job
        t0 = time.monotonic()
        opts = EvalOptions(gpus=[args.gpu], world=world, share_gpu=True, bench=False, perturb=False)
        r = evaluate(W.root / "faults" / f"{name}.cu", W, opts)
        return {"fault": name, "world": world, "status": r.status.value, "reason": r.reason[:300],
                "seconds": round(time.monotonic() - t0, 1)}

    with ThreadPoolExecutor(args.jobs) as pool:
        rows = list(pool.map(run, jobs))
    for r in rows:
        print(f"  W={r['world']} {r['fault']}: {r['status']} ({r['reason'][:120]})")
    (args.out / "luck.json").write_text(json.dumps(rows, indent=1))
    return 0


def _load(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def cmd_summary(args: argparse.Namespace) -> int:
    report: dict = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "faults": [], "luck": _load(args.out / "luck.json") or []}
    print("\nrace and hang faults, every rank on one GPU (cuco selftest --faults --share-gpu):")
    print(f"  {'fault':<18} {'W':>2} {'got':<11} {'seed':>9} {'replayed':<10} {'today':<10} verdict / diagnosis")
    luck = {(r["fault"], r["world"]): r["status"] for r in report["luck"]}
    problems = 0
    for path in sorted(args.out.glob("faults-w*.json")):
        for c in (_load(path) or {}).get("checks", []):
            report["faults"].append(c)
            problems += not c["ok"]
            seed = "-" if c["perturb_seed"] is None else str(c["perturb_seed"])
            verdict = "pass" if c["ok"] else "FAIL: " + "; ".join(c["problems"])
            said = (c["report"].splitlines()[0] if c["report"] else c["reason"])[:150]
            note = f" [{c['note']}]" if c.get("note") else ""
            print(f"  {c['name']:<18} {c['world']:>2} {c['got']:<11} {seed:>9} {c['replayed'] or '-':<10} "
                  f"{luck.get((c['name'], c['world']), '-'):<10} {verdict}{note}: {said}")
    check = _load(args.check) if args.check else None
    if check:
        rows = check.get("results", [])
        report["correct"] = rows
        print("\ncorrect candidates under perturbation (benchmarks/shared_gpu_check.py):")
        print(f"  {'W':>2} {'verified':>9} {'rounds':>7} {'median s':>9} {'perturbed s: median':>20} {'max':>6}")
        for world in sorted({r["world"] for r in rows}):
            mine = [r for r in rows if r["world"] == world]
            ok = sum(r["ok"] for r in mine)
            problems += len(mine) - ok
            added = [r.get("perturbed_s", 0.0) for r in mine if r["ok"]]
            rounds = sum(len(r.get("perturbed_rounds", [])) for r in mine)
            print(f"  {world:>2} {ok:>4} of {len(mine):<3} {rounds:>7} "
                  f"{statistics.median(r['seconds'] for r in mine):>9.1f} "
                  f"{statistics.median(added) if added else 0:>20.2f} {max(added, default=0):>6.2f}")
        for r in rows:
            if not r["ok"]:
                print(f"  FAIL W={r['world']} {r['workload']} {r['label']}: {r['reason'][:200]}")
        for s in check.get("skipped", []):
            print(f"  skipped {s['workload']} {s['label']}: {s['why']}")
    (args.out / "races.json").write_text(json.dumps(report, indent=1))
    print(f"\n{problems} problem(s); {args.out / 'races.json'}")
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    for name, fn in (("build", cmd_build), ("faults", cmd_faults), ("luck", cmd_luck), ("summary", cmd_summary)):
        p = sub.add_parser(name)
        p.add_argument("--out", type=Path, required=True)
        p.add_argument("--gpu", type=int, default=0)
        p.add_argument("--jobs", type=int, default=3)
        p.set_defaults(fn=fn)
        if name == "faults":
            p.add_argument("--world", type=int, required=True)
            p.add_argument("--only", help="comma-separated fault names (default: the races and this world's hangs)")
        if name == "luck":
            p.add_argument("--worlds", default="2,4")
        if name == "summary":
            p.add_argument("--check", type=Path)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
