"""The offline search against random sampling of the same space (issue 34, item 2): best speedup
found against evaluations, per workload and agent, over seeds.

    python3 benchmarks/search_vs_random.py SESSION_OR_BUNDLE_OR_FOLDER... [--out DIR]
    python3 benchmarks/search_vs_random.py --run --gpus 0,1 [--workloads gemm_allgather,moe_dispatch_combine]
        [--seeds 1,2,3] [--agents offline,random] [--candidates 30] [--islands 3] [--limit-s S]
        [--root DIR] [--bundles DIR] [--out DIR]

Each session is read through the lineage (a session folder, a .bundle, or a folder holding
them); its workload, its search seed and its agent (the agent of its non-seed candidates) come
from the session itself. A candidate counts as an evaluation when it was evaluated: not pending,
not unreviewed, not an exhausted agent's placeholder, not turned away before evaluation (a
duplicate, an agent's failure, a rejection in review); the seed is the first. Only measured
candidates have speedups, and the best after n evaluations is the session's best as the search
decides it (core/ranking.py best_measured: replaced only by one faster beyond noise).

Per workload, the sessions are compared at the same number of evaluations, the fewest any of
them has (the budget): a table of the best after n = 5, 10, 15, 20, 30, 40 (those within the
budget, and the budget itself) per agent as the median over seeds [min-max], then per session
the evaluations it needed to reach 95 % of the best either agent found within the budget. The
plot (search_vs_random.png with matplotlib, else plotext's text plot in search_vs_random.txt)
has one line per session; the table goes to stdout and search_vs_random.md, the curves to
search_vs_random.json.

--run first runs the searches, in series: `cuco search --agent A --seed S` for each workload,
seed and agent (the two agents of a seed one after the other), in session folders
ROOT/WORKLOAD-AGENT-sSEED (one already there is read, not run again). `cuco search` has no
candidate budget: --candidates N becomes --generations ceil((N - 2) / islands) (generation 0 holds
the seed and at least one fast-path proposal, each later one a proposal per island), so each
search evaluates about N (duplicates turned away are not evaluations); the comparison uses the
common budget anyway. --limit-s stops a search with Ctrl-C's signal after S seconds (the
evaluations in flight are committed). --bundles exports each session as DIR/NAME.bundle."""

from __future__ import annotations

import argparse
import json
import math
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from cuco_tui.core.noise import record_speedup
from cuco_tui.core.ranking import best_measured
from cuco_tui.core.records import CandidateRecord, RecordStatus, id_number
from cuco_tui.lineage import SessionError, SessionRepo, export_bundle, open_session_or_bundle

REPO = Path(__file__).resolve().parents[1]
BUDGETS = (5, 10, 15, 20, 30, 40)
SHARE = 0.95  # of the best either agent found: the mark each session is timed to
AGENT_ORDER = ("offline", "random")
NOT_EVALUATED = (RecordStatus.PENDING, RecordStatus.UNREVIEWED, RecordStatus.EXHAUSTED)
STOP_GRACE_S = 180  # after the stop signal: the evaluations in flight finish and are committed


class Refused(Exception):
    """A bad argument or input: one line, exit 2."""


# ---------------------------------------------------------------------------- reading sessions


def is_evaluation(record: CandidateRecord) -> bool:
    """Evaluated: neither pending, unreviewed nor a placeholder, and not turned away before
    evaluation (search/outcomes.py turned_away marks those with `rejected_by`)."""
    return record.status not in NOT_EVALUATED and not record.rejected_by


@dataclass(frozen=True)
class Curve:
    """One session's best speedup after each evaluation (None: nothing measured yet)."""

    name: str
    workload: str
    agent: str
    seed: int
    best: tuple[float | None, ...]  # best[n - 1]: after n evaluations
    best_ids: tuple[str | None, ...]
    # (low, high) of that best's noise band (core/noise.py); equal to it where no timings were kept
    bands: tuple[tuple[float, float] | None, ...] = ()

    def band(self, n: int) -> tuple[float, float] | None:
        if self.best[n - 1] is None:
            return None
        return self.bands[n - 1] if n <= len(self.bands) and self.bands[n - 1] else (self.best[n - 1],) * 2

    @property
    def evaluations(self) -> int:
        return len(self.best)

    def reached(self, mark: float, budget: int) -> int | None:
        """The evaluations it took to reach `mark` within `budget` (None: not within it)."""
        for n, best in enumerate(self.best[:budget], start=1):
            if best is not None and best >= mark:
                return n
        return None


def curve_of(name: str, workload: str, seed: int, records: list[CandidateRecord]) -> Curve:
    evaluations = sorted((r for r in records if is_evaluation(r)), key=lambda r: id_number(r.id))
    agents = Counter(r.agent for r in evaluations if r.kind != "seed")
    best, ids, bands = [], [], []
    for n in range(1, len(evaluations) + 1):
        b = best_measured(evaluations[:n])
        band = record_speedup(b) if b else None
        best.append(b.speedup if b else None)
        ids.append(b.id if b else None)
        bands.append((band.low, band.high) if band else None)
    agent = agents.most_common(1)[0][0] if agents else "?"
    return Curve(name, workload, agent, seed, tuple(best), tuple(ids), tuple(bands))


def read_curve(path: Path) -> Curve:
    repo = open_session_or_bundle(path)
    try:
        info = repo.session_info()
        records = repo.records()
    finally:
        repo.close()
    workload = Path(str(info.get("workload", "?"))).name  # a workload outside the clone is stored by folder
    seed = int((info.get("config") or {}).get("seed", 0))
    return curve_of(path.name.removesuffix(".bundle"), workload, seed, records)


def session_paths(given: list[Path]) -> list[Path]:
    """Each session folder or bundle given, and those a given folder holds."""
    out = []
    for path in given:
        if path.suffix == ".bundle" and path.is_file() or (path / ".git").is_dir():
            out.append(path)
        elif path.is_dir():
            inside = sorted(p for p in path.iterdir() if p.suffix == ".bundle" and p.is_file() or (p / ".git").is_dir())
            if not inside:
                raise Refused(f"{path} holds no session folder and no .bundle")
            out.extend(inside)
        else:
            raise Refused(f"{path} is not a session folder, a .bundle or a folder of them")
    return out


# ---------------------------------------------------------------------------- comparing


@dataclass(frozen=True)
class Comparison:
    """One workload's sessions at their common budget."""

    workload: str
    curves: tuple[Curve, ...]

    @property
    def budget(self) -> int:
        return min(c.evaluations for c in self.curves)

    @property
    def agents(self) -> list[str]:
        found = {c.agent for c in self.curves}
        return [a for a in AGENT_ORDER if a in found] + sorted(found - set(AGENT_ORDER))

    def of(self, agent: str) -> list[Curve]:
        return sorted((c for c in self.curves if c.agent == agent), key=lambda c: (c.seed, c.name))

    def best_either(self) -> tuple[float, Curve] | None:
        """The best any session found within the budget, and that session."""
        found = [(c.best[self.budget - 1], c) for c in self.curves if c.best[self.budget - 1] is not None]
        return max(found, key=lambda bc: bc[0]) if found else None

    def rows(self) -> list[int]:
        return [n for n in BUDGETS if n < self.budget] + [self.budget]


def cell(values: list[float | None], of: int) -> str:
    """Median [min-max] of the measured values; how many seeds had one when not all."""
    got = [v for v in values if v is not None]
    if not got:
        return "-"
    text = f"{statistics.median(got):.3f}x [{min(got):.3f}-{max(got):.3f}]"
    return text if len(got) == of else f"{text} ({len(got)} of {of} measured)"


def ahead(comparison: Comparison, n: int) -> str:
    """The agent ahead after n evaluations: the one whose best, as the median over seeds of its
    noise band (core/noise.py), lies wholly above every other agent's; "tie (within noise)" when
    the bands overlap, as the leaderboard calls two candidates within noise of each other."""
    bands = {}
    for agent in comparison.agents:
        got = [b for b in (c.band(n) for c in comparison.of(agent)) if b is not None]
        if got:
            bands[agent] = (statistics.median(lo for lo, _ in got), statistics.median(hi for _, hi in got))
    if len(bands) < 2:
        return "-"
    for agent, (low, _) in bands.items():
        if all(low > high for other, (_, high) in bands.items() if other != agent):
            return agent
    return "tie (within noise)"


def report(comparison: Comparison) -> str:
    c, budget = comparison, comparison.budget
    agents = c.agents
    lines = [f"### {c.workload}: best speedup after n evaluations (median over seeds [min-max])", "",
             "| evaluations | " + " | ".join(agents) + " | ahead |", "|---|" + "---|" * (len(agents) + 1)]
    for n in c.rows():
        label = f"{n} (budget)" if n == budget and n not in BUDGETS else str(n)
        cells = [cell([k.best[n - 1] for k in c.of(a)], len(c.of(a))) for a in agents]
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {ahead(c, n)} |")
    lines.append("")
    either = c.best_either()
    if either is None:
        lines.append(f"Nothing measured within {budget} evaluations: no 95 % mark (compiled only, or no GPU).")
        return "\n".join(lines)
    best, by = either
    mark = SHARE * best
    lines += [f"Budget: {budget} evaluations (the fewest of these sessions). Best either found: {best:.3f}x "
              f"({by.agent}, seed {by.seed}, {by.best_ids[budget - 1]}); {SHARE:.0%} of it: {mark:.3f}x.", "",
              f"| agent | seed | session | evaluations | best within {budget} | evaluations to {SHARE:.0%} |",
              "|---|---|---|---|---|---|"]
    for agent in agents:
        for k in c.of(agent):
            b = k.best[budget - 1]
            n = k.reached(mark, budget)
            lines.append(f"| {agent} | {k.seed} | {k.name} | {k.evaluations} | "
                         f"{f'{b:.3f}x' if b is not None else '-'} | {n if n else f'not within {budget}'} |")
    lines.append("")
    for agent in agents:
        reached = [n for k in c.of(agent) if (n := k.reached(mark, budget))]
        total = len(c.of(agent))
        median = f", median {statistics.median(reached):g} evaluations" if reached else ""
        lines.append(f"- {agent}: reached {SHARE:.0%} in {len(reached)} of {total} seeds{median}")
    return "\n".join(lines)


def compare(curves: list[Curve]) -> list[Comparison]:
    by_workload: dict[str, list[Curve]] = {}
    for curve in curves:
        if curve.evaluations:
            by_workload.setdefault(curve.workload, []).append(curve)
    return [Comparison(w, tuple(cs)) for w, cs in sorted(by_workload.items())]


def as_json(comparisons: list[Comparison]) -> dict:
    out = {}
    for c in comparisons:
        either = c.best_either()
        mark = SHARE * either[0] if either else None
        out[c.workload] = {
            "budget": c.budget, "best_either": either[0] if either else None, "mark": mark,
            "sessions": [{"name": k.name, "agent": k.agent, "seed": k.seed, "evaluations": k.evaluations,
                          "best": list(k.best), "best_ids": list(k.best_ids),
                          "bands": [list(k.band(n)) if k.band(n) else None for n in range(1, k.evaluations + 1)],
                          "reached": k.reached(mark, c.budget) if mark else None} for k in c.curves]}
    return out


# ---------------------------------------------------------------------------- the plot


def plot(comparisons: list[Comparison], out: Path) -> Path:
    """search_vs_random.png (matplotlib), else search_vs_random.txt (plotext's text plot)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as mpl
    except ImportError:
        return _text_plot(comparisons, out / "search_vs_random.txt")
    fig, axes = mpl.subplots(1, len(comparisons), figsize=(6 * len(comparisons), 4.5), squeeze=False)
    colors = {"offline": "tab:blue", "random": "tab:orange"}
    for ax, c in zip(axes[0], comparisons):
        for agent in c.agents:
            for k, style in zip(c.of(agent), ("-", "--", ":", "-.") * 8):
                xs = [n for n, b in enumerate(k.best, 1) if b is not None]
                ax.step(xs, [k.best[n - 1] for n in xs], where="post", linestyle=style,
                        color=colors.get(agent), label=f"{agent} seed {k.seed}")
        either = c.best_either()
        if either:
            ax.axhline(SHARE * either[0], color="grey", linewidth=0.8, label=f"{SHARE:.0%} of the best")
        ax.set_title(c.workload)
        ax.set_xlabel("evaluations")
        ax.set_ylabel("best speedup found")
        ax.legend(fontsize=7)
    path = out / "search_vs_random.png"
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def _text_plot(comparisons: list[Comparison], path: Path) -> Path:
    import plotext as plt

    markers = {"offline": "o0@", "random": "x+*"}
    parts = []
    for c in comparisons:
        plt.clear_figure()
        plt.plotsize(100, 28)
        plt.theme("clear")
        for agent in c.agents:
            for k, marker in zip(c.of(agent), markers.get(agent, "#%&") * 8):
                xs = [n for n, b in enumerate(k.best, 1) if b is not None]
                if xs:
                    plt.plot(xs, [k.best[n - 1] for n in xs], label=f"{agent} seed {k.seed}", marker=marker)
        either = c.best_either()
        if either:
            plt.horizontal_line(SHARE * either[0])
        plt.xlabel("evaluations")
        # plotext drops a title wider than the plot: the heading is a line of its own
        heading = (f"{c.workload}: best speedup found after n evaluations"
                   + (f" (the flat line: {SHARE:.0%} of the best, {SHARE * either[0]:.3f}x)" if either else ""))
        parts.append(heading + "\n" + plt.uncolorize(plt.build()))
    path.write_text("\n\n".join(parts) + "\n")
    return path


# ---------------------------------------------------------------------------- running searches


def generations_for(candidates: int, islands: int) -> int:
    """`cuco search --generations` for about `candidates` evaluations: generation 0 holds the seed
    and a fast-path proposal, every later one a proposal per island."""
    return max(1, math.ceil((candidates - 2) / islands))


def run_searches(args: argparse.Namespace, out: Path) -> tuple[list[Path], bool]:
    """The searches, in series; the session folders, and whether every search ended as a search
    should (exit 0, or 130 when --limit-s stopped it)."""
    root = Path(args.root)
    root.mkdir(parents=True, exist_ok=True)
    generations = generations_for(args.candidates, args.islands)
    paths, fine = [], True
    for workload in args.workloads:
        for seed in args.seeds:
            for agent in args.agents:
                session = root / f"{Path(workload).name}-{agent}-s{seed}"  # a workload may be a folder
                paths.append(session)
                if (session / ".git").is_dir():
                    print(f"{session.name}: already there, read and not run again", flush=True)
                else:
                    cmd = [sys.executable, "-m", "cuco_tui.cli", "search", "--workload", workload, "--agent", agent,
                           "--seed", str(seed), "--generations", str(generations), "--islands", str(args.islands),
                           "--session", str(session)] + (["--gpus", args.gpus] if args.gpus else []) + \
                        (["--keep-workers"] if args.keep_workers else [])
                    started = time.monotonic()
                    rc = _search(cmd, out / f"{session.name}.log", args.limit_s)
                    fine &= rc in (0, 130)
                    print(f"{session.name}: exit {rc} in {time.monotonic() - started:.0f} s "
                          f"(log {out / f'{session.name}.log'})", flush=True)
                if args.bundles and (session / ".git").is_dir():
                    Path(args.bundles).mkdir(parents=True, exist_ok=True)
                    with SessionRepo.open(session) as repo:
                        export_bundle(repo, Path(args.bundles) / f"{session.name}.bundle")
    return paths, fine


def _search(cmd: list[str], log: Path, limit_s: float | None) -> int:
    """One `cuco search`, its output to `log`; after `limit_s` stopped as Ctrl-C stops it (the
    evaluations in flight committed), then, if it has not left STOP_GRACE_S later, a second
    Ctrl-C (at once)."""
    with log.open("w") as sink:
        proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, cwd=REPO)
        try:
            return proc.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
        try:
            return proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            return proc.wait()


# ---------------------------------------------------------------------------- main


def _names(text: str) -> list[str]:
    return [t for t in text.split(",") if t]


def _seeds(text: str) -> list[int]:
    try:
        return [int(t) for t in _names(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"seeds are whole numbers separated by commas, not {text!r}") from None


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="search_vs_random.py", description=__doc__.split("\n\n")[0])
    p.add_argument("sessions", nargs="*", type=Path, help="session folders, .bundle files, or folders of them")
    p.add_argument("--out", type=Path, default=Path("search_vs_random"), help="where the table, JSON and plot go")
    p.add_argument("--run", action="store_true", help="run the searches first (cuco search, in series)")
    p.add_argument("--workloads", type=_names, default=["gemm_allgather", "moe_dispatch_combine"])
    p.add_argument("--seeds", type=_seeds, default=[1, 2, 3])
    p.add_argument("--agents", type=_names, default=list(AGENT_ORDER))
    p.add_argument("--candidates", type=int, default=30, help="evaluations per search, about (see above)")
    p.add_argument("--islands", type=int, default=3)
    p.add_argument("--gpus", help="cuco search --gpus (default: every GPU)")
    p.add_argument("--limit-s", type=float, help="stop each search after this many seconds")
    p.add_argument("--keep-workers", action="store_true", help="cuco search --keep-workers (both agents alike)")
    p.add_argument("--root", default="/tmp/cuco-search-vs-random", help="where --run puts the sessions")
    p.add_argument("--bundles", help="export each session --run ran or found to DIR/NAME.bundle")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    try:
        if not args.run and not args.sessions:
            raise Refused("give sessions to compare, or --run to run the searches")
        if args.run and (args.candidates < 3 or args.islands < 1):
            raise Refused("--candidates needs at least 3 (the seed, a fast path, one more) and --islands 1 or more")
        unknown = sorted(set(args.agents) - {"offline", "random", "claude"})
        if unknown:
            raise Refused(f"no agent {unknown[0]!r}: the agents are offline, random and claude")
        args.out.mkdir(parents=True, exist_ok=True)
        ran, fine = run_searches(args, args.out) if args.run else ([], True)
        curves = [read_curve(p) for p in ran + session_paths(list(args.sessions))]
    except (Refused, SessionError) as exc:
        print(f"search_vs_random.py: {exc}", file=sys.stderr)
        return 2
    comparisons = compare(curves)
    if not comparisons:
        print("search_vs_random.py: no session holds an evaluation", file=sys.stderr)
        return 2
    text = "\n\n".join(report(c) for c in comparisons)
    figure = plot(comparisons, args.out)
    text += f"\n\nPlot: {figure.name}\n"
    (args.out / "search_vs_random.md").write_text(text)
    (args.out / "search_vs_random.json").write_text(json.dumps(as_json(comparisons), indent=1))
    print(text)
    return 0 if fine else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
