#!/usr/bin/env bash
# One device call on a single GPU: moe_dispatch_combine's reference with the prebuilt grouped GEMM
# (gemm=cutlass, its default since 2026-12-07 where the harness preloads the library):
#   (in this order: 2, 3, then 1)
#   1. benchmarks/moe_grouped.py: rank 0's expert phase at W=2 at every bench shape in the four
#      modes (cuBLAS grouped, per expert, auto; cutlass), graphs on and off, against float64; then
#      the whole reference against float64 on a one-rank communicator in every mode;
#   2. the one-GPU tests of test_moe_gpu.py (every mode, graphs on and off);
#   3. `cuco workload check --gpu --share-gpu` at W=2 and W=4: the rank workers preload the library
#      and the reference finds it (a ReferenceWarning would say it fell back to cuBLAS).
set -u
STEP_TAIL=30
source "$(dirname "$0")/common.sh"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
# Correctness first (the tests build the library into the shared cache), the timing last.
step ref-tests "${TESTS_S:-150}" python3 -m pytest -q -n 0 -p no:cacheprovider -m gpu -rs \
  tests/workloads/moe_dispatch_combine/test_moe_gpu.py
for w in 2 4; do
  step check-w$w 80 python3 -m cuco_tui.cli workload check workloads/moe_dispatch_combine --no-compile --gpu \
    --share-gpu --world $w
done
TAIL=16 step moe-grouped "${BENCH_S:-240}" python3 benchmarks/moe_grouped.py --reps 20 --out "$OUT/moe_grouped.json"
