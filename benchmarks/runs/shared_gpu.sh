#!/usr/bin/env bash
# One device call on a single GPU (nvidia-h100-x1): every workload's seed and strategy templates
# verified with their ranks sharing the GPU (benchmarks/shared_gpu_check.py; SWEEP=1: every knob
# value), then the GPU tests that need one GPU (the references against float64, every seed with 2
# and 4 ranks sharing the GPU), and, beside them, the attention library's build-and-load test.
# Results under $OUT.
#   [SWEEP=1] [WORLDS=2,4] [JOBS=3] bash benchmarks/runs/shared_gpu.sh
set -u
STEP_TAIL=30
source "$(dirname "$0")/common.sh"
nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv
ip -brief addr 2>/dev/null || ls /sys/class/net
# Its own cache and one nvcc: it runs beside the steps below.
(timeout 300 python3 -m pytest -q -n 0 -p no:cacheprovider tests/toolchain/test_attention_lib.py > "$OUT/attention-lib-tests.txt" 2>&1;
 echo "rc=$?" >> "$OUT/attention-lib-tests.txt") &
step shared-check "${CHECK_S:-360}" python3 benchmarks/shared_gpu_check.py --out "$OUT/check" --jobs "${JOBS:-3}" \
  --worlds "${WORLDS:-2,4}" ${SWEEP:+--sweep}
step gpu-tests "${TESTS_S:-150}" bash scripts/gpu-tests.sh -q
wait
tail -n 5 "$OUT/attention-lib-tests.txt"
