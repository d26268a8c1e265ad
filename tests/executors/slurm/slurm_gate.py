"""The gate that holds a Slurm job RUNNING until a test lets it go: the executor's `setup` lines
(what a site puts there: `module load ...`) wait until the gate folder holds a file named after
the job's candidate, or `all`. Shared by test_slurm_search and test_slurm_tui."""

from pathlib import Path


def gate_line(gate: Path) -> str:
    """Wait (at most two minutes) for GATE/<candidate> or GATE/all; the job's name ends with its candidate."""
    return (f'for i in $(seq 1200); do [ -e {gate}/all ] || [ -e "{gate}/${{SLURM_JOB_NAME##*:}}" ] && break; '
            f'sleep 0.1; done')


def open_gate(gate: Path, name: str = "all") -> None:
    gate.mkdir(exist_ok=True)
    (gate / name).touch()
