"""Tests against a real Slurm: one cluster (munged, slurmctld, slurmd) for the whole session,
started from tests/slurm_cluster.py; skipped with the reason when the machine cannot run one."""

import pytest
from slurm_cluster import SlurmCluster, missing, start_cluster

from cuco_tui.executors.slurm_client import SlurmClient


@pytest.fixture(scope="session")
def slurm_cluster():
    reason = missing()
    if reason:
        pytest.skip(f"test Slurm {reason}")
    cluster = start_cluster()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def slurm(slurm_cluster: SlurmCluster):
    """A client of the test cluster; the queue is emptied after each test, passed or failed."""
    yield SlurmClient(env=slurm_cluster.env, timeout_s=20)
    slurm_cluster.cancel_all()
