#!/usr/bin/env bash
# One device call on a single GPU (nvidia-h100-x1 or nvidia-h200): the prebuilt grouped GEMM's
# configurations (cuco_grouped_gemm_lib.h; the 128x256 and 256x128 tiles new on 2026-12-07)
# against cuBLAS on moe_dispatch_combine's expert problems, then its one-GPU test.
#   1. benchmarks/grouped_gemm.py: rank 0's experts at W=2 and W=4, every bench shape, both
#      projections; cublasGemmEx per expert, cublasGemmGroupedBatchedEx, each configuration in one
#      launch and in four; each checked against cuBLAS first (builds the six libraries side by
#      side, about a minute on 16 cores, then ~2 min of GPU);
#   2. tests/workloads/moe_dispatch_combine/test_moe_grouped_gemm.py -m gpu: every configuration
#      against a float reference with uneven, empty and chunk-cut groups (the 2-GPU tests skip).
# Run after the pip line of docs/performance.md; results in $OUT (grouped_gemm.md/.json, step logs).
set -u
STEP_TAIL=30
source "$(dirname "$0")/common.sh"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
TAIL=40 step grouped-gemm "${BENCH_S:-330}" python3 benchmarks/grouped_gemm.py --worlds "${WORLDS:-2,4}" \
  --reps "${REPS:-15}" --out "$OUT"
step grouped-tests "${TESTS_S:-120}" python3 -m pytest -q -n 0 -p no:cacheprovider -m gpu -rs \
  tests/workloads/moe_dispatch_combine/test_moe_grouped_gemm.py
