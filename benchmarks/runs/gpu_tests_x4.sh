#!/usr/bin/env bash
# One call on a 4-GPU host (nvidia-h100-x4): every GPU test after a parallel prebuild (the fused
# GEMM libraries, every workload's seed and templates, the attention library), harness and
# evaluate first, then the workloads; then fused_tile through its prebuilt library on real GPUs at
# W=4 and W=2 against the reference and the bounds. About 9 minutes.
#   R=$OUT; OUT=/tmp/o bash benchmarks/runs/gpu_tests_x4.sh; tar czf $R/t.tgz -C /tmp/o .
set -u
STEP_TAIL=30
source "$(dirname "$0")/common.sh"
nvidia-smi -L
mkdir -p /tmp/v
python3 benchmarks/render_strategy.py gemm_allgather fused_tile /tmp/v/ring1.cu chunks=1
python3 benchmarks/render_strategy.py gemm_allgather fused_tile /tmp/v/ring2.cu chunks=2
step prebuild "${PREBUILD_S:-130}" python3 benchmarks/runs/prebuild.py --jobs 48
python3 benchmarks/runs/prebuild.py --jobs 4 --files /tmp/v/*.cu > "$OUT/prebuild-v.txt" 2>&1
TAIL=45 step gpu-tests "${TESTS_S:-330}" bash scripts/gpu-tests.sh tests/evaluate tests/harness tests/core \
  tests/workloads/gemm_reducescatter tests/workloads/gemm_allgather tests/workloads/kv_transfer \
  tests/workloads/tp_attn_out tests/workloads/moe_dispatch_combine tests/workloads/cp_attention \
  -q -rfE --tb=line --durations=15 -o console_output_style=classic
step baseline4 60 python3 -m cuco_tui.cli baseline -w gemm_allgather --gpus 0,1,2,3 --json
step w4-ring1 60 python3 -m cuco_tui.cli eval /tmp/v/ring1.cu --workload gemm_allgather --gpus 0,1,2,3 --json
step baseline2 60 python3 -m cuco_tui.cli baseline -w gemm_allgather --gpus 0,1 --json
step w2-ring2 60 python3 -m cuco_tui.cli eval /tmp/v/ring2.cu --workload gemm_allgather --gpus 0,1 --json
for f in "$OUT"/w[24]-*.txt "$OUT"/baseline[24].txt; do [ -f "$f" ] && sed -n '/^{/,$p' "$f" > "${f%.txt}.json"; done
python3 benchmarks/eval_table.py "$OUT/baseline4.json" "ring1-w4=$OUT/w4-ring1.json"
python3 benchmarks/eval_table.py "$OUT/baseline2.json" "ring2-w2=$OUT/w2-ring2.json"
exit 0
