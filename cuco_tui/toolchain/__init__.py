"""Building candidates: toolchain discovery, nvcc with a build cache, readable diagnostics, and a
pool of CPU threads that compiles candidates ahead of their evaluation."""

from cuco_tui.toolchain.build_pool import BuildPool
from cuco_tui.toolchain.diagnostics import parse_nvcc_output
from cuco_tui.toolchain.nvcc import BuildCache, BuildResult, compile_candidate

__all__ = ["BuildCache", "BuildPool", "BuildResult", "compile_candidate", "parse_nvcc_output"]
