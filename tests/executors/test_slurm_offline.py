"""The Slurm client's pure parts, without a cluster: job names, sbatch arguments, and the
parsers, fed the formats Slurm prints on clusters unlike the one-node test cluster (several
partitions, nodes down or powered off, typed GPUs, accounting)."""

import pytest

from cuco_tui.executors.slurm_client import SlurmClient
from cuco_tui.executors.slurm_types import (
    JobSpec, JobState, SlurmError, SlurmNotInstalled, candidate_of, gres_gpus, job_name, job_state, parse_sacct,
    parse_sinfo, parse_squeue, session_prefix, time_limit,
)


def test_job_names_find_their_session_and_no_sibling():
    name = job_name("moe-20261124-0930", "c0007")
    assert name == "cuco:moe-20261124-0930:c0007"
    assert name.startswith(session_prefix("moe-20261124-0930"))
    assert not job_name("moe-20261124-0930-2", "c0001").startswith(session_prefix("moe-20261124-0930"))
    assert candidate_of(name, "moe-20261124-0930") == "c0007"
    assert candidate_of(name, "moe-20261124") is None
    assert candidate_of("someone-elses-job", "moe-20261124-0930") is None
    for session, candidate in (("a:b", "c1"), ("a", "c 1"), ("", "c1"), ("a", "")):
        with pytest.raises(ValueError):
            job_name(session, candidate)


def test_time_limit_is_whole_minutes_rounded_up():
    assert [time_limit(s) for s in (1, 59.5, 60, 61, 3600)] == ["1", "1", "1", "2", "60"]
    for bad in (0, -5):
        with pytest.raises(ValueError, match="positive"):
            time_limit(bad)


def test_sbatch_arguments():
    spec = JobSpec(script="#!/bin/bash\ntrue\n", name="cuco:s:c0001", partition="gpu", account="proj",
                   time_limit_s=90, constraint="h100", gpus_per_node=8, nodes=2, ntasks_per_node=8,
                   output="/runs/%j.out", workdir="/runs", hold=True, extra_args=("--qos=high",))
    assert spec.sbatch_args() == [
        "--parsable", "--job-name=cuco:s:c0001", "--nodes=2", "--no-requeue", "--export=ALL", "--partition=gpu",
        "--account=proj", "--constraint=h100", "--ntasks-per-node=8", "--output=/runs/%j.out", "--chdir=/runs",
        "--time=2", "--gpus-per-node=8", "--hold", "--qos=high"]
    minimal = JobSpec(script="#!/bin/sh\n", name="x")
    assert minimal.sbatch_args() == ["--parsable", "--job-name=x", "--nodes=1", "--no-requeue", "--export=ALL"]


@pytest.mark.parametrize("kwargs, message", [
    ({"script": "echo hi\n"}, "starts with '#!'"),
    ({"name": "two words"}, "no spaces"),
    ({"name": "a|b"}, "no '|'"),
    ({"nodes": 0}, "nodes must be at least 1"),
    ({"gpus_per_node": -1}, "gpus_per_node must be at least 0"),
    ({"time_limit_s": 0}, "positive"),
])
def test_bad_job_specs_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        JobSpec(**{"script": "#!/bin/bash\n", "name": "x", **kwargs})


def test_squeue_lines_with_wait_statuses():
    text = ("12|cuco:s:c0001|COMPLETED|None|gpu[01-02]|0|gpu|\n"
            "13|cuco:s:c0002|FAILED|NonZeroExitCode|gpu03|768|gpu|\n"
            "14|cuco:s:c0003|CANCELLED|None|gpu04|15|gpu|\n"
            "15|cuco:s:c0004|PENDING|ReqNodeNotAvail, UnavailableNodes:gpu05|||gpu|\n"
            "16|cuco:s:c0005|COMPLETING|None|gpu06|0|gpu|\n")
    jobs = {j.job_id: j for j in parse_squeue(text)}
    assert (jobs["12"].state, jobs["12"].node_list, jobs["12"].exit_code, jobs["12"].signal) == (
        JobState.COMPLETED, "gpu[01-02]", 0, 0)
    assert (jobs["13"].state, jobs["13"].exit_code, jobs["13"].signal) == (JobState.FAILED, 3, 0)
    assert (jobs["14"].state, jobs["14"].exit_code, jobs["14"].signal) == (JobState.CANCELLED, 0, 15)
    assert (jobs["15"].state, jobs["15"].reason, jobs["15"].node_list, jobs["15"].exit_code) == (
        JobState.PENDING, "ReqNodeNotAvail, UnavailableNodes:gpu05", "", None)
    assert (jobs["16"].state, jobs["16"].slurm_state, jobs["16"].finished) == (JobState.RUNNING, "COMPLETING", False)


def test_sacct_lines_with_who_cancelled():
    text = ("20|cuco:s:c0001|CANCELLED by 1000|None|gpu01|0:15|gpu\n"
            "21|cuco:s:c0002|NODE_FAIL|None|gpu02|0:0|gpu\n"
            "22|cuco:s:c0003|PREEMPTED|None|gpu03|0:0|gpu\n"
            "23|cuco:s:c0004|PENDING|Priority|None assigned|0:0|gpu\n"
            "24|cuco:s:c0005|TIMEOUT|None|gpu04|0:1|gpu\n")
    jobs = {j.job_id: j for j in parse_sacct(text)}
    assert (jobs["20"].state, jobs["20"].slurm_state, jobs["20"].signal) == (JobState.CANCELLED, "CANCELLED", 15)
    assert jobs["21"].state is JobState.NODE_FAIL and jobs["22"].state is JobState.PREEMPTED
    assert (jobs["23"].state, jobs["23"].node_list, jobs["23"].exit_code) == (JobState.PENDING, "", None)
    assert jobs["24"].state is JobState.TIMEOUT and jobs["24"].finished


def test_slurm_states_fold_into_eight():
    assert job_state("BOOT_FAIL") is JobState.NODE_FAIL
    assert job_state("OUT_OF_MEMORY") is JobState.FAILED
    assert job_state("DEADLINE") is JobState.TIMEOUT
    assert job_state("CONFIGURING") is JobState.PENDING
    with pytest.raises(SlurmError, match="does not know: 'WARPING'"):
        job_state("WARPING")
    with pytest.raises(SlurmError, match="cannot read"):
        parse_squeue("12|only-two\n")


def test_gres_strings_count_gpus():
    assert gres_gpus("gpu:4") == 4
    assert gres_gpus("gpu:h100:8(S:0-1)") == 8
    assert gres_gpus("gpu:a100:2,gpu:v100:2,shard:8") == 4
    assert gres_gpus("gpumem:40G,shard:4") == 0
    assert gres_gpus("(null)") == 0


def test_sinfo_of_a_cluster_with_several_partitions():
    text = ("gpu01|gpu*|up|1-00:00:00|mixed|64|gpu:h100:8(S:0-1)|h100,ib\n"
            "gpu02|gpu*|up|1-00:00:00|down*|64|gpu:h100:8(S:0-1)|h100,ib\n"
            "gpu03|gpu*|up|1-00:00:00|idle~|64|gpu:h100:8(S:0-1)|h100,ib\n"
            "gpu04|gpu*|up|1-00:00:00|drained|64|gpu:h100:8(S:0-1)|h100,ib\n"
            "cpu01|cpu|down|infinite|idle|128|(null)|(null)\n"
            "gpu01|debug|up|30:00|mixed|64|gpu:h100:8(S:0-1)|h100,ib\n")
    info = parse_sinfo(text)
    assert info.names() == "gpu, cpu, debug"
    gpu = info.partition(None)
    assert (gpu.name, gpu.default, gpu.available, gpu.time_limit) == ("gpu", True, True, "1-00:00:00")
    assert (gpu.nodes_up, gpu.nodes_down, gpu.gpus_per_node) == (2, 2, 8)
    assert [n.up for n in gpu.nodes] == [True, False, True, False]
    assert gpu.nodes[0].features == ("h100", "ib")
    cpu = info.partition("cpu")
    assert (cpu.available, cpu.gpus_per_node, cpu.nodes[0].cpus, cpu.nodes[0].features) == (False, 0, 128, ())
    assert info.partition("debug").time_limit == "30:00" and info.partition("nope") is None


def test_missing_commands_say_so():
    client = SlurmClient(env={"PATH": "/nonexistent"})
    with pytest.raises(SlurmNotInstalled, match="^sinfo is not on PATH: install Slurm's client commands"):
        client.cluster()
    # A SLURM_CONF that names no file is said at once (Slurm's commands retry it for 60 s).
    with pytest.raises(SlurmError, match="^squeue: SLURM_CONF names /nonexistent/slurm.conf, which does not exist"):
        SlurmClient(env={"SLURM_CONF": "/nonexistent/slurm.conf"}).my_jobs()
    # Nothing asked, nothing run.
    assert client.status([]) == {}
    client.cancel([])
    with pytest.raises(ValueError, match="empty one would cancel all your jobs"):
        client.cancel_prefix("")
