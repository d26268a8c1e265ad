"""Fixtures of moe_dispatch_combine's tests."""

import pytest

from moe_emulator import build_kernels


@pytest.fixture(scope="session")
def emu(tmp_path_factory):
    """REF._KERNELS built for the CPU (g++, C++20), loaded with ctypes: once for every test file
    of this folder that runs them (the kernel tests, the Reference class on fake GPUs)."""
    return build_kernels(tmp_path_factory)
