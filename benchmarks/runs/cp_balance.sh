#!/usr/bin/env bash
# Issue 32 (nvidia-h100-x4 for W=4, or -x2): cp_attention at W GPUs against its balanced bound, in
# one call. The prebuild (seed and every template at each single-knob change, with the harness
# attention library), the library on one GPU with the balanced bound of W ranks
# (benchmarks/attention_lib.py: the zigzag work of the busiest rank, timed alone), then
# benchmarks/cp_balance.py: the reference and its parts, and each candidate of SET (core: seed,
# attn_balance, balance_overlap, ring and ipc_pull on the harness attention; knobs: balance_overlap's
# single-knob changes; all: both) through the cascade, with ms, speedup and time over the bound
# (balanced when causal, the reference's attention alone when not) per shape; a table at the end
# and the JSON after every candidate, so a call cut short keeps what it measured.
#   W=4 SET=all bash benchmarks/runs/cp_balance.sh     # estimated 9-10 min on 4 x H100
#   W=2 SET=core bash benchmarks/runs/cp_balance.sh    # estimated 6-7 min on 2 x H100
# Needs .whl/cudnn_frontend (benchmarks/runs/stage_attention_headers.sh). More than 8 files: run it
# with OUT=/tmp/o and tar /tmp/o into the real $OUT.
set -u
STEP_TAIL=14
source "$(dirname "$0")/common.sh"
W=${W:-2}
SET=${SET:-all}
GPUS=$(seq -s, 0 $((W - 1)))
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n "$W"
step cp-prebuild "${PREBUILD_S:-150}" python3 benchmarks/runs/prebuild.py --jobs 30 cp_attention
step "attention-lib-w$W" "${ATTN_S:-150}" python3 benchmarks/attention_lib.py --world "$W" --reps 5 \
  --out "$OUT/attention_lib_w$W.json"
TAIL=12 step "cp-balance-w$W" "${BENCH_S:-420}" python3 benchmarks/cp_balance.py --gpus "$GPUS" --set "$SET" \
  --attention-lib "$OUT/attention_lib_w$W.json" --out "$OUT/cp_w$W"
cat "$OUT/cp_w$W/cp_attention_w$W.md"
