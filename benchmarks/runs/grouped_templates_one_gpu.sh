#!/usr/bin/env bash
# One device call on a single GPU: moe_dispatch_combine's expert_pipeline and arrival_pipeline
# with the CUTLASS grouped GEMM of 128x256 tiles (their default since 2026-12-07), verified with
# the ranks sharing the GPU: every knob value one at a time at W=2, the defaults at W=4, perturbed
# rounds on (benchmarks/shared_gpu_check.py; nothing timed). Results in $OUT/w2, $OUT/w4.
set -u
STEP_TAIL=25
source "$(dirname "$0")/common.sh"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
step w2 "${W2_S:-330}" python3 benchmarks/shared_gpu_check.py --out "$OUT/w2" --jobs 3 --build-jobs 14 --worlds 2 \
  --sweep --strategies expert_pipeline,arrival_pipeline moe_dispatch_combine
step w4 "${W4_S:-150}" python3 benchmarks/shared_gpu_check.py --out "$OUT/w4" --jobs 2 --build-jobs 14 --worlds 4 \
  --strategies expert_pipeline,arrival_pipeline moe_dispatch_combine
