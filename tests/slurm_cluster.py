"""A throwaway one-node Slurm cluster for tests: munged, slurmctld and slurmd from Debian's
slurm-wlm and munge packages, started as children of the test process with every file
(configuration, munge key and socket, state, spool, logs, pid files) in one temporary folder.

The node has few CPUs (so a test can fill it and make the next job PEND) and `gpus` fake GPUs:
gres entries whose device files are links to /dev/null. Jobs may ask for `--gpus-per-node`,
Slurm counts them and sets CUDA_VISIBLE_DEVICES, and no GPU is needed.

The daemons run in the foreground (`-D`, `-F`) with a parent-death signal, so they end with the
test process even when it is killed; `stop()` cancels the jobs, shuts the daemons down and
removes the folder. Clients reach this cluster through `cluster.env` (SLURM_CONF).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "squeue", "scancel", "sinfo", "scontrol")
PARTITION = "debug"
URGENT = "urgent"
NODE = "cuco-node1"
INSTALL_HINT = "apt-get install -y slurm-wlm munge"

SLURM_CONF = """\
ClusterName=cucotest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={munge_socket}
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/run/slurmctld.pid
SlurmdPidFile={root}/run/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
MailProg=/bin/true
# No cgroups in a container: processes are tracked through /proc and tasks are not bound.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
# Jobs start as soon as they fit (the default lets a batch job wait up to 3 s for its turn).
SchedulerParameters=batch_sched_delay=0
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
# Cancelled jobs get SIGKILL 2 s after SIGTERM (default 30 s), so tests do not wait.
KillWait=2
# Finished jobs stay visible to squeue/scontrol this long (the default, named: tests rely on it).
MinJobAge=300
SlurmctldTimeout=30
SlurmdTimeout=30
GresTypes=gpu
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=1000 {gres}State=UNKNOWN
# A job in the partition {urgent} preempts (cancels) the jobs of {partition} it needs room from:
# how tests make a job end PREEMPTED.
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
PartitionName={partition} Nodes={node} Default=YES MaxTime=INFINITE State=UP PriorityTier=1
PartitionName={urgent} Nodes={node} MaxTime=INFINITE State=UP PriorityTier=2
"""

# Read by slurmd when it exists; nothing here is constrained (task/none, proctrack/linuxproc).
CGROUP_CONF = """\
CgroupAutomount=no
ConstrainCores=no
ConstrainDevices=no
ConstrainRAMSpace=no
"""


def missing() -> str | None:
    """Why this machine cannot run the test cluster (one line), or None when it can."""
    absent = [b for b in DAEMONS + CLIENTS if shutil.which(b) is None and not Path("/usr/sbin", b).exists()]
    if absent:
        return f"needs Slurm and munge ({', '.join(absent)} not found): {INSTALL_HINT}"
    if os.geteuid() != 0:
        return "needs root: slurmd starts jobs as their user and munged/slurmd run as root here"
    return None


def _binary(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    # PR_SET_PDEATHSIG: the kernel sends SIGTERM to the daemon when the test process dies,
    # even by SIGKILL, so no daemon outlives a killed test run.
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)


@dataclass
class SlurmCluster:
    root: Path
    cpus: int
    gpus: int
    partition: str = PARTITION
    urgent: str = URGENT
    node: str = NODE
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    @property
    def conf(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """The environment that points Slurm's commands at this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    def command(self, *args: str, timeout: float = 20) -> subprocess.CompletedProcess:
        return subprocess.run(
            [_binary(args[0]), *args[1:]], env={**os.environ, **self.env}, capture_output=True,
            text=True, timeout=timeout, check=False)

    def log_tail(self, lines: int = 15) -> str:
        out = []
        for log in sorted((self.root / "log").glob("*")):
            text = log.read_text(errors="replace").splitlines()[-lines:]
            out.append(f"--- {log.name}\n" + "\n".join(text))
        return "\n".join(out)

    def _spawn(self, name: str, args: list[str]) -> None:
        log = open(self.root / "log" / f"{name}.out", "ab")
        try:
            self.procs[name] = subprocess.Popen(
                [_binary(name), *args], env={**os.environ, **self.env}, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        finally:
            log.close()

    def _wait(self, what: str, ready, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited ({proc.returncode}) while waiting for {what}\n{self.log_tail()}")
            if ready():
                return
            time.sleep(0.2)
        raise RuntimeError(f"test Slurm: {what} not reached in {timeout:.0f} s\n{self.log_tail()}")

    def node_state(self) -> str:
        """The node's state as sinfo prints it (once per partition, the same in each)."""
        r = self.command("sinfo", "-h", "-N", "-n", self.node, "-o", "%T")
        return r.stdout.split()[0] if r.returncode == 0 and r.stdout.strip() else ""

    def fail_node(self, reason: str = "test: node lost", timeout: float = 30) -> None:
        """Mark the node DOWN as if it died: its jobs end NODE_FAIL (reason NodeDown). slurmd
        lives on, so the node registers again and, with ReturnToService=2, is idle once more;
        this returns when it is."""
        r = self.command("scontrol", "update", f"nodename={self.node}", "state=down", f"reason={reason}")
        if r.returncode != 0:
            raise RuntimeError(f"scontrol could not mark {self.node} down: {r.stderr.strip()}")
        self._wait(f"node {self.node} idle again", lambda: self.node_state() == "idle", timeout)

    def start(self, timeout: float = 60) -> None:
        for sub in ("etc", "munge", "run", "state", "spool", "log", "gpus"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        # munged wants its socket's folders searchable by all (mkdtemp made the root 0700).
        self.root.chmod(0o711)
        (self.root / "run").chmod(0o755)
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(128))
        key.chmod(0o400)
        munge_socket = self.root / "run" / "munge.socket"
        gres = ""
        if self.gpus:
            for i in range(self.gpus):
                (self.root / "gpus" / f"gpu{i}").symlink_to("/dev/null")
            gres = f"Gres=gpu:{self.gpus} "
            (self.conf.parent / "gres.conf").write_text(
                f"NodeName={self.node} Name=gpu File={self.root}/gpus/gpu[0-{self.gpus - 1}]\n")
        else:
            (self.conf.parent / "gres.conf").write_text("")
        self.conf.write_text(SLURM_CONF.format(
            host=socket.gethostname().split(".")[0], ctld_port=free_port(), slurmd_port=free_port(),
            munge_socket=munge_socket, root=self.root, node=self.node, cpus=self.cpus, gres=gres,
            partition=self.partition, urgent=self.urgent))
        (self.conf.parent / "cgroup.conf").write_text(CGROUP_CONF)

        self._spawn("munged", [
            "-F", "--force", f"--key-file={key}", f"--socket={munge_socket}",
            f"--pid-file={self.root}/run/munged.pid", f"--seed-file={self.root}/munge/seed",
            f"--log-file={self.root}/log/munged.log"])
        self._wait("the munge socket", munge_socket.exists, timeout)
        self._spawn("slurmctld", ["-D", "-i"])
        self._wait("slurmctld answering", lambda: "UP" in self.command("scontrol", "ping").stdout, timeout)
        self._spawn("slurmd", ["-D", "-N", self.node])
        self._wait(f"node {self.node} idle", lambda: self.node_state() == "idle", timeout)

    def cancel_all(self, timeout: float = 15) -> None:
        """Cancel every job and wait until the queue is empty."""
        self.command("scancel", "-u", "root")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r = self.command("squeue", "-h", "-o", "%i")
            if r.returncode != 0 or not r.stdout.strip():
                return
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop every daemon and job of this cluster and remove its folder; safe to call after a
        partial start and more than once."""
        try:
            if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
                self.cancel_all()
                self.command("scontrol", "shutdown")
            for name in ("slurmd", "slurmctld", "munged"):
                proc = self.procs.get(name)
                if proc is not None:
                    if name == "munged":
                        proc.terminate()
                    _end(proc, grace=10)
            self._kill_strays()
        finally:
            self.procs.clear()
            shutil.rmtree(self.root, ignore_errors=True)

    def _kill_strays(self) -> None:
        kill_processes_of(self.conf)


def kill_processes_of(conf: Path) -> None:
    """SIGKILL every process of the cluster configured by `conf`. slurmstepd detaches from
    slurmd (and ignores SIGTERM while it cannot reach it), so a job step that outlived its slurmd
    is found by the one thing every process of a test cluster carries: SLURM_CONF naming `conf`."""
    mark = f"SLURM_CONF={conf}".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            if mark in (proc / "environ").read_bytes().split(b"\0"):
                os.kill(int(proc.name), signal.SIGKILL)
        except (OSError, ValueError):
            continue


def _start_time(pid: int) -> str | None:
    try:
        # Field 22 of /proc/PID/stat (after the parenthesised name): the start time, which tells
        # a live owner from a later process that reuses its pid.
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _owner_mark() -> str:
    return f"{os.getpid()} {_start_time(os.getpid())}"


def reap_abandoned(tmp: Path | None = None) -> None:
    """Remove the clusters of test runs that were killed (SIGKILL leaves their job steps running
    and their folders behind): those whose owner process is gone. Live ones, of other test runs
    on this machine, are left alone."""
    for root in Path(tmp or tempfile.gettempdir()).glob("cuco-slurm-*"):
        try:
            pid, start = (root / "owner").read_text().split()
        except (OSError, ValueError):
            continue
        if _start_time(int(pid)) == start:
            continue
        kill_processes_of(root / "etc" / "slurm.conf")
        shutil.rmtree(root, ignore_errors=True)


def _end(proc: subprocess.Popen, grace: float) -> None:
    """Wait `grace` seconds for the process to exit, then SIGTERM, then SIGKILL."""
    try:
        proc.wait(timeout=grace)
        return
    except subprocess.TimeoutExpired:
        proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def start_cluster(cpus: int = 2, gpus: int = 2, timeout: float = 60) -> SlurmCluster:
    """A running cluster in a new folder under the system's temp dir (short paths: munge and
    slurmd put unix sockets there, whose paths may not exceed 107 bytes)."""
    reap_abandoned()
    root = Path(tempfile.mkdtemp(prefix="cuco-slurm-"))
    (root / "owner").write_text(_owner_mark())
    # More CPUs than the machine has would drain the node ("Low CPUs").
    cluster = SlurmCluster(root=root, cpus=min(cpus, os.cpu_count() or 1), gpus=gpus)
    try:
        cluster.start(timeout=timeout)
    except BaseException:
        cluster.stop()
        raise
    return cluster
