"""ParallelKernelBench's reference problems imported as PyTorch programs (issue 33, item 6).

    python3 benchmarks/parallelkernelbench.py /tmp/pkb [--problems 1-20,33] [--worlds 2,4]
    python3 benchmarks/parallelkernelbench.py /tmp/pkb --table-only --gpu-results OUT [--world 2] [--device TEXT]
    python3 benchmarks/parallelkernelbench.py /tmp/pkb --table-only --reference-results OUT

ParallelKernelBench (github.com/togethercomputer/ParallelKernelBench, "PKB") holds each problem as
reference/<id>_<name>.py with a `solution(*inputs)` run on every rank under torch.distributed; its
inputs come from one function of the harness, utils/input_output_tensors.py
`create_input_tensor(rank, world_size, problem_id, base_shape=(M, N), dtype, trial, device)`.
Given a local clone (kept outside this repository: nothing of it is copied here), this script:

1. introspects every problem's inputs in a process of its own (benchmarks/pkb_introspect.py): PKB's
   create_input_tensor under torch.distributed's fake process group, on the meta device (else the
   CPU), at both shapes, world sizes 2, 4 and 8, every rank and two trials, each argument classed as
   a tensor; a constant (a plain value equal at every call: an epsilon, a block size, None); the
   world's process group; an nn.Linear; a plain value that follows the world size, rank and shape but
   not the trial (split sizes, a token count); or something else (another process group, a list of
   tensors, another module, a value drawn at random);
2. writes an adapter per problem into the scratch folder: SHAPES (verify M=N=256, bench PKB's
   default M=N=1024), make_inputs(rank, world, *, M, N, dtype, device) calling PKB's own
   create_input_tensor (its trial drawn from torch's generator, so that the caller's seed gives fresh
   inputs), solution calling the problem's own solution. Constants are held by the adapter; the
   world group is given at call time; an nn.Linear's weight and bias are inputs, wrapped in a module
   again in solution; plain values that follow the world, rank and shape are held per
   "world/rank/MxN" and looked up in solution, which then takes M and N by keyword (the program
   convention gives them). A problem with arguments of the last kind gets them as make_inputs gives
   them, and `cuco workload import` says in one line why it cannot take them;
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


# -- 1. introspection (benchmarks/pkb_introspect.py, in a process of its own, with torch) -------

def introspect(pkb: Path, problems: list[Problem], scratch: Path, timeout: float,
               worlds: list[int]) -> dict[str, Any]:
    out = scratch / "introspection.json"
    ids = ",".join(str(p.id) for p in problems)
    _run([sys.executable, str(Path(__file__).resolve().parent / "pkb_introspect.py"), str(pkb), ids, str(out),
          ",".join(map(str, worlds))], timeout)
    if not out.exists():
        raise SystemExit("introspecting PKB's inputs failed (run it alone: python3 benchmarks/pkb_introspect.py PKB "
                         "IDS OUT.json)")
    return json.loads(out.read_text())


# -- 2. the adapter -------------------------------------------------------------------------------

ADAPTABLE = ("tensor", "constant", "world_group", "linear", "tensor_list", "derived")
LINEAR = ("\n\nclass _Linear(torch.nn.Module):\n"
          "    \"\"\"PKB's nn.Linear with the harness's buffers as its weight and bias (PKB calls it, reads .weight).\"\"\"\n\n"
          "    def __init__(self, weight, bias):\n"
          "        super().__init__()\n"
          "        self.weight, self.bias = weight, bias\n"
          "        self.out_features, self.in_features = weight.shape\n\n"
          "    def forward(self, x):\n"
          "        return torch.nn.functional.linear(x, self.weight, self.bias)\n")


def adapter_text(pkb: Path, problem: Problem, info: dict[str, Any]) -> str:
    """The program of `problem` in cuco's convention (SHAPES, make_inputs, solution). PKB's inputs
    become: tensors, inputs; an nn.Linear, its weight (and bias) as inputs, a module around them
    again in solution; a list of tensors of a fixed length, each an input, the list again in solution; constants, held here; the world's process group, given at call time; plain
    values that follow the world size, rank and shape, held here per (world, rank, M x N) and looked
    up in solution, which takes M and N by keyword."""
    args = info.get("args")
    adaptable = bool(args) and all(a["kind"] in ADAPTABLE for a in args) and \
        any(a["kind"] in ("tensor", "linear", "tensor_list") for a in args)
    head = (f'"""ParallelKernelBench problem {problem.id} ({problem.stem}) in cuco\'s program convention, written by\n'
            f'benchmarks/parallelkernelbench.py: its inputs are PKB\'s (utils/input_output_tensors.py\n'
            f'create_input_tensor at base shape (M, N)), its solution reference/{problem.path.name}\'s."""\n'
            f"import importlib.util\nimport sys\n\nimport torch\nimport torch.distributed as dist\n\n"
            f"PKB = {str(Path(pkb).resolve())!r}\n"
            f"if PKB not in sys.path:\n    sys.path.insert(0, PKB)\n"
            f"from utils.input_output_tensors import create_input_tensor  # noqa: E402\n\n"
            f"_spec = importlib.util.spec_from_file_location('pkb_reference_{problem.id}', "
            f"PKB + '/reference/{problem.path.name}')\n_reference = importlib.util.module_from_spec(_spec)\n"
            f"_spec.loader.exec_module(_reference)\n\nPROBLEM = {problem.id}\nSHAPES = {SHAPES!r}\n")
    make = ("\n\ndef make_inputs(rank, world, *, M, N, dtype=torch.bfloat16, device=\"cuda\"):\n"
            "    # PKB seeds torch from the problem, the rank and a trial; the trial comes from torch's generator,\n"
            "    # which the caller seeded, so that each seed of the caller gives other inputs.\n"
            "    trial = int(torch.randint(0, 1 << 20, ()).item())\n"
            "    made = create_input_tensor(rank, world, PROBLEM, (M, N), dtype, trial=trial, device=device)\n")
    if not adaptable:
        return head + f"# PKB's inputs as they are: {_other(info)}\n" + make + \
            "    return made\n\n\nsolution = _reference.solution\n"
    constants = {i: a["value"] for i, a in enumerate(args) if a["kind"] == "constant"}
    derived = {i: a["values"] for i, a in enumerate(args) if a["kind"] == "derived"}
    held = ", ".join(f"{i}: {v}" for i, v in constants.items())
    head += ("# PKB's inputs that are the same plain value at every shape, world size and rank: held here,\n"
             f"# passed to the reference's solution in their places.\nCONSTANTS = {{{held}}}\n")
    if derived:
        table = ",\n".join(f"    {i}: {{" + ", ".join(f"{k!r}: {v}" for k, v in vals.items()) + "}"
                           for i, vals in derived.items())
        head += ("# PKB's plain inputs that follow the world size, rank and shape (not the trial): their value at\n"
                 f"# each \"world/rank/MxN\", as create_input_tensor gives them.\nDERIVED = {{\n{table},\n}}\n")
    linear = any(a["kind"] == "linear" for a in args)
    params = info.get("params")
    names = params[:len(args)] if params and len(params) >= len(args) else None
    produced, sig, call = [], [], []
    for i, a in enumerate(args):
        name = names[i] if names else f"in{i}"
        if a["kind"] == "tensor":
            produced.append(f"made[{i}]")
            sig.append(name)
            call.append(name)
        elif a["kind"] == "linear":
            produced.append(f"made[{i}].weight.detach()")
            sig.append(f"{name}_weight")
            if a["bias"]:
                produced.append(f"made[{i}].bias.detach()")
                sig.append(f"{name}_bias")
            call.append(f"_Linear({name}_weight, {name + '_bias' if a['bias'] else 'None'})")
        elif a["kind"] == "tensor_list":
            items = [f"{name}_{j}" for j in range(a["length"])]
            produced += [f"made[{i}][{j}]" for j in range(a["length"])]
            sig += items
            call.append(f"[{', '.join(items)}]")
        elif a["kind"] == "constant":
            call.append(f"CONSTANTS[{i}]")
        elif a["kind"] == "world_group":
            call.append("dist.group.WORLD")
        else:
            call.append(f"DERIVED[{i}][f\"{{dist.get_world_size()}}/{{dist.get_rank()}}/{{M}}x{{N}}\"]")
    make += f"    return ({', '.join(produced)},)\n"
    keywords = ", *, M, N" if derived else ""
    # no @torch.no_grad() here: the reference sets its own grad mode (PKB's DDP and ZeRO steps use autograd)
    return (head + (LINEAR if linear else "") + make +
            f"\n\ndef solution({', '.join(sig)}{keywords}):\n    return _reference.solution({', '.join(call)})\n")


def _inputs_words(args: list[dict[str, Any]]) -> str:
    """`3 tensors, 3 nn.Linear, constants 8, 2, the world group, 1 plain value by world, rank and shape`."""
    held = [a["value"] for a in args if a["kind"] == "constant"]
    count = lambda kind: sum(a["kind"] == kind for a in args)  # noqa: E731
    parts = [f"{count('tensor')} tensors"] + ([f"{count('linear')} nn.Linear"] if count("linear") else []) + \
        ([f"{count('tensor_list')} list(s) of tensors"] if count("tensor_list") else []) + \
        ([f"constants {', '.join(held)}"] if held else []) + (["the world group"] if count("world_group") else []) + \
        ([f"{count('derived')} plain value(s) by world, rank and shape"] if count("derived") else [])
    return ", ".join(parts)


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
    info = introspect(args.pkb, chosen, scratch, 60.0 * len(chosen) + 120, worlds) if chosen else {}
    crashed = 0
    for q in chosen:
        found = info.get(str(q.id), {"error": "introspection gave nothing"})
        adapter = scratch / "adapters" / f"pkb{q.id}.py"
        adapter.write_text(adapter_text(args.pkb, q, found))
        args_ = found.get("args") or []
        inputs = (_other(found) if "error" in found or any(a["kind"] == "other" for a in args_) else
                  _inputs_words(args_))
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
    sys.exit(main())
