"""Loading a workload folder: its manifest, shapes, tolerance and the files it ships.

A workload is a folder under `workloads/` holding `manifest.toml`, a seed candidate,
a Python + CuPy reference module, a task description for agents and, optionally, more
candidates. Errors in a manifest name the file and the field so a person can fix it."""

from __future__ import annotations

import difflib
import tomllib
from pathlib import Path

from cuco_tui.core.workload import DTYPES, LIBRARIES, Shape, Workload, WorkloadError

REPO_WORKLOADS = Path(__file__).resolve().parents[2] / "workloads"

# Every field a manifest may hold; anything else is a typo the loader names rather than ignores.
FIELDS = ("name", "title", "world_sizes", "dtype", "dims", "seed", "reference", "task", "candidates",
          "split_dims", "flag_dims", "libraries", "divisible", "tolerance", "timing", "verify", "bench")
TABLE_FIELDS = {"tolerance": ("rtol", "floor"), "timing": ("warmup", "repetitions")}


def _unknown(keys, allowed, where: str, path: Path) -> None:
    for key in keys:
        if key not in allowed:
            close = difflib.get_close_matches(key, allowed, n=1)
            hint = f"; did you mean `{close[0]}`?" if close else f"; the fields are {', '.join(allowed)}"
            raise WorkloadError(f"{path}: unknown field `{key}`{where}{hint}")


def _check_fields(data: dict, path: Path) -> None:
    _unknown(data, FIELDS, "", path)
    for table, allowed in TABLE_FIELDS.items():
        value = data.get(table, {})
        if not isinstance(value, dict):
            raise WorkloadError(f"{path}: `{table}` is a table ([{table}]), not {value!r}")
        _unknown(value, allowed, f" in [{table}]", path)
    dims = data.get("dims", [])
    if not isinstance(dims, list) or not dims or not all(isinstance(d, str) and d.isidentifier() for d in dims):
        raise WorkloadError(f"{path}: `dims` is a list of dimension names such as [\"M\", \"K\", \"N\"], not {dims!r}")
    if len(set(dims)) != len(dims):
        raise WorkloadError(f"{path}: `dims` names a dimension twice: {dims}")
    divisible = data.get("divisible", {})
    if not isinstance(divisible, dict):
        raise WorkloadError(f"{path}: `divisible` is a table ([divisible]), not {divisible!r}")
    _unknown(divisible, tuple(dims), " in [divisible] (a dim)", path)
    for key, value in divisible.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise WorkloadError(f"{path}: [divisible] {key} must be a positive integer, not {value!r}")
    for key in ("split_dims", "flag_dims"):
        value = data.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise WorkloadError(f"{path}: `{key}` lists dims of this workload ({', '.join(dims)}), not {value!r}")
        extra = sorted(set(value) - set(dims))
        if extra:
            raise WorkloadError(f"{path}: {key} names {', '.join(extra)}, which is not in dims")
    worlds = data.get("world_sizes")
    if not isinstance(worlds, list) or not worlds or any(isinstance(w, bool) or not isinstance(w, int) or w < 1
                                                         for w in worlds):
        raise WorkloadError(f"{path}: `world_sizes` is a list of rank counts such as [2, 4, 8], not {worlds!r}")
    dtype = data.get("dtype", "bf16")
    if dtype not in DTYPES:
        raise WorkloadError(f"{path}: `dtype` must be one of {', '.join(DTYPES)}, not {dtype!r}")


def _shapes(data: dict, key: str, dims: tuple[str, ...], path: Path,
            flags: frozenset[str] = frozenset()) -> tuple[Shape, ...]:
    entries = data.get(key)
    if not entries:
        raise WorkloadError(f"{path}: needs at least one [[{key}]] shape")
    shapes = []
    for i, entry in enumerate(entries):
        name = entry.get("name", f"{key}{i}")
        missing = [d for d in dims if d not in entry]
        if missing:
            raise WorkloadError(f"{path}: [[{key}]] {name} lacks {', '.join(missing)}")
        _unknown(entry, ("name",) + tuple(dims), f" in [[{key}]] {name}", path)
        values = {}
        for d in dims:
            v = entry[d]
            if d in flags:  # a switch (e.g. CAUSAL): 0 or 1
                if not isinstance(v, int) or isinstance(v, bool) or v not in (0, 1):
                    raise WorkloadError(f"{path}: [[{key}]] {name}: {d} is a flag dim and must be 0 or 1, not {v!r}")
            elif not isinstance(v, int) or v <= 0:
                raise WorkloadError(f"{path}: [[{key}]] {name}: {d} must be a positive integer, not {v!r}")
            values[d] = v
        shapes.append(Shape(str(name), values))
    names = [s.name for s in shapes]
    if len(set(names)) != len(names):
        raise WorkloadError(f"{path}: [[{key}]] shape names repeat: {names}")
    return tuple(shapes)


def _tolerance(table: dict, path: Path) -> dict[str, float]:
    """[tolerance]: rtol > 0, and floor (a fraction of max|want|, see harness.verify) in [0, 1)."""
    out = {}
    for key, default, low, high in (("rtol", 0.02, 0.0, 1.0), ("floor", 0.0, 0.0, 1.0)):
        value = table.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                low < value < high if key == "rtol" else low <= value < high):
            raise WorkloadError(f"{path}: [tolerance] {key} must be a number in "
                                f"{'(' if key == 'rtol' else '['}{low:g}, {high:g}), not {value!r}")
        out[key] = float(value)
    return out


def _utf8(path: Path) -> str:
    """The file's text; WorkloadError naming the first byte that is not UTF-8 and where it lies
    (a file saved in another encoding, or a binary one named by mistake), never a traceback."""
    try:
        return path.read_bytes().decode("utf-8")
    except OSError as exc:  # a folder of that name, a file this user may not read
        raise WorkloadError(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise WorkloadError(f"{path} is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start}); "
                            "save it as UTF-8") from None


def load_workload(name_or_path: str | Path, search: Path = REPO_WORKLOADS) -> Workload:
    """Load a workload by name (a folder under `workloads/`) or by the path of its folder."""
    root = Path(name_or_path)
    if not (root / "manifest.toml").exists():
        root = search / str(name_or_path)
    path = root / "manifest.toml"
    if not path.exists():
        known = sorted(p.name for p in search.iterdir() if (p / "manifest.toml").exists()) if search.is_dir() else []
        raise WorkloadError(f"no workload {name_or_path!r}; known workloads: {', '.join(known) or 'none'}")
    try:
        data = tomllib.loads(_utf8(path))
    except tomllib.TOMLDecodeError as exc:
        raise WorkloadError(f"{path}: not valid TOML: {exc}") from exc
    for key in ("name", "world_sizes", "dims", "seed", "reference"):
        if key not in data:
            raise WorkloadError(f"{path}: missing required field `{key}`")
    _check_fields(data, path)
    dims = tuple(data["dims"])
    # Dims listed in `flag_dims` are switches that may be 0 (every other dim is positive).
    flags = frozenset(data.get("flag_dims", ()))
    if not flags <= set(dims):
        raise WorkloadError(f"{path}: flag_dims names {', '.join(sorted(flags - set(dims)))}, which is not in dims")
    files = {}
    for key in ("seed", "reference", "task"):
        rel = data.get(key, f"{key}.md")
        f = root / rel
        if not f.exists():
            raise WorkloadError(f"{path}: `{key}` names {rel}, which does not exist in {root}")
        if key != "reference":  # Python source may declare another encoding; its import says so
            # Read here so that every command that loads the workload refuses a bad file the same
            # way, before the evaluator or the agents' prompt would stumble on it with a traceback.
            _utf8(f)
        files[key] = f
    tol = _tolerance(data.get("tolerance", {}), path)
    timing = data.get("timing", {})
    warmup = int(timing.get("warmup", 5))
    reps = int(timing.get("repetitions", 30))
    if reps < 20:
        raise WorkloadError(f"{path}: [timing] repetitions must be at least 20, not {reps}")
    libraries = data.get("libraries", [])
    if not isinstance(libraries, list) or any(lib not in LIBRARIES for lib in libraries):
        raise WorkloadError(f"{path}: `libraries` is a list of harness libraries ({', '.join(LIBRARIES)}), "
                            f"not {libraries!r}")
    cand = data.get("candidates")
    known_keys = {"name", "title", "world_sizes", "dtype", "dims", "seed", "reference", "task", "candidates",
                  "divisible", "tolerance", "timing", "verify", "bench"}
    return Workload(
        name=data["name"],
        title=data.get("title", data["name"]),
        root=root.resolve(),
        world_sizes=tuple(int(w) for w in data["world_sizes"]),
        dtype=data.get("dtype", "bf16"),
        dim_names=dims,
        divisible={k: int(v) for k, v in data.get("divisible", {}).items()},
        rtol=tol["rtol"],
        floor=tol["floor"],
        warmup=warmup,
        repetitions=reps,
        verify_shapes=_shapes(data, "verify", dims, path, flags),
        bench_shapes=_shapes(data, "bench", dims, path, flags),
        seed=files["seed"].resolve(),
        reference=files["reference"].resolve(),
        task=files["task"].resolve(),
        candidates_dir=(root / cand).resolve() if cand else None,
        extra={k: v for k, v in data.items() if k not in known_keys},
    )


def list_workloads(search: Path = REPO_WORKLOADS) -> list[str]:
    if not search.is_dir():
        return []
    return sorted(p.name for p in search.iterdir() if (p / "manifest.toml").exists())
