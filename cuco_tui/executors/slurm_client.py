"""A thin, typed client of Slurm's commands: sbatch, squeue (sacct when the cluster keeps
accounting), scancel, sinfo, scontrol. Each call is one subprocess with a timeout; a failure is a
`SlurmError` whose message is one sentence saying what to change.

Job states come from `squeue -t all`, which also lists finished jobs while slurmctld keeps them
(MinJobAge, 300 s by default, the same record `scontrol show job` prints). Jobs squeue no longer
knows are asked of sacct; on a cluster without accounting storage they are simply absent from
the answer, and the caller decides what an unknown job means.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from cuco_tui.harness.env import child_env
from cuco_tui.executors.slurm_types import (
    SACCT_FIELDS, SINFO_FORMAT, SQUEUE_FORMAT, ClusterInfo, JobInfo, JobSpec, SlurmError, SlurmNotInstalled,
    parse_sacct, parse_sinfo, parse_squeue, session_prefix,
)

_UNREACHABLE = ("Unable to contact slurm controller", "Socket timed out", "Zero Bytes were transmitted",
                "Connection refused", "Connection timed out")
_NO_CONFIG = ("Could not establish a configuration source", "Unable to process configuration file")
_NO_MUNGE = ("Munge encode failed", "auth_g_create", "Invalid authentication credential")
_GONE = ("Invalid job id specified", "already completing or completed")


def _message(stderr: str) -> str:
    """The last error line of a Slurm command, without its "sbatch: error: " lead."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower() or "fatal" in line.lower()] or lines
    if not errors:
        return "no message"
    return re.sub(r"^\S+: (error|fatal): ", "", errors[-1].strip()).strip()


def _general_failure(tool: str, stderr: str, rc: int) -> SlurmError:
    if any(s in stderr for s in _UNREACHABLE):
        return SlurmError(f"{tool}: cannot reach the Slurm controller (is slurmctld up? `scontrol ping` tells)")
    if any(s in stderr for s in _NO_CONFIG):
        return SlurmError(f"{tool}: no Slurm configuration found (set SLURM_CONF, or run on a node of the cluster)")
    if any(s in stderr for s in _NO_MUNGE):
        return SlurmError(f"{tool}: munge refused to authenticate this command (is munged running here, "
                          "with the cluster's key?)")
    return SlurmError(f"{tool} failed (exit {rc}): {_message(stderr)}")


@dataclass(frozen=True)
class SlurmClient:
    """`env` is added to the environment of every command (SLURM_CONF for a cluster other than
    the machine's own); `timeout_s` bounds each one."""

    env: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 30.0

    def _run(self, tool: str, args: Sequence[str], stdin: str | None = None,
             extra_env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        env = child_env({**self.env, **(extra_env or {})})
        conf = env.get("SLURM_CONF")
        if conf and not os.path.exists(conf):
            # Slurm's commands would retry reading it for 60 s before saying so.
            raise SlurmError(f"{tool}: SLURM_CONF names {conf}, which does not exist (unset it or point it at "
                             "the cluster's slurm.conf)")
        try:
            return subprocess.run(
                [tool, *args], input=stdin, capture_output=True, text=True, timeout=self.timeout_s, env=env,
                check=False)
        except FileNotFoundError:
            raise SlurmNotInstalled(f"{tool} is not on PATH: install Slurm's client commands, or run this on "
                                    "the cluster's login node") from None
        except subprocess.TimeoutExpired:
            raise SlurmError(f"{tool} gave no answer in {self.timeout_s:.0f} s: the Slurm controller is "
                             "overloaded or unreachable (`scontrol ping` tells)") from None

    def _output(self, tool: str, args: Sequence[str]) -> str:
        r = self._run(tool, args)
        if r.returncode != 0:
            raise _general_failure(tool, r.stderr, r.returncode)
        return r.stdout

    # -- submitting ------------------------------------------------------------------------

    def submit(self, spec: JobSpec) -> str:
        """Submit a batch job; its id. When sbatch gives no answer in time the job may still have
        been queued: look for its name (`session_jobs`) before submitting it again."""
        r = self._run("sbatch", spec.sbatch_args(), stdin=spec.script, extra_env=spec.env)
        if r.returncode != 0:
            raise self._submit_failure(spec, r.stderr, r.returncode)
        # --parsable prints "id" or "id;cluster".
        job_id = r.stdout.strip().split(";")[0]
        if not job_id:
            raise SlurmError(f"sbatch printed no job id (stderr: {_message(r.stderr)})")
        return job_id

    def _submit_failure(self, spec: JobSpec, stderr: str, rc: int) -> SlurmError:
        if "Invalid account" in stderr:
            return SlurmError(f"sbatch: account '{spec.account}' may not submit to partition "
                              f"'{spec.partition or 'default'}' (`sacctmgr show assoc user=$USER` lists yours)")
        if "invalid partition specified" in stderr or "Invalid partition name specified" in stderr:
            if spec.partition is None:
                return SlurmError(f"sbatch: this cluster has no default partition; name one "
                                  f"(partitions: {self._partition_names()})")
            return SlurmError(f"sbatch: no partition '{spec.partition}' on this cluster "
                              f"(partitions: {self._partition_names()})")
        if "Invalid feature specification" in stderr:
            return SlurmError(f"sbatch: no node offers the constraint '{spec.constraint}' "
                              f"(features here: {self._features()})")
        if "Invalid generic resource" in stderr and spec.gpus_per_node:
            return SlurmError(f"sbatch: partition '{spec.partition or 'default'}' has no GPUs Slurm knows of "
                              f"(gres/gpu) for --gpus-per-node={spec.gpus_per_node}")
        if "Requested node configuration is not available" in stderr:
            return SlurmError(f"sbatch: partition '{spec.partition or 'default'}' has no {self._request_words(spec)} "
                              f"({self._partition_offers(spec.partition)})")
        if "Requested time limit is invalid" in stderr:
            return SlurmError(f"sbatch: the time limit is above partition '{spec.partition or 'default'}''s "
                              f"({self._partition_limit(spec.partition)}); ask for less")
        if "Invalid qos specification" in stderr:
            return SlurmError("sbatch: the QOS asked for (in extra sbatch arguments) is not one your account may use")
        if "accounting/QOS policy" in stderr:
            return SlurmError(f"sbatch: the job breaks a limit of your account or QOS ({_message(stderr)}); "
                              "ask for fewer nodes or GPUs or a shorter time")
        return _general_failure("sbatch", stderr, rc)

    # What the cluster offers, for error messages: best effort, a second failure says less.
    def _cluster_or_none(self) -> ClusterInfo | None:
        try:
            return self.cluster()
        except SlurmError:
            return None

    def _partition_names(self) -> str:
        info = self._cluster_or_none()
        return info.names() if info else "sinfo did not answer"

    def _features(self) -> str:
        info = self._cluster_or_none()
        found = sorted({f for p in info.partitions for n in p.nodes for f in n.features}) if info else []
        return ", ".join(found) or "none"

    def _partition_offers(self, name: str | None) -> str:
        info = self._cluster_or_none()
        part = info.partition(name) if info else None
        if part is None:
            return "sinfo did not answer"
        cpus = max((n.cpus for n in part.nodes), default=0)
        return f"{len(part.nodes)} node(s) there, at most {part.gpus_per_node} GPU(s) and {cpus} CPU(s) each"

    def _partition_limit(self, name: str | None) -> str:
        info = self._cluster_or_none()
        part = info.partition(name) if info else None
        return part.time_limit if part else "unknown"

    @staticmethod
    def _request_words(spec: JobSpec) -> str:
        """The request in words: "2 node(s) with 8 GPU(s) and 16 CPU(s) per task each, and the
        constraint 'h100'"."""
        each = [f"{spec.gpus_per_node} GPU(s)"] if spec.gpus_per_node else []
        each += [f"{spec.cpus_per_task} CPU(s) per task"] if spec.cpus_per_task else []
        words = f"{spec.nodes} node(s)" + (f" with {' and '.join(each)} each" if each else "")
        return words + (f", and the constraint '{spec.constraint}'" if spec.constraint else "")

    # -- states ----------------------------------------------------------------------------

    def status(self, job_ids: Iterable[str]) -> dict[str, JobInfo]:
        """The state of each job Slurm still knows, by id: squeue first, sacct for the rest when
        the cluster keeps accounting. A job neither knows is missing from the answer."""
        wanted = [str(j) for j in job_ids]
        if not wanted:
            return {}
        r = self._run("squeue", ["-h", "-t", "all", "-O", SQUEUE_FORMAT, "-j", ",".join(wanted)])
        # squeue fails when none of the ids is known any more (all of them aged out).
        if r.returncode != 0 and "Invalid job id specified" not in r.stderr:
            raise _general_failure("squeue", r.stderr, r.returncode)
        found = {j.job_id: j for j in parse_squeue(r.stdout if r.returncode == 0 else "") if j.job_id in wanted}
        missing = [j for j in wanted if j not in found]
        if missing:
            found.update({j.job_id: j for j in self._accounting(missing) if j.job_id in missing})
        return found

    def _accounting(self, job_ids: Sequence[str]) -> list[JobInfo]:
        try:
            r = self._run("sacct", ["-X", "-n", "-P", "-o", ",".join(SACCT_FIELDS), "-j", ",".join(job_ids)])
        except SlurmNotInstalled:
            return []
        if r.returncode != 0:
            # No accounting storage: nothing more is known about these jobs.
            if "accounting storage is disabled" in r.stderr:
                return []
            raise _general_failure("sacct", r.stderr, r.returncode)
        return parse_sacct(r.stdout)

    def my_jobs(self, name_prefix: str = "", active_only: bool = True) -> list[JobInfo]:
        """This user's jobs whose name starts with `name_prefix`: those pending or running, or
        with `active_only=False` also those finished that slurmctld still remembers."""
        args = ["-h", "--me", "-O", SQUEUE_FORMAT] + ([] if active_only else ["-t", "all"])
        jobs = parse_squeue(self._output("squeue", args))
        return [j for j in jobs if j.name.startswith(name_prefix) and not (active_only and j.finished)]

    def session_jobs(self, session: str, active_only: bool = True) -> list[JobInfo]:
        """The jobs named by `job_name(session, ...)`, found again after the search was killed."""
        return self.my_jobs(session_prefix(session), active_only=active_only)

    # -- cancelling ------------------------------------------------------------------------

    def cancel(self, job_ids: Iterable[str]) -> None:
        """Cancel these jobs. Ones already finished or forgotten are no error: cancelling is how
        a search makes sure none of its jobs runs on."""
        ids = [str(j) for j in job_ids]
        if not ids:
            return
        r = self._run("scancel", ids)
        if r.returncode != 0:
            problems = [line for line in r.stderr.splitlines() if line.strip() and not any(g in line for g in _GONE)]
            if problems:
                raise _general_failure("scancel", "\n".join(problems), r.returncode)

    def cancel_prefix(self, name_prefix: str) -> list[str]:
        """Cancel every pending or running job of this user whose name starts with
        `name_prefix` (a session's: `session_prefix(session)`); the ids cancelled."""
        if not name_prefix:
            raise ValueError("cancel_prefix needs a name prefix: an empty one would cancel all your jobs")
        ids = [j.job_id for j in self.my_jobs(name_prefix)]
        self.cancel(ids)
        return ids

    def cancel_session(self, session: str) -> list[str]:
        return self.cancel_prefix(session_prefix(session))

    # -- the cluster -----------------------------------------------------------------------

    def cluster(self) -> ClusterInfo:
        """Partitions, their nodes (up or not) and GPUs per node, from sinfo."""
        return parse_sinfo(self._output("sinfo", ["-h", "-N", "-o", SINFO_FORMAT]))

    def hostnames(self, node_list: str) -> list[str]:
        """Slurm's compact node list ("gpu[01-03]") as names, expanded by scontrol."""
        if not node_list:
            return []
        return self._output("scontrol", ["show", "hostnames", node_list]).split()
