"""ParallelKernelBench's reference problems imported as PyTorch programs (issue 33, item 6).

    python3 benchmarks/parallelkernelbench.py /tmp/pkb [--problems 1-20,33] [--worlds 2,4]
    python3 benchmarks/parallelkernelbench.py /tmp/pkb --table-only --gpu-results OUT [--world 2] [--device TEXT]
    python3 benchmarks/parallelkernelbench.py /tmp/pkb --table-only --reference-results OUT

ParallelKernelBench (github.com/togethercomputer/ParallelKernelBench, "PKB") holds each problem as
reference/<id>_<name>.py with a `solution(*inputs)` run on every rank under torch.distributed; its
inputs come from one function of the harness, utils/input_output_tensors.py
`create_input_tensor(rank, world_size, problem_id, base_shape=(M, N), dtype, trial, device)`.
Given a local clone (kept outside this repository: nothing of it is copied here), this script:

1. introspects every problem's inputs in a process of its own (`--introspect`): PKB's
   create_input_tensor under torch.distributed's fake process group, on the meta device (else the
   CPU), at both shapes, world sizes 2, 4 and 8 and every rank, each argument classed as a tensor,
   a constant (a plain value equal at every call: an epsilon, a block size, None) or something else
   (a process group, a list of tensors, a module, a value that changes with the shape or world);
2. writes an adapter per problem into the scratch folder: SHAPES (verify M=N=256, bench PKB's
   default M=N=1024), make_inputs(rank, world, *, M, N, dtype, device) calling PKB's own
   create_input_tensor (its trial drawn from torch's generator, so that the caller's seed gives fresh
   inputs), solution calling the problem's own solution; constants are held by the adapter, not
   passed as inputs. A problem with arguments of the third kind gets them as make_inputs gives them,
   and `cuco workload import` says in one line why it cannot take them;
3. runs `cuco workload import ADAPTER --world W` and `cuco workload check --no-compile` per problem and
   world size (a process group each, killed whole at the timeout), and records per problem: imported
   or the one-line refusal, the CPU check (float64 under gloo), the pattern the importer names;
4. keeps every result in SCRATCH/results.json (runs of subsets add to it) and writes the table of
   every problem of the clone to docs/parallelkernelbench.md (pkb_table.py). Its GPU columns come
   from the folder of a device call of benchmarks/runs/pkb_gemm.sh, read with `--gpu-results DIR`
   (pkb_gpu.py) and kept in results.json too; `--table-only` writes the table from what is kept, and
   refuses to overwrite a table that shows results the kept ones lack.

An import or check that ends in a Python traceback is a bug of cuco-tui: the table says "crash" and
the script exits 1."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "benchmarks"), str(REPO)]  # this checkout's cuco_tui, whatever is installed
from pkb_gpu import read_run, store_gpu  # noqa: E402  (the GPU columns, from a device call's folder)
from pkb_reference import read_reference_run, store_reference  # noqa: E402  (the reference on GPU)
from pkb_table import lost_from, render_table  # noqa: E402  (the table's words)

SCRATCH = Path("/tmp/cuco-pkb")
TABLE = REPO / "docs" / "parallelkernelbench.md"
SHAPES = {"verify": {"M": 256, "N": 256}, "bench": {"M": 1024, "N": 1024}}
INTROSPECT_WORLDS = (2, 4, 8)  # the world sizes the importer sizes a program at
TIMEOUT = 180.0  # seconds an import or a check may take (a problem's whole run is bounded by 3 of them)
_PROBLEM_FILE = re.compile(r"^(\d+)_(\w+)\.py$")


@dataclass(frozen=True)
class Problem:
    id: int
    stem: str  # "12_allgather_gemm"
    path: Path


def discover(pkb: Path) -> list[Problem]:
    """The reference problems of a PKB clone, by id."""
    ref = Path(pkb) / "reference"
    if not (ref.is_dir() and (Path(pkb) / "utils" / "input_output_tensors.py").is_file()):
        raise SystemExit(f"{pkb}: not a ParallelKernelBench clone (no reference/ and utils/input_output_tensors.py)")
    found = [Problem(int(m.group(1)), p.stem, p) for p in ref.iterdir() if (m := _PROBLEM_FILE.match(p.name))]
    return sorted(found, key=lambda p: p.id)


def parse_ids(text: str) -> set[int]:
    """`1-20,33` -> {1, ..., 20, 33}."""
    ids: set[int] = set()
    for part in filter(None, (p.strip() for p in text.split(","))):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise SystemExit(f"--problems {text!r}: give ids and ranges, e.g. 1-20,33")
        ids.update(range(int(lo), int(hi or lo) + 1))
    return ids


# -- 1. introspection (runs in a process of its own, with torch) --------------------------------

def _plain(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, float, str)):
        return True
    return isinstance(value, (list, tuple)) and type(value) in (list, tuple) and all(_plain(v) for v in value)


def _kind(value: Any) -> str:
    import torch

    if isinstance(value, torch.Tensor):
        return "tensor"
    return "plain" if _plain(value) else type(value).__name__


def introspect_problem(pkb: Path, problem: Problem) -> dict[str, Any]:
    """{"params": solution's parameter names or None, "args": [{"kind", "value"?}], "device", "error"?}."""
    import inspect

    import torch
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if str(pkb) not in sys.path:
        sys.path.insert(0, str(pkb))
    from utils.input_output_tensors import create_input_tensor

    out: dict[str, Any] = {"params": None}
    try:
        module = _load(problem.path, f"pkb_reference_{problem.id}")
        params = list(inspect.signature(module.solution).parameters.values())
        if all(p.kind == p.POSITIONAL_OR_KEYWORD for p in params):
            out["params"] = [p.name for p in params]
    except Exception as exc:  # noqa: BLE001 - PKB's module: report, go on with the next problem
        return {**out, "error": f"loading it failed: {type(exc).__name__}: {_first_line(exc)}"}
    calls: list[tuple] = []
    for device in ("meta", "cpu"):
        calls, out["device"] = [], device
        try:
            for world in INTROSPECT_WORLDS:
                for rank in range(world):
                    if dist.is_initialized():
                        dist.destroy_process_group()
                    dist.init_process_group("cpu:fake,meta:fake", store=FakeStore(), rank=rank, world_size=world)
                    for dims in SHAPES.values():
                        made = create_input_tensor(rank, world, problem.id, (dims["M"], dims["N"]), torch.float32,
                                                   trial=0, device=device)
                        calls.append(tuple(made) if isinstance(made, (tuple, list)) else (made,))
            out.pop("error", None)
            break
        except Exception as exc:  # noqa: BLE001 - PKB's input builder: try the next device, else report
            out["error"] = f"create_input_tensor on {device} failed: {type(exc).__name__}: {_first_line(exc)}"
    if dist.is_initialized():
        dist.destroy_process_group()
    if "error" in out or len({len(c) for c in calls}) != 1:
        out.setdefault("error", "create_input_tensor gives a different number of inputs by rank or shape")
        return out
    args = []
    for i in range(len(calls[0])):
        kinds = {_kind(c[i]) for c in calls}
        if kinds == {"tensor"}:
            args.append({"kind": "tensor"})
        elif kinds == {"plain"} and all(c[i] == calls[0][i] and repr(c[i]) == repr(calls[0][i]) for c in calls):
            args.append({"kind": "constant", "value": repr(calls[0][i])})
        else:
            varies = " (varies with the shape, world size or rank)" if kinds == {"plain"} else ""
            args.append({"kind": "other", "what": "/".join(sorted(kinds)) + varies})
    out["args"] = args
    return out


def _load(path: Path, name: str) -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0][:200]


def _introspect_main(pkb: str, ids: str, out: str) -> int:
    """`--introspect PKB IDS OUT.json`: every problem of IDS, each bounded by an alarm."""
    import warnings

    warnings.simplefilter("ignore")
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    wanted = parse_ids(ids)
    report: dict[str, Any] = {}

    def expired(*_: Any) -> None:
        raise TimeoutError("building its inputs took over 60 s")

    signal.signal(signal.SIGALRM, expired)
    for problem in discover(Path(pkb)):
        if problem.id in wanted:
            signal.alarm(60)
            try:
                report[str(problem.id)] = introspect_problem(Path(pkb), problem)
            except Exception as exc:  # noqa: BLE001 - one problem's failure is its row, not the run's
                report[str(problem.id)] = {"params": None, "error": f"{type(exc).__name__}: {_first_line(exc)}"}
            finally:
                signal.alarm(0)
    Path(out).write_text(json.dumps(report, indent=1))
    return 0


def introspect(pkb: Path, problems: list[Problem], scratch: Path, timeout: float) -> dict[str, Any]:
    out = scratch / "introspection.json"
    ids = ",".join(str(p.id) for p in problems)
    _run([sys.executable, str(Path(__file__).resolve()), "--introspect", str(pkb), ids, str(out)], timeout)
    if not out.exists():
        raise SystemExit("introspecting PKB's inputs failed (run it alone: --introspect PKB IDS OUT.json)")
    return json.loads(out.read_text())


# -- 2. the adapter -------------------------------------------------------------------------------

def adapter_text(pkb: Path, problem: Problem, info: dict[str, Any]) -> str:
    """The program of `problem` in cuco's convention (SHAPES, make_inputs, solution)."""
    args = info.get("args")
    adaptable = bool(args) and all(a["kind"] in ("tensor", "constant") for a in args) and \
        any(a["kind"] == "tensor" for a in args)
    head = (f'"""ParallelKernelBench problem {problem.id} ({problem.stem}) in cuco\'s program convention, written by\n'
            f'benchmarks/parallelkernelbench.py: its inputs are PKB\'s (utils/input_output_tensors.py\n'
            f'create_input_tensor at base shape (M, N)), its solution reference/{problem.path.name}\'s."""\n'
            f"import importlib.util\nimport sys\n\nimport torch\n\nPKB = {str(Path(pkb).resolve())!r}\n"
            f"if PKB not in sys.path:\n    sys.path.insert(0, PKB)\n"
            f"from utils.input_output_tensors import create_input_tensor  # noqa: E402\n\n"
            f"_spec = importlib.util.spec_from_file_location('pkb_reference_{problem.id}', "
            f"PKB + '/reference/{problem.path.name}')\n_reference = importlib.util.module_from_spec(_spec)\n"
            f"_spec.loader.exec_module(_reference)\n\nPROBLEM = {problem.id}\nSHAPES = {SHAPES!r}\n")
    constants = {i: a["value"] for i, a in enumerate(args or []) if a["kind"] == "constant"} if adaptable else {}
    held = ", ".join(f"{i}: {v}" for i, v in constants.items())
    head += ("# PKB's inputs that are the same plain value at every shape, world size and rank: held here,\n"
             f"# passed to the reference's solution in their places.\nCONSTANTS = {{{held}}}\n"
             if adaptable else f"# PKB's inputs as they are: {_other(info)}\n")
    make = ("\n\ndef make_inputs(rank, world, *, M, N, dtype=torch.bfloat16, device=\"cuda\"):\n"
            "    # PKB seeds torch from the problem, the rank and a trial; the trial comes from torch's generator,\n"
            "    # which the caller seeded, so that each seed of the caller gives other inputs.\n"
            "    trial = int(torch.randint(0, 1 << 20, ()).item())\n"
            "    made = create_input_tensor(rank, world, PROBLEM, (M, N), dtype, trial=trial, device=device)\n")
    if not adaptable:
        return head + make + "    return made\n\n\nsolution = _reference.solution\n"
    make += "    return tuple(x for i, x in enumerate(made) if i not in CONSTANTS)\n"
    params = info.get("params")
    # solution's own parameter names (those past PKB's inputs have defaults), else *inputs
    names = [n for i, n in enumerate(params[:len(args)]) if i not in constants] \
        if params and len(params) >= len(args) else None
    call = ", ".join(f"CONSTANTS[{i}]" if i in constants else
                     (names[sum(1 for j in range(i) if j not in constants)] if names else
                      f"inputs[{sum(1 for j in range(i) if j not in constants)}]") for i in range(len(args)))
    sig = ", ".join(names) if names else "*inputs"
    # no @torch.no_grad() here: the reference sets its own grad mode (PKB's DDP and ZeRO steps use autograd)
    return head + make + f"\n\ndef solution({sig}):\n    return _reference.solution({call})\n"


def _other(info: dict[str, Any]) -> str:
    if "error" in info:
        return f"introspection could not build them ({info['error']})"
    kinds = [f"input {i}: {a['what']}" for i, a in enumerate(info.get("args") or []) if a["kind"] == "other"]
    return "; ".join(kinds) or "no tensor among them"


# -- 3. import and check ------------------------------------------------------------------------

@dataclass
class Outcome:
    """One problem at one world size."""
    imported: str = ""  # "yes", or "refused: <the one line>", "crash: ...", "timed out after N s"
    check: str = ""  # "passed", "failed: <first error>", "crash: ...", "" when not imported
    pattern: str = ""  # what the importer named: "all-gather → matmul (mapped)", "none"
    seconds: float = 0.0


@dataclass
class Result:
    id: int
    stem: str
    inputs: str  # what the adapter did with PKB's inputs
    worlds: dict[str, Outcome] = field(default_factory=dict)


def _run(cmd: list[str], timeout: float, env: dict[str, str] | None = None) -> tuple[int | None, str, str]:
    """(exit status or None at the timeout, stdout, stderr); the command's whole process group is
    killed at the timeout (the importer's gloo ranks with it)."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        return None, out, err
    except BaseException:  # interrupted: the command's processes go with this one
        os.killpg(proc.pid, signal.SIGKILL)
        raise


def _cuco_env() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="10000", CUCO_NO_GPU="1")
    env.pop("ANTHROPIC_API_KEY", None)
    return env


def _failure(rc: int | None, err: str, timeout: float) -> str:
    if rc is None:
        return f"timed out after {timeout:.0f} s"
    lines = [line for line in err.strip().splitlines() if line.strip()]
    if "Traceback (most recent call last)" in err or rc not in (0, 1, 2):
        return f"crash: {lines[-1] if lines else f'exit {rc}'}"
    if len(lines) != 1:
        return f"crash: {len(lines)} lines on stderr, the last: {lines[-1] if lines else ''}"
    return "refused: " + lines[0].removeprefix("cuco: ")


def pattern_of(stdout: str) -> str:
    """The pattern the importer named: `pattern: all-gather → matmul: mapped (...)` -> "all-gather →
    matmul (mapped)"; `pattern: none ...` -> "none"."""
    found = []
    for line in stdout.splitlines():
        if not line.startswith("pattern: "):
            continue
        text = line.removeprefix("pattern: ")
        if text.startswith("none"):
            return "none"
        m = re.match(r"(.+?): (mapped|not mapped) \((.*)\)$", text)
        found.append(f"{m.group(1)} ({m.group(2)}{': ' + m.group(3) if m and m.group(2) == 'not mapped' else ''})"
                     if m else text)
    return "; ".join(found) or "none"


def import_and_check(adapter: Path, problem: Problem, world: int, scratch: Path, timeout: float,
                     check: bool = True) -> Outcome:
    """The import at `world` and, when it imports and `check`, `cuco workload check --no-compile`."""
    name = f"pkb{problem.id}_w{world}"
    parent = scratch / "workloads"
    root = parent / name
    if root.exists():
        import shutil

        shutil.rmtree(root)
    cli = [sys.executable, "-m", "cuco_tui.cli", "workload"]
    start = time.monotonic()
    rc, out, err = _run(cli + ["import", str(adapter), "--world", str(world), "--name", name, "--dir", str(parent)],
                        timeout, _cuco_env())
    outcome = Outcome()
    if rc != 0:
        outcome.imported = _failure(rc, err, timeout)
    else:
        outcome.imported, outcome.pattern = "yes", pattern_of(out)
    if outcome.imported == "yes" and check:
        rc, out, err = _run(cli + ["check", str(root), "--no-compile", "--json"], timeout, _cuco_env())
        if rc is None or rc not in (0, 1):
            outcome.check = _failure(rc, err, timeout) if rc != 2 else "failed: " + err.strip()
        else:
            errors = [f for f in json.loads(out) if f["level"] == "error"]
            outcome.check = "passed" if not errors else f"failed: {errors[0]['item']}: {errors[0]['detail']}"
    outcome.seconds = round(time.monotonic() - start, 1)
    return outcome


# -- 4. results and the table -------------------------------------------------------------------

def load_results(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.is_file() else {"problems": {}}


def save_result(path: Path, results: dict[str, Any], result: Result) -> None:
    results["problems"][str(result.id)] = asdict(result)
    save_results(path, results)


def save_results(path: Path, results: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(results, indent=1, ensure_ascii=False))
    os.replace(tmp, path)


def pkb_commit(pkb: Path) -> str:
    """The clone's commit: its own git's HEAD, else the COMMIT file that a copy without .git
    carries (benchmarks/runs/pkb_gemm.sh), else "". A copy without .git inside another repository
    (.whl/pkb in a checkout) must not give that repository's commit."""
    def git(*cmd: str) -> str:
        done = subprocess.run(["git", "-C", str(pkb), *cmd], capture_output=True, text=True, check=False)
        return done.stdout.strip() if done.returncode == 0 else ""

    top = git("rev-parse", "--show-toplevel")
    if top and Path(top).resolve() == Path(pkb).resolve():
        return git("rev-parse", "HEAD")
    stamp = Path(pkb) / "COMMIT"
    return stamp.read_text().strip() if stamp.is_file() else ""


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("pkb", type=Path, help="a local clone of ParallelKernelBench (kept outside this repository)")
    p.add_argument("--problems", default="", help="ids to run, e.g. 1-20,33 (default: every problem); results of "
                                                  "earlier runs are kept")
    p.add_argument("--worlds", default="2,4", help="world sizes to import at (default 2,4)")
    p.add_argument("--scratch", type=Path, default=SCRATCH, help=f"adapters, workloads, results (default {SCRATCH})")
    p.add_argument("--timeout", type=float, default=TIMEOUT, help=f"seconds per import and per check (default "
                                                                    f"{TIMEOUT:g})")
    p.add_argument("--table", type=Path, default=TABLE, help="the Markdown table to write (default docs/...)")
    p.add_argument("--table-only", action="store_true", help="write the table from the results kept, run nothing")
    p.add_argument("--gpu-results", type=Path, metavar="DIR",
                   help="the GPU columns: the $OUT folder of a device call of benchmarks/runs/pkb_gemm.sh\n"
                        "(seed_ID.txt, show_ID.txt, ...), kept with the results (calls add up)")
    p.add_argument("--reference-results", type=Path, metavar="DIR",
                   help="the column 'reference against float64 on GPU': the $OUT folder of a device call of\n"
                        "benchmarks/runs/pkb_refcheck.sh (reference_ID_wW.json), kept with the results")
    p.add_argument("--world", type=int, help="that call's world size (default: what its folder says)")
    p.add_argument("--device", default="", help="that call's machine and date, as the table names it (default: what\n"
                                                "its run.txt or its cuco show says)")
    args = p.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill takes the imports' processes with it
    problems = discover(args.pkb)
    chosen = [] if args.table_only else [q for q in problems if q.id in parse_ids(args.problems)] \
        if args.problems else problems
    worlds = [int(w) for w in args.worlds.split(",") if w.strip()]
    scratch = args.scratch.resolve()
    if scratch == REPO or REPO in scratch.parents:
        raise SystemExit(f"--scratch {scratch}: keep it outside the repository (it imports PKB's code)")
    store = scratch / "results.json"
    results = load_results(store)
    # Nothing is written until the flags, the GPU folder and the table's results are found good.
    if (args.world is not None or args.device) and args.gpu_results is None:
        raise SystemExit("--world and --device go with --gpu-results (the folder of a device call of "
                         "benchmarks/runs/pkb_gemm.sh)")
    on_gpu = []
    if args.gpu_results is not None:
        if args.world is not None and args.world not in worlds:
            raise SystemExit(f"--world {args.world} is not among --worlds {args.worlds}: the table has no column "
                             f"for it")
        try:
            on_gpu = read_run(args.gpu_results, args.world, args.device)
        except ValueError as exc:
            raise SystemExit(str(exc)) from None
        if on_gpu and on_gpu[0].world not in worlds:
            raise SystemExit(f"{args.gpu_results} is a call at W={on_gpu[0].world}, not among --worlds {args.worlds}")
    on_gpu_ref = []
    if args.reference_results is not None:
        try:
            on_gpu_ref = read_reference_run(args.reference_results)
        except ValueError as exc:
            raise SystemExit(str(exc)) from None
    lost = lost_from(args.table, results, {q.id for q in chosen}, {p.id for p in on_gpu})
    if lost:
        raise SystemExit(f"{args.table} shows {lost} that {store} lacks: writing it would lose them (give the "
                         f"--scratch that holds them, or another --table)")
    (scratch / "adapters").mkdir(parents=True, exist_ok=True)
    results["pkb_commit"] = pkb_commit(args.pkb) or results.get("pkb_commit") or "unknown"
    if on_gpu:
        store_gpu(results, on_gpu)
    if on_gpu_ref:
        store_reference(results, on_gpu_ref)
    if on_gpu or on_gpu_ref:
        save_results(store, results)
    info = introspect(args.pkb, chosen, scratch, timeout=60.0 * len(chosen) + 120) if chosen else {}
    crashed = 0
    for q in chosen:
        found = info.get(str(q.id), {"error": "introspection gave nothing"})
        adapter = scratch / "adapters" / f"pkb{q.id}.py"
        adapter.write_text(adapter_text(args.pkb, q, found))
        args_ = found.get("args") or []
        held = [a["value"] for a in args_ if a["kind"] == "constant"]
        inputs = (_other(found) if "error" in found or any(a["kind"] == "other" for a in args_) else
                  f"{sum(a['kind'] == 'tensor' for a in args_)} tensors" + (f", constants {', '.join(held)}"
                                                                              if held else ""))
        result = Result(q.id, q.stem, inputs)
        for w in worlds:
            # The check probes the reference at the folder's smallest world size whatever the import's:
            # once a problem, on the first folder that imports (it costs as much as an import).
            checked = any(o.check for o in result.worlds.values())
            outcome = import_and_check(adapter, q, w, scratch, args.timeout, check=not checked)
            result.worlds[str(w)] = outcome
            crashed += outcome.imported.startswith("crash") or outcome.check.startswith("crash")
            print(f"{q.stem} W={w}: {outcome.imported}; check {outcome.check or '-'}; pattern "
                  f"{outcome.pattern or '-'} ({outcome.seconds:.0f} s)", flush=True)
        save_result(store, results, result)
    command = " ".join(["python3 benchmarks/parallelkernelbench.py", str(args.pkb)]
                       + ([f"--worlds {args.worlds}"] if args.worlds != "2,4" else [])
                       + ([f"--timeout {args.timeout:g}"] if args.timeout != TIMEOUT else []))
    args.table.write_text(render_table(problems, results, worlds, command, datetime.date.today().isoformat(),
                                       str(args.pkb), SHAPES))
    gpu = f"; GPU results of {len(on_gpu)} problems at W={on_gpu[0].world} from {args.gpu_results}" if on_gpu \
        else ""
    gpu += f"; the reference on GPU of {len(on_gpu_ref)} folders from {args.reference_results}" if on_gpu_ref else ""
    print(f"wrote {args.table} ({len(results['problems'])} of {len(problems)} problems run{gpu}; results in {store})")
    return 1 if crashed else 0


if __name__ == "__main__":
    sys.exit(_introspect_main(*sys.argv[2:]) if sys.argv[1:2] == ["--introspect"] else main())
