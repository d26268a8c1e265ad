"""ctypes mirror of runtime/cuco_abi.h, and loading a candidate library.

tests/harness/test_abi.py compiles cuco_abi.h with the C compiler and checks every offset here."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

ABI_VERSION = 3
MAX_BUFFERS = 8
MAX_DIMS = 8
NAME_LEN = 16
ERROR_LEN = 1024
NCCL_ID_BYTES = 128
WAIT_LABEL_LEN = 24
WAIT_FUNCTION_LEN = 32

DTYPES = {"bf16": 1, "f16": 2, "f32": 3, "i32": 4, "i64": 5, "u8": 6}
WAIT_KINDS = {1: "flag", 2: "signal", 3: "barrier"}
WAIT_STATES = {0: "idle", 1: "waiting", 2: "done"}


class CBuffer(ctypes.Structure):
    _fields_ = [
        ("ptr", ctypes.c_void_p),
        ("bytes", ctypes.c_uint64),
        ("shape", ctypes.c_int64 * 4),
        ("ndim", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("name", ctypes.c_char * NAME_LEN),
    ]


class CWaitSlot(ctypes.Structure):
    _fields_ = [
        ("state", ctypes.c_uint32),
        ("site", ctypes.c_int32),
        ("kind", ctypes.c_int32),
        ("peer", ctypes.c_int32),
        ("id", ctypes.c_uint64),
        ("expected", ctypes.c_uint64),
        ("observed", ctypes.c_uint64),
        ("completed", ctypes.c_uint64),
        ("label", ctypes.c_char * WAIT_LABEL_LEN),
        ("function", ctypes.c_char * WAIT_FUNCTION_LEN),
    ]


class CContext(ctypes.Structure):
    _fields_ = [
        ("abi_version", ctypes.c_int32),
        ("rank", ctypes.c_int32),
        ("world", ctypes.c_int32),
        ("device", ctypes.c_int32),
        ("n_inputs", ctypes.c_int32),
        ("n_outputs", ctypes.c_int32),
        ("inputs", CBuffer * MAX_BUFFERS),
        ("outputs", CBuffer * MAX_BUFFERS),
        ("n_dims", ctypes.c_int32),
        ("trace_slots", ctypes.c_int32),
        ("dim_names", (ctypes.c_char * NAME_LEN) * MAX_DIMS),
        ("dims", ctypes.c_int64 * MAX_DIMS),
        ("nccl_id", ctypes.c_ubyte * NCCL_ID_BYTES),
        ("trace", ctypes.c_void_p),
        ("error", ctypes.c_char * ERROR_LEN),
    ]


@dataclass(frozen=True)
class WaitRecord:
    """One block's wait slot as read from the trace memory."""

    slot: int
    state: str
    site: int
    kind: str
    peer: int
    id: int
    expected: int
    observed: int
    completed: int
    label: str = ""  # the wait's name (cuco::WaitSite); "" for a wait at a device line (CUCO_SITE)
    function: str = ""  # the function whose code waits: the kernel, or a device function it calls


def decode_slots(raw: bytes) -> list[WaitRecord]:
    """Decode a dump of consecutive cuco_wait_slot structs (slots never used are skipped)."""
    size = ctypes.sizeof(CWaitSlot)
    out = []
    for i in range(len(raw) // size):
        s = CWaitSlot.from_buffer_copy(raw, i * size)
        if s.state == 0 and s.completed == 0:
            continue
        out.append(
            WaitRecord(
                slot=i,
                state=WAIT_STATES.get(s.state, str(s.state)),
                site=s.site,
                kind=WAIT_KINDS.get(s.kind, str(s.kind)),
                peer=s.peer,
                id=s.id,
                expected=s.expected,
                observed=s.observed,
                completed=s.completed,
                label=s.label.decode(errors="replace"),
                function=s.function.decode(errors="replace"),
            )
        )
    return out


class AbiError(RuntimeError):
    """The library does not expose the candidate ABI."""


def preload(paths: list[str]) -> None:
    """Load harness libraries (cuDNN, then cuco_attn) with RTLD_GLOBAL, so that a candidate that
    calls them finds their symbols when it is loaded."""
    for path in paths:
        try:
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        except OSError as exc:
            raise AbiError(f"cannot load the harness library {path}: {exc}") from exc


class CandidateLibrary:
    """A compiled candidate, loaded into this (rank worker) process."""

    def __init__(self, path: Path, name: str = "") -> None:
        """`name`: what messages call it (a kept worker loads a copy of the candidate's library)."""
        name = name or path.name
        try:
            self.lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_LOCAL)
        except OSError as exc:
            if "undefined symbol: cuco_attn_" in str(exc):
                raise AbiError(f"cannot load {name}: it calls the harness attention library (cuco_attn.h), "
                               f"which this run did not load: {exc}") from exc
            raise AbiError(f"cannot load {name}: {exc}") from exc
        missing = [n for n in ("cuco_init", "cuco_launch", "cuco_teardown") if not hasattr(self.lib, n)]
        if missing:
            raise AbiError(f"{name} does not export {', '.join(missing)}")
        self.lib.cuco_init.argtypes = [ctypes.POINTER(CContext), ctypes.POINTER(ctypes.c_void_p)]
        self.lib.cuco_init.restype = ctypes.c_int
        self.lib.cuco_launch.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        self.lib.cuco_launch.restype = ctypes.c_int
        self.lib.cuco_teardown.argtypes = [ctypes.c_void_p]
        self.lib.cuco_teardown.restype = ctypes.c_int

    def init(self, ctx: CContext) -> tuple[int, ctypes.c_void_p]:
        state = ctypes.c_void_p()
        rc = self.lib.cuco_init(ctypes.byref(ctx), ctypes.byref(state))
        return rc, state

    def launch(self, state: ctypes.c_void_p, stream_ptr: int) -> int:
        return self.lib.cuco_launch(state, ctypes.c_void_p(stream_ptr))

    def teardown(self, state: ctypes.c_void_p) -> int:
        return self.lib.cuco_teardown(state)
