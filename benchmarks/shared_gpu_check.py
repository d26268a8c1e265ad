"""Correctness of every workload's seed and strategy templates with all ranks on one GPU
(`--share-gpu`): verification at each verify shape, the back-to-back launches included, at
world sizes 2 and 4 (8 with --worlds), on a machine with a single GPU. Nothing is timed.

Communication between ranks that share a GPU goes through NCCL's socket transport and CUDA
IPC mappings of one device, so this finds wrong indexing, missing stream ordering within a
rank, init and teardown errors and reference mismatches before a multi-GPU host is at hand;
it cannot see races that need two GPUs' real concurrency, and device-initiated NCCL (LSA, GIN)
or NVSHMEM code is skipped (it needs one GPU per rank).

  python benchmarks/shared_gpu_check.py --out DIR [--jobs 2] [--worlds 2,4] [--sweep] [--only LABELS]
                                        [--strategies NAMES] [WORKLOAD ...]
  python benchmarks/shared_gpu_check.py --real [--gpus 0-3] --out DIR [...]   # a GPU per rank

With `--real`, each rank has a GPU of its own (issue 32: races with real concurrency): the GPUs
are cut into groups of the world size, one evaluation per group at a time (two W=2 groups on four
GPUs), the device-initiated candidates are checked too, and the results go to real_gpu_check.json.

Evaluations run `--jobs` at a time on the GPU; a candidate that fails is evaluated once more
alone, so that a failure caused by sharing the GPU with another group is told apart. L2's
perturbed schedules run as in any evaluation (`--no-perturb` turns them off); each result records
their seeds and the seconds they added (`perturbed_s`, the slowest rank's).
"""

from __future__ import annotations

import argparse
import json
import queue
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from cuco_tui.agents.offline import StrategyBook
from cuco_tui.toolchain import BuildCache, compile_candidate
from cuco_tui.toolchain.attention import ensure_library
from cuco_tui.toolchain.toolchain import discover
from cuco_tui.evaluate.cascade import EvalOptions, evaluate
from cuco_tui.evaluate.races import rounds_of_events
from cuco_tui.harness.rank_events import RankEvent
from cuco_tui.core.result import CascadeResult, Status
from cuco_tui.evaluate.shared_gpu import device_initiated
from cuco_tui.workload.manifest import list_workloads, load_workload



@dataclass
class Job:
    workload: str
    world: int
    label: str
    path: Path


def sources(name: str, dest: Path, sweep: bool) -> list[tuple[str, Path]]:
    """The seed, the hand-written candidates and every strategy at its default knobs (with
    `sweep`, also at each value of each knob, one at a time), identical renders once."""
    w = load_workload(name)
    out: dict[str, str] = {p.stem: p.read_text() for p in w.candidates()}  # the seed first
    book = StrategyBook.load(w.root, w.seed)
    for s in book.strategies:
        for knobs in s.one_knob_changes(None if sweep else []):
            tag = "_".join(str(v) for v in knobs.values())
            out[f"{s.name}[{tag}]" if sweep and tag else s.name] = book.render(s, knobs)
    seen: set[str] = set()
    files = []
    dest.mkdir(parents=True, exist_ok=True)
    for label, text in out.items():
        if text in seen:
            continue
        seen.add(text)
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", label)
        path = dest / f"{stem}.cu"
        while path in (p for _, p in files):  # two labels that clean up to one name
            stem += "_"
            path = dest / f"{stem}.cu"
        path.write_text(text)
        files.append((label, path))
    return files


def summary(r: CascadeResult, seconds: float, alone: bool, events: list[RankEvent] | None = None) -> dict:
    labels = [v.shape for v in r.verifications]
    rounds = rounds_of_events(events or [])
    return {
        "status": r.status.value, "level": int(r.level), "ok": r.status in (Status.MEASURED, Status.VERIFIED), "reason": r.reason,
        "checks": len(labels), "back_to_back_checks": sum("back to back" in s for s in labels),
        "worst_rel_error": max((v.max_rel_error for v in r.verifications), default=None),
        "errors": [d.render() for d in r.diagnostics if d.severity == "error"][:5],
        "deadlock_report": r.deadlock_report[:3000], "seconds": round(seconds, 1), "alone": alone,
        "perturbed_rounds": [{"seed": x.seed, "kind": x.kind, "ok": x.ok, "seconds": round(x.seconds, 3),
                              "held_ms": round(x.delayed_us / 1000, 1), "calls": x.calls,
                              "shape": x.shape, "per_class": x.per_class} for x in rounds],
        "perturbed_s": round(sum(x.seconds for x in rounds), 3),
        "stderr": {} if r.status == Status.MEASURED else
                  {k: v[-1500:] for k, v in r.logs.items() if k.startswith("rank")},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workloads", nargs="*", help="default: every workload")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--worlds", default="2,4", help="world sizes to check, those the workload allows (default 2,4)")
    ap.add_argument("--jobs", type=int, default=2, help="evaluations at a time on the GPU (default 2)")
    ap.add_argument("--sweep", action="store_true", help="every value of every knob, one at a time")
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--only", help="comma-separated labels (e.g. seed,ipc_dispatch[ipc_8]): check only these")
    ap.add_argument("--strategies", help="comma-separated strategy names (e.g. fused_tile): check only their renders")
    ap.add_argument("--build-jobs", type=int, default=12, help="parallel nvcc runs before the checks (default 12)")
    ap.add_argument("--no-perturb", action="store_true", help="verify without L2's perturbed schedules")
    ap.add_argument("--real", action="store_true", help="a GPU per rank instead of every rank on --gpu")
    ap.add_argument("--gpus", help="with --real: the GPUs to use, e.g. 0-3 (default: every GPU)")
    args = ap.parse_args(argv)
    worlds = [int(x) for x in args.worlds.split(",") if x]
    gpus = real_gpus(args.gpus) if args.real else [args.gpu]
    args.out.mkdir(parents=True, exist_ok=True)
    report = args.out / ("real_gpu_check.json" if args.real else "shared_gpu_check.json")

    jobs: list[Job] = []
    skipped: list[dict] = []
    for name in args.workloads or list_workloads():
        w = load_workload(name)
        for label, path in sources(name, args.out / "rendered" / name, args.sweep):
            if args.only and label not in args.only.split(","):
                continue
            if args.strategies and label.split("[")[0] not in args.strategies.split(","):
                continue
            if not args.real and device_initiated(path.read_text()):
                skipped.append({"workload": name, "label": label, "why": "device-initiated: needs one GPU per rank"})
                continue
            for world in worlds:
                if world not in w.world_sizes:
                    continue
                if args.real and world > len(gpus):
                    skipped.append({"workload": name, "label": label, "world": world,
                                    "why": f"W={world} needs {world} GPUs, --gpus names {len(gpus)}"})
                    continue
                jobs.append(Job(name, world, label, path))

    # Compile everything first, in parallel: the evaluations then find their builds in the cache.
    toolchain, cache = discover(), BuildCache()
    t0 = time.monotonic()
    with ThreadPoolExecutor(max(1, args.build_jobs)) as pool:
        library = pool.submit(ensure_library, toolchain, cache)
        paths = list(dict.fromkeys(j.path for j in jobs))
        built = list(pool.map(lambda p: compile_candidate(p, toolchain, cache).ok, paths))
        lib = library.result()
    print(f"built {sum(built)} of {len(paths)} sources in {time.monotonic() - t0:.0f} s; attention library: "
          f"{lib.path if lib.ok else lib.problem}", flush=True)

    def run(job: Job, group: list[int], alone: bool = False) -> dict:
        t0 = time.monotonic()
        opts = EvalOptions(gpus=group, world=job.world, share_gpu=not args.real, bench=False,
                           perturb=not args.no_perturb)
        events: list[RankEvent] = []
        r = evaluate(job.path, load_workload(job.workload), opts, events_out=events)
        return {**summary(r, time.monotonic() - t0, alone, events), "gpus": group}

    # The groups evaluations may take at once, per world size: every rank on --gpu (`--jobs` of
    # them sharing it), or each group of W GPUs of --gpus, one evaluation each.
    free: dict[int, queue.Queue] = {}
    for world in worlds:
        free[world] = queue.Queue()
        groups = ([gpus[i:i + world] for i in range(0, len(gpus) - world + 1, world)] if args.real
                  else [gpus] * max(1, args.jobs))
        for g in groups:
            free[world].put(g)
    beside = {w: free[w].qsize() > 1 for w in worlds}  # evaluations of this world ran side by side

    def run_on_a_group(job: Job) -> dict:
        group = free[job.world].get()
        try:
            return run(job, group)
        finally:
            free[job.world].put(group)

    results: dict[tuple[str, int, str], dict] = {}
    t0 = time.monotonic()

    def dump() -> list[dict]:  # after every result: a step cut off at its time limit keeps what it had
        rows = [{"workload": k[0], "world": k[1], "label": k[2], **v} for k, v in results.items()]
        report.write_text(json.dumps(
            {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "argv": sys.argv, "seconds": round(time.monotonic() - t0, 1),
             "results": rows, "skipped": skipped}, indent=1))
        return rows

    for world in worlds:  # one world size at a time: a W=4 group takes the GPUs the W=2 ones use
        batch = [j for j in jobs if j.world == world]
        with ThreadPoolExecutor(max(1, free[world].qsize())) as pool:
            for job, res in zip(batch, pool.map(run_on_a_group, batch)):
                results[(job.workload, job.world, job.label)] = res
                dump()
                print(f"{'ok  ' if res['ok'] else 'FAIL'} {res['seconds']:5.1f} s (perturbed {res['perturbed_s']:.2f} s)  "
                      f"{job.workload} W={job.world} {job.label} on GPUs {res['gpus']}: {res['reason'][:160]}",
                      flush=True)
    for job in jobs:  # a failure beside another group: once more, alone
        key = (job.workload, job.world, job.label)
        if not results[key]["ok"] and beside[job.world]:
            res = run(job, results[key]["gpus"], alone=True)
            res["first_try"] = results[key]
            results[key] = res
            dump()
            print(f"{'ok  ' if res['ok'] else 'FAIL'} {res['seconds']:5.1f} s  {job.workload} W={job.world} "
                  f"{job.label} (alone): {res['reason'][:160]}", flush=True)

    rows = dump()
    failed = [r for r in rows if not r["ok"]]
    for s in skipped:
        print(f"skip {s['workload']} {s['label']}: {s['why']}")
    where = f"a GPU per rank of {gpus}" if args.real else f"every rank on GPU {args.gpu}"
    print(f"{len(rows) - len(failed)} of {len(rows)} verified with {where}, "
          f"{len(skipped)} skipped, {time.monotonic() - t0:.0f} s")
    return 1 if failed else 0


def real_gpus(spec: str | None) -> list[int]:
    """--gpus as indices (`0-3`, `0,1,2,3`), or every GPU NVML sees; one line when there are none."""
    if spec:
        out: list[int] = []
        try:
            for part in spec.split(","):
                a, _, b = part.partition("-")
                out += list(range(int(a), int(b) + 1)) if b else [int(a)]
        except ValueError:
            raise SystemExit(f"error: --gpus {spec!r} is not a GPU list like 0-3 or 0,1") from None
        if len(set(out)) < 2:
            raise SystemExit(f"error: --real needs a GPU per rank: --gpus {spec} names {len(set(out))}")
        return out
    from cuco_tui.harness.gpus import inventory

    count = inventory().count
    if count < 2:
        raise SystemExit("error: --real needs a GPU per rank, and this machine has "
                         f"{count or 'no'} GPU{'s' if count != 1 else ''}")
    return list(range(count))


if __name__ == "__main__":
    sys.exit(main())
