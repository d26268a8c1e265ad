"""What the `cuco` subcommands and `cuco-tui` share: reading --gpus, --workload and --share-gpu
into values (a bad one is a `UsageError`, one sentence, exit 2), the search settings the command
line gives, where a search's evaluations run (--executor local|slurm and the Slurm options), the
console for stdout, and how a cascade result is shown."""

from __future__ import annotations

import argparse
import io
import math
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from cuco_tui.core.errors import UsageError
from cuco_tui.core.bounds import all_figures
from cuco_tui.core.noise import speedup_of
from cuco_tui.core.result import CascadeResult, Status
from cuco_tui.core.workload import DEFAULT_WORKLOAD, Workload, WorkloadError
from cuco_tui.harness.gpus import GpuNamedTwice, parse_gpu_list
from cuco_tui.workload.manifest import REPO_WORKLOADS, load_workload

if TYPE_CHECKING:  # the executors import the cascade: only `--executor slurm` needs them at run time
    from cuco_tui.executors import Executor

DEFAULT_GENERATIONS = 10
DEFAULT_CLAUDE_BUDGET = 5.0

WORKLOAD_HELP = ("the workload: a name (`cuco workloads` lists them) or a workload's folder "
                 f"(default {DEFAULT_WORKLOAD})")
SHARE_GPU_HELP = ("run every rank on one GPU (the one --gpus names, else 0; --world ranks, else the workload's "
                  "smallest world): checks correctness on a machine with fewer GPUs than ranks; times nothing")
SHARE_GPU_HINT = "with fewer GPUs, --share-gpu checks correctness with every rank on one GPU (nothing timed)"
# After a GPU named twice: a command with --share-gpu names it; one without (cuco-tui, search,
# baseline) points to the command that has it.
_SHARE_GPU_HERE = " (--share-gpu puts every rank on one GPU)"
_SHARE_GPU_ELSEWHERE = " (to check a candidate with every rank on one GPU: `cuco eval CANDIDATE --share-gpu`)"

STATUS_STYLE = {
    Status.MEASURED: "bold green",
    Status.VERIFIED: "bold dark_sea_green",  # correct, nothing timed
    Status.NO_GPU: "bold cyan",
    Status.REJECTED: "bold magenta",
    Status.COMPILE_ERROR: "bold red",
    Status.RUNTIME_ERROR: "bold red",
    Status.DEADLOCK: "bold red",
    Status.INCORRECT: "bold yellow",
}


# ---------------------------------------------------------------------------- options


def gpu_list(text: str | None, offers_share_gpu: bool = False) -> list[int] | None:
    """--gpus as indices (None when not given): a GPU named twice, or one this machine does not
    have, is a usage error; on a machine with no usable GPU a warning says that nothing will run.
    `offers_share_gpu`: the command has --share-gpu, which the refusal of a GPU named twice may suggest."""
    if text is None:
        return None
    from cuco_tui.harness.gpus import inventory, missing_gpus  # looked up when asked: tests stand in GPUs

    gpus = _parsed(text, offers_share_gpu)
    inv = inventory()
    absent = missing_gpus(gpus, inv)
    if absent:
        raise UsageError(absent)
    if not inv.count:
        print(f"cuco: warning: --gpus {text} cannot be checked here ({inv.problem or 'no usable GPU'}); "
              f"candidates are compiled, not run", file=sys.stderr)
    return gpus


def _parsed(text: str, offers_share_gpu: bool) -> list[int]:
    try:
        return parse_gpu_list(text)
    except GpuNamedTwice as exc:
        raise UsageError(str(exc) + (_SHARE_GPU_HERE if offers_share_gpu else _SHARE_GPU_ELSEWHERE)) from exc
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def workload_named(name: str) -> Workload:
    """--workload: a workload's name or folder. A folder or file that is none is refused as such:
    load_workload's "no workload" would read as a name it does not know."""
    try:
        return load_workload(name)
    except WorkloadError as exc:
        given = Path(name)
        shipped = (REPO_WORKLOADS / name / "manifest.toml").is_file()
        if given.is_dir() and not shipped and not (given / "manifest.toml").is_file():
            raise UsageError(f"{name} is a folder without a manifest.toml, so no workload: give a workload's folder "
                             f"(`cuco workload new NAME` makes one) or a name (`cuco workloads` lists them)") from exc
        if given.is_file() and not shipped:
            raise UsageError(f"{name} is a file, not a workload: give a workload's folder (the one holding "
                             f"manifest.toml) or a name (`cuco workloads` lists them)") from exc
        raise UsageError(str(exc)) from exc


def workload_of_file(path: Path) -> Path | None:
    """The workload folder (one holding manifest.toml) a candidate file lies in, looking up from it:
    a workload's seed, templates' renders or faults need no --workload."""
    for folder in Path(path).resolve().parents:
        if (folder / "manifest.toml").is_file():
            return folder
    return None


def workload_root(name: str) -> Path | None:
    """The folder of the workload `name` names (a name or a folder), resolved; None where it names
    none here."""
    try:
        return workload_named(name).root.resolve()
    except UsageError:
        return None


def check_group(workload: Workload, args: argparse.Namespace) -> None:
    """--world, and the count of --gpus, against the world sizes the workload's manifest lists
    (and its shapes' divisibility), before anything is compiled: a cascade would otherwise
    compile first and, without a GPU, never look at them. With --share-gpu, --gpus names the one
    GPU every rank shares, so only --world counts."""
    world = getattr(args, "world", None)
    gpus = _parsed(args.gpus, hasattr(args, "share_gpu")) if getattr(args, "gpus", None) else None
    shared = getattr(args, "share_gpu", False)
    if world is not None:
        _check_world(workload, world, f"--world {world}")
    if gpus is not None and not shared:
        if world is not None and world != len(gpus):
            raise UsageError(f"--world {world} and --gpus {args.gpus} ({len(gpus)} GPUs) disagree: give one of them")
        _check_world(workload, len(gpus), f"--gpus {args.gpus} names {len(gpus)} GPU{'s' if len(gpus) > 1 else ''}")


def _check_world(workload: Workload, world: int, given: str) -> None:
    try:
        workload.check_world(world)
    except WorkloadError as exc:
        raise UsageError(f"{given}: {exc}") from exc


def bench_shapes(workload: Workload, text: str | None) -> tuple[str, ...]:
    """--shapes as bench shape names of `workload`; a name it lacks is refused, naming those it has,
    and so is an empty name (`--shapes ,` or `--shapes ""`), which would otherwise mean every shape."""
    if text is None:
        return ()
    known = [s.name for s in workload.bench_shapes]
    names = tuple(s.strip() for s in text.split(","))
    if not all(names):
        raise UsageError(f"--shapes {text!r} has an empty name: give comma-separated bench shape names of "
                         f"{workload.name} ({', '.join(known)}), or drop --shapes to measure them all")
    for name in names:
        if name not in known:
            raise UsageError(f"--shapes: {workload.name} has no bench shape {name!r}; its bench shapes are "
                             f"{', '.join(known)}")
    return names


def share_gpu_asked(args: argparse.Namespace) -> bool:
    """--share-gpu, refused where it cannot mean what it says."""
    if not args.share_gpu:
        return False
    if args.gpus and len(_parsed(args.gpus, True)) > 1:
        raise UsageError("--share-gpu puts every rank on one GPU: name one with --gpus, e.g. --gpus 0")
    if getattr(args, "shapes", None):
        raise UsageError("--share-gpu checks correctness only and times nothing: drop --shapes")
    return True


def share_gpu_hint(workload: Workload, options: Any) -> str:
    """The --share-gpu hint, where this machine has GPUs but fewer than the group asked for.
    `options` is the cascade's EvalOptions."""
    from cuco_tui.harness.gpus import inventory  # looked up when asked: tests stand in a machine's GPUs

    if options.share_gpu:
        return ""
    needed = len(options.gpus) if options.gpus else (options.world or min(workload.world_sizes))
    return SHARE_GPU_HINT if 0 < inventory().count < needed else ""


def config_overrides(args: argparse.Namespace, agent_kind: str, keys: tuple[str, ...]) -> dict[str, Any]:
    """The SearchConfig fields the command line sets (`keys` given as flags, --gpus, --budget),
    shared by `cuco search` and `cuco-tui`; a new Claude session gets the default dollar cap."""
    overrides = {k: getattr(args, k) for k in keys if getattr(args, k) is not None}
    if "generations" in overrides and overrides["generations"] < 1:  # a search that would search nothing
        raise UsageError(f"--generations counts the generations after the seed's (generation 0, which every search "
                         f"evaluates first): give 1 or more, not {overrides['generations']}")
    if "evaluations" in overrides and overrides["evaluations"] < 1:
        raise UsageError(f"--evaluations is the number of candidates to evaluate: give 1 or more, "
                         f"not {overrides['evaluations']}")
    if args.gpus is not None:  # checked against this machine by gpu_list, which every command calls
        overrides["gpus"] = tuple(_parsed(args.gpus, False))
    if args.budget is not None:
        overrides["budget_usd"] = args.budget
    elif agent_kind == "claude" and not args.resume:
        overrides["budget_usd"] = DEFAULT_CLAUDE_BUDGET
    return overrides


def positive_seconds(text: str) -> float:
    """An argparse type for a time limit: a finite number of seconds above 0 (NaN would pass a
    `<= 0` check, and a limit of NaN or inf never ends a wait)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number of seconds, not {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"a number of seconds above 0, not {text!r}")
    return value


def dollars(text: str) -> float:
    """An argparse type for a budget: a finite number of dollars, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a number of dollars, not {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"a number of dollars, 0 or more, not {text!r}")
    return value


class IntermixedParser(argparse.ArgumentParser):
    """A subcommand's parser that takes options and positionals in any order (`cuco show S --json
    c0011`): plain argparse matches an optional positional (nargs="?") at the first positional and
    leaves it empty when an option comes between. Parsers of subcommands of their own (`cuco
    workload`), which intermixed parsing does not support, parse as usual."""

    _intermixing = False

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]
        nested = any(a.nargs in (argparse.PARSER, argparse.REMAINDER) for a in self._get_positional_actions())
        if nested or self._intermixing:  # Python 3.11/3.12's intermixed parsing calls back in here
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False


# ---------------------------------------------------------------------------- pacing

def add_pacing_options(parser: argparse.ArgumentParser) -> None:
    """How a search keeps its GPUs fed and how many candidates it evaluates: `cuco search` and
    `cuco-tui` take the same flags, which set the SearchConfig fields of their names (a resumed
    search keeps its own unless given)."""
    parser.add_argument("--evaluations", type=int, metavar="N",
                        help="the session's total of candidates to evaluate (the seed included; re-measures "
                             "not counted): then no more are proposed, those in flight finish and the search "
                             "ends (default: the generations alone bound it); with --resume, it goes on up to N")
    parser.add_argument("--no-lookahead", dest="lookahead", action="store_false", default=None,
                        help="each generation waits for every result of the one before (default: the next "
                             "generation is proposed and built while the last evaluation of each GPU group still runs)")
    parser.add_argument("--keep-workers", dest="keep_workers", action=argparse.BooleanOptionalAction, default=None,
                        help="keep each GPU group's rank workers (CUDA context, NCCL group) from one evaluation to "
                             "the next instead of starting them for each; a failed run or a candidate that leaves "
                             "memory, threads or device limits behind ends them (default: on; --no-keep-workers "
                             "starts them for each evaluation)")


def check_pacing_options(args: argparse.Namespace) -> None:
    """--keep-workers where it cannot mean what it says is refused, not ignored."""
    if args.keep_workers and getattr(args, "executor", None) == "slurm":
        raise UsageError("--keep-workers keeps rank workers on this machine's GPUs; with --executor slurm each "
                         "evaluation is a job of its own: drop --keep-workers")


# ---------------------------------------------------------------------------- --executor

# --flag -> the SlurmSettings field it sets; each takes a value
SLURM_OPTIONS = {
    "--partition": "partition", "--account": "account", "--constraint": "constraint",
    "--time-limit": "time_limit_min", "--gpus-per-node": "gpus_per_node", "--nodes": "nodes",
    "--max-jobs": "max_jobs",
}
_COUNTS = ("time_limit_min", "gpus_per_node", "nodes", "max_jobs")


def add_executor_options(parser: argparse.ArgumentParser) -> None:
    """--executor and the Slurm options, for `cuco search` and `cuco-tui`."""
    parser.add_argument("--executor", choices=("local", "slurm"), default="local",
                        help="where evaluations run: this machine's GPUs (local, the default) or one Slurm job "
                             "each (slurm; settings from --slurm-config, else ~/.config/cuco/slurm.toml)")
    group = parser.add_argument_group("Slurm (with --executor slurm)")
    group.add_argument("--slurm-config", metavar="FILE", help="the Slurm settings file (TOML; see the README)")
    group.add_argument("--partition", help="the partition to submit to (default: the cluster's default)")
    group.add_argument("--account", help="the account to charge")
    group.add_argument("--constraint", help="a node feature the jobs need, e.g. h100")
    group.add_argument("--time-limit", metavar="MINUTES",
                       help="each job's time limit (default: the cascade's own limits for the workload's shapes)")
    group.add_argument("--gpus-per-node", metavar="N", help="GPUs a job asks of its node (default: the world size)")
    group.add_argument("--nodes", metavar="N", help="nodes per evaluation (1: ranks share one node)")
    group.add_argument("--max-jobs", metavar="N", help="evaluations queued or running at once (default 4)")


def _count(flag: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{flag} takes a whole number, not {text!r}") from None
    if value < 1:
        raise UsageError(f"{flag} must be at least 1, not {value}")
    return value


def make_executor(args: argparse.Namespace, workload: Workload, world: int) -> Executor | None:
    """The executor --executor names for evaluations of `world` ranks of `workload`: None for the
    local pool (the scheduler plans it), else a SlurmExecutor whose settings and cluster were
    checked (partition, GPUs per node, time limit) with `sinfo`. Every problem is a UsageError."""
    given = {flag: getattr(args, field if field != "time_limit_min" else "time_limit")
             for flag, field in SLURM_OPTIONS.items()}
    given["--slurm-config"] = args.slurm_config
    if args.executor != "slurm":
        named = [flag for flag, value in given.items() if value is not None]
        if named:
            raise UsageError(f"{named[0]} is an option of --executor slurm (evaluations run locally here)")
        return None
    if getattr(args, "gpus", None) is not None:
        raise UsageError("--gpus names this machine's GPUs; with --executor slurm each job gets its GPUs from Slurm "
                         "(drop --gpus)")
    from cuco_tui.executors.slurm import SlurmExecutor
    from cuco_tui.executors.slurm_settings import SlurmSettingsError, load_settings
    from cuco_tui.executors.slurm_types import SlurmError

    overrides: dict[str, Any] = {}
    for flag, field in SLURM_OPTIONS.items():
        value = given[flag]
        if value is not None:
            overrides[field] = _count(flag, value) if field in _COUNTS else value
    from cuco_tui.evaluate.cascade import EvalOptions

    try:
        executor = SlurmExecutor(load_settings(args.slurm_config, overrides=overrides), world)
        executor.check(executor.limit_for(workload, EvalOptions(world=world)))
    except (SlurmSettingsError, SlurmError) as exc:
        raise UsageError(f"--executor slurm: {exc}") from exc
    return executor


# ---------------------------------------------------------------------------- output


class _Unpadded(io.TextIOBase):
    """A pipe or a file, written line by line without the spaces rich pads a table's cells with
    up to the console's width (a log or a diff of the output should hold only what was said)."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._line = ""  # the text of a line not yet ended

    @property
    def encoding(self) -> str:  # type: ignore[override]  # rich asks, to choose its box characters
        return getattr(self._out, "encoding", None) or "utf-8"

    def write(self, text: str) -> int:
        *whole, self._line = (self._line + text).split("\n")
        for line in whole:
            self._out.write(line.rstrip(" ") + "\n")
        return len(text)

    def flush(self) -> None:  # what is left of a line goes out as it is: more of it may follow
        if self._line:
            self._out.write(self._line)
            self._line = ""
        self._out.flush()


# Output to a pipe or a file is this wide unless COLUMNS says otherwise, so that tables keep one
# line per row instead of wrapping into the 80 columns rich assumes of a stream that is no terminal.
PIPED_WIDTH = 200


def _console(stream: TextIO, stderr: bool) -> Console:
    """Markup off: what is printed quotes TOML tables, C indexing and model replies (`[tolerance]`,
    `c[i]`, `:x:`), which rich would take for style tags and emoji codes; styles go through `Text`.
    A terminal is left to rich (its size, or COLUMNS); a pipe or a file gets COLUMNS when set, else
    PIPED_WIDTH, and no trailing spaces."""
    if stream.isatty():
        return Console(stderr=stderr, markup=False, emoji=False)
    columns = os.environ.get("COLUMNS", "")
    width = int(columns) if columns.isdigit() and int(columns) > 0 else PIPED_WIDTH
    return Console(file=_Unpadded(stream), width=width, markup=False, emoji=False)


def stdout_console() -> Console:
    """Rich output for stdout."""
    return _console(sys.stdout, stderr=False)


def stderr_console() -> Console:
    """Progress lines on stderr."""
    return _console(sys.stderr, stderr=True)


def render_result(result: CascadeResult) -> Group:
    head = Table.grid(padding=(0, 2))
    head.add_row("candidate", result.candidate)
    head.add_row("status", Text(result.status.value, style=STATUS_STYLE[result.status]))
    head.add_row("level", f"L{int(result.level)} ({result.level.name.lower()})")
    head.add_row("reason", result.reason)
    build = f"{result.build_seconds:.1f} s" + (" (cached)" if result.build_cached else "")
    head.add_row("build", build)
    if result.gpus:
        head.add_row("GPUs", f"{','.join(map(str, result.gpus))} (world {result.world}), run {result.run_seconds:.1f} s")
    if result.speedup is not None:
        reps = result.timings[0].candidate.n if result.timings else 0
        head.add_row("speedup", f"{speedup_of(result.speedup, result.timings).label()} the reference, geometric mean "
                                f"over {len(result.timings)} shape(s) (±: half the band of noise of {reps} "
                                f"repetitions a shape)")
    parts: list = [head]
    if result.diagnostics:
        parts.append(Panel("\n\n".join(d.render() for d in result.diagnostics), title="diagnostics", expand=False))
    if result.verifications:
        t = Table(title="verification", title_justify="left")
        for col in ("shape", "ok", "max rel err", "rel fro err", "unwritten", "non-finite", "worst element"):
            t.add_column(col)
        for v in result.verifications:
            t.add_row(v.shape, "yes" if v.ok else "NO", f"{v.max_rel_error:.3g}", f"{v.rel_fro_error:.3g}",
                      str(v.unwritten), str(v.nonfinite), v.worst)
        parts.append(t)
    if result.timings:
        t = Table(title="timings (ms, median of the slowest rank per repetition)", title_justify="left")
        for col in ("shape", "M,K,N", "reference", "candidate", "IQR %", "per-rank medians", "speedup"):
            t.add_column(col, justify="right" if col not in ("shape",) else "left")
        for s, f in zip(result.timings, all_figures(result.timings)):
            dims = ",".join(str(v) for v in s.dims.values())
            ranks = " ".join(f"{r.median:.3f}" for r in s.per_rank)
            t.add_row(f.shape, dims, f"{f.reference_ms:.3f}", f"{f.time_ms:.3f}", f"{f.iqr_pct:.1f}", ranks,
                      f.speedup_band.label())
        parts.append(t)
    if result.deadlock_report:
        parts.append(Panel(result.deadlock_report, title="deadlock report", expand=False))
    return Group(*parts)


def package_version() -> str:
    """The installed cuco-tui's version (`cuco --version`, `cuco-tui --version`)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("cuco-tui")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed: pip install -e .)"
