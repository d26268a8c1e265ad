"""The include lines of a source, read once (source/includes.py) for L0's check, `cuco export`
and the toolchain's choice of what a candidate links: commented-out includes count for none."""

from __future__ import annotations

from cuco_tui.source.includes import included, includes
from cuco_tui.toolchain.attention import uses_attention
from cuco_tui.toolchain.nvcc import uses_cutlass
from cuco_tui.toolchain.tile_gemm_lib import uses_library

SOURCE = """#include <cuda_runtime.h>
  #  include "cuco_runtime.cuh"  // the runtime
#include_next <vector>
#include CUCO_HEADER
// #include "cuco_attn.h"
/*
#include "cuco_tile_gemm_lib.h"
#include <cutlass/gemm/device/gemm.h>
*/
"""


def test_each_include_line_with_its_header_and_where_it_is():
    found = includes(SOURCE)
    assert [i.header for i in found] == ["cuda_runtime.h", "cuco_runtime.cuh", "vector", ""]
    assert [i.named for i in found] == ["<cuda_runtime.h>", '"cuco_runtime.cuh"', "<vector>", ""]
    macro = found[3]
    assert macro.through_macro and macro.argument == "CUCO_HEADER"
    second = found[1]
    assert SOURCE[second.offset:].startswith("  #  include") and SOURCE[second.argument_offset:].startswith('"cuco')
    assert included(SOURCE) == ("cuda_runtime.h", "cuco_runtime.cuh", "vector")


def test_an_include_in_a_block_comment_links_nothing():
    """It counted: a candidate with a CUTLASS include in a block comment was refused where CUTLASS
    is missing ("the candidate includes CUTLASS") and compiled with its flags and long time limit
    elsewhere; one with the fused GEMM library's waited for that library's build, and one with the
    attention library's failed where that library cannot be built."""
    assert not uses_cutlass(SOURCE) and not uses_library(SOURCE) and not uses_attention(SOURCE)
    live = '#include "cuco_tile_gemm_lib.h"\n#include <cutlass/gemm/device/gemm.h>\n#include "cuco_attn.h"\n'
    assert uses_cutlass(live) and uses_library(live) and uses_attention(live)
