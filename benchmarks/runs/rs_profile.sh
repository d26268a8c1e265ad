#!/usr/bin/env bash
# One call on a 4-GPU host (nvidia-h100-x4), issue 31: why gemm_reducescatter's best candidate
# (ce_push, chunks 2, 256 reduce blocks: 1.17x over the reference but 2.17 of the bound on long-seq
# at W=2, 1.72 at W=4, ninth session) stays far from max(GEMM, bytes / peer bandwidth) where the
# reduce-scatter dominates. CUPTI profiles (per-copy and per-kernel intervals of every rank) of
# ce_push at chunks 2 and 4 on long-seq at W=2 and W=4, each with its speedup and the bound of the
# call's own baseline: when each chunk's GEMM ends, when its push starts and lands, when the
# summing kernel starts, waits and ends; and the same for ce_fold (the owner's own GEMM folds the
# arrived partial through cuBLASLt's C operand, no summing pass) at chunks 4 and 8.
#   R=$OUT; OUT=/tmp/o bash benchmarks/runs/rs_profile.sh; tar czf $R/rs.tgz -C /tmp/o .
set -u
STEP_TAIL=12
source "$(dirname "$0")/common.sh"
need_cupti
mkdir -p /tmp/v
python3 benchmarks/render_strategy.py gemm_reducescatter ce_push /tmp/v/rs_c2.cu chunks=2 reduce_blocks=256
python3 benchmarks/render_strategy.py gemm_reducescatter ce_fold /tmp/v/rs_f4.cu chunks=4
python3 benchmarks/render_strategy.py gemm_reducescatter ce_fold /tmp/v/rs_f8.cu chunks=8
(python3 benchmarks/runs/prebuild.py --jobs 8 --files /tmp/v/rs_*.cu > "$OUT/prebuild.txt" 2>&1) &
step baseline2 120 python3 -m cuco_tui.cli baseline -w gemm_reducescatter --gpus 0,1 --json
step baseline4 120 python3 -m cuco_tui.cli baseline -w gemm_reducescatter --gpus 0,1,2,3 --json
wait
for c in c2 f4 f8; do
  for w in 2 4; do
    gpus=$(seq -s, 0 $((w - 1)))
    TAIL=30 step profile-$c-w$w 90 python3 -m cuco_tui.cli eval /tmp/v/rs_$c.cu --workload gemm_reducescatter \
      --gpus "$gpus" --profile long-seq --shapes long-seq
    t=$(grep -o 'trace: [^ ]*' "$OUT/profile-$c-w$w.txt" | head -1 | cut -d' ' -f2)
    [ -n "$t" ] && [ -f "$t" ] && cp "$t" "$OUT/profile-$c-w$w.trace.json"
  done
done
exit 0
