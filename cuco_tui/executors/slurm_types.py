"""What the Slurm client gives and takes, and the parsers from Slurm's text output to it. Pure:
no subprocess here, so every format Slurm prints (also those of clusters unlike the test one)
is checked without a cluster.

Job names are how a search finds its jobs again after it was killed: `cuco:<session>:<candidate>`.
A session token never contains ":", so the prefix `cuco:<session>:` matches that session's jobs
and no other's (session folder names are like `gemm_allgather-20261123-0427-2`: with "-" as the
separator one session's prefix would match its `-2` sibling's jobs).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Mapping

NAME_PREFIX = "cuco"
_TOKEN = re.compile(r"[A-Za-z0-9._-]+")


class SlurmError(Exception):
    """A Slurm command failed or refused a request. The message is one sentence that says what
    went wrong and what to change."""


class SlurmNotInstalled(SlurmError):
    """A Slurm command is not on PATH: this machine is no node or login node of a cluster."""


class JobState(str, Enum):
    """A job's state, Slurm's two dozen folded into the eight a search acts on. The state Slurm
    printed is kept beside it (`JobInfo.slurm_state`)."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    PREEMPTED = "PREEMPTED"

    @property
    def finished(self) -> bool:
        return self not in (JobState.PENDING, JobState.RUNNING)


# Slurm's states (squeue --help, sacct's "CANCELLED by <uid>" cut to its first word) folded: a job
# that has an allocation runs; one that will (re)start later pends; the end states keep their
# names, with the rarer ones joined to the nearest (a boot failure loses the node like a node
# failure; a deadline is a time limit; out-of-memory is a failure).
_STATES = {
    "PENDING": JobState.PENDING, "CONFIGURING": JobState.PENDING, "REQUEUED": JobState.PENDING,
    "REQUEUE_HOLD": JobState.PENDING, "REQUEUE_FED": JobState.PENDING, "RESV_DEL_HOLD": JobState.PENDING,
    "SPECIAL_EXIT": JobState.PENDING, "SUSPENDED": JobState.PENDING,
    "RUNNING": JobState.RUNNING, "COMPLETING": JobState.RUNNING, "RESIZING": JobState.RUNNING,
    "SIGNALING": JobState.RUNNING, "STAGE_OUT": JobState.RUNNING, "STOPPED": JobState.RUNNING,
    "COMPLETED": JobState.COMPLETED,
    "FAILED": JobState.FAILED, "OUT_OF_MEMORY": JobState.FAILED,
    "CANCELLED": JobState.CANCELLED, "REVOKED": JobState.CANCELLED,
    "TIMEOUT": JobState.TIMEOUT, "DEADLINE": JobState.TIMEOUT,
    "NODE_FAIL": JobState.NODE_FAIL, "BOOT_FAIL": JobState.NODE_FAIL,
    "PREEMPTED": JobState.PREEMPTED,
}

# Pending reasons that do not go away by waiting: the request itself must change.
NEVER_STARTS = frozenset({
    "PartitionConfig", "PartitionNodeLimit", "PartitionTimeLimit", "BadConstraints", "InvalidAccount",
    "InvalidQOS", "DependencyNeverSatisfied", "AccountNotAllowed", "QOSNotAllowed",
})


def job_state(text: str) -> JobState:
    word = text.strip().split(" ")[0].upper()
    try:
        return _STATES[word]
    except KeyError:
        raise SlurmError(f"Slurm reported a job state this client does not know: {text!r}") from None


def job_name(session: str, candidate: str) -> str:
    """The job name of one candidate's evaluation, e.g. `cuco:moe-20261124-0930:c0007`."""
    for what, token in (("session", session), ("candidate", candidate)):
        if not _TOKEN.fullmatch(token):
            raise ValueError(f"a Slurm job name's {what} part may hold only letters, digits, '.', '_' "
                             f"and '-': {token!r}")
    return f"{session_prefix(session)}{candidate}"


def session_prefix(session: str) -> str:
    """The start of every job name of this session, and of no other session's."""
    if not _TOKEN.fullmatch(session):
        raise ValueError(f"a session token may hold only letters, digits, '.', '_' and '-': {session!r}")
    return f"{NAME_PREFIX}:{session}:"


def candidate_of(name: str, session: str) -> str | None:
    """The candidate of a job named by `job_name(session, ...)`; None for any other name."""
    prefix = session_prefix(session)
    rest = name[len(prefix):] if name.startswith(prefix) else ""
    return rest if _TOKEN.fullmatch(rest) else None


def time_limit(seconds: float) -> str:
    """sbatch's --time in whole minutes: Slurm rounds seconds up to the next minute anyway, and
    0 would mean no limit at all."""
    if not seconds > 0:
        raise ValueError(f"a Slurm time limit must be positive, not {seconds}")
    return str(math.ceil(seconds / 60))


@dataclass(frozen=True)
class JobSpec:
    """One batch job. `script` is the batch script's text (its first line `#!`); it reaches
    sbatch on stdin. `env` is added to the environment sbatch runs in and, through
    `--export=ALL`, to the job's. Output paths may use Slurm's patterns (%j: the job id).
    `extra_args` carries site options this type has no field for (--qos, --reservation)."""

    script: str
    name: str
    partition: str | None = None
    account: str | None = None
    time_limit_s: float | None = None
    constraint: str | None = None
    gpus_per_node: int = 0
    nodes: int = 1
    ntasks: int | None = None
    ntasks_per_node: int | None = None
    cpus_per_task: int | None = None
    output: str | None = None
    error: str | None = None
    workdir: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    hold: bool = False
    extra_args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.script.startswith("#!"):
            raise ValueError("a batch script starts with '#!' (e.g. #!/bin/bash); sbatch refuses others")
        if not self.name or any(c.isspace() or c == "|" for c in self.name):
            raise ValueError(f"a Slurm job name needs no spaces and no '|': {self.name!r}")
        for what, n, least in (("nodes", self.nodes, 1), ("gpus_per_node", self.gpus_per_node, 0),
                               ("ntasks", self.ntasks, 1), ("ntasks_per_node", self.ntasks_per_node, 1),
                               ("cpus_per_task", self.cpus_per_task, 1)):
            if n is not None and n < least:
                raise ValueError(f"{what} must be at least {least}, not {n}")
        if self.time_limit_s is not None:
            time_limit(self.time_limit_s)

    def sbatch_args(self) -> list[str]:
        # --no-requeue: a job that loses its node or is preempted ends there; the search records
        # it lost and runs the proposal again itself, so Slurm must not restart it under the same id.
        args = ["--parsable", f"--job-name={self.name}", f"--nodes={self.nodes}", "--no-requeue", "--export=ALL"]
        options = (("partition", self.partition), ("account", self.account), ("constraint", self.constraint),
                   ("ntasks", self.ntasks), ("ntasks-per-node", self.ntasks_per_node),
                   ("cpus-per-task", self.cpus_per_task), ("output", self.output), ("error", self.error),
                   ("chdir", self.workdir))
        args += [f"--{flag}={value}" for flag, value in options if value is not None]
        if self.time_limit_s is not None:
            args.append(f"--time={time_limit(self.time_limit_s)}")
        if self.gpus_per_node:
            args.append(f"--gpus-per-node={self.gpus_per_node}")
        if self.hold:
            args.append("--hold")
        return args + list(self.extra_args)


@dataclass(frozen=True)
class JobInfo:
    """One job as Slurm reports it. `node_list` is Slurm's compact form ("gpu[01-02]"; "" while
    pending; `SlurmClient.hostnames` expands it). `exit_code` and `signal` are set once finished."""

    job_id: str
    name: str
    state: JobState
    slurm_state: str
    reason: str
    node_list: str
    partition: str
    exit_code: int | None = None
    signal: int | None = None

    @property
    def finished(self) -> bool:
        return self.state.finished

    @property
    def never_starts(self) -> bool:
        """Pending for a reason that waiting does not cure (the partition cannot hold it)."""
        return self.state is JobState.PENDING and self.reason in NEVER_STARTS


def _empty(text: str) -> str:
    text = text.strip()
    return "" if text in ("None", "(null)", "None assigned", "N/A") else text


# squeue's -O fields, each ended by "|" (no size: printed whole, neither cut nor padded).
SQUEUE_FIELDS = ("JobID", "Name", "State", "Reason", "NodeList", "exit_code", "Partition")
SQUEUE_FORMAT = ",".join(f"{f}:|" for f in SQUEUE_FIELDS)


def parse_squeue(text: str) -> list[JobInfo]:
    """Lines of `squeue -h -O SQUEUE_FORMAT`. exit_code is the raw wait status there: the exit
    code in the high byte, the signal that ended the job in the low seven bits."""
    jobs = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) < len(SQUEUE_FIELDS):
            raise SlurmError(f"squeue printed a line this client cannot read: {line!r}")
        job_id, name, state_text, reason, nodes, status, partition = (p.strip() for p in parts[:len(SQUEUE_FIELDS)])
        state = job_state(state_text)
        code = sig = None
        if state.finished and status.lstrip("-").isdigit():
            raw = int(status)
            code, sig = (raw >> 8) & 0xFF, raw & 0x7F
        jobs.append(JobInfo(job_id=job_id, name=name, state=state, slurm_state=state_text.split(" ")[0],
                            reason=_empty(reason), node_list=_empty(nodes), partition=partition,
                            exit_code=code, signal=sig))
    return jobs


SACCT_FIELDS = ("JobIDRaw", "JobName", "State", "Reason", "NodeList", "ExitCode", "Partition")


def parse_sacct(text: str) -> list[JobInfo]:
    """Lines of `sacct -X -n -P -o SACCT_FIELDS`: "|"-separated; ExitCode is "code:signal"; State
    may read "CANCELLED by 1000"."""
    jobs = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) != len(SACCT_FIELDS):
            raise SlurmError(f"sacct printed a line this client cannot read: {line!r}")
        job_id, name, state_text, reason, nodes, exit_text, partition = (p.strip() for p in parts)
        state = job_state(state_text)
        code = sig = None
        m = re.fullmatch(r"(\d+):(\d+)", exit_text)
        if state.finished and m:
            code, sig = int(m.group(1)), int(m.group(2))
        jobs.append(JobInfo(job_id=job_id, name=name, state=state, slurm_state=state_text.split(" ")[0],
                            reason=_empty(reason), node_list=_empty(nodes), partition=partition,
                            exit_code=code, signal=sig))
    return jobs


_UP_STATES = frozenset({"idle", "mixed", "allocated", "completing", "planned", "reserved"})


@dataclass(frozen=True)
class NodeInfo:
    """One node as sinfo reports it. `state` is sinfo's long state with its flag ("idle",
    "down*": not responding, "idle~": powered down, which Slurm boots on demand)."""

    name: str
    state: str
    cpus: int
    gpus: int
    features: tuple[str, ...] = ()

    @property
    def up(self) -> bool:
        return not self.state.endswith("*") and self.state.rstrip("~#!%$@^-+") in _UP_STATES


@dataclass(frozen=True)
class PartitionInfo:
    name: str
    default: bool
    available: bool
    time_limit: str  # as sinfo prints it: "infinite", "1-00:00:00", "30:00"
    nodes: tuple[NodeInfo, ...]

    @property
    def nodes_up(self) -> int:
        return sum(n.up for n in self.nodes)

    @property
    def nodes_down(self) -> int:
        return len(self.nodes) - self.nodes_up

    @property
    def gpus_per_node(self) -> int:
        """The most GPUs one of its nodes has (partitions are seldom mixed)."""
        return max((n.gpus for n in self.nodes), default=0)


@dataclass(frozen=True)
class ClusterInfo:
    partitions: tuple[PartitionInfo, ...]

    def partition(self, name: str | None) -> PartitionInfo | None:
        """The partition of this name; with None, the cluster's default."""
        for p in self.partitions:
            if (p.name == name) if name is not None else p.default:
                return p
        return None

    def names(self) -> str:
        return ", ".join(p.name for p in self.partitions) or "none"


def gres_gpus(gres: str) -> int:
    """GPUs in a gres string: "gpu:4", "gpu:a100:4(S:0-1)", "gpu:a100:2,gpu:v100:2,shard:8" (4)."""
    return sum(int(m.group(1)) for m in re.finditer(r"(?:^|,)gpu(?::[^:,()]+)?:(\d+)", gres))


SINFO_FORMAT = "%N|%P|%a|%l|%T|%c|%G|%f"


def parse_sinfo(text: str) -> ClusterInfo:
    """Lines of `sinfo -h -N -o SINFO_FORMAT`: one per node and partition; the default
    partition's name ends with "*"."""
    order: list[str] = []
    facts: dict[str, tuple[bool, bool, str]] = {}
    members: dict[str, list[NodeInfo]] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split("|")]
        if len(parts) != 8:
            raise SlurmError(f"sinfo printed a line this client cannot read: {line!r}")
        node, part, avail, limit, state, cpus, gres, features = parts
        name = part.rstrip("*")
        if name not in facts:
            order.append(name)
            facts[name] = (part.endswith("*"), avail == "up", limit)
            members[name] = []
        members[name].append(NodeInfo(
            name=node, state=state, cpus=int(cpus) if cpus.isdigit() else 0, gpus=gres_gpus(gres),
            features=tuple(f for f in _empty(features).split(",") if f)))
    return ClusterInfo(tuple(PartitionInfo(n, *facts[n], tuple(members[n])) for n in order))
