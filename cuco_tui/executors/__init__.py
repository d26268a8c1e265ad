"""Where an evaluation runs: this machine's GPUs, or a Slurm cluster's (`slurm_client.py`, a typed
client of sbatch, squeue, sacct, scancel and sinfo)."""
