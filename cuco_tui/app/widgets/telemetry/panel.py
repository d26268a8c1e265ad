"""The GPUs at a glance: one row per GPU (utilization, memory, power, temperature, SM clock,
NVLink GB/s), refreshed about once a second. A thread worker owns the reader and does every
NVML call; its snapshots come back as Sampled messages, so the event loop never waits on the
driver. Without a GPU the panel is one line saying so (class -none)."""

from __future__ import annotations

import threading
from typing import Protocol

from textual import work
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import DataTable, Label, Static
from textual.worker import get_current_worker

from cuco_tui.harness.telemetry import GpuSample, TelemetryReader, TelemetrySnapshot

WAITING = "reading telemetry…"
NONE = "–"


class SnapshotSource(Protocol):
    """What the panel polls: a TelemetryReader, or a stand-in in tests."""

    def sample(self) -> TelemetrySnapshot: ...


def _number(value: float | None, spec: str, unit: str = "") -> str:
    return NONE if value is None else f"{value:{spec}}{unit}"


def _memory(sample: GpuSample) -> str:
    if sample.memory_used_mib is None or sample.memory_total_mib is None:
        return NONE
    return f"{sample.memory_used_mib / 1024:.1f}/{sample.memory_total_mib / 1024:.0f}"


def _nvlink(sample: GpuSample) -> str:
    tx, rx = sample.nvlink_tx_gbps, sample.nvlink_rx_gbps
    if tx is None and rx is None:
        return NONE
    return f"{_number(tx, '.1f')}/{_number(rx, '.1f')}"


def row(sample: GpuSample) -> tuple[str, ...]:
    """The cells of one GPU's row, in the table's column order."""
    return (
        str(sample.index),
        _number(sample.utilization_pct, "d", "%"),
        _memory(sample),
        _number(sample.power_w, ".0f", "W"),
        _number(sample.temperature_c, "d", "C"),
        _number(sample.sm_clock_mhz, "d"),
        _nvlink(sample),
    )


# (label, key, width): fixed widths, so that the table does not jump as values change
COLUMNS = (
    ("GPU", "gpu", 3),
    ("util", "util", 4),
    ("mem GiB", "mem", 9),
    ("power", "power", 5),
    ("temp", "temp", 4),
    ("SM MHz", "sm", 6),
    ("NVLink tx/rx GB/s", "nvlink", 17),
)


class TelemetryPanel(Vertical):
    class Sampled(Message):
        """A snapshot from the polling thread."""

        def __init__(self, snapshot: TelemetrySnapshot) -> None:
            super().__init__()
            self.snapshot = snapshot

    snapshot: reactive[TelemetrySnapshot | None] = reactive(None)

    def __init__(self, reader: SnapshotSource | None = None, interval_s: float = 1.0, **kwargs) -> None:
        """`reader`: what to poll; by default a TelemetryReader that the panel opens in its
        worker thread and closes when it is removed. A reader passed in stays the caller's."""
        super().__init__(**kwargs)
        self._reader = reader
        self._interval_s = interval_s
        self._stop = threading.Event()

    def compose(self) -> ComposeResult:
        yield Label("GPUs", id="telemetry-title", classes="panel-title")
        yield Static(WAITING, id="telemetry-status")
        table: DataTable = DataTable(id="telemetry-table", cursor_type="none", zebra_stripes=False)
        for label, key, width in COLUMNS:
            table.add_column(label, key=key, width=width)
        table.display = False
        yield table

    def on_mount(self) -> None:
        self._poll()

    def on_unmount(self) -> None:
        self._stop.set()  # wakes the worker from its wait; it closes its reader and ends

    @work(thread=True, exclusive=True, group="telemetry", name="telemetry", exit_on_error=False)
    def _poll(self) -> None:
        worker = get_current_worker()
        reader = self._reader if self._reader is not None else TelemetryReader()
        try:
            while not (worker.is_cancelled or self._stop.is_set()):
                try:
                    snapshot = reader.sample()
                except Exception as exc:  # a stand-in reader that fails: say so, keep polling
                    snapshot = TelemetrySnapshot(error=f"telemetry failed: {type(exc).__name__}: {exc}")
                try:
                    self.post_message(self.Sampled(snapshot))
                except RuntimeError:  # the app's loop is gone
                    return
                self._stop.wait(self._interval_s)
        finally:
            if self._reader is None:
                reader.close()

    def on_telemetry_panel_sampled(self, message: Sampled) -> None:
        message.stop()
        self.snapshot = message.snapshot

    def watch_snapshot(self, snapshot: TelemetrySnapshot | None) -> None:
        if snapshot is None or not self.is_mounted:
            return
        status = self.query_one("#telemetry-status", Static)
        table = self.query_one(DataTable)
        names = {s.name for s in snapshot.samples}
        title = f"GPUs · {names.pop()}" if len(names) == 1 else "GPUs"
        self.query_one("#telemetry-title", Label).update(title)
        if not snapshot.samples:
            status.update(f"GPUs: {snapshot.error or 'none found; telemetry off'}")
            status.display, table.display = True, False
            self.add_class("-none")
            return
        self.remove_class("-none")
        status.display, table.display = False, True
        keys = [str(s.index) for s in snapshot.samples]
        if [str(k.value) for k in table.rows] != keys:
            table.clear()
            for sample in snapshot.samples:
                table.add_row(*row(sample), key=str(sample.index))
            return
        for sample in snapshot.samples:
            for (_, column, _), cell in zip(COLUMNS, row(sample)):
                table.update_cell(str(sample.index), column, cell)
