"""A banner shown only when this machine has no usable GPU: it probes NVML in a thread (the
driver can take a while to answer) and says what still works."""

from __future__ import annotations

from textual import work
from textual.widgets import Static

from cuco_tui.harness.gpus import GpuInventory, inventory


class GpuBanner(Static):
    """`message`: what the screen can still do without a GPU; the probe's reason is appended."""

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
            problem = f" ({inv.problem})" if inv.problem else ""
            self.update(self.message + problem)
            self.add_class("-visible")
        else:
            self.remove_class("-visible")
