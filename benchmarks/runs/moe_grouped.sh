#!/usr/bin/env bash
# One device call on a single GPU (nvidia-h100-x1 or nvidia-h200): moe_dispatch_combine's expert
# phase in its GEMM modes. In order of importance, each step under its own time limit:
#   1. benchmarks/moe_grouped.py: rank 0's expert phase at W=2 at every bench shape, grouped GEMMs,
#      two GEMMs per expert and auto (the reference: per expert from 128 rows an expert on
#      average), with and without CUDA graphs, 25 interleaved calls each, every variant against a
#      float64 expert MLP, auto's way and its time over the faster fixed way's; then the whole
#      reference against float64 on a one-rank communicator at the verify shapes, every GEMM mode
#      (about 2-3 min);
#   2. the one-GPU tests of tests/workloads/moe_dispatch_combine/test_moe_gpu.py (the reference
#      against float64 in every mode, graphs on and off, the modes against each other; the 2-GPU
#      tests skip) (~1.5 min);
#   3. the seed and every strategy template, each knob value one at a time, verified with 2 ranks
#      sharing the GPU, and at their defaults with 4 (benchmarks/shared_gpu_check.py) (~3 min).
# Everything lands in one archive, $OUT/moe_grouped.tgz, beside the benchmark's table and JSON.
# Run after the pip line of docs/performance.md:
#   python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
#   export PYTHONPATH=/tmp/site:$PWD; bash benchmarks/runs/moe_grouped.sh
set -u
REAL_OUT=${OUT:-/tmp/out}
mkdir -p "$REAL_OUT"
OUT=/tmp/moe-grouped-out
rm -rf "$OUT"
STEP_TAIL=12
source "$(dirname "$0")/common.sh"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
TAIL=24 step moe-grouped "${BENCH_S:-230}" python3 benchmarks/moe_grouped.py --reps 25 --out "$OUT/moe_grouped.json"
step moe-ref-tests "${TESTS_S:-120}" python3 -m pytest -q -n 0 -p no:cacheprovider -m gpu -rs tests/workloads/moe_dispatch_combine/test_moe_gpu.py
step shared-check-w2 "${SWEEP_S:-170}" python3 benchmarks/shared_gpu_check.py --out "$OUT/check-w2" --jobs 3 \
  --worlds 2 --sweep moe_dispatch_combine
step shared-check-w4 "${W4_S:-60}" python3 benchmarks/shared_gpu_check.py --out "$OUT/check-w4" --jobs 3 \
  --worlds 4 moe_dispatch_combine
cp "$OUT/moe-grouped.txt" "$REAL_OUT/" 2>/dev/null
cp "$OUT/moe_grouped.json" "$REAL_OUT/" 2>/dev/null
tar -czf "$REAL_OUT/moe_grouped.tgz" -C "$(dirname "$OUT")" "$(basename "$OUT")"
ls -la "$REAL_OUT"
