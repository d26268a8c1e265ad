"""Where an evaluation runs. An `Executor` lends the search one place to run one evaluation (a
group of GPUs, lent whole) and takes it back. The local pool (`local.py`) splits this machine's
GPUs into disjoint, NVLink-aware groups (`placement.py`), and the scheduler runs the cascade on
them in its own process. The Slurm executor (`slurm.py`, settings in `slurm_settings.py`) is
also a `JobExecutor`: each evaluation is a batch job it submits, follows and ends, on
`slurm_client.py` (a typed client of sbatch, squeue, sacct, scancel and sinfo); the job runs
`cuco_tui.evaluate.remote` on its node."""

from cuco_tui.executors.base import Executor, GpuGroup, PlacementError
from cuco_tui.executors.local import GpuPool, local_pool
from cuco_tui.executors.placement import Topology, plan_groups, topology_of

__all__ = ["Executor", "GpuGroup", "GpuPool", "PlacementError", "Topology", "local_pool", "plan_groups",
           "topology_of"]
