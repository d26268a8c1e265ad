"""GPU telemetry: the reader without a driver, the NVLink rate math, one GPU's failing field,
and the panel in an app, fed by the real reader (no GPU here) or by a stand-in. Every wait is
bounded."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

import pytest
from textual.app import App, ComposeResult
from textual.widgets import DataTable, Static

from cuco_tui.app.widgets.telemetry.panel import TelemetryPanel
from cuco_tui.harness.telemetry import (NO_DRIVER, NVLINK_RX_FIELD, NVLINK_TX_FIELD, CounterReading, GpuSample,
                                TelemetryReader, TelemetrySnapshot, throughput_gbps)
from pilot_helpers import wait_until



# --- the rate math ------------------------------------------------------------------------------

def test_throughput_from_two_cumulative_readings():
    earlier = CounterReading(kib=1_000_000, at_s=100.0)
    later = CounterReading(kib=1_000_000 + 48_828_125, at_s=102.0)  # 50e9 bytes in 2 s
    assert throughput_gbps(earlier, later) == pytest.approx(25.0)


def test_throughput_is_unknown_without_two_readings_time_or_a_monotonic_counter():
    r = CounterReading(kib=10, at_s=1.0)
    assert throughput_gbps(None, r) is None
    assert throughput_gbps(r, None) is None
    assert throughput_gbps(r, CounterReading(kib=20, at_s=1.0)) is None  # no time passed
    assert throughput_gbps(r, CounterReading(kib=5, at_s=2.0)) is None  # the counter was reset
    assert throughput_gbps(r, CounterReading(kib=10, at_s=2.0)) == 0.0


# --- the reader -----------------------------------------------------------------------------------

def test_reader_without_a_driver_says_telemetry_is_off(monkeypatch):
    monkeypatch.delenv("CUCO_NO_GPU", raising=False)
    reader = TelemetryReader()
    try:
        snapshot = reader.sample()
    finally:
        reader.close()
    if snapshot.samples:
        pytest.skip("this machine has an NVIDIA driver")
    assert snapshot == TelemetrySnapshot(samples=(), error=NO_DRIVER, timestamp=snapshot.timestamp)
    reader.close()  # twice is fine


class NvmlError(Exception):
    pass


class FakeNvml:
    """Two GPUs; GPU 1 cannot report its power, GPU 0 has no NVLink counters. Counts its calls."""

    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1

    def __init__(self) -> None:
        self.inits = self.shutdowns = 0
        self.kib = {0: 0, 1: 0}
        self.at_us = 1_000_000

    def nvmlInit(self):
        self.inits += 1

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return b"NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetUtilizationRates(self, h):
        return SimpleNamespace(gpu=90 + h)

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(used=(10 + h) * 2**30, total=80 * 2**30)

    def nvmlDeviceGetPowerUsage(self, h):
        if h == 1:
            raise NvmlError("not supported")
        return 650_000

    def nvmlDeviceGetTemperature(self, h, sensor):
        return 60 + h

    def nvmlDeviceGetClockInfo(self, h, clock):
        return 1980

    def nvmlDeviceGetFieldValues(self, h, fields):
        assert [f for f, _ in fields] == [NVLINK_TX_FIELD, NVLINK_RX_FIELD]
        ok = 3 if h == 0 else 0  # NVML_ERROR_NOT_SUPPORTED for GPU 0's counters
        return [SimpleNamespace(nvmlReturn=ok, timestamp=self.at_us, value=SimpleNamespace(ullVal=self.kib[h] * k))
                for k in (2, 1)]


def test_reader_reads_every_gpu_and_keeps_what_one_gpu_cannot_report():
    nvml = FakeNvml()
    reader = TelemetryReader(nvml=nvml, clock=lambda: 5.0)
    first = reader.sample()
    assert first.error is None and [s.index for s in first.samples] == [0, 1]
    gpu0, gpu1 = first.samples
    assert gpu0 == GpuSample(0, "NVIDIA H100 80GB HBM3", 90, 10240.0, 81920.0, 650.0, 60, 1980, None, None, 5.0)
    assert gpu1.power_w is None and gpu1.utilization_pct == 91 and gpu1.temperature_c == 61
    assert gpu1.nvlink_tx_gbps is None  # one reading: no rate yet

    nvml.kib[1] += 1_000_000  # KiB: tx moves 2e6 KiB, rx 1e6 KiB in half a second
    nvml.at_us += 500_000
    second = reader.sample()
    assert second.samples[1].nvlink_tx_gbps == pytest.approx(2e6 * 1024 / 0.5 / 1e9)
    assert second.samples[1].nvlink_rx_gbps == pytest.approx(1e6 * 1024 / 0.5 / 1e9)
    assert second.samples[0].nvlink_tx_gbps is None

    reader.close()
    reader.close()
    assert (nvml.inits, nvml.shutdowns) == (1, 1)
    assert reader.sample().samples == ()


def test_reader_whose_driver_fails_to_start():
    class Broken(FakeNvml):
        def nvmlInit(self):
            raise NvmlError("Driver Not Loaded")

    nvml = Broken()
    reader = TelemetryReader(nvml=nvml)
    assert reader.sample().error == NO_DRIVER
    reader.close()
    assert nvml.shutdowns == 0


# --- the panel ------------------------------------------------------------------------------------

class PanelApp(App):
    def __init__(self, reader=None) -> None:
        super().__init__()
        self.reader = reader

    def compose(self) -> ComposeResult:
        yield TelemetryPanel(reader=self.reader, interval_s=0.05)


def status(app: App) -> str:
    return str(app.query_one("#telemetry-status", Static).render())


@pytest.mark.asyncio
async def test_panel_without_a_gpu_says_telemetry_is_off(monkeypatch):
    monkeypatch.delenv("CUCO_NO_GPU", raising=False)
    if TelemetryReader().sample().samples:
        pytest.skip("this machine has an NVIDIA driver")
    app = PanelApp()
    async with app.run_test(size=(80, 10)) as pilot:
        assert await wait_until(pilot, lambda: status(app) == f"GPUs: {NO_DRIVER}")  # one line, named
        assert not app.query_one(DataTable).display


def gpu(index: int, util: int, tx: float | None, at: float) -> GpuSample:
    return GpuSample(index=index, name="NVIDIA H200", utilization_pct=util, memory_used_mib=20 * 1024.0,
                     memory_total_mib=141 * 1024.0, power_w=512.4, temperature_c=55 + index, sm_clock_mhz=1980,
                     nvlink_tx_gbps=tx, nvlink_rx_gbps=tx / 2 if tx is not None else None, timestamp=at)


class SyntheticReader:
    """Snapshots of two GPUs whose utilization climbs by one each sample."""

    def __init__(self) -> None:
        self.count = 0
        self.threads: set[str] = set()

    def sample(self) -> TelemetrySnapshot:
        self.threads.add(threading.current_thread().name)
        self.count += 1
        at = float(self.count)
        return TelemetrySnapshot(samples=(gpu(0, 40 + self.count, 123.4, at), gpu(1, 7, None, at)), timestamp=at)


@pytest.mark.asyncio
async def test_panel_shows_a_row_per_gpu_from_an_injected_reader():
    reader = SyntheticReader()
    app = PanelApp(reader)
    async with app.run_test(size=(80, 10)) as pilot:
        table = app.query_one(DataTable)
        assert await wait_until(pilot, lambda: table.row_count == 2)
        assert table.display and not app.query_one("#telemetry-status", Static).display
        assert table.get_row("1") == ["1", "7%", "20.0/141", "512W", "56C", "1980", "–"]
        row0 = table.get_row("0")
        assert row0[2:] == ["20.0/141", "512W", "55C", "1980", "123.4/61.7"]
        polled = reader.count
        assert await wait_until(pilot, lambda: reader.count >= polled + 2)  # it keeps polling
        assert await wait_until(pilot, lambda: table.get_row("0")[1] != row0[1])  # and redraws in place
        assert table.row_count == 2
        assert str(app.query_one("#telemetry-title").render()) == "GPUs · NVIDIA H200"
    assert threading.main_thread().name not in reader.threads  # never sampled on the event loop
    stopped = reader.count
    await asyncio.sleep(0.2)
    assert reader.count == stopped  # the worker ended with the app
