#!/usr/bin/env bash
# A third single-GPU call (nvidia-h100-x1): the MoE and kv knob sweeps at 2 ranks sharing the GPU
# once more (after the worker began to close its NCCL group before exiting), the MoE templates
# the 8-rank step of shared_gpu_more.sh did not reach, and the whole fault suite at 4 ranks
# sharing the GPU. Results under $OUT.
set -u
STEP_TAIL=8
source "$(dirname "$0")/common.sh"
step sweep-w2 "${SWEEP_S:-200}" python3 benchmarks/shared_gpu_check.py --out "$OUT/sweep" --jobs 3 --build-jobs 15 \
  --worlds 2 --sweep kv_transfer moe_dispatch_combine
step moe-w8 "${W8_S:-60}" python3 benchmarks/shared_gpu_check.py --out "$OUT/w8" --jobs 3 --worlds 8 \
  --only chunked_pipeline,ipc_dispatch,expert_pipeline moe_dispatch_combine
TAIL=40 step faults-w4 "${FAULTS_S:-270}" python3 -m cuco_tui.cli selftest --faults --share-gpu --world 4 --launch-timeout 10
