"""Building candidates: toolchain discovery, nvcc with a build cache, readable diagnostics."""

from cuco_tui.toolchain.diagnostics import parse_nvcc_output
from cuco_tui.toolchain.nvcc import BuildCache, BuildResult, compile_candidate

__all__ = ["BuildCache", "BuildResult", "compile_candidate", "parse_nvcc_output"]
