#!/usr/bin/env bash
# One device call on a single GPU (nvidia-h100-x1) closing issue 22's one-GPU checks and the test
# move: the new strategies' single-knob sweeps with 4 ranks sharing the GPU (fused_tile of
# gemm_allgather, arrival_pipeline of moe_dispatch_combine; their W=2 sweeps ran on 2026-11-24),
# then the one-GPU tests from their new folders (scripts/gpu-tests.sh). Results under $OUT.
#   bash benchmarks/runs/final_one_gpu.sh        # about 7 minutes on a fresh H100
set -u
STEP_TAIL=25
source "$(dirname "$0")/common.sh"
nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv,noheader
step fused-w4 "${FUSED_S:-230}" python3 benchmarks/shared_gpu_check.py gemm_allgather --out "$OUT/fused-w4" \
  --worlds 4 --sweep --strategies fused_tile --jobs "${JOBS:-3}" --build-jobs 15
step arrival-w4 "${ARRIVAL_S:-150}" python3 benchmarks/shared_gpu_check.py moe_dispatch_combine \
  --out "$OUT/arrival-w4" --worlds 4 --sweep --strategies arrival_pipeline --jobs "${JOBS:-3}" --build-jobs 15
step gpu-tests "${TESTS_S:-200}" bash scripts/gpu-tests.sh -q
