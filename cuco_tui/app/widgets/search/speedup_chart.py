"""Every measured candidate's speedup over the reference, the best so far, and 1.0x."""

from __future__ import annotations

from textual.reactive import reactive
from textual_plotext import PlotextPlot


class SpeedupChart(PlotextPlot):
    """`points`: (candidate number, speedup) of the measured candidates, in commit order."""

    points: reactive[tuple[tuple[int, float], ...]] = reactive((), always_update=True)

    def on_mount(self) -> None:
        self.watch_points(self.points)

    def watch_points(self, points: tuple[tuple[int, float], ...]) -> None:
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        plt.title("speedup over the reference")
        plt.xlabel("candidate")
        if points:
            xs = [x for x, _ in points]
            ys = [y for _, y in points]
            best, line = 0.0, []
            for y in ys:
                best = max(best, y)
                line.append(best)
            lo, hi = min(xs), max(xs)
            plt.hline(1.0, "gray")
            plt.plot(xs, line, marker="braille", color="green", label="best so far")
            plt.scatter(xs, ys, marker="●", color="cyan", label="measured")
            plt.xlim(lo - 0.5, hi + 0.5)
            step = max(1, (hi - lo) // 8 + 1)
            plt.xticks(list(range(lo, hi + 1, step)))
            low, high = min(0.9, min(ys) - 0.1), max(1.1, max(ys) + 0.1)
            plt.ylim(low, high)
            _reference_ticks(plt, low, high)
        else:
            plt.hline(1.0, "gray")
            plt.ylim(0.5, 1.5)
            _reference_ticks(plt, 0.5, 1.5)
        self.refresh()


def _reference_ticks(plt, low: float, high: float) -> None:
    """Y ticks that always include the reference (1.0x), labelled so: plotext's own ticks skip
    it, and the grey line alone does not say what it is."""
    step = (high - low) / 4
    ticks = [low + i * step for i in range(5) if abs(low + i * step - 1.0) > step / 2] + [1.0]
    ticks.sort()
    plt.yticks(ticks, ["1.0 ref" if t == 1.0 else f"{t:.2f}" for t in ticks])
