"""Python's side of the prebuilt grouped GEMM (cuco_grouped_gemm_lib.h's C ABI), for references and
benchmarks: the same library the candidates link, called through ctypes.

`loaded(entry)` finds a configuration's library where the rank worker preloaded it (RTLD_GLOBAL:
its entry point is in the process's global namespace) or loads it from a path; `GroupedGemm` is one
created GEMM, launched on a stream over device arrays the caller owns (`Problems`).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

ABI = 1  # CUCO_GROUPED_GEMM_LIB_ABI


class Setup(ctypes.Structure):
    _fields_ = [("abi", ctypes.c_int32), ("max_groups", ctypes.c_int32), ("sms", ctypes.c_int32),
                ("reserved", ctypes.c_int32)]


class Problems(ctypes.Structure):
    """One launch's groups: device arrays (shapes [g][3] int32: m, n, k; strides [3][g] int64: a's,
    b's, d's row lengths; a, b, d [g] pointers), read when the kernel runs."""

    _fields_ = [("groups", ctypes.c_int32), ("reserved", ctypes.c_int32), ("shapes", ctypes.c_void_p),
                ("strides", ctypes.c_void_p), ("a", ctypes.c_void_p), ("b", ctypes.c_void_p),
                ("d", ctypes.c_void_p), ("host_shapes", ctypes.c_void_p)]


class Info(ctypes.Structure):
    _fields_ = [("sms", ctypes.c_int32), ("smem_bytes", ctypes.c_int32), ("workspace_bytes", ctypes.c_int64)]


_CREATE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(Setup), ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(Info),
                           ctypes.c_char_p, ctypes.c_size_t)
_LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(Problems), ctypes.c_void_p)
_RELEASE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class Api(ctypes.Structure):
    _fields_ = [("abi", ctypes.c_int32), ("block_m", ctypes.c_int32), ("block_n", ctypes.c_int32),
                ("cluster_m", ctypes.c_int32), ("cluster_n", ctypes.c_int32), ("create", _CREATE),
                ("launch", _LAUNCH), ("release", _RELEASE)]


class GroupedGemmError(RuntimeError):
    """The library refused a setup or a launch; the message is the library's, or the CUDA error's."""


def loaded(entry: str, paths: list[str] | None = None) -> Api | None:
    """The API of the configuration whose entry point is `entry` (e.g. cuco_grouped_gemm_128x256_1x1):
    from `paths` loaded with RTLD_GLOBAL, or already in this process's global namespace; None when
    neither has it or it speaks another ABI."""
    try:
        for path in paths or []:
            ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
        fn = getattr(ctypes.CDLL(None), entry)
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.POINTER(Api)
    fn.argtypes = []
    api = fn()
    if not api or api.contents.abi != ABI:
        return None
    return api.contents


def _set_device(device: int) -> None:
    """cudaSetDevice in the process's CUDA runtime (the one the library was linked against, found by
    its soname); where there is none to find, the library's runtime has the caller's device."""
    try:
        runtime = ctypes.CDLL("libcudart.so.13")
    except OSError:
        return
    rc = runtime.cudaSetDevice(ctypes.c_int(device))
    if rc:
        raise GroupedGemmError(f"cudaSetDevice({device}) returned CUDA error {rc}")


@dataclass
class GroupedGemm:
    """One grouped GEMM of a configuration on the current device, its workspace sized for
    `max_groups`; launches on one stream (they share the workspace)."""

    api: Api
    handle: ctypes.c_void_p
    info: Info

    @classmethod
    def create(cls, api: Api, max_groups: int, sms: int = 0, device: int | None = None) -> "GroupedGemm":
        """`device`: made current in the CUDA runtime first (the library creates on the current
        device; the caller's CuPy may have set it in its own view of the runtime)."""
        if device is not None:
            _set_device(device)
        setup = Setup(ABI, max_groups, sms, 0)
        handle = ctypes.c_void_p()
        info = Info()
        error = ctypes.create_string_buffer(1024)
        if api.create(ctypes.byref(setup), ctypes.byref(handle), ctypes.byref(info), error, len(error)):
            raise GroupedGemmError(error.value.decode(errors="replace"))
        return cls(api, handle, info)

    def launch(self, problems: Problems, stream: int) -> None:
        """One grouped GEMM over `problems`' arrays, enqueued on `stream` (a cudaStream_t as int).
        The parameters of a set of arrays are built at its first launch and kept: launch a new set
        outside any stream capture first."""
        if not self.handle:
            raise GroupedGemmError("grouped GEMM launched after release")
        rc = self.api.launch(self.handle, ctypes.byref(problems), ctypes.c_void_p(stream))
        if rc:
            raise GroupedGemmError(f"the grouped GEMM's launch returned CUDA error {rc}")

    def release(self) -> None:
        if self.handle:
            self.api.release(self.handle)
            self.handle = ctypes.c_void_p()
