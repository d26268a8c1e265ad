"""The workload manifest type: a workload's shapes, sizes, tolerance and the files it ships, as
`cuco_tui.workload.manifest.load_workload` reads them from a folder."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

# What a manifest's `libraries` may name for its reference: "attention" is cuco_attn.h (cuDNN's
# fused attention), "grouped_gemm" the prebuilt CUTLASS grouped GEMM of cuco_grouped_gemm_lib.h.
LIBRARIES = ("attention", "grouped_gemm")
# Element types a manifest's `dtype` may name; the harness ABI (cuco_abi.h) has one code for each.
DTYPES = ("bf16", "f16", "f32", "i32", "i64", "u8")
# The workload a command, the app and a search config use when none is named.
DEFAULT_WORKLOAD = "gemm_allgather"


class WorkloadError(ValueError):
    """A workload that cannot be used, with a sentence saying what to fix."""


@dataclass(frozen=True)
class Shape:
    name: str
    dims: dict[str, int]

    def label(self) -> str:
        return f"{self.name} (" + ", ".join(f"{k}={v}" for k, v in self.dims.items()) + ")"


@dataclass(frozen=True)
class Workload:
    name: str
    title: str
    root: Path
    world_sizes: tuple[int, ...]
    dtype: str
    dim_names: tuple[str, ...]
    divisible: dict[str, int]
    rtol: float
    warmup: int
    repetitions: int
    verify_shapes: tuple[Shape, ...]
    bench_shapes: tuple[Shape, ...]
    seed: Path
    reference: Path
    task: Path
    candidates_dir: Path | None = None
    extra: dict[str, object] = field(default_factory=dict)
    # Error denominator floor as a fraction of max|want| (0: none); see harness.verify.compare.
    floor: float = 0.0

    def check_world(self, world: int) -> None:
        if world not in self.world_sizes:
            sizes = ", ".join(str(w) for w in self.world_sizes)
            raise WorkloadError(f"{self.name} runs on {sizes} GPUs, not {world}")
        for shape in self.verify_shapes + self.bench_shapes:
            for dim, per_rank in self.divisible.items():
                value = shape.dims[dim]
                # Dims split across ranks (M, N for gemm_allgather) must divide by world * unit.
                unit = per_rank * (world if dim in self.split_dims else 1)
                if value % unit:
                    raise WorkloadError(
                        f"{self.name}: shape {shape.name} has {dim}={value}, which is not a multiple of {unit} "
                        f"at world size {world}"
                    )

    @property
    def libraries(self) -> tuple[str, ...]:
        """Harness libraries the workload's reference and candidates may call (LIBRARIES)."""
        return tuple(self.extra.get("libraries", ()))  # type: ignore[arg-type]

    @property
    def split_dims(self) -> tuple[str, ...]:
        return tuple(self.extra.get("split_dims", ("M", "N")))  # type: ignore[arg-type]

    @property
    def design_notes(self) -> Path:
        """The workload's own notes for agents (`design/common.md`, `design/<backend>.md`):
        its baseline and what was measured or learnt on it; may not exist."""
        return self.root / "design"

    def candidates(self) -> list[Path]:
        files = [self.seed]
        if self.candidates_dir and self.candidates_dir.is_dir():
            files += sorted(self.candidates_dir.glob("*.cu"))
        return files
