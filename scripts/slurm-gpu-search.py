#!/usr/bin/env python3
"""One search through Slurm on a GPU host, verifying candidates for real (issue 27).

Starts the tests' one-node cluster (tests/slurm_cluster.py: munged, slurmctld, slurmd in a temp
folder) with as many GPUs as NVML sees here, then runs `cuco search --executor slurm` with the
offline agent; every evaluation is a Slurm job whose cascade verifies and times the candidate on
the GPUs Slurm gave it. Needs root and Debian's slurm-wlm and munge; says so and exits 2 when
the machine cannot start the cluster. Prints a table of the committed candidates (job, node,
status, speedup) and writes the search's output and the session under $OUT (or ./slurm-gpu-out).

Usage: [OUT=folder] python3 scripts/slurm-gpu-search.py [--workload W] [--generations N]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

from slurm_cluster import missing, start_cluster  # noqa: E402

from cuco_tui.harness.gpus import inventory  # noqa: E402
from cuco_tui.lineage import SessionRepo  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="gemm_allgather")
    parser.add_argument("--generations", type=int, default=2)
    args = parser.parse_args()
    why = missing()
    if why:
        print(f"slurm-gpu-search: cannot start the test cluster here: {why}", file=sys.stderr)
        return 2
    gpus = inventory().count
    if gpus < 2:
        print(f"slurm-gpu-search: needs 2 GPUs or more, NVML sees {gpus}", file=sys.stderr)
        return 2
    out = Path(os.environ.get("OUT") or REPO / "slurm-gpu-out")
    out.mkdir(parents=True, exist_ok=True)
    session = out / f"session-{time.strftime('%Y%m%d-%H%M%S')}"
    # gres entries are links to /dev/null: Slurm counts them and sets CUDA_VISIBLE_DEVICES to the
    # indices it allots (0..n-1), which are this host's GPUs as CUDA numbers them.
    cluster = start_cluster(cpus=os.cpu_count() or 2, gpus=gpus)
    try:
        env = {**os.environ, **cluster.env, "PYTHONPATH": str(REPO)}
        settings = out / "slurm.toml"
        settings.write_text(f'partition = "{cluster.partition}"\nmax_jobs = {gpus // 2}\npoll_seconds = 0.5\n')
        cmd = [sys.executable, "-m", "cuco_tui.cli", "search", "--executor", "slurm", "--slurm-config", str(settings),
               "--workload", args.workload, "--agent", "offline", "--generations", str(args.generations),
               "--islands", "2", "--session", str(session), "--json"]
        started = time.monotonic()
        run = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=3600)
        (out / "search.stderr").write_text(run.stderr)
        (out / "search.json").write_text(run.stdout)
        left = cluster.command("squeue", "-h", "-o", "%i %j").stdout.strip()
    finally:
        cluster.stop()
    print(f"cuco search --executor slurm: exit {run.returncode} in {time.monotonic() - started:.0f} s; "
          f"squeue afterwards: {left or 'empty'}")
    if run.returncode != 0:
        print(run.stderr[-3000:])
        return 1
    with SessionRepo.open(session) as repo:
        records = repo.records()
    print(f"{'id':6} {'kind':10} {'job':>5} {'node':12} {'status':14} {'speedup':>8}  reason")
    for r in records:
        job = r.extra.get("job", {})
        speed = f"{r.speedup:.3f}x" if r.speedup is not None else "-"
        print(f"{r.id:6} {r.kind:10} {job.get('id', '-'):>5} {','.join(job.get('nodes', [])) or '-':12} "
              f"{r.status:14} {speed:>8}  {(r.result or {}).get('reason', '')[:70]}")
    as_jobs = sum(1 for r in records if r.extra.get("job"))
    print(f"{len(records)} candidates, {as_jobs} evaluated as Slurm jobs, "
          f"{sum(r.status == 'measured' for r in records)} measured; summary: "
          f"{json.loads(run.stdout).get('best') if run.stdout.strip() else '-'} best")
    return 0


if __name__ == "__main__":
    sys.exit(main())
