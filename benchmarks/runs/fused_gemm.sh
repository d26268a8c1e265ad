#!/usr/bin/env bash
# One device call on ONE GPU (nvidia-h100-x1 or nvidia-h200): the runtime's fused GEMM
# (cuco_tile_gemm.cuh, the kernel of gemm_allgather's fused_tile template) against cuBLAS on
# each bench shape's per-rank problem at W=2, every arrival flag set; then each once with its
# flags set late by a second stream. Builds 5 units in parallel (about 1-2 min on 16 cores),
# runs about 1-2 min. Needs the CUTLASS headers: the nvidia-cutlass wheel in .whl/ (wheels.sh).
#   bash benchmarks/runs/fused_gemm.sh          # after the pip line of docs/performance.md
set -u
STEP_TAIL=40
source "$(dirname "$0")/common.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv
python3 -c "from cuco_tui.toolchain.toolchain import discover; t = discover(); print('CUTLASS', t.cutlass_version, t.cutlass or t.cutlass_problem)"
step fused-gemm "${BENCH_S:-540}" python3 benchmarks/fused_gemm.py --out "$OUT" --jobs 8 ${FUSED_ARGS:-}
# SHARED=1: the fused_tile template itself, every knob value once (one knob changed at a time),
# verified with 2, 4 and 8 ranks sharing this GPU (back-to-back check included); about 5 min more.
if [ "${SHARED:-0}" = 1 ]; then
  step fused-tile-shared "${SHARED_S:-420}" python3 benchmarks/shared_gpu_check.py gemm_allgather --out "$OUT/check" \
    --worlds 2,4,8 --sweep --strategies fused_tile --jobs 2
fi
