"""The grouped GEMM of cuco_grouped_gemm_lib.h prebuilt: one shared library per kernel configuration,
built once per machine and cached, linked into every candidate that includes the header.

CUTLASS's ptr-array grouped GEMM (the MoE templates' expert phase, docs/grouped_gemm.md) takes a
minute or more of CPU in nvcc per configuration, and nothing of a candidate but the tile and the
cluster changes it: problem sizes and pointers are device arrays read when it runs. So it is built
here exactly as the fused GEMM is (tile_gemm_lib.py, whose build, cache key, lock and one-line
failures this shares): `libcuco_grouped_gemm-<BMxBN>-<CMxCN>-<key>.so` in the build cache, keyed by
the runtime headers (this header's bytes among them) and the library's source, the CUTLASS
headers, the nvcc version, the flags and the configuration; a candidate includes the thin header
(no CUTLASS) and is linked against the libraries of the configurations it names.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from cuco_tui.source.includes import included
from cuco_tui.toolchain.tile_gemm_lib import TiledConfig, named_configs

SOURCE = Path(__file__).resolve().parent.parent / "harness" / "grouped_gemm_lib" / "cuco_grouped_gemm_lib.cu"
HEADER = "cuco_grouped_gemm_lib.h"


@dataclass(frozen=True, order=True)
class GroupedConfig(TiledConfig):
    """The grouped GEMM's (grouped_gemm::GroupedConfig)."""

    LABEL: ClassVar[str] = "grouped GEMM"
    STEM: ClassVar[str] = "cuco_grouped_gemm"
    SOURCE: ClassVar[Path] = SOURCE
    SALT: ClassVar[bytes] = b"cuco-grouped-gemm-lib-v1\0"
    MACRO: ClassVar[str] = "CUCO_GG"
    WRITTEN: ClassVar[str] = "gg::GroupedConfig"


# The configurations a library exists for (cuco_grouped_gemm_lib.h declares their entry points).
# 128x256 tiles with 1x1 clusters were the fastest on every MoE expert problem measured, a few dozen
# rows an expert to thousands (103-142 % of cuBLAS on one H100, docs/grouped_gemm.md); the others
# stay for comparison and for candidates that name them.
CONFIGS = (GroupedConfig(128, 128, 1, 1), GroupedConfig(128, 128, 2, 1), GroupedConfig(128, 256, 1, 1),
           GroupedConfig(128, 256, 1, 2), GroupedConfig(128, 256, 2, 1), GroupedConfig(256, 128, 2, 1))
# The configuration a workload's reference calls through the harness (`libraries = ["grouped_gemm"]`):
# the fastest on every MoE expert problem measured (docs/grouped_gemm.md).
REFERENCE_CONFIG = GroupedConfig(128, 256, 1, 1)
KNOWN = "tiles 128x128 (clusters 1x1, 2x1), 128x256 (1x1, 1x2, 2x1) or 256x128 (2x1)"


def uses_library(source: str) -> bool:
    """Whether a candidate includes the prebuilt grouped GEMM's header."""
    return HEADER in included(source)


def configs_named(source: str) -> tuple[tuple[GroupedConfig, ...], list[str]]:
    """named_configs of the grouped GEMM (`gg::GroupedConfig{BM, BN, CM, CN}`)."""
    return named_configs(source, GroupedConfig, CONFIGS)
