"""The Slurm executor's parts that need no cluster: its settings (TOML file and command line),
the one-line refusals of `cuco search` and `cuco-tui` (exit 2, no session left behind), the
runner a job starts on its node (evaluate/remote.py, run here directly), what the CLI prints of
a job's state changes, and the in-flight table's job columns. Against real daemons:
tests/executors/slurm/test_slurm_search.py."""

from __future__ import annotations

import json

import pytest
from textual.app import App, ComposeResult
from textual.widgets import DataTable

from cuco_tui.app.search_state import Evaluation
from cuco_tui.app.widgets.search.in_flight import InFlightTable
from cuco_tui.cli import main, tui_main
from cuco_tui.cli.search import ProgressPrinter
from cuco_tui.evaluate import remote
from cuco_tui.executors import GpuPool
from cuco_tui.evaluate.cascade import EvalOptions, make_plan, run_deadline
from cuco_tui.executors.slurm import limit_seconds, lost_reason, session_token
from cuco_tui.executors.slurm_settings import SlurmSettings, SlurmSettingsError, load_settings
from cuco_tui.executors.slurm_types import JobInfo, JobState
from cuco_tui.search import events as ev
from cuco_tui.toolchain.toolchain import discover
from cuco_tui.workload.manifest import load_workload

W = load_workload("gemm_allgather")


@pytest.fixture
def no_cluster(monkeypatch, tmp_path):
    """No settings file and no SLURM_CONF: what this machine has."""
    monkeypatch.delenv("SLURM_CONF", raising=False)
    monkeypatch.delenv("CUCO_SLURM_CONFIG", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


# ---------------------------------------------------------------------------- settings


def test_the_settings_file_and_the_command_line_over_it(tmp_path):
    path = tmp_path / "slurm.toml"
    path.write_text('partition = "gpu"\naccount = "proj42"\nconstraint = "h100"\ntime_limit = 15\nmax_jobs = 8\n'
                    'gpus_per_node = 4\nsetup = ["module load cuda/13.0"]\nsbatch_args = ["--qos=high"]\n'
                    'poll_seconds = 1\npython = "/shared/venv/bin/python"\n')
    s = load_settings(str(path), env={}, overrides={"partition": "h100-short", "max_jobs": None})
    assert (s.partition, s.account, s.constraint, s.time_limit_min, s.max_jobs, s.gpus_per_node) == \
        ("h100-short", "proj42", "h100", 15, 8, 4)
    assert (s.setup, s.sbatch_args, s.poll_s, s.python) == (("module load cuda/13.0",), ("--qos=high",), 1.0,
                                                            "/shared/venv/bin/python")
    assert s.gpus_for(4) == 4
    with pytest.raises(SlurmSettingsError, match=r"^--gpus-per-node 4 x --nodes 1 is 4 GPUs, but an evaluation has 2"):
        s.gpus_for(2)


def test_the_settings_file_is_found_where_the_readme_says(tmp_path):
    assert load_settings(None, env={"XDG_CONFIG_HOME": str(tmp_path)}) == SlurmSettings()  # none: the defaults
    (tmp_path / "cuco").mkdir()
    (tmp_path / "cuco" / "slurm.toml").write_text('partition = "debug"\n')
    assert load_settings(None, env={"XDG_CONFIG_HOME": str(tmp_path)}).partition == "debug"
    other = tmp_path / "other.toml"
    other.write_text('partition = "urgent"\n')
    assert load_settings(None, env={"XDG_CONFIG_HOME": str(tmp_path), "CUCO_SLURM_CONFIG": str(other)}).partition \
        == "urgent"
    with pytest.raises(SlurmSettingsError, match="^no Slurm settings file at /no/such.toml$"):
        load_settings("/no/such.toml", env={})


@pytest.mark.parametrize("text, message", [
    ('partion = "gpu"\n', "unknown setting 'partion' (known: partition, account"),
    ('max_jobs = "4"\n', "max_jobs must be a whole number, not '4'"),
    ("time_limit = 1.5\n", "time_limit must be a whole number of minutes, not 1.5"),
    ('setup = "module load cuda"\n', "setup must be a list of shell lines, not 'module load cuda'"),
    ("partition = \n", "not valid TOML"),
    ("max_jobs = 0\n", "--max-jobs must be at least 1, not 0 (with the settings of"),
    ('sbatch_args = ["qos=high"]\n', "sbatch_args are sbatch options, each starting with '-'"),
])
def test_a_bad_settings_file_is_one_sentence_naming_it(tmp_path, text, message):
    path = tmp_path / "slurm.toml"
    path.write_text(text)
    with pytest.raises(SlurmSettingsError) as e:
        load_settings(str(path), env={})
    assert message in str(e.value) and str(path) in str(e.value) and "\n" not in str(e.value)


def test_an_evaluation_spans_one_node():
    with pytest.raises(SlurmSettingsError, match=r"^--nodes 2: an evaluation's ranks run on one node for now"):
        SlurmSettings(nodes=2)


# ---------------------------------------------------------------------------- the command line


@pytest.mark.parametrize("args, message", [
    (["--partition", "gpu"], "cuco: --partition is an option of --executor slurm (evaluations run locally here)"),
    (["--max-jobs", "2"], "cuco: --max-jobs is an option of --executor slurm (evaluations run locally here)"),
    (["--executor", "slurm", "--gpus", "0,1"], "cuco: --gpus names this machine's GPUs; with --executor slurm each "
                                               "job gets its GPUs from Slurm (drop --gpus)"),
    (["--executor", "slurm", "--max-jobs", "0"], "cuco: --max-jobs must be at least 1, not 0"),
    (["--executor", "slurm", "--time-limit", "soon"], "cuco: --time-limit takes a whole number, not 'soon'"),
    (["--executor", "slurm", "--nodes", "2"], "cuco: --executor slurm: --nodes 2: an evaluation's ranks run on one "
                                              "node for now (LSA and the harness's launcher are single-node); use "
                                              "--nodes 1"),
    (["--executor", "slurm", "--gpus-per-node", "4"], "cuco: --executor slurm: --gpus-per-node 4 x --nodes 1 is 4 "
                                                      "GPUs, but an evaluation has 2 ranks (one GPU each): make them "
                                                      "equal"),
    (["--executor", "slurm", "--slurm-config", "/no/such.toml"],
     "cuco: --executor slurm: no Slurm settings file at /no/such.toml"),
])
def test_cuco_search_refuses_bad_executor_options_in_one_line(no_cluster, capsys, tmp_path, args, message):
    assert main(["search", "--session", str(tmp_path / "never"), *args]) == 2
    assert capsys.readouterr().err.strip() == message
    assert not (tmp_path / "never").exists()


def test_cuco_search_without_a_reachable_cluster_says_so_in_one_line(no_cluster, capsys, tmp_path):
    assert main(["search", "--executor", "slurm", "--session", str(tmp_path / "never")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("cuco: --executor slurm: sinfo") and "\n" not in err
    assert not (tmp_path / "never").exists()


@pytest.mark.parametrize("args, message", [
    (["--account", "proj"], "cuco-tui: --account is an option of --executor slurm (evaluations run locally here)"),
    (["--executor", "slurm", "--evaluate"], "cuco-tui: --executor slurm runs a search's evaluations; --evaluate "
                                            "evaluates on this machine"),
])
def test_cuco_tui_refuses_bad_executor_options_in_one_line(no_cluster, capsys, monkeypatch, args, message):
    from cuco_tui.app.app import CucoApp

    started = []
    monkeypatch.setattr(CucoApp, "run", lambda self, *a, **k: started.append(self))
    assert tui_main(args) == 2
    assert capsys.readouterr().err.strip() == message and not started


def test_the_local_executor_stays_the_default(no_cluster, monkeypatch):
    from cuco_tui.app.app import CucoApp

    started = []
    monkeypatch.setattr(CucoApp, "run", lambda self, *a, **k: started.append(self))
    assert tui_main([]) == 0
    assert isinstance(started[0].search_launch.executor, GpuPool)  # the GPU groups cuco-tui planned, not Slurm


# ---------------------------------------------------------------------------- what the job runs


def test_a_slurm_search_measures_though_its_slots_hold_no_gpu():
    """The executor's slots bound how many jobs are out and name no GPU; each job gets its GPUs from
    Slurm. The engine asks the executor whether its evaluations measure (plateau watch, re-benchmark,
    the chart), not whether its groups hold GPUs."""
    from cuco_tui.executors import GpuGroup, GpuPool
    from cuco_tui.executors.slurm import SlurmExecutor

    ex = SlurmExecutor(SlurmSettings(max_jobs=2), 2, client=object())
    assert [g.gpus for g in ex.groups] == [(), ()] and ex.can_measure
    assert not GpuPool.cpu_only(2).can_measure and GpuPool([GpuGroup(0, (0, 1))]).can_measure


def test_the_jobs_gpus_are_the_ones_cuda_numbers_inside_it():
    assert remote.visible_gpus({"CUDA_VISIBLE_DEVICES": "3,5"}, 2) == [0, 1]
    assert remote.visible_gpus({"CUDA_VISIBLE_DEVICES": "GPU-a1,GPU-b2,GPU-c3,GPU-d4"}, 2) == [0, 1]
    assert remote.visible_gpus({"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, None) == [0, 1, 2, 3]
    assert remote.visible_gpus({"CUDA_VISIBLE_DEVICES": "7"}, 2) == [0]  # too few: the cascade says so
    assert remote.visible_gpus({}, 2) is None and remote.visible_gpus({"CUDA_VISIBLE_DEVICES": ""}, 2) is None


def test_the_jobs_limit_is_the_launchers_deadline_plus_start_and_release():
    options = EvalOptions(world=2)
    shapes = len(W.verify_shapes) + len(W.bench_shapes)
    assert remote.evaluation_limit_s(W, options) == 180.0 + 120.0 * shapes + remote.START_AND_RELEASE_S
    assert remote.evaluation_limit_s(W, options) == run_deadline(make_plan(W, None, options, "evaluate")) + 120.0


def test_a_request_travels_whole(tmp_path):
    options = EvalOptions(gpus=[4, 5], world=2, run_root=tmp_path / "runs", shapes=("square-8k",), trace=False)
    remote.RemoteRequest.of(tmp_path / "c0001.cu", W, options).write(tmp_path)
    back = remote.RemoteRequest.read(tmp_path)
    assert back.workload == str(W.root) and back.candidate == str(tmp_path / "c0001.cu")
    assert back.eval_options([0, 1]) == EvalOptions(gpus=[0, 1], world=2, run_root=tmp_path / "runs",
                                                    shapes=("square-8k",), trace=False)


def test_the_runner_writes_the_cascades_result_and_its_steps(tmp_path, monkeypatch):
    if not discover().can_compile:
        pytest.skip("no CUDA toolchain here: the cascade cannot compile")
    monkeypatch.setenv("CUCO_NO_GPU", "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    source = tmp_path / "c0000.cu"
    source.write_text(W.seed.read_text())
    remote.RemoteRequest.of(source, W, EvalOptions(world=2, run_root=tmp_path / "runs")).write(tmp_path)
    assert remote.main([str(tmp_path)]) == 0
    result = json.loads((tmp_path / remote.RESULT).read_text())
    assert (result["status"], result["level"], result["candidate"]) == ("no_gpu", 1, str(source))
    steps = [json.loads(line) for line in (tmp_path / remote.PROGRESS).read_text().splitlines()]
    assert steps[:2] == [{"level": 0, "message": "static checks"}, {"level": 1, "message": "compiling with nvcc"}]
    assert not (tmp_path / remote.ERROR).exists()


def test_the_runner_reports_the_evaluators_failure(tmp_path, capsys):
    options = EvalOptions(world=2)
    remote.RemoteRequest(str(tmp_path / "c0000.cu"), str(tmp_path / "no-workload"),
                         remote.RemoteRequest.of(tmp_path, W, options).options).write(tmp_path)
    assert remote.main([str(tmp_path)]) == 1
    error = json.loads((tmp_path / remote.ERROR).read_text())
    assert error["error"].startswith("WorkloadError: ") and "Traceback" in error["traceback"]
    assert not (tmp_path / remote.RESULT).exists()
    assert remote.main([str(tmp_path / "nowhere")]) == 2
    assert "usage: python -m cuco_tui.evaluate.remote JOBDIR" in capsys.readouterr().err


# ---------------------------------------------------------------------------- what is shown


def info(state: JobState, reason: str = "") -> JobInfo:
    return JobInfo(job_id="12", name="cuco:s:c0001", state=state, slurm_state=state.value, reason=reason,
                   node_list="gpu[01-02]", partition="gpu")


def test_lost_jobs_say_why_in_slurms_words_too():
    assert lost_reason(info(JobState.NODE_FAIL, "NodeDown"), ("gpu01", "gpu02")) == \
        "its node gpu01,gpu02 failed (Slurm: NODE_FAIL, NodeDown)"
    assert lost_reason(info(JobState.PREEMPTED), ()) == "preempted on gpu[01-02] (Slurm: PREEMPTED)"
    assert lost_reason(info(JobState.CANCELLED), ("gpu01",)) == "cancelled outside the search (Slurm: CANCELLED)"
    assert session_token("gemm_allgather-20261123-0427-2") == "gemm_allgather-20261123-0427-2"
    assert session_token("my session:1") == "my_session_1"


def test_partition_time_limits_as_sinfo_prints_them():
    assert [limit_seconds(t) for t in ("90", "30:00", "2:00:00", "1-00:00:00", "1-12", "1-2:30")] == \
        [5400.0, 1800.0, 7200.0, 86400.0, 129600.0, 95400.0]
    assert [limit_seconds(t) for t in ("infinite", "UNLIMITED", "", "1:2:3:4", "a-1")] == [None] * 5


def test_the_cli_prints_each_job_state_change_on_one_line():
    line = ProgressPrinter(None).line
    job = dict(candidate="c0003", job="4711")
    assert line(ev.JobChanged(**job, state="pending", reason="Resources")) == "job 4711 of c0003: pending (Resources)"
    assert line(ev.JobChanged(**job, state="running", nodes=("gpu07",))) == "job 4711 of c0003: running on gpu07"
    assert line(ev.JobChanged(**job, state="lost", reason="preempted on gpu07 (Slurm: PREEMPTED)")) == \
        "job 4711 of c0003: lost: preempted on gpu07 (Slurm: PREEMPTED)"
    assert line(ev.JobChanged(**job, state="finished", reason="COMPLETED")) == "job 4711 of c0003: finished (COMPLETED)"
    assert line(ev.JobChanged(candidate="c0004", job="", state="cancelled", reason="the search is stopping")) == \
        "c0004: no job submitted (the search is stopping)"


class TableApp(App):
    def compose(self) -> ComposeResult:
        yield InFlightTable()


@pytest.mark.asyncio
async def test_the_in_flight_table_adds_the_job_columns_with_the_first_job():
    app = TableApp()
    async with app.run_test(size=(140, 20)) as pilot:
        flight = app.query_one(InFlightTable)
        table = flight.query_one(DataTable)
        flight.show((Evaluation("c0001", 2, (0, 1), "verify"),))
        await pilot.pause()
        assert len(table.columns) == 4  # a local search: no job columns
        flight.show((Evaluation("c0001", 2, (0, 1), "verify"),
                     Evaluation("c0002", 1, (), "", "4711", "pending", "Resources")))
        await pilot.pause()
        assert [str(c.label) for c in table.columns.values()] == ["id", "stage", "GPUs", "step", "job", "job state",
                                                                  "nodes"]
        assert [str(c) for c in table.get_row("c0001")] == ["c0001", "L2 verify", "0,1", "verify", "-", "-", "-"]
        assert [str(c) for c in table.get_row("c0002")][2:] == ["-", "", "4711", "pending: Resources", "-"]
        flight.show((Evaluation("c0002", 2, (), "verify square-8k", "4711", "running", "", ("gpu07",)),))
        await pilot.pause()
        assert flight.candidates == ["c0002"]
        assert [str(c) for c in table.get_row("c0002")][1:] == ["L2 verify", "-", "verify square-8k", "4711", "running",
                                                                "gpu07"]
