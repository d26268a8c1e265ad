#!/usr/bin/env bash
# Every GPU test on a 4-GPU host (nvidia-h100-x4), in three calls: the 92 tests take longer than one
# 10-minute call (on 4 x H100, 2026-11-26: evaluate's 26 took 400 s, the imported programs' 9 182 s,
# gemm_reducescatter's 13 111 s). Each call starts with a
# parallel prebuild (the fused GEMM libraries, every workload's seed and templates, the attention
# library: 78 s on 64 cores), then one pytest per group of files, verbose and with a per-test
# limit, so that a call cut short still names each test's result and each failure's traceback.
#   PART=1: tests/evaluate, tests/harness, tests/core
#   PART=2: tests/workload (the imported programs), gemm_reducescatter, gemm_allgather, kv, tp_attn_out
#   PART=3: moe_dispatch_combine, cp_attention
#   PART=4: the kept rank workers (tests/evaluate/test_gpu_kept.py, 11 evaluations), alone
#   R=$OUT; OUT=/tmp/o PART=1 bash benchmarks/runs/gpu_tests_x4.sh; tar czf $R/t.tgz -C /tmp/o .
set -u
STEP_TAIL=40
source "$(dirname "$0")/common.sh"
nvidia-smi -L
step prebuild "${PREBUILD_S:-130}" python3 benchmarks/runs/prebuild.py --jobs 48
A=(-v --tb=short -rfE -p no:randomly --durations=10 --timeout="${TEST_TIMEOUT_S:-200}")
case "${PART:-1}" in
  1) step evaluate 420 bash scripts/gpu-tests.sh "${A[@]}" --ignore=tests/evaluate/test_gpu_kept.py \
       tests/evaluate tests/harness tests/core ;;
  2) step program 220 bash scripts/gpu-tests.sh "${A[@]}" tests/workload
     for w in gemm_reducescatter gemm_allgather kv_transfer tp_attn_out; do
       [ -d "tests/workloads/$w" ] && step "$w" 150 bash scripts/gpu-tests.sh "${A[@]}" "tests/workloads/$w"
     done ;;
  3) for w in moe_dispatch_combine cp_attention; do
       step "$w" 200 bash scripts/gpu-tests.sh "${A[@]}" "tests/workloads/$w"
     done ;;
  4) step kept 300 bash scripts/gpu-tests.sh "${A[@]}" tests/evaluate/test_gpu_kept.py ;;
esac
exit 0
