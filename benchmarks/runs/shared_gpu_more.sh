#!/usr/bin/env bash
# A second single-GPU call (nvidia-h100-x1), after shared_gpu.sh: every knob value of the
# cp, kv and MoE templates with 2 ranks sharing the GPU, every default at 8 ranks, and the
# fault suite at 4 ranks sharing the GPU (the cycle through three ranks included). Results under $OUT.
#   bash benchmarks/runs/shared_gpu_more.sh
set -u
STEP_TAIL=14
source "$(dirname "$0")/common.sh"
step sweep-w2 "${SWEEP_S:-330}" python3 benchmarks/shared_gpu_check.py --out "$OUT/sweep" --jobs 3 --build-jobs 15 --worlds 2 --sweep \
  cp_attention kv_transfer moe_dispatch_combine
step default-w8 "${W8_S:-130}" python3 benchmarks/shared_gpu_check.py --out "$OUT/w8" --jobs 2 --worlds 8
TAIL=20 step faults-w4 "${FAULTS_S:-120}" python3 -m cuco_tui.cli selftest --faults --share-gpu --world 4 --launch-timeout 10 \
  --only cycle_of_three,hang,missing_signal,infinite_loop,illegal_address
