"""cuco-tui with its search's evaluations run as Slurm jobs, against real daemons: the command
line wires the executor, the dashboard's in-flight table shows the job (id, state, nodes), and
`x` cancels it, leaving nothing in squeue and nothing committed for it."""

from __future__ import annotations

import pytest
from textual.widgets import DataTable

from cuco_tui.app.app import CucoApp
from cuco_tui.app.screens.dashboard import DashboardScreen
from cuco_tui.app.widgets.search.in_flight import InFlightTable
from cuco_tui.cli import tui_main
from cuco_tui.executors.slurm import SlurmExecutor
from cuco_tui.executors.slurm_settings import SlurmSettings
from cuco_tui.lineage import SessionRepo
from cuco_tui.search.config import SearchConfig
from cuco_tui.toolchain.toolchain import discover
from pilot_helpers import wait_until
from slurm_gate import gate_line

pytestmark = pytest.mark.slurm


def test_cuco_tui_hands_the_search_a_slurm_executor(slurm_cluster, monkeypatch, tmp_path):
    apps: list[CucoApp] = []
    monkeypatch.setattr(CucoApp, "run", lambda self, *a, **k: apps.append(self))
    for key, value in slurm_cluster.env.items():
        monkeypatch.setenv(key, value)
    settings = tmp_path / "slurm.toml"
    settings.write_text('max_jobs = 3\nsetup = ["module load cuda"]\n')
    assert tui_main(["--executor", "slurm", "--slurm-config", str(settings), "--partition", "urgent"]) == 0
    executor = apps[0].search_launch.executor
    assert isinstance(executor, SlurmExecutor)
    assert (executor.settings.partition, executor.size, executor.settings.setup) == ("urgent", 3, ("module load cuda",))
    assert executor.gpus_per_node == 2  # gemm_allgather's smallest world


@pytest.mark.asyncio
async def test_the_dashboard_shows_the_job_and_x_cancels_it(slurm, slurm_cluster, tmp_path, monkeypatch):
    if not discover().can_compile:
        pytest.skip("no CUDA toolchain here: the seed cannot be compiled ahead")
    monkeypatch.setenv("CUCO_NO_GPU", "1")
    gate = tmp_path / "gate"  # never opened: the seed's job waits there, running
    executor = SlurmExecutor(SlurmSettings(partition=slurm_cluster.partition, max_jobs=1, poll_s=0.2,
                                           setup=(gate_line(gate),)), 2, client=slurm)
    config = SearchConfig(workload="gemm_allgather", generations=1, islands=1, seed=0, max_concurrent_builds=1)
    app = CucoApp(start_search=True, search_config=config, session=tmp_path / "live", agent="offline",
                  executor=executor)
    async with app.run_test(size=(160, 40)) as pilot:
        def running():
            return isinstance(app.screen, DashboardScreen) and any(
                e.job_state == "running" for e in app.screen.state.evaluations)

        assert await wait_until(pilot, running, timeout_s=180)
        [shown] = app.screen.state.evaluations
        await pilot.pause(0.2)
        table = app.screen.query_one(InFlightTable).query_one(DataTable)
        row = [str(cell) for cell in table.get_row("c0000")]
        assert row[-3:] == [shown.job, "running", slurm_cluster.node] and row[2] == "-"
        assert [j.job_id for j in slurm.session_jobs("live")] == [shown.job]
        await pilot.press("x")  # stopping asks first (issue 24): yes
        assert await wait_until(pilot, lambda: not isinstance(app.screen, DashboardScreen), timeout_s=10)
        await pilot.press("y")
        assert await wait_until(pilot, lambda: isinstance(app.screen, DashboardScreen)
                                and app.screen.state.run_text == "stopped", timeout_s=60)
        assert app.screen.state.evaluations == () and table.row_count == 0
    assert slurm.session_jobs("live") == []
    with SessionRepo.open(tmp_path / "live") as repo:
        assert repo.records() == []  # the cancelled seed is not committed: a resume evaluates it again
