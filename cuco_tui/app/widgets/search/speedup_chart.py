"""Every measured candidate's speedup over the reference, the best so far, 1.0x, and the bound:
what a perfect overlap would reach (the geometric mean over the bench shapes of reference time
/ bound time, from the session's bounds), drawn as a line of its own."""

from __future__ import annotations

from textual.reactive import reactive
from textual_plotext import PlotextPlot


class SpeedupChart(PlotextPlot):
    """`points`: (candidate number, speedup) of the measured candidates, in commit order;
    `bound`: the bound as a speedup (None: not measured)."""

    points: reactive[tuple[tuple[int, float], ...]] = reactive((), always_update=True)
    bound: reactive[float | None] = reactive(None)

    def on_mount(self) -> None:
        self.redraw()

    def watch_points(self, points: tuple[tuple[int, float], ...]) -> None:
        self.redraw()

    def watch_bound(self, bound: float | None) -> None:
        self.redraw()

    def redraw(self) -> None:
        points, bound = self.points, self.bound
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title("speedup over the reference" + (f" · bound {bound:.2f}x" if bound else ""))
        plt.xlabel("candidate")
        marks = [1.0] + ([bound] if bound else [])
        if points:
            xs = [x for x, _ in points]
            ys = [y for _, y in points]
            best, line = 0.0, []
            for y in ys:
                best = max(best, y)
                line.append(best)
            lo, hi = min(xs), max(xs)
            plt.hline(1.0, "gray")
            if bound:
                plt.hline(bound, "red")
            plt.plot(xs, line, marker="braille", color="green", label="best so far")
            plt.scatter(xs, ys, marker="●", color="cyan", label="measured")
            plt.xlim(lo - 0.5, hi + 0.5)
            step = max(1, (hi - lo) // 8 + 1)
            plt.xticks(list(range(lo, hi + 1, step)))
            low, high = min(0.9, min(ys) - 0.1), max(1.1, max(ys + marks) + 0.1)
        else:
            plt.hline(1.0, "gray")
            if bound:
                plt.hline(bound, "red")
            low, high = 0.5, max(1.5, max(marks) + 0.1)
        plt.ylim(low, high)
        _ticks(plt, low, high, bound)
        self.refresh()


def _ticks(plt, low: float, high: float, bound: float | None) -> None:
    """Y ticks that always include the reference (1.0x) and the bound, labelled so: plotext's
    own ticks skip them, and a coloured line alone does not say what it is."""
    step = (high - low) / 4
    named = {1.0: "1.0 ref"}
    if bound:
        named[bound] = f"{bound:.2f} bound"
    ticks = [low + i * step for i in range(5) if all(abs(low + i * step - v) > step / 2 for v in named)]
    ticks += list(named)
    ticks.sort()
    plt.yticks(ticks, [named.get(t, f"{t:.2f}") for t in ticks])
