"""A stand-in rank process for launcher tests: `fake_rank.py BEHAVIOURS --plan P --rank R` behaves
as the R-th of the comma-separated BEHAVIOURS says ("ok", "crash", "error", "hang", "hang-deaf").
(The real worker needs GPUs; the launcher's job, starting and killing groups, does not.)"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from cuco_tui.harness.plan import RunPlan

p = argparse.ArgumentParser()
p.add_argument("behaviours")
p.add_argument("--plan")
p.add_argument("--rank", type=int)
a = p.parse_args()
plan = RunPlan.from_json(json.loads(Path(a.plan).read_text()))  # as the real worker reads it
rundir = Path(plan.rundir)
log = open(rundir / f"rank{a.rank}.jsonl", "a", buffering=1)


def emit(event, **kw):
    log.write(json.dumps({"event": event, "rank": a.rank, **kw}) + "\n")


behaviour = a.behaviours.split(",")[a.rank]
emit("joined", pid=os.getpid())
# A grandchild in the same session: the launcher must take it down with the rank.
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
(rundir / f"child{a.rank}.pid").write_text(str(child.pid))
if behaviour == "ok":
    emit("done")
    child.kill()
    sys.exit(0)
if behaviour == "crash":
    time.sleep(0.3)
    os.kill(os.getpid(), signal.SIGSEGV)
if behaviour == "error":
    emit("error", kind="cuda", message="cudaErrorIllegalAddress: an illegal memory access was encountered")
    sys.exit(2)
if behaviour == "hang":
    while True:  # like a rank stuck in a collective: only an abort or a kill ends it
        if (rundir / "abort").exists():
            emit("aborted", what="candidate launch", phase="verify:verify", trace=[])
            os._exit(125)
        time.sleep(0.05)
if behaviour == "hang-deaf":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while True:
        time.sleep(1)
