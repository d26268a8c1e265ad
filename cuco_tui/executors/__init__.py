"""Where an evaluation runs. An `Executor` lends the search one place to run one evaluation (a
group of GPUs, lent whole) and takes it back; the search's scheduler sees nothing else. The local
pool (`local.py`) splits this machine's GPUs into disjoint, NVLink-aware groups (`placement.py`);
a Slurm executor will stand beside it, implementing the same protocol, on `slurm_client.py` (a
typed client of sbatch, squeue, sacct, scancel and sinfo)."""

from cuco_tui.executors.base import Executor, GpuGroup, PlacementError
from cuco_tui.executors.local import GpuPool, local_pool
from cuco_tui.executors.placement import Topology, plan_groups, topology_of

__all__ = ["Executor", "GpuGroup", "GpuPool", "PlacementError", "Topology", "local_pool", "plan_groups",
           "topology_of"]
