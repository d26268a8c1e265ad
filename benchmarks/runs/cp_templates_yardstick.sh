#!/usr/bin/env bash
# One device call (nvidia-h200-x2): cp_attention's reference, parts, seed and every strategy
# template (with the tolerance floor), PyTorch's fused attention on the slowest rank's work as a
# yardstick for the attention kernels, and the MoE reference with its CUDA graphs off (the
# before of the capture fix). Results under $OUT.
set -u
STEP_TAIL=14
source "$(dirname "$0")/common.sh"
step prebuild 40 python3 benchmarks/runs/prebuild.py --jobs 14 cp_attention
step cp-yardstick 90 python3 benchmarks/cp_yardstick.py --world 2 --out "$OUT/cp_yardstick.json"
step moe-ref-eager 60 env CUCO_MOE_REF_GRAPHS=0 python3 benchmarks/workload_bench.py -w moe_dispatch_combine --gpus 0,1 \
  --no-seed --out "$OUT/moe_eager"
TAIL=20 step cp-templates 300 python3 benchmarks/workload_bench.py -w cp_attention --gpus 0,1 --templates \
  --out "$OUT/cp"
