"""A banner shown only when this machine has no usable GPU: it probes NVML in a thread (the
driver can take a while to answer) and says why there is none, then what still works. The reason
comes first and the banner wraps to the lines it needs: at 80 columns a banner cut at two lines
lost the reason, the one part a person can act on."""

from __future__ import annotations

from textual import work
from textual.widgets import Static

from cuco_tui.harness.gpus import GpuInventory, inventory


class GpuBanner(Static):
    """`message`: what the screen can still do without a GPU, a clause after "No GPU (reason): "."""

    DEFAULT_CSS = """
    GpuBanner {
        display: none;
        width: 1fr;
        height: auto;
        padding: 0 1;
        background: $warning-muted;
        color: $text-warning;
        text-style: bold;
    }
    GpuBanner.-visible {
        display: block;
    }
    """

    def __init__(self, message: str, **kwargs) -> None:
        super().__init__(message, **kwargs)
        self.message = message
        self.inventory: GpuInventory | None = None

    def on_mount(self) -> None:
        self._probe()

    @work(thread=True, exclusive=True, group="gpu-banner")
    def _probe(self) -> None:
        try:
            inv = inventory()
        except Exception as exc:  # NVML misbehaving must not take the screen down
            inv = GpuInventory((), problem=f"NVML failed: {exc}")
        self.app.call_from_thread(self.show_inventory, inv)

    def show_inventory(self, inv: GpuInventory) -> None:
        self.inventory = inv
        if inv.count == 0:
            self.update(banner_text(self.message, inv.problem))
            self.add_class("-visible")
        else:
            self.remove_class("-visible")


def banner_text(message: str, problem: str) -> str:
    return f"No GPU ({problem}): {message}" if problem else f"No GPU on this machine: {message}"
