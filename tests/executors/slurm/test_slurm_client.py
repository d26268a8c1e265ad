"""The Slurm client against real daemons (tests/slurm_cluster.py): submit, states, reasons,
cancel, cluster info, and the one-line errors of requests the cluster refuses."""

import re
import shutil
import time
from pathlib import Path

import pytest
from slurm_cluster import free_port

from cuco_tui.executors.slurm_client import SlurmClient
from cuco_tui.executors.slurm_types import (
    JobInfo, JobSpec, JobState, SlurmError, job_name, session_prefix,
)

pytestmark = pytest.mark.slurm


def wait_for(client: SlurmClient, job_id: str, ok, what: str, timeout: float = 20) -> JobInfo:
    deadline = time.monotonic() + timeout
    info = None
    while time.monotonic() < deadline:
        info = client.status([job_id]).get(job_id)
        if info is not None and ok(info):
            return info
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} not {what} in {timeout:.0f} s: {info}")


def gated(folder: Path, body: str = "") -> str:
    """A batch script that waits (up to a minute) for `go` in `folder`, then runs `body`: the
    test sees it RUNNING for as long as it likes."""
    return (f"#!/bin/bash\nfor i in $(seq 600); do [ -e {folder}/go ] && break; sleep 0.1; done\n{body}\n")


def test_job_runs_then_completes_on_the_node(slurm, slurm_cluster, tmp_path):
    name = job_name("s1", "c0001")
    body = f'echo "$SLURM_JOB_NAME $CUCO_MARK $CUDA_VISIBLE_DEVICES $(pwd)" > {tmp_path}/result'
    job = slurm.submit(JobSpec(
        script=gated(tmp_path, body), name=name, partition=slurm_cluster.partition, time_limit_s=90,
        gpus_per_node=1, nodes=1, ntasks=1, output=f"{tmp_path}/slurm-%j.out", workdir=str(tmp_path),
        env={"CUCO_MARK": "marked"}))
    assert job.isdigit()

    running = wait_for(slurm, job, lambda j: j.state is JobState.RUNNING, "running")
    assert (running.name, running.node_list, running.partition) == (name, slurm_cluster.node, slurm_cluster.partition)
    assert running.exit_code is None and not running.finished
    assert slurm.hostnames(running.node_list) == [slurm_cluster.node]

    (tmp_path / "go").touch()
    done = wait_for(slurm, job, lambda j: j.finished, "finished")
    assert (done.state, done.exit_code, done.signal, done.node_list) == (JobState.COMPLETED, 0, 0, slurm_cluster.node)
    # The job's environment: its name, the spec's env, one of the node's (fake) GPUs, the workdir.
    assert (tmp_path / "result").read_text().split() == [name, "marked", "0", str(tmp_path)]
    assert (tmp_path / f"slurm-{job}.out").exists()


def test_failing_job_reports_its_exit_code(slurm, tmp_path):
    job = slurm.submit(JobSpec(script="#!/bin/bash\nexit 3\n", name=job_name("s1", "c0002"),
                               output=f"{tmp_path}/%j.out"))
    done = wait_for(slurm, job, lambda j: j.finished, "finished")
    assert (done.state, done.exit_code, done.reason) == (JobState.FAILED, 3, "NonZeroExitCode")


def test_held_job_pends_with_its_reason(slurm, tmp_path):
    job = slurm.submit(JobSpec(script="#!/bin/bash\ntrue\n", name=job_name("s1", "c0003"), hold=True,
                               output=f"{tmp_path}/%j.out"))
    info = wait_for(slurm, job, lambda j: j.reason != "", "given a reason")
    assert (info.state, info.reason, info.node_list, info.never_starts) == (JobState.PENDING, "JobHeldUser", "", False)


def test_job_pends_while_the_node_is_full_and_starts_when_freed(slurm, slurm_cluster, tmp_path):
    # The first job holds every CPU of the only node; the second waits for Resources.
    holder = slurm.submit(JobSpec(script=gated(tmp_path), name=job_name("s1", "c0004"),
                                  cpus_per_task=slurm_cluster.cpus, output=f"{tmp_path}/%j.out"))
    wait_for(slurm, holder, lambda j: j.state is JobState.RUNNING, "running")
    waiter = slurm.submit(JobSpec(script="#!/bin/bash\ntrue\n", name=job_name("s1", "c0005"),
                                  output=f"{tmp_path}/%j.out"))
    pending = wait_for(slurm, waiter, lambda j: j.reason != "", "given a reason")
    assert (pending.state, pending.reason, pending.never_starts) == (JobState.PENDING, "Resources", False)

    (tmp_path / "go").touch()
    done = wait_for(slurm, waiter, lambda j: j.finished, "finished once the node is free")
    assert done.state is JobState.COMPLETED


def test_job_larger_than_the_partition_never_starts(slurm, tmp_path):
    job = slurm.submit(JobSpec(script="#!/bin/bash\ntrue\n", name=job_name("s1", "c0006"), cpus_per_task=64,
                               output=f"{tmp_path}/%j.out"))
    info = wait_for(slurm, job, lambda j: j.reason != "", "given a reason")
    assert (info.state, info.reason, info.never_starts) == (JobState.PENDING, "PartitionConfig", True)


def test_cancelled_running_job_is_cancelled(slurm, tmp_path):
    job = slurm.submit(JobSpec(script=gated(tmp_path), name=job_name("s1", "c0007"), output=f"{tmp_path}/%j.out"))
    wait_for(slurm, job, lambda j: j.state is JobState.RUNNING, "running")
    slurm.cancel([job])
    done = wait_for(slurm, job, lambda j: j.finished, "finished")
    assert done.state is JobState.CANCELLED
    # Cancelling what already ended, or what Slurm never knew, is no error.
    slurm.cancel([job, "999999"])


def test_job_preempted_by_a_higher_partition_is_preempted(slurm, slurm_cluster, tmp_path):
    victim = slurm.submit(JobSpec(script=gated(tmp_path), name=job_name("s1", "c0012"),
                                  cpus_per_task=slurm_cluster.cpus, output=f"{tmp_path}/%j.out"))
    wait_for(slurm, victim, lambda j: j.state is JobState.RUNNING, "running")
    slurm.submit(JobSpec(script="#!/bin/bash\ntrue\n", name="urgent-work", partition=slurm_cluster.urgent,
                         cpus_per_task=slurm_cluster.cpus, output=f"{tmp_path}/%j.out"))
    done = wait_for(slurm, victim, lambda j: j.finished, "finished")
    assert (done.state, done.node_list) == (JobState.PREEMPTED, slurm_cluster.node)


def test_job_on_a_failed_node_ends_node_fail(slurm, slurm_cluster, tmp_path):
    job = slurm.submit(JobSpec(script=gated(tmp_path), name=job_name("s1", "c0013"), output=f"{tmp_path}/%j.out"))
    wait_for(slurm, job, lambda j: j.state is JobState.RUNNING, "running")
    slurm_cluster.fail_node()
    done = wait_for(slurm, job, lambda j: j.finished, "finished")
    assert (done.state, done.reason, done.node_list) == (JobState.NODE_FAIL, "NodeDown", slurm_cluster.node)


def test_cancel_session_leaves_none_of_its_jobs_and_spares_the_sibling(slurm, slurm_cluster, tmp_path):
    session, sibling = "moe-20261124-0930", "moe-20261124-0930-2"
    ours = [slurm.submit(JobSpec(script=gated(tmp_path), name=job_name(session, "c0001"), output=f"{tmp_path}/%j.out"))]
    ours += [slurm.submit(JobSpec(script="#!/bin/bash\ntrue\n", name=job_name(session, f"c000{i}"), hold=True,
                                  output=f"{tmp_path}/%j.out")) for i in (2, 3)]
    theirs = slurm.submit(JobSpec(script="#!/bin/bash\ntrue\n", name=job_name(sibling, "c0001"), hold=True,
                                  output=f"{tmp_path}/%j.out"))
    wait_for(slurm, ours[0], lambda j: j.state is JobState.RUNNING, "running")
    assert sorted(j.job_id for j in slurm.session_jobs(session)) == sorted(ours)

    assert sorted(slurm.cancel_session(session)) == sorted(ours)

    for job in ours:
        assert wait_for(slurm, job, lambda j: j.finished, "finished").state is JobState.CANCELLED
    # A cancelled job is COMPLETING until its processes are gone (KillWait); then no trace is left.
    deadline = time.monotonic() + 10
    while slurm.session_jobs(session) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert slurm.session_jobs(session) == []
    queue = slurm_cluster.command("squeue", "-h", "-o", "%j").stdout.split()
    assert [n for n in queue if n.startswith(session_prefix(session))] == []
    assert [j.job_id for j in slurm.session_jobs(sibling)] == [theirs]


def test_cluster_reports_partition_nodes_and_gpus(slurm, slurm_cluster):
    info = slurm.cluster()
    assert info.names() == f"{slurm_cluster.partition}, {slurm_cluster.urgent}"
    part = info.partition(None)
    assert part is not None and part is info.partition(slurm_cluster.partition)
    assert (part.name, part.default, part.available) == (slurm_cluster.partition, True, True)
    assert (part.nodes_up, part.nodes_down, part.gpus_per_node) == (1, 0, slurm_cluster.gpus)
    assert [(n.name, n.cpus, n.up) for n in part.nodes] == [(slurm_cluster.node, slurm_cluster.cpus, True)]
    assert slurm.hostnames("gpu[01-03],login") == ["gpu01", "gpu02", "gpu03", "login"]


def test_unknown_partition_is_one_line_naming_the_partitions(slurm, slurm_cluster):
    with pytest.raises(SlurmError) as e:
        slurm.submit(JobSpec(script="#!/bin/bash\ntrue\n", name=job_name("s1", "c0009"), partition="gpu"))
    assert str(e.value) == (f"sbatch: no partition 'gpu' on this cluster "
                            f"(partitions: {slurm_cluster.partition}, {slurm_cluster.urgent})")


def test_more_gpus_than_a_node_has_is_one_line(slurm, slurm_cluster):
    with pytest.raises(SlurmError) as e:
        slurm.submit(JobSpec(script="#!/bin/bash\ntrue\n", name=job_name("s1", "c0010"), gpus_per_node=8))
    assert str(e.value) == (f"sbatch: partition 'default' has no 1 node(s) with 8 GPU(s) each "
                            f"(1 node(s) there, at most {slurm_cluster.gpus} GPU(s) and {slurm_cluster.cpus} CPU(s) each)")


def test_unknown_constraint_is_one_line(slurm):
    with pytest.raises(SlurmError) as e:
        slurm.submit(JobSpec(script="#!/bin/bash\ntrue\n", name=job_name("s1", "c0011"), constraint="h100"))
    assert str(e.value) == "sbatch: no node offers the constraint 'h100' (features here: none)"



def test_unreachable_controller_is_one_line(slurm_cluster):
    # The same cluster's configuration with the controller's port moved to one nobody listens on;
    # MessageTimeout=2 shortens the commands' retries (10 s by default).
    etc = slurm_cluster.root / "etc-unreachable"
    etc.mkdir()
    conf = re.sub(r"SlurmctldPort=\d+", f"SlurmctldPort={free_port()}", slurm_cluster.conf.read_text())
    (etc / "slurm.conf").write_text(conf + "MessageTimeout=2\n")
    shutil.copy(slurm_cluster.conf.parent / "gres.conf", etc / "gres.conf")
    client = SlurmClient(env={"SLURM_CONF": str(etc / "slurm.conf")}, timeout_s=20)
    with pytest.raises(SlurmError) as e:
        client.cluster()
    assert str(e.value) == "sinfo: cannot reach the Slurm controller (is slurmctld up? `scontrol ping` tells)"
