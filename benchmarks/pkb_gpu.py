"""The GPU columns of docs/parallelkernelbench.md, read back from the folder of a device call of
benchmarks/runs/pkb_gemm.sh (its $OUT): per problem, `cuco eval` of the imported program's
generated seed against the program (seed_ID.txt) and `cuco show` of a short offline search from
it (show_ID.txt), with import.txt, pkb.log and run.txt saying what was imported, what ran and
where the call ended.

The seed is the recognized pattern's host-driven version (NCCL + cuBLAS) at full strength, so the
best candidate over the pattern's reference is the best candidate's speedup over the program
divided by the seed's, each timed against the program in its own run of the same search. The
noise test is core/noise.py's (a tie where the two bands overlap), the one `cuco show`'s ties use.

A file that is missing or cannot be read gives a "not run" cell with the reason, never an error:
a call cut off by its time limit leaves some out."""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from cuco_tui.core.noise import Band, exceeds, figure_label, within_noise

_FIGURE = r"([0-9]+(?:\.[0-9]+)?)x(?:\s+±([0-9]+(?:\.[0-9]+)?)%)?"


@dataclass(frozen=True)
class Figure:
    """A speedup as printed, '5.44x ±17%': its value and its spread (a fraction; 0: none printed)."""

    value: float
    spread: float = 0.0

    @classmethod
    def read(cls, text: str) -> Figure | None:
        m = re.search(_FIGURE, text)
        return cls(float(m.group(1)), float(m.group(2) or 0) / 100.0) if m else None

    def band(self) -> Band:
        return Band.around(self.value, math.log1p(self.spread))

    def label(self) -> str:
        return figure_label(self.value, self.spread)


@dataclass(frozen=True)
class ShapeTime:
    """One bench shape: the program's and the candidate's milliseconds."""

    shape: str
    program_ms: float
    candidate_ms: float


@dataclass(frozen=True)
class Candidate:
    """A row of `cuco show`'s listing."""

    id: str
    kind: str
    status: str
    speedup: Figure | None


@dataclass(frozen=True)
class SeedEval:
    """`cuco eval` of the seed against the program: verified (every check matched), failed (its
    status and reason) or not run (why)."""

    state: str  # "verified", "failed", "not run"
    detail: str = ""  # the status and reason when failed, why when not run
    checks: int = 0  # the verification rows that matched
    speedup: Figure | None = None
    shapes: tuple[ShapeTime, ...] = ()


@dataclass(frozen=True)
class SearchShow:
    """`cuco show` of the search: done (a best measured) or not run (why)."""

    state: str  # "done", "not run"
    detail: str = ""  # why not run; when done, how it ended if not of itself
    best: str = ""
    best_speedup: Figure | None = None
    ties: tuple[str, ...] = ()  # as printed, fastest first (at most 8)
    ties_total: int = 0  # with the "and N more" past those printed
    candidates: tuple[Candidate, ...] = ()
    searched: int = 0
    shapes: tuple[ShapeTime, ...] = ()

    def seed(self) -> Candidate | None:
        return next((c for c in self.candidates if c.kind == "seed"), None)

    def seed_speedup(self) -> Figure | None:
        """The seed's speedup in this search (its own run), None when not listed or not measured."""
        seed = self.seed()
        return seed.speedup if seed is not None else None

    def best_is_seed(self) -> bool:
        seed = self.seed()
        return seed is not None and seed.id == self.best

    def beats_seed(self) -> bool:
        """The best is faster than the seed beyond noise."""
        seed = self.seed_speedup()
        return self.best_speedup is not None and seed is not None and exceeds(self.best_speedup.band(), seed.band())


@dataclass(frozen=True)
class GpuProblem:
    """One problem at one world size of one device call."""

    id: int
    world: int
    device: str
    seed: SeedEval
    search: SearchShow = field(default_factory=lambda: SearchShow("not run"))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> GpuProblem:
        def fig(x: Any) -> Figure | None:
            return Figure(**x) if x else None

        def shapes(xs: Any) -> tuple[ShapeTime, ...]:
            return tuple(ShapeTime(**x) for x in xs or ())

        s, q = d["seed"], d["search"]
        seed = SeedEval(s["state"], s["detail"], s["checks"], fig(s["speedup"]), shapes(s["shapes"]))
        search = SearchShow(q["state"], q["detail"], q["best"], fig(q["best_speedup"]), tuple(q["ties"]),
                            q["ties_total"], tuple(Candidate(c["id"], c["kind"], c["status"], fig(c["speedup"]))
                                                   for c in q["candidates"]), q["searched"], shapes(q["shapes"]))
        return cls(int(d["id"]), int(d["world"]), d["device"], seed, search)


# -- reading the files ----------------------------------------------------------------------------

def _cells(line: str) -> list[str]:
    """The cells of a row of a rich table ('│ a │ b │')."""
    return [c.strip() for c in line.strip().strip("│").split("│")]


def _last_line(text: str) -> str:
    """A file's last line that says something (an error's one line comes last)."""
    return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "(empty)")[:160]


def read_seed(path: Path) -> SeedEval | None:
    """seed_ID.txt; None when the file is missing (the caller knows why)."""
    if not path.is_file():
        return None
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return SeedEval("not run", f"{path.name} cannot be read: {exc.strerror}")
    head = {m.group(1): m.group(2).strip()
            for m in re.finditer(r"^(status|reason|speedup)\s{2,}(.+)$", text, re.MULTILINE)}
    if "status" not in head:
        return SeedEval("not run", f"{path.name} holds no evaluation: {_last_line(text)}")
    rows, timings, table = [], [], ""
    for line in text.splitlines():
        if line.startswith(("verification", "timings")):
            table = line.split()[0]
        elif line.startswith("│") and table:
            cells = _cells(line)
            if not cells[0]:  # a wrapped cell's second line
                continue
            if table == "verification" and len(cells) > 1:
                rows.append(cells[1] == "yes")
            elif table == "timings" and len(cells) >= 4:
                try:
                    timings.append(ShapeTime(cells[0], float(cells[2]), float(cells[3])))
                except ValueError:
                    pass
    status = head["status"]
    speedup = Figure.read(head.get("speedup", ""))
    if status in ("measured", "verified") and rows and all(rows):
        return SeedEval("verified", "", len(rows), speedup, tuple(timings))
    why = head.get("reason", "")
    if status in ("measured", "verified"):  # said ok, yet no check or a failed row: not verified
        why = "no verification row" if not rows else f"{rows.count(False)} of {len(rows)} checks failed"
    return SeedEval("failed", f"{status}: {why}" if why else status, sum(rows), speedup, tuple(timings))


def read_show(path: Path) -> SearchShow | None:
    """show_ID.txt; None when the file is missing."""
    if not path.is_file():
        return None
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return SearchShow("not run", f"{path.name} cannot be read: {exc.strerror}")
    best = re.search(r"^best\s+(\S+): " + _FIGURE, text, re.MULTILINE)
    if best is None:
        none = re.search(r"^best\s+(none.*)$", text, re.MULTILINE)
        why = f"the search measured no candidate ({none.group(1)})" if none else \
            f"{path.name} has no `best` line: {_last_line(text)}"
        return SearchShow("not run", why)
    ties: tuple[str, ...] = ()
    more = 0
    tie = re.search(r"^ties\s+within noise of it: (.+)$", text, re.MULTILINE)
    if tie:
        printed, _, rest = tie.group(1).partition(" and ")
        ties = tuple(re.findall(r"\bc\d+\b", printed))
        more = int(m.group(1)) if (m := re.match(r"(\d+) more", rest)) else 0
    searched = re.search(r"^searched\s+(\d+) candidates", text, re.MULTILINE)
    listing = re.finditer(r"^(c\d+)\s+\d+\s+\d+\s+(\S+)\s+\S+\s+(\S+)\s+(\S.*)$", text, re.MULTILINE)
    candidates = tuple(Candidate(m.group(1), m.group(2), m.group(3), Figure.read(m.group(4))) for m in listing)
    shapes = []
    m = re.search(r"^per shape .*\n((?: {10}\S.*\n?)+)", text, re.MULTILINE)
    for line in (m.group(1).splitlines() if m else []):
        parts = line.split()
        try:
            shapes.append(ShapeTime(parts[0], float(parts[1]), float(parts[2])))
        except (IndexError, ValueError):
            pass
    return SearchShow("done", "", best.group(1), Figure(float(best.group(2)), float(best.group(3) or 0) / 100.0),
                      ties, len(ties) + more, candidates, int(searched.group(1)) if searched else len(candidates),
                      tuple(shapes))


@dataclass(frozen=True)
class CallLog:
    """What pkb.log and run.txt say of the call: the steps that started and ended, the one it
    ended during (cut off by its time limit), the problems it skipped and why."""

    started: frozenset[str] = frozenset()
    ended: dict[str, int] = field(default_factory=dict)  # step: its exit status
    skipped: dict[int, str] = field(default_factory=dict)
    info: dict[str, str] = field(default_factory=dict)  # run.txt's lines: world, device, problems...

    @property
    def cut_during(self) -> str:
        return next((s for s in sorted(self.started) if s not in self.ended), "")

    def why_missing(self, step: str, file: str) -> str:
        if step in self.started and step not in self.ended:
            return f"the call ended during {step}"
        if step in self.ended:
            return f"{step} ended with exit status {self.ended[step]} and left no {file}"
        if self.cut_during:
            return f"the call ended during {self.cut_during}, before it"
        return f"no {file} in the call's folder"


def read_call(folder: Path) -> CallLog:
    log = folder / "pkb.log"
    text = log.read_text(errors="replace") if log.is_file() else ""
    started = frozenset(re.findall(r"^== (\S+) \(", text, re.MULTILINE))
    ended = {m.group(1): int(m.group(2)) for m in re.finditer(r"^== (\S+) rc=(\d+)", text, re.MULTILINE)}
    info: dict[str, str] = {}
    skipped: dict[int, str] = {}
    run = folder / "run.txt"
    for line in (run.read_text(errors="replace").splitlines() if run.is_file() else []):
        key, sep, value = line.partition(":")
        if not sep:
            continue
        if (m := re.fullmatch(r"skipped (\d+)", key.strip())):
            skipped[int(m.group(1))] = value.strip()
        else:
            info[key.strip()] = value.strip()
    return CallLog(started, ended, skipped, info)


def read_imports(folder: Path) -> dict[int, tuple[int, str]]:
    """import.txt: {problem id: (world, 'yes' or the refusal)}."""
    path = folder / "import.txt"
    text = path.read_text(errors="replace") if path.is_file() else ""
    return {int(m.group(1)): (int(m.group(2)), m.group(3).strip())
            for m in re.finditer(r"^(\d+)_\S* W=(\d+): ([^;\n]*)", text, re.MULTILINE)}


def read_run(folder: Path, world: int | None = None, device: str = "") -> list[GpuProblem]:
    """Every problem the call was given or left a file for, at its world size. Raises ValueError
    with one line when the folder is no such call's or its world size is unclear."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"{folder}: no such folder")
    call, imports = read_call(folder), read_imports(folder)
    files = {int(m.group(2)) for p in folder.iterdir()
             if (m := re.fullmatch(r"(seed|search|show)_(\d+)\.txt", p.name))}
    if not (files or imports or call.info):
        raise ValueError(f"{folder}: no seed_ID.txt, show_ID.txt, import.txt or run.txt of "
                         f"benchmarks/runs/pkb_gemm.sh")
    said = {int(call.info["world"])} if call.info.get("world", "").isdigit() else {w for w, _ in imports.values()}
    if world is None:
        if len(said) != 1:
            raise ValueError(f"{folder}: give --world (the folder says {sorted(said) or 'nothing'})")
        world = said.pop()
    elif said and said != {world}:
        raise ValueError(f"--world {world}: {folder} is a call at W={'/'.join(map(str, sorted(said)))}")
    device = device or call.info.get("device", "") or _machine(folder) or "a GPU host"
    planned = {int(p) for p in call.info.get("problems", "").split() if p.isdigit()}
    out = []
    for pid in sorted(files | set(imports) | planned | set(call.skipped)):
        out.append(GpuProblem(pid, world, device, _seed(folder, pid, call, imports), _search(folder, pid, call)))
    return out


def _machine(folder: Path) -> str:
    for show in sorted(folder.glob("show_*.txt")):
        m = re.search(r"^machine\s+(\S.*?)(?: · .*)?$", show.read_text(errors="replace"), re.MULTILINE)
        if m and not m.group(1).startswith("not recorded"):
            return m.group(1)
    return ""


def _seed(folder: Path, pid: int, call: CallLog, imports: dict[int, tuple[int, str]]) -> SeedEval:
    got = read_seed(folder / f"seed_{pid}.txt")
    if got is not None:
        return got
    if pid in imports and imports[pid][1] != "yes":
        return SeedEval("not run", f"not imported ({imports[pid][1]})")
    if pid in call.skipped:
        return SeedEval("not run", f"skipped: {call.skipped[pid]}")
    return SeedEval("not run", call.why_missing(f"seed_{pid}", f"seed_{pid}.txt"))


def _search(folder: Path, pid: int, call: CallLog) -> SearchShow:
    got = read_show(folder / f"show_{pid}.txt")
    if got is not None and got.state == "done" and call.ended.get(f"search_{pid}") == 124:
        return replace(got, detail="the search stopped at its time limit")  # `timeout`'s exit status
    if got is not None:
        return got
    if pid in call.skipped:
        return SearchShow("not run", f"skipped: {call.skipped[pid]}")
    return SearchShow("not run", call.why_missing(f"search_{pid}", f"show_{pid}.txt"))


# -- the cells ------------------------------------------------------------------------------------

def verified_cell(entries: list[GpuProblem]) -> str:
    """Reference verified on GPU: the program ran under torch.distributed (NCCL) on the GPUs as
    the reference and the seed matched it at every check."""
    parts = []
    for p in entries:
        s = p.seed
        if s.state == "verified":
            parts.append(f"yes (W={p.world}: the seed matched it in {s.checks} checks)")
        elif s.state == "failed":
            parts.append(f"no (W={p.world}: the seed's evaluation: {s.detail})")
        else:
            parts.append(f"not run (W={p.world}: {s.detail})")
    return "; ".join(parts) or "not run"


def program_cell(p: GpuProblem) -> str:
    """Best speedup over the program: the search's best, else the seed's own, marked so."""
    q, seed = p.search, p.seed
    if q.state == "done" and q.best_speedup is not None:
        which = f"{q.best}, the seed" if q.best_is_seed() else q.best
        how = f"; {q.detail}" if q.detail else ""
        return f"{q.best_speedup.label()} ({which}; best of {q.searched} candidates{how})"
    if seed.state == "verified" and seed.speedup is not None:
        return f"{seed.speedup.label()} (the seed alone, from its evaluation; no search result: {q.detail})"
    return "not run (the seed was not verified)" if seed.state == "failed" else f"not run ({seed.detail or q.detail})"


def ratio(best: Figure, seed: Figure) -> Figure:
    """best / seed, the two spreads combined in quadrature (two independent runs, as core/noise.py
    combines a run's two series)."""
    h = math.hypot(math.log1p(best.spread), math.log1p(seed.spread))
    return Figure(best.value / seed.value, math.expm1(h))


def pattern_cell(p: GpuProblem) -> str:
    """Best speedup over the pattern's reference: the best candidate over the seed, which is the
    pattern's host-driven reference at full strength."""
    q = p.search
    if q.state != "done" or q.best_speedup is None:
        if p.seed.state == "verified":
            return f"not measured (the seed alone; no search result: {q.detail})"
        return "not run (the seed was not verified)" if p.seed.state == "failed" else f"not run ({p.seed.detail})"
    seed = q.seed()
    if seed is None or seed.speedup is None:
        return "not measured (the search's listing shows no measured seed)"
    if q.best == seed.id:
        words = "1.00x (the best is the seed itself"
        if q.ties_total:
            fastest = next((c for c in q.candidates if c.id == q.ties[0] and c.speedup), None)
            words += (f"; {q.ties_total} other{'s' if q.ties_total > 1 else ''} within noise of it"
                      + (f", the fastest {fastest.id} at {fastest.speedup.label()}" if fastest and fastest.speedup
                         else ""))
        slower = sum(1 for c in q.candidates if c.id != q.best and c.speedup) - q.ties_total
        return words + (f"; {slower} slower beyond noise" if slower > 0 else "") + ")"
    noise = ("faster beyond noise" if q.beats_seed() else "within noise: the two bands overlap"
             if within_noise(q.best_speedup.band(), seed.speedup.band()) else "slower beyond noise")
    return (f"{ratio(q.best_speedup, seed.speedup).label()} ({q.best} at {q.best_speedup.label()} over the seed "
            f"{seed.id} at {seed.speedup.label()}; {noise})")


def gpu_cells(entries: dict[int, GpuProblem], worlds: list[int]) -> list[str]:
    """The row's GPU cells: verified, then per world over the program and over the pattern's reference."""
    cells = [verified_cell([entries[w] for w in sorted(entries)])]
    for w in worlds:
        cells += [program_cell(entries[w]), pattern_cell(entries[w])] if w in entries else ["not run", "not run"]
    return cells


# -- results.json --------------------------------------------------------------------------------

def load_gpu(results: dict[str, Any]) -> dict[int, dict[int, GpuProblem]]:
    """{problem id: {world: its GPU result}} from results.json's "gpu" ({world: {id: ...}})."""
    out: dict[int, dict[int, GpuProblem]] = {}
    for world, problems in (results.get("gpu") or {}).items():
        for pid, d in problems.items():
            out.setdefault(int(pid), {})[int(world)] = GpuProblem.from_dict(d)
    return out


def store_gpu(results: dict[str, Any], problems: list[GpuProblem]) -> None:
    """Adds a call's problems to results.json's "gpu": calls add up, and a problem the new call
    did not run keeps what an earlier call measured."""
    gpu = results.setdefault("gpu", {})
    for p in problems:
        kept = gpu.setdefault(str(p.world), {}).get(str(p.id))
        if kept is None or p.seed.state != "not run" or kept["seed"]["state"] == "not run":
            gpu[str(p.world)][str(p.id)] = p.to_dict()
