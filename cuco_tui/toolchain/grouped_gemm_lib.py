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

import re
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from cuco_tui.source.includes import included
from cuco_tui.source.lexer import SourceText

SOURCE = Path(__file__).resolve().parent.parent / "harness" / "grouped_gemm_lib" / "cuco_grouped_gemm_lib.cu"
HEADER = "cuco_grouped_gemm_lib.h"
# `gg::GroupedConfig{128, 128, 1, 1}`, `constexpr gg::GroupedConfig kGrouped{...}` or `(...)`.
_CONFIG = re.compile(r"\bGroupedConfig\b[^;{}()]*?[{(]\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*[})]")


@dataclass(frozen=True, order=True)
class GroupedConfig:
    """A CTA tile block_m x block_n (x 64 along K) and a cluster cluster_m x cluster_n
    (grouped_gemm::GroupedConfig)."""

    LABEL: ClassVar[str] = "grouped GEMM"
    STEM: ClassVar[str] = "cuco_grouped_gemm"
    SOURCE: ClassVar[Path] = SOURCE
    SALT: ClassVar[bytes] = b"cuco-grouped-gemm-lib-v1\0"

    block_m: int
    block_n: int
    cluster_m: int
    cluster_n: int

    @property
    def name(self) -> str:
        return f"{self.block_m}x{self.block_n} tiles, {self.cluster_m}x{self.cluster_n} clusters"

    @property
    def tag(self) -> str:
        return f"{self.block_m}x{self.block_n}-{self.cluster_m}x{self.cluster_n}"

    @property
    def entry(self) -> str:
        """The library's one exported function, as cuco_grouped_gemm_lib.h declares it."""
        return f"cuco_grouped_gemm_{self.block_m}x{self.block_n}_{self.cluster_m}x{self.cluster_n}"

    def defines(self) -> list[str]:
        return [f"-DCUCO_GG_BLOCK_M={self.block_m}", f"-DCUCO_GG_BLOCK_N={self.block_n}",
                f"-DCUCO_GG_CLUSTER_M={self.cluster_m}", f"-DCUCO_GG_CLUSTER_N={self.cluster_n}",
                f"-DCUCO_GG_ENTRY={self.entry}"]


# The configurations a library exists for (cuco_grouped_gemm_lib.h declares their entry points).
CONFIGS = (GroupedConfig(128, 128, 1, 1), GroupedConfig(128, 128, 2, 1))
KNOWN = "tiles 128x128, clusters 1x1 or 2x1"


def uses_library(source: str) -> bool:
    """Whether a candidate includes the prebuilt grouped GEMM's header."""
    return HEADER in included(source)


def configs_named(source: str) -> tuple[tuple[GroupedConfig, ...], list[str]]:
    """(the configurations to link, the ones written that have no library, as written). Those written
    as `GroupedConfig{BM, BN, CM, CN}` with literal numbers, outside comments; every configuration
    when the source writes none so (it computes one: any may be asked for at run time)."""
    code = SourceText(source).code
    named, unknown = [], []
    for m in _CONFIG.finditer(code):
        config = GroupedConfig(*(int(g) for g in m.groups()))
        if config in CONFIGS:
            named.append(config)
        else:
            unknown.append(f"gg::GroupedConfig{{{', '.join(m.groups())}}}")
    if not named and not unknown:
        return CONFIGS, []
    return tuple(sorted(set(named))), list(dict.fromkeys(unknown))
