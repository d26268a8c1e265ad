#!/usr/bin/env bash
# One device call for cp_attention (nvidia-h200-x2), 9-10 min with SEARCH_S=300: the build cache
# warmed with the harness attention library (built once, ~1 min, beside the candidates), the
# library against float64 and PyTorch on one GPU with the balanced (zigzag) work of the slowest
# rank as a second lower bound, then workload_search.sh's reference, parts, seed and offline search
# + bundle. Needs .whl/cudnn_frontend (benchmarks/runs/stage_attention_headers.sh). Results under $OUT.
#   SEARCH_S=300 bash benchmarks/runs/cp_search.sh
set -u
STEP_TAIL=30
source "$(dirname "$0")/common.sh"
step cp-prebuild 150 python3 benchmarks/runs/prebuild.py --jobs 14 cp_attention
step attention-lib 150 python3 benchmarks/attention_lib.py --world 2 --reps 5 --out "$OUT/attention_lib.json"
PREBUILD_S=60 WORKLOAD=cp_attention SEARCH_S=${SEARCH_S:-300} bash "$(dirname "$0")/workload_search.sh"
