"""A stand-in kept rank for launcher tests: `fake_serving_rank.py --plan P --rank R [--serve]`.
Each plan's `workload` names, comma-separated, what each rank does with it: "ok" (done; with
--serve then idle, waiting on stdin for the next plan's path), "leave" (done, then says it leaves
and exits), "error" (fails and exits 2), "hang" (until the launcher's abort file appears).
(The real worker needs GPUs; keeping a group between plans does not.)"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

from cuco_tui.harness.plan import RunPlan

p = argparse.ArgumentParser()
p.add_argument("--plan")
p.add_argument("--rank", type=int)
p.add_argument("--serve", action="store_true")
a = p.parse_args()
plans = 0
path = a.plan
while True:
    plan = RunPlan.from_json(json.loads(Path(path).read_text()))  # as the real worker reads it
    rundir = Path(plan.rundir)
    log = open(rundir / f"rank{a.rank}.jsonl", "a", buffering=1)

    def emit(event, **kw):
        log.write(json.dumps({"event": event, "rank": a.rank, **kw}) + "\n")

    emit("joined", pid=os.getpid(), plans=plans)
    print(f"rank {a.rank} ran plan {plans + 1}", flush=True)
    behaviour = plan.workload.split(",")[a.rank]
    if behaviour == "error":
        emit("error", kind="cuda", message="cudaErrorIllegalAddress: an illegal memory access was encountered")
        sys.exit(2)
    if behaviour == "hang":
        while not (rundir / "abort").exists():
            time.sleep(0.05)
        emit("aborted", what="candidate launch", phase="verify:verify", trace=[])
        os._exit(125)
    emit("done")
    plans += 1
    if not a.serve:
        sys.exit(0)
    if behaviour == "leave":
        emit("leaving", reason="1000 MiB of GPU memory not given back")
        sys.exit(0)
    emit("idle", plans=plans)
    path = sys.stdin.readline().strip()
    if not path:  # the launcher ended the group
        sys.exit(0)
