"""What the GPUs are doing now, read through NVML (nvidia-ml-py): utilization, memory, power,
temperature, SM clock and NVLink throughput, one GpuSample per GPU. Knows nothing about Textual.

NVML is initialised once per TelemetryReader, on its first sample (so that constructing one never
touches the driver), and shut down by close(). Every NVML call is guarded: a GPU that cannot
report a field gets None for that field and the other fields and GPUs are kept. A reader is meant
to be used from one thread at a time (the panel's worker)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

NO_DRIVER = "no NVIDIA driver: telemetry off"
HIDDEN = "GPUs hidden by CUCO_NO_GPU=1: telemetry off"
CLOSED = "telemetry reader closed"

# NVML's field ids for the cumulative NVLink data counters (KiB, payload only), and the scope id
# that sums them over all links of a GPU.
NVLINK_TX_FIELD = 138  # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
NVLINK_RX_FIELD = 139  # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
ALL_LINKS = 0xFFFFFFFF

T = TypeVar("T")


@dataclass(frozen=True)
class GpuSample:
    index: int
    name: str
    utilization_pct: int | None
    memory_used_mib: float | None
    memory_total_mib: float | None
    power_w: float | None
    temperature_c: int | None
    sm_clock_mhz: int | None
    nvlink_tx_gbps: float | None  # None: no NVLink counters, or no earlier reading to compare with
    nvlink_rx_gbps: float | None
    timestamp: float  # seconds since the epoch


@dataclass(frozen=True)
class TelemetrySnapshot:
    samples: tuple[GpuSample, ...] = ()
    error: str | None = None  # a sentence for the engineer when there is nothing to read
    timestamp: float = 0.0


@dataclass(frozen=True)
class CounterReading:
    """One cumulative NVLink counter: KiB moved so far, and when NVML read it (seconds)."""

    kib: int
    at_s: float


def throughput_gbps(earlier: CounterReading | None, later: CounterReading | None) -> float | None:
    """GB/s (10^9 bytes a second) between two readings of a cumulative KiB counter; None when
    either is missing, time did not advance, or the counter went backwards (a reset)."""
    if earlier is None or later is None:
        return None
    seconds = later.at_s - earlier.at_s
    moved = later.kib - earlier.kib
    if seconds <= 0 or moved < 0:
        return None
    return moved * 1024 / seconds / 1e9


class TelemetryReader:
    """sample() -> TelemetrySnapshot. `nvml` is the pynvml module (a stand-in in tests)."""

    def __init__(self, nvml: Any = None, clock: Callable[[], float] = time.time) -> None:
        self._nvml = nvml
        self._clock = clock
        self._started = False
        self._error: str | None = None
        self._handles: dict[int, Any] = {}
        self._count = 0
        self._counters: dict[tuple[int, int], CounterReading] = {}  # (gpu, field) -> last reading

    # --- lifetime -------------------------------------------------------------------------------

    def _start(self) -> None:
        self._started = True
        if self._nvml is None:
            if os.environ.get("CUCO_NO_GPU") == "1":
                self._error = HIDDEN
                return
            try:
                import pynvml
            except ImportError:
                self._error = NO_DRIVER
                return
            self._nvml = pynvml
        try:
            self._nvml.nvmlInit()
        except Exception:  # NVMLError or a missing library: the same sentence either way
            self._nvml = None
            self._error = NO_DRIVER
            return
        count = self._guard(self._nvml.nvmlDeviceGetCount)
        if count is None:
            self.close()
            self._error = NO_DRIVER
            return
        self._count = count

    def close(self) -> None:
        """Shut NVML down, once; sample() afterwards says telemetry is off."""
        nvml, self._nvml = self._nvml, None
        if self._started and self._error is None and nvml is not None:
            self._guard(nvml.nvmlShutdown)
        self._started = True
        self._error = self._error or CLOSED
        self._handles.clear()

    def __enter__(self) -> TelemetryReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- reading --------------------------------------------------------------------------------

    def sample(self) -> TelemetrySnapshot:
        if not self._started:
            self._start()
        now = self._clock()
        if self._error is not None:
            return TelemetrySnapshot(error=self._error, timestamp=now)
        return TelemetrySnapshot(samples=tuple(self._sample_gpu(i, now) for i in range(self._count)), timestamp=now)

    def _sample_gpu(self, index: int, now: float) -> GpuSample:
        nvml = self._nvml
        handle = self._handles.get(index)
        if handle is None:
            handle = self._guard(nvml.nvmlDeviceGetHandleByIndex, index)
            if handle is None:
                return GpuSample(index, "unavailable", None, None, None, None, None, None, None, None, now)
            self._handles[index] = handle
        name = self._guard(nvml.nvmlDeviceGetName, handle)
        util = self._guard(lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu)
        memory = self._guard(nvml.nvmlDeviceGetMemoryInfo, handle)
        milliwatts = self._guard(nvml.nvmlDeviceGetPowerUsage, handle)
        temperature = self._guard(nvml.nvmlDeviceGetTemperature, handle, getattr(nvml, "NVML_TEMPERATURE_GPU", 0))
        sm_clock = self._guard(nvml.nvmlDeviceGetClockInfo, handle, getattr(nvml, "NVML_CLOCK_SM", 1))
        tx, rx = self._nvlink(index, handle, now)
        return GpuSample(
            index=index,
            name=name.decode() if isinstance(name, bytes) else (name or "unknown"),
            utilization_pct=int(util) if util is not None else None,
            memory_used_mib=memory.used / 2**20 if memory is not None else None,
            memory_total_mib=memory.total / 2**20 if memory is not None else None,
            power_w=milliwatts / 1000 if milliwatts is not None else None,
            temperature_c=int(temperature) if temperature is not None else None,
            sm_clock_mhz=int(sm_clock) if sm_clock is not None else None,
            nvlink_tx_gbps=tx,
            nvlink_rx_gbps=rx,
            timestamp=now,
        )

    def _nvlink(self, index: int, handle: Any, now: float) -> tuple[float | None, float | None]:
        """TX and RX rates since the previous sample, from the cumulative all-link counters."""
        fields = [(NVLINK_TX_FIELD, ALL_LINKS), (NVLINK_RX_FIELD, ALL_LINKS)]
        values = self._guard(self._nvml.nvmlDeviceGetFieldValues, handle, fields)
        rates: list[float | None] = []
        for position, field in enumerate((NVLINK_TX_FIELD, NVLINK_RX_FIELD)):
            reading = _counter(values[position], now) if values is not None else None
            earlier = self._counters.pop((index, field), None)
            if reading is not None:
                self._counters[(index, field)] = reading
            rates.append(throughput_gbps(earlier, reading))
        return rates[0], rates[1]

    @staticmethod
    def _guard(call: Callable[..., T], *args: Any) -> T | None:
        try:
            return call(*args)
        except Exception:  # NVMLError_NotSupported, _NoPermission, _GpuIsLost, ...: the field is unknown
            return None


def _counter(value: Any, now: float) -> CounterReading | None:
    """A field value as a counter reading; None when NVML answered with an error for it."""
    try:
        if value.nvmlReturn != 0:
            return None
        kib = int(value.value.ullVal)
        at_s = value.timestamp / 1e6 if value.timestamp > 0 else now  # NVML stamps in microseconds
    except Exception:
        return None
    return CounterReading(kib, at_s)
