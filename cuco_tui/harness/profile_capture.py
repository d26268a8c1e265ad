"""What a rank's GPU ran, recorded through CUPTI's activity API (NVIDIA's `cupti-python`, the
`profile` extra): every kernel (concurrent, so kernels of different streams keep overlapping as they
would untraced), every copy (memcpy; memcpy2, the copies between devices) and every memset, with
start and end on the host's clock, as core/profile.py `Activity` records.

Nsight Systems is not on the GPU hosts; CUPTI is a pip package and runs inside the worker. Every
name this module calls is in cupti-python's `cupti/cupti.pyi`: activity_register_callbacks,
activity_enable, activity_disable, activity_flush_all, get_timestamp, ActivityKind,
ActivityMemcpyKind, ActivityFlag.FLUSH_FORCED, and the records' fields kind, start, end, device_id,
stream_id, name (a kernel's), copy_kind, bytes, src_device_id, dst_device_id (a peer copy's).

CUPTI loads libcupti and the driver when first called, not on import: a host without them fails at
`start`, not at `load`. Each way it can fail is a `CaptureUnavailable`, one sentence, and the
evaluation goes on without a profile."""

from __future__ import annotations

from typing import Any

from cuco_tui.core.profile import KERNEL, MEMCPY, MEMSET, Activity

BUFFER_BYTES = 8 * 1024 * 1024  # per buffer CUPTI asks for; it asks again when one fills
MAX_ACTIVITIES = 100_000  # per rank: past this, records are counted, not kept (a runaway candidate)
INSTALL = "pip install 'cuco-tui[profile]'"


class CaptureUnavailable(RuntimeError):
    """No activities can be recorded here: the sentence says why."""


def _sentence(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def load_cupti() -> Any:
    """cupti-python's `cupti` module; CaptureUnavailable when it is not installed or cannot load."""
    try:
        from cupti import cupti
    except ImportError as exc:
        raise CaptureUnavailable(f"CUPTI's Python package is not installed on this host ({INSTALL}): "
                                 f"{_sentence(exc)}") from None
    except Exception as exc:  # a wheel that imports but cannot load its parts (cuda-bindings, libcupti)
        raise CaptureUnavailable(f"CUPTI's Python package could not be loaded: {_sentence(exc)}") from None
    return cupti


class ActivityRecorder:
    """Records between `start` and `stop`; `stop` returns the activities (at most `limit`) and
    counts those past it in `dropped`."""

    def __init__(self, cupti: Any, limit: int = MAX_ACTIVITIES) -> None:
        self.cupti = cupti
        self.limit = limit
        self.records: list[Activity] = []
        self.dropped = 0
        self.unreadable = 0  # records whose fields could not be read (a cupti-python of another layout)
        self.kinds = (cupti.ActivityKind.CONCURRENT_KERNEL, cupti.ActivityKind.MEMCPY, cupti.ActivityKind.MEMCPY2,
                      cupti.ActivityKind.MEMSET)
        self._enabled: list[Any] = []
        self._copy_kinds = {int(k): k.name.lower() for k in cupti.ActivityMemcpyKind}

    @classmethod
    def load(cls) -> ActivityRecorder:
        return cls(load_cupti())

    def start(self) -> None:
        """Turn recording on; CaptureUnavailable (with everything turned off again) when CUPTI refuses."""
        c = self.cupti
        try:
            c.activity_register_callbacks(self._buffer_requested, self._buffer_completed)
            for kind in self.kinds:
                c.activity_enable(kind)
                self._enabled.append(kind)
        except Exception as exc:  # cuptiError, or NotSupportedError (no driver, no libcupti)
            self._disable()
            raise CaptureUnavailable(f"CUPTI could not record activities on this host: {_sentence(exc)}") from None

    def now_ns(self) -> int:
        """The clock CUPTI stamps activities with (the host's), in nanoseconds."""
        return int(self.cupti.get_timestamp())

    def stop(self) -> list[Activity]:
        """Deliver every buffered record (a forced flush: the GPU work has finished), turn recording
        off, and return what was recorded; CaptureUnavailable when the records cannot be read out."""
        try:
            self.cupti.activity_flush_all(self.cupti.ActivityFlag.FLUSH_FORCED)
        except Exception as exc:  # cuptiError from the flush
            raise CaptureUnavailable(f"CUPTI's records could not be read out: {_sentence(exc)}") from None
        finally:
            self._disable()
        return list(self.records)

    def _disable(self) -> None:
        for kind in self._enabled:
            try:
                self.cupti.activity_disable(kind)
            except Exception:  # turning off what may not be on: nothing more to do about it
                pass
        self._enabled = []

    def _buffer_requested(self) -> tuple[int, int]:
        return BUFFER_BYTES, 0  # 0: as many records as fit

    def _buffer_completed(self, activities: list) -> None:
        # Called by CUPTI (possibly on a thread of its own) with records that live only until it
        # returns: each is copied into an Activity here. An exception must not escape into CUPTI.
        for record in activities:
            try:
                activity = self._convert(record)
            except Exception:
                self.unreadable += 1
                continue
            if activity is None:
                continue
            if len(self.records) < self.limit:
                self.records.append(activity)
            else:
                self.dropped += 1

    def _convert(self, r: Any) -> Activity | None:
        kinds = self.cupti.ActivityKind
        kind = r.kind
        if kind == kinds.CONCURRENT_KERNEL:
            return Activity(KERNEL, str(r.name), int(r.start), int(r.end), int(r.device_id), int(r.stream_id))
        if kind == kinds.MEMCPY:
            copy_kind = self._copy_kinds.get(int(r.copy_kind), "unknown")
            return Activity(MEMCPY, f"memcpy {copy_kind}", int(r.start), int(r.end), int(r.device_id),
                            int(r.stream_id), copy_kind=copy_kind, bytes=int(r.bytes))
        if kind == kinds.MEMCPY2:  # a copy between two devices
            return Activity(MEMCPY, f"memcpy ptop {int(r.src_device_id)}->{int(r.dst_device_id)}", int(r.start),
                            int(r.end), int(r.device_id), int(r.stream_id), copy_kind="ptop", bytes=int(r.bytes))
        if kind == kinds.MEMSET:
            return Activity(MEMSET, "memset", int(r.start), int(r.end), int(r.device_id), int(r.stream_id),
                            bytes=int(r.bytes))
        return None
