"""Python's side of the harness attention library (cuco_attn.h), for references and benchmarks.

`loaded()` finds the library where the rank worker put it (preloaded with RTLD_GLOBAL, so its
symbols are in the process's global namespace) or loads it from a path; `Plan` is one shape.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

NO_MASK, CAUSAL_TOP_LEFT, CAUSAL_BOTTOM_RIGHT = 0, 1, 2


class Desc(ctypes.Structure):
    _fields_ = [
        ("heads_q", ctypes.c_int),
        ("heads_kv", ctypes.c_int),
        ("head_dim", ctypes.c_int),
        ("rows_q", ctypes.c_int),
        ("rows_kv", ctypes.c_int),
        ("q_row_stride", ctypes.c_longlong),
        ("kv_row_stride", ctypes.c_longlong),
        ("o_row_stride", ctypes.c_longlong),
        ("mask", ctypes.c_int),
        ("scale", ctypes.c_float),
        ("stats", ctypes.c_int),
    ]


class AttentionError(RuntimeError):
    """The library refused a shape or a call; the message is the library's."""


def _bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    lib.cuco_attn_create.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(Desc)]
    lib.cuco_attn_create.restype = ctypes.c_int
    lib.cuco_attn_run.argtypes = [ctypes.c_void_p] * 6 + [ctypes.c_void_p]
    lib.cuco_attn_run.restype = ctypes.c_int
    lib.cuco_attn_destroy.argtypes = [ctypes.c_void_p]
    lib.cuco_attn_destroy.restype = None
    lib.cuco_attn_last_error.argtypes = []
    lib.cuco_attn_last_error.restype = ctypes.c_char_p
    lib.cuco_attn_cudnn_version.argtypes = []
    lib.cuco_attn_cudnn_version.restype = ctypes.c_long
    return lib


def loaded(paths: list[str] | None = None) -> ctypes.CDLL | None:
    """The library: loaded from `paths` (cuDNN first, as AttentionLibrary.preload() lists them),
    or the one already in this process's global namespace; None when neither works."""
    try:
        for path in paths or []:
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        lib = ctypes.CDLL(None)
        lib.cuco_attn_create  # noqa: B018 - raises AttributeError when the library is absent
    except (OSError, AttributeError):
        return None
    return _bind(lib)


@dataclass
class Plan:
    """One attention shape on the current device (see cuco_attn.h for the layout)."""

    lib: ctypes.CDLL
    desc: Desc
    handle: ctypes.c_void_p

    @classmethod
    def create(cls, lib: ctypes.CDLL, heads_q: int, heads_kv: int, head_dim: int, rows_q: int, rows_kv: int,
               mask: int = NO_MASK, stats: bool = False, q_row_stride: int = 0, kv_row_stride: int = 0,
               o_row_stride: int = 0, scale: float = 0.0) -> "Plan":
        desc = Desc(heads_q, heads_kv, head_dim, rows_q, rows_kv, q_row_stride, kv_row_stride, o_row_stride, mask,
                    scale, int(stats))
        handle = ctypes.c_void_p()
        if lib.cuco_attn_create(ctypes.byref(handle), ctypes.byref(desc)):
            raise AttentionError(lib.cuco_attn_last_error().decode(errors="replace"))
        return cls(lib, desc, handle)

    def run(self, q: int, k: int, v: int, o: int, stream: int, stats: int = 0) -> None:
        if self.lib.cuco_attn_run(self.handle, q, k, v, o, stats or None, stream):
            raise AttentionError(self.lib.cuco_attn_last_error().decode(errors="replace"))

    def close(self) -> None:
        if self.handle:
            self.lib.cuco_attn_destroy(self.handle)
            self.handle = ctypes.c_void_p()

    def __del__(self) -> None:  # a reference object dropped between shapes frees its workspace
        self.close()
