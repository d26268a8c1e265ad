"""Where a search's evaluations go on a cluster: the Slurm settings, from a TOML file and the
command line, as one frozen dataclass. Every bad value is a `SlurmSettingsError`, one sentence
naming the setting (and the file) and what it accepts.

The file is `--slurm-config FILE`, else $CUCO_SLURM_CONFIG, else ~/.config/cuco/slurm.toml
($XDG_CONFIG_HOME/cuco/slurm.toml) when it exists; options on the command line win over it:

    partition = "gpu"              # default: the cluster's default partition
    account = "proj42"
    constraint = "h100"            # a node feature (sbatch --constraint)
    gpus_per_node = 2              # default: the evaluation's world size
    nodes = 1                      # an evaluation's ranks share one node
    time_limit = 15                # minutes; default: the cascade's own limits, rounded up
    max_jobs = 8                   # evaluations queued or running at once
    python = "/shared/venv/bin/python"   # default: this interpreter (the same path on the nodes)
    setup = ["module load cuda/13.0"]    # shell lines the job runs first
    sbatch_args = ["--qos=high"]
    slurm_conf = "/etc/slurm/other.conf" # SLURM_CONF for Slurm's commands
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Mapping

CONFIG_ENV = "CUCO_SLURM_CONFIG"


class SlurmSettingsError(ValueError):
    """A Slurm setting that cannot work, with a sentence saying what to change."""


@dataclass(frozen=True)
class SlurmSettings:
    partition: str | None = None
    account: str | None = None
    constraint: str | None = None
    gpus_per_node: int | None = None  # None: the evaluation's world size
    nodes: int = 1
    time_limit_min: int | None = None  # None: from the cascade's limits for the workload's shapes
    max_jobs: int = 4
    python: str | None = None  # None: sys.executable of the search
    setup: tuple[str, ...] = ()
    sbatch_args: tuple[str, ...] = ()
    slurm_conf: str | None = None
    poll_s: float = 2.0  # how often the search asks squeue about its jobs
    max_lost: int = 3  # an evaluation whose job is lost this often is committed as a runtime error

    def __post_init__(self) -> None:
        for name in ("partition", "account", "constraint", "python", "slurm_conf"):
            value = getattr(self, name)
            if value is not None and (not value.strip() or "\n" in value):
                raise SlurmSettingsError(f"{name} must be a non-empty line of text, not {value!r}")
        for name, least in (("gpus_per_node", 1), ("nodes", 1), ("time_limit_min", 1), ("max_jobs", 1),
                            ("max_lost", 1)):
            value = getattr(self, name)
            if value is not None and value < least:
                raise SlurmSettingsError(f"{_flag(name)} must be at least {least}, not {value}")
        if self.nodes != 1:
            # The harness's launcher starts a group's ranks as processes of one host and gives each
            # its GPU by number; spanning nodes needs it to place ranks through srun instead.
            raise SlurmSettingsError(f"--nodes {self.nodes}: an evaluation's ranks run on one node for now "
                                     "(LSA and the harness's launcher are single-node); use --nodes 1")
        if not self.poll_s > 0:
            raise SlurmSettingsError(f"poll_s must be a positive number of seconds, not {self.poll_s}")
        if any(not a.startswith("-") for a in self.sbatch_args):
            raise SlurmSettingsError(f"sbatch_args are sbatch options, each starting with '-': {list(self.sbatch_args)}")

    def gpus_for(self, world: int) -> int:
        """GPUs per node for an evaluation of `world` ranks: every rank on one node."""
        gpn = self.gpus_per_node or world
        if gpn * self.nodes != world:
            raise SlurmSettingsError(f"--gpus-per-node {gpn} x --nodes {self.nodes} is {gpn * self.nodes} GPUs, but an "
                                     f"evaluation has {world} ranks (one GPU each): make them equal")
        return gpn

    def env(self) -> dict[str, str]:
        """The environment Slurm's commands need (SLURM_CONF when the settings name one)."""
        return {"SLURM_CONF": self.slurm_conf} if self.slurm_conf else {}

    def summary(self) -> str:
        parts = [f"partition {self.partition or '(default)'}"]
        parts += [f"account {self.account}"] if self.account else []
        parts += [f"constraint {self.constraint}"] if self.constraint else []
        return ", ".join(parts)


def _flag(name: str) -> str:
    return "--" + {"time_limit_min": "time-limit"}.get(name, name).replace("_", "-")


# TOML key -> (field, the type it must have, what to say when it does not)
_KEYS: dict[str, tuple[str, type, str]] = {
    "partition": ("partition", str, "a partition's name"),
    "account": ("account", str, "an account's name"),
    "constraint": ("constraint", str, "a node feature, e.g. \"h100\""),
    "gpus_per_node": ("gpus_per_node", int, "a whole number"),
    "nodes": ("nodes", int, "a whole number"),
    "time_limit": ("time_limit_min", int, "a whole number of minutes"),
    "max_jobs": ("max_jobs", int, "a whole number"),
    "python": ("python", str, "the path of a Python interpreter on the nodes"),
    "setup": ("setup", list, "a list of shell lines"),
    "sbatch_args": ("sbatch_args", list, "a list of sbatch options"),
    "slurm_conf": ("slurm_conf", str, "the path of a slurm.conf"),
    "poll_seconds": ("poll_s", float, "a number of seconds"),
    "max_lost": ("max_lost", int, "a whole number"),
}


def config_path(explicit: str | None, env: Mapping[str, str]) -> tuple[Path | None, bool]:
    """The settings file to read and whether it was named (a named one must exist): the
    explicit path, else $CUCO_SLURM_CONFIG, else ~/.config/cuco/slurm.toml."""
    if explicit:
        return Path(explicit).expanduser(), True
    if env.get(CONFIG_ENV):
        return Path(env[CONFIG_ENV]).expanduser(), True
    base = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else Path.home() / ".config"
    return base / "cuco" / "slurm.toml", False


def read_file(path: Path) -> dict[str, Any]:
    """The settings a TOML file holds, as SlurmSettings field values."""
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise SlurmSettingsError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise SlurmSettingsError(f"{path}: not valid TOML ({exc})") from None
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key not in _KEYS:
            raise SlurmSettingsError(f"{path}: unknown setting {key!r} (known: {', '.join(_KEYS)})")
        name, kind, words = _KEYS[key]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise SlurmSettingsError(f"{path}: {key} must be {words}, not {value!r}")
        if kind is list:
            if not all(isinstance(v, str) for v in value):
                raise SlurmSettingsError(f"{path}: {key} must be {words} (strings), not {value!r}")
            value = tuple(value)
        values[name] = value
    return values


def load_settings(explicit: str | None = None, env: Mapping[str, str] | None = None,
                  overrides: Mapping[str, Any] | None = None) -> SlurmSettings:
    """The settings file's values (see config_path), then `overrides` (the command line's,
    None values left out) on top."""
    env = os.environ if env is None else env
    path, named = config_path(explicit, env)
    values: dict[str, Any] = {}
    if path is not None and (named or path.exists()):
        if not path.is_file():
            raise SlurmSettingsError(f"no Slurm settings file at {path}")
        values = read_file(path)
    values.update({k: v for k, v in (overrides or {}).items() if v is not None})
    unknown = set(values) - {f.name for f in fields(SlurmSettings)}
    if unknown:  # a caller's mistake, not the user's
        raise TypeError(f"unknown Slurm settings: {', '.join(sorted(unknown))}")
    try:
        return SlurmSettings(**values)
    except SlurmSettingsError as exc:
        if path is not None and path.is_file():
            raise SlurmSettingsError(f"{exc} (with the settings of {path})") from None
        raise
