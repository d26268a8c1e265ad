#!/usr/bin/env bash
# A short call on 2 GPUs (nvidia-h100-x2) after the harness protocol, ABI 3 and the fused GEMM
# library landed: every test of tests/evaluate/test_gpu.py (real GPUs: seeds, faults, hangs and
# where their reports point), the shared-GPU tests of gemm_allgather and gemm_reducescatter and
# the first compute-sanitizer run, while the fused GEMM library builds beside them; then fused_tile
# (ring, 2 chunks) through the library at W=2. About 5 minutes.
#   R=$OUT; OUT=/tmp/o bash benchmarks/runs/final_x2.sh; tar czf $R/f.tgz -C /tmp/o .
set -u
source "$(dirname "$0")/common.sh"
nvidia-smi -L
mkdir -p /tmp/v
python3 benchmarks/render_strategy.py gemm_allgather fused_tile /tmp/v/ring2.cu chunks=2
timeout "${PREBUILD_S:-150}" python3 benchmarks/runs/prebuild.py --jobs 16 --files /tmp/v/ring2.cu > "$OUT/prebuild.txt" 2>&1 &
build=$!
timeout "${TESTS_S:-110}" bash scripts/gpu-tests.sh tests/evaluate/test_gpu.py -q -rfE --tb=short \
  -o console_output_style=classic > "$OUT/test_gpu.txt" 2>&1; echo "test_gpu rc=$?"; tail -n 25 "$OUT/test_gpu.txt"
timeout "${SHARED_S:-70}" bash scripts/gpu-tests.sh tests/evaluate/test_gpu_shared.py -q -rfE --tb=short \
  -k "gemm_allgather or gemm_reducescatter or memcheck" -o console_output_style=classic > "$OUT/test_shared.txt" 2>&1
echo "test_shared rc=$?"; tail -n 20 "$OUT/test_shared.txt"
wait $build; tail -n 3 "$OUT/prebuild.txt"
timeout 45 python3 -m cuco_tui.cli eval /tmp/v/ring2.cu --workload gemm_allgather --gpus 0,1 --json > "$OUT/ring2.txt" 2>&1
echo "eval rc=$?"; sed -n '/^{/,$p' "$OUT/ring2.txt" > "$OUT/ring2.json"
python3 -c "
import json; r=json.load(open('$OUT/ring2.json')); print(r['status'], r['reason'][:200])
for t in r['timings']: print(t['shape'], round(t['candidate']['median'],3), round(t['reference']['median'],3), round(t['speedup'],2))
" 2>&1 | tail -8
exit 0
