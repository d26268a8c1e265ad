"""The search with its evaluations run as Slurm jobs (cuco_tui.executors.slurm) against real
daemons (tests/slurm_cluster.py): every evaluation a job (ids and nodes in the commits), stop and
SIGKILL + --resume leaving no job in squeue and losing nothing committed, jobs lost to scancel,
a failed node or a preemption run again, a pending job seen pending, the search's own kill of a
job past its limit, and the evaluator's failure on the node. Without GPUs the jobs run the real
cascade to no_gpu (CUCO_NO_GPU=1); candidates are compiled ahead here, into the shared cache.

Jobs that must stay RUNNING until the test lets them go wait at a gate: the executor's `setup`
lines (what a site puts there: `module load ...`) wait until the gate folder holds a file named
after the job's candidate, or `all`, before the evaluation starts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from cuco_tui.app.search_state import DashboardState, apply
from cuco_tui.core.result import Level
from cuco_tui.evaluate.cascade import EvalOptions
from cuco_tui.executors.base import EvaluationFailed, EvaluationRequest, JobExecutor
from cuco_tui.executors.slurm import SlurmExecutor, session_token
from cuco_tui.executors.slurm_settings import SlurmSettings
from cuco_tui.executors.slurm_types import JobSpec, JobState
from cuco_tui.lineage import SessionRepo
from cuco_tui.search.config import SearchConfig
from cuco_tui.search.engine import SearchEngine
from cuco_tui.search.events import EventBus, JobChanged, SearchStarted
from cuco_tui.search.sessions import create_session
from cuco_tui.toolchain.toolchain import discover
from engine_helpers import ScriptedAgent, W
from slurm_gate import gate_line, open_gate
from repo_paths import REPO

pytestmark = pytest.mark.slurm

if not discover().can_compile:
    pytest.skip("no CUDA toolchain here: the cascade cannot compile the candidates", allow_module_level=True)

MAIN = "import sys; from cuco_tui.cli import main; sys.exit(main())"


@pytest.fixture(autouse=True)
def no_gpu(monkeypatch):
    # Exported to the jobs (sbatch --export=ALL): the cascade on the node stops at no_gpu.
    monkeypatch.setenv("CUCO_NO_GPU", "1")


def executor(slurm_cluster, slurm, gate: Path | None = None, cls=SlurmExecutor, **settings) -> SlurmExecutor:
    settings = {"partition": slurm_cluster.partition, "max_jobs": 1, "poll_s": 0.2,
                "setup": (gate_line(gate),) if gate else (), **settings}
    return cls(SlurmSettings(**settings), 2, client=slurm)


def engine_on(tmp_path, ex, generations=0, agent=None, name="s"):
    config = SearchConfig(workload="gemm_allgather", generations=generations, islands=1, fast_path=False,
                          max_concurrent_builds=1)
    repo = create_session(W, config, tmp_path / name)
    bus = EventBus()
    engine = SearchEngine(W, agent or ScriptedAgent(), repo, config, events=bus, gpu_pool=ex,
                          design_context=lambda point: "")
    return engine, repo, bus


def run_in_thread(engine):
    out = {}

    def target():
        try:
            out["summary"] = engine.run()
        except BaseException as exc:  # surfaced by the test's assertions
            out["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, out


def wait_for(what: str, predicate, timeout: float = 120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"not seen in {timeout:.0f} s: {what}")


def job_event(bus, candidate: str, state: str, reason: str | None = None):
    def seen():
        return next((e for e in bus.history(JobChanged) if e.candidate == candidate and e.state == state
                     and (reason is None or e.reason == reason)), None)
    return seen


def queue_of(slurm, session: Path) -> list:
    return slurm.session_jobs(session_token(session.name))


def test_every_evaluation_of_a_search_is_a_slurm_job_whose_id_and_nodes_are_committed(slurm, slurm_cluster, tmp_path):
    ex = executor(slurm_cluster, slurm)
    assert isinstance(ex, JobExecutor)
    engine, repo, bus = engine_on(tmp_path, ex, generations=3)
    summary = engine.run()
    with repo:
        records = repo.records()
    assert summary.reason == "done" and [r.generation for r in records] == [0, 1, 2, 3]
    assert {r.status for r in records} == {"no_gpu"}
    jobs = [r.extra["job"] for r in records]
    assert all(j["id"].isdigit() and j["state"] == "COMPLETED" for j in jobs)
    assert len({j["id"] for j in jobs}) == len(records)  # one job per evaluation
    assert all(j["nodes"] == [slurm_cluster.node] and j["partition"] == slurm_cluster.partition for j in jobs)
    assert all(r.result["level"] == int(Level.COMPILE) and r.result["build_seconds"] > 0 for r in records)
    assert not any("lost_jobs" in r.extra for r in records)
    # each job was seen queued, then running on the node, then finished, in that order
    for r, j in zip(records, jobs):
        states = [e.state for e in bus.history(JobChanged) if e.job == j["id"]]
        assert states[0] == "pending" and states[-1] == "finished" and "running" in states, states
        running = next(e for e in bus.history(JobChanged) if e.job == j["id"] and e.state == "running")
        assert running.nodes == (slurm_cluster.node,) and running.candidate == r.id
    assert "Slurm (partition debug)" in bus.history(SearchStarted)[0].executor
    assert queue_of(slurm, repo.path) == []
    # the jobs were named after the session and the candidate
    job_dirs = sorted((repo.path / "scratch" / "jobs").iterdir())
    assert [d.name.split("-")[0] for d in job_dirs] == [r.id for r in records]
    assert all((d / "result.json").exists() for d in job_dirs)


def test_stop_cancels_the_running_job_and_leaves_none_and_resume_goes_on(slurm, slurm_cluster, tmp_path):
    gate = tmp_path / "gate"
    open_gate(gate, "c0000")  # the seed's job only: the next one runs and waits at the gate
    engine, repo, bus = engine_on(tmp_path, executor(slurm_cluster, slurm, gate), generations=2)
    thread, out = run_in_thread(engine)
    running = wait_for("c0001's job running", job_event(bus, "c0001", "running"))
    assert [j.job_id for j in queue_of(slurm, repo.path)] == [running.job]
    engine.stop()
    thread.join(60)
    assert not thread.is_alive() and "error" not in out, out
    assert out["summary"].reason == "stopped"
    assert queue_of(slurm, repo.path) == []  # run() returned: squeue lists none of its jobs
    assert slurm.status([running.job])[running.job].state is JobState.CANCELLED
    assert job_event(bus, "c0001", "cancelled")()
    with repo:
        before = repo.records()
    assert [r.id for r in before] == ["c0000"]  # the cancelled evaluation is not committed

    open_gate(gate)
    resumed = SearchEngine.from_session(repo.path, lambda workload, config: ScriptedAgent(offset=100),
                                        gpu_pool=executor(slurm_cluster, slurm, gate),
                                        design_context=lambda point: "")
    summary = resumed.run()
    with resumed.repo as again:
        after = again.records()
    assert after[0] == before[0]
    assert [r.generation for r in after] == [0, 1, 2] and summary.reason == "done"
    assert all(r.extra["job"]["id"].isdigit() for r in after)
    assert queue_of(slurm, repo.path) == []


@pytest.mark.parametrize("how", ["scancel", "node failure", "preemption"])
def test_a_job_lost_is_recorded_with_slurms_reason_and_run_again(slurm, slurm_cluster, tmp_path, how):
    gate = tmp_path / "gate"
    engine, repo, bus = engine_on(tmp_path, executor(slurm_cluster, slurm, gate))
    thread, out = run_in_thread(engine)
    first = wait_for("the seed's job running", job_event(bus, "c0000", "running"))
    if how == "scancel":
        slurm.cancel([first.job])
    elif how == "node failure":
        slurm_cluster.fail_node()
    else:
        slurm.submit(JobSpec(script="#!/bin/bash\nsleep 1\n", name="urgent-work", partition=slurm_cluster.urgent,
                             cpus_per_task=slurm_cluster.cpus, output=f"{tmp_path}/urgent-%j.out"))
    lost = wait_for("the job lost", job_event(bus, "c0000", "lost"))
    open_gate(gate)
    thread.join(120)
    assert not thread.is_alive() and "error" not in out, out
    with repo:
        [seed] = repo.records()
    assert seed.status == "no_gpu"  # the proposal ran again; the loss is not the candidate's failure
    [gone] = seed.extra["lost_jobs"]
    assert gone["id"] == first.job == lost.job and seed.extra["job"]["id"] != first.job
    expected = {"scancel": ("CANCELLED", "cancelled outside the search (Slurm: CANCELLED"),
                "node failure": ("NODE_FAIL", f"its node {slurm_cluster.node} failed (Slurm: NODE_FAIL, NodeDown)"),
                "preemption": ("PREEMPTED", f"preempted on {slurm_cluster.node} (Slurm: PREEMPTED")}[how]
    assert gone["state"] == expected[0] and gone["reason"].startswith(expected[1]), gone
    assert lost.reason == gone["reason"] and gone["nodes"] == [slurm_cluster.node]
    assert queue_of(slurm, repo.path) == []


def test_a_job_waiting_for_resources_shows_as_pending(slurm, slurm_cluster, tmp_path):
    gate = tmp_path / "gate"
    holder = slurm.submit(JobSpec(script=f"#!/bin/bash\n{gate_line(gate)}\n", name="someone-else",
                                  cpus_per_task=slurm_cluster.cpus, output=f"{tmp_path}/holder-%j.out"))
    wait_for("the node full", lambda: slurm.status([holder])[holder].state is JobState.RUNNING, 30)
    engine, repo, bus = engine_on(tmp_path, executor(slurm_cluster, slurm))
    thread, out = run_in_thread(engine)
    pending = wait_for("the seed's job pending for Resources", job_event(bus, "c0000", "pending", "Resources"))
    # what the dashboard makes of the events so far: the evaluation, its job, pending and why
    state = DashboardState()
    for e in bus.history():
        state = apply(state, e)
    [shown] = state.evaluations
    assert (shown.candidate, shown.job, shown.job_state, shown.job_reason, shown.nodes) == \
        ("c0000", pending.job, "pending", "Resources", ())
    assert not job_event(bus, "c0000", "running")()
    open_gate(gate)
    thread.join(120)
    assert not thread.is_alive() and "error" not in out, out
    with repo:
        [seed] = repo.records()
    assert seed.status == "no_gpu" and seed.extra["job"]["id"] == pending.job


class QuickLimit(SlurmExecutor):
    """The cascade's limits are minutes long; a test waits seconds."""

    def limit_s(self, request):
        return 2.0


def test_a_job_past_its_limit_is_cancelled_by_the_search_and_committed_as_runtime_error(slurm, slurm_cluster, tmp_path):
    gate = tmp_path / "never-opened"
    engine, repo, bus = engine_on(tmp_path, executor(slurm_cluster, slurm, gate, cls=QuickLimit))
    summary = engine.run()
    with repo:
        [seed] = repo.records()
    job = seed.extra["job"]
    assert seed.status == "runtime_error" and summary.reason == "done"
    assert seed.result["reason"] == (f"the evaluation job {job['id']} on {slurm_cluster.node} ran past its limit of 2 s "
                                     f"and was cancelled")
    assert job["state"] == "CANCELLED" and job["seconds"] >= 2.0
    assert queue_of(slurm, repo.path) == []


def test_the_evaluators_failure_on_the_node_is_the_jobs_failure(slurm, slurm_cluster, tmp_path):
    ex = executor(slurm_cluster, slurm)
    assert ex.open("broken-session", tmp_path / "jobs") == []
    source = tmp_path / "c0001.cu"
    source.write_text(W.seed.read_text())
    gone = replace(W, root=tmp_path / "no-such-workload")
    handle = ex.submit(EvaluationRequest("c0001", source, gone, EvalOptions(world=2)), lambda p: None, lambda u: None)
    with pytest.raises(EvaluationFailed) as e:
        handle.result()
    assert str(e.value).startswith(f"the evaluator failed in job {handle.job} on {slurm_cluster.node}: WorkloadError")
    assert "Traceback" in e.value.log and e.value.run.state == "FAILED"
    ex.close()
    assert slurm.session_jobs("broken-session") == []


def test_what_a_job_asks_slurm_for(slurm, slurm_cluster, tmp_path):
    from cuco_tui.evaluate.remote import evaluation_limit_s
    from cuco_tui.toolchain import BuildCache

    ex = executor(slurm_cluster, slurm, sbatch_args=("--mem=0",))
    ex.open("asks", tmp_path / "jobs")
    request = EvaluationRequest("c0007", tmp_path / "c0007.cu", W, EvalOptions(world=2), exclusive=True)
    spec = ex.spec(request, tmp_path / "jobs" / "c0007-x")
    args = spec.sbatch_args()
    minutes = -(-int(evaluation_limit_s(W, EvalOptions(world=2))) // 60)
    for arg in ("--job-name=cuco:asks:c0007", "--nodes=1", "--no-requeue", f"--partition={slurm_cluster.partition}",
                f"--time={minutes}", "--gpus-per-node=2", "--cpus-per-task=2", "--ntasks=1", "--mem=0", "--exclusive",
                f"--output={tmp_path}/jobs/c0007-x/job.out"):
        assert arg in args, (arg, args)
    assert spec.env["CUCO_CACHE_DIR"] == str(BuildCache().root.resolve()) and spec.env["NCCL_NVLS_ENABLE"] == "0"
    assert spec.script.splitlines()[-1] == f"exec {sys.executable} -m cuco_tui.evaluate.remote {tmp_path}/jobs/c0007-x"
    assert "--exclusive" not in ex.spec(replace(request, exclusive=False), tmp_path).sbatch_args()
    ex.close()


# ---------------------------------------------------------------------------- the command line


def cli_env(slurm_cluster, settings: Path) -> dict[str, str]:
    env = {**os.environ, **slurm_cluster.env, "CUCO_SLURM_CONFIG": str(settings)}
    env.pop("ANTHROPIC_API_KEY", None)
    return env


def test_cuco_search_killed_then_resumed_cancels_its_leftover_job_and_loses_nothing(slurm, slurm_cluster, tmp_path):
    gate = tmp_path / "gate"
    open_gate(gate, "c0000")  # the seed's job only: the next one runs and waits at the gate
    settings = tmp_path / "slurm.toml"
    settings.write_text(f'partition = "{slurm_cluster.partition}"\nmax_jobs = 1\npoll_seconds = 0.2\n'
                        f'setup = {json.dumps([gate_line(gate)])}\n')
    session = tmp_path / "killed"
    env = cli_env(slurm_cluster, settings)
    proc = subprocess.Popen([sys.executable, "-c", MAIN, "search", "--executor", "slurm", "--agent", "offline",
                             "--generations", "2", "--islands", "1", "--seed", "3", "--session", str(session)],
                            env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    lines, leftover = [], None
    try:
        for line in proc.stderr:
            lines.append(line)
            if "] job " in line and ": running on" in line and " of c0000:" not in line:
                leftover = line.split("] job ")[1].split()[0]
                os.killpg(proc.pid, signal.SIGKILL)
                break
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    assert leftover and proc.returncode == -signal.SIGKILL, "".join(lines)[-3000:]
    assert [j.job_id for j in queue_of(slurm, session)] == [leftover]  # the killed search's job runs on
    with SessionRepo.open(session) as repo:
        before = {r.id: r for r in repo.records()}
    assert "c0000" in before

    resumed = subprocess.Popen([sys.executable, "-c", MAIN, "search", "--resume", str(session), "--executor",
                                "slurm", "--json"], env=env, cwd=REPO, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    said = []
    for line in resumed.stderr:
        said.append(line)
        if f"job {leftover} of " in line and "left over by an earlier run" in line:
            open_gate(gate)  # the leftover is cancelled: the resumed search's jobs may go
    stdout = resumed.stdout.read()
    assert resumed.wait(60) == 0, "".join(said)[-3000:]
    assert (gate / "all").exists(), "".join(said)[-3000:]
    assert slurm.status([leftover])[leftover].state is JobState.CANCELLED
    assert queue_of(slurm, session) == []
    with SessionRepo.open(session) as repo:
        after = {r.id: r for r in repo.records()}
    assert all(after[cid] == rec for cid, rec in before.items())  # nothing committed was lost or changed
    assert max(r.generation for r in after.values()) == 2
    assert all(r.extra["job"]["id"].isdigit() and r.extra["job"]["id"] != leftover for r in after.values())
    assert json.loads(stdout)["candidates"] == len(after)


def test_cuco_search_refuses_what_the_cluster_cannot_run_in_one_line(slurm, slurm_cluster, tmp_path):
    settings = tmp_path / "slurm.toml"
    settings.write_text("")
    env = cli_env(slurm_cluster, settings)
    for args, message in (
        (["--partition", "gpu"], "cuco: --executor slurm: no partition 'gpu' on this cluster (partitions: debug, urgent)"),
        (["--gpus-per-node", "4", "--world", "4"],
         "cuco: --executor slurm: partition 'debug' has at most 2 GPU(s) per node; an evaluation of 4 ranks needs 4 "
         "on one node"),
    ):
        r = subprocess.run([sys.executable, "-c", MAIN, "search", "--executor", "slurm", "--session",
                            str(tmp_path / "never"), *args], env=env, cwd=REPO, capture_output=True, text=True,
                           timeout=120)
        assert (r.returncode, r.stderr.strip()) == (2, message)
        assert not (tmp_path / "never").exists()


def test_doctor_reports_the_partitions(slurm_cluster, monkeypatch, capsys):
    from cuco_tui.cli.machine_checks import slurm_checks

    checks = {c.name: c for c in slurm_checks({**os.environ, **slurm_cluster.env})}
    assert checks["Slurm"].ok and checks["Slurm"].detail == "2 partition(s): debug, urgent"
    debug = checks["partition debug (default)"]
    assert debug.ok and debug.detail == "1 of 1 node(s) up, 2 GPU(s) per node, time limit infinite"
    assert checks["partition urgent"].ok


def test_ctrl_c_cancels_the_searchs_jobs_and_cuco_search_ends_stopped(slurm, slurm_cluster, tmp_path):
    gate = tmp_path / "gate"  # never opened: the seed's job waits there, running
    settings = tmp_path / "slurm.toml"
    settings.write_text(f'max_jobs = 1\npoll_seconds = 0.2\nsetup = {json.dumps([gate_line(gate)])}\n')
    session = tmp_path / "interrupted"
    proc = subprocess.Popen([sys.executable, "-c", MAIN, "search", "--executor", "slurm", "--agent", "offline",
                             "--generations", "1", "--session", str(session)], env=cli_env(slurm_cluster, settings),
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    said, job = [], None
    for line in proc.stderr:
        said.append(line)
        if job is None and "] job " in line and " of c0000: running on" in line:
            job = line.split("] job ")[1].split()[0]
            proc.send_signal(signal.SIGINT)
    proc.stdout.read()
    assert proc.wait(60) == 130, "".join(said)[-3000:]
    text = "".join(said)
    assert job and "stopping: cancelling the search's Slurm jobs" in text, text[-3000:]
    assert f"job {job} of c0000: cancelled (the search stopped)" in text and "ended: stopped" in text
    assert "no job submitted" not in text  # said once, by the job's own line
    assert queue_of(slurm, session) == []
    with SessionRepo.open(session) as repo:
        assert repo.records() == []
