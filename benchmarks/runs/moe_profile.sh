#!/usr/bin/env bash
# Part of a call on a 2- or 4-GPU host, issue 32: where moe_dispatch_combine's best templates
# (arrival_pipeline and expert_pipeline on cuBLAS: 1.19-1.22x over the reference but 1.23-1.25 of
# max(parts) on the prefill shapes at W=2, sixteenth session) lose their last 20 %. CUPTI profiles
# (per-copy and per-kernel intervals of every rank) on prefill-4k and prefill-4k-e256 at W=2: when
# each dispatch chunk lands, when the expert GEMMs of its tokens start, how long the combine waits.
#   R=$OUT; OUT=/tmp/o bash benchmarks/runs/moe_profile.sh; tar czf $R/m.tgz -C /tmp/o .
set -u
STEP_TAIL=12
source "$(dirname "$0")/common.sh"
need_cupti
mkdir -p /tmp/v
python3 benchmarks/render_strategy.py moe_dispatch_combine arrival_pipeline /tmp/v/moe_arr.cu gemm=cublas
python3 benchmarks/render_strategy.py moe_dispatch_combine expert_pipeline /tmp/v/moe_exp.cu gemm=cublas
(python3 benchmarks/runs/prebuild.py --jobs 8 --files /tmp/v/moe_arr.cu /tmp/v/moe_exp.cu > "$OUT/prebuild.txt" 2>&1) &
step baseline2 150 python3 -m cuco_tui.cli baseline -w moe_dispatch_combine --gpus 0,1 --json
wait
for v in arr exp; do
  for s in prefill-4k prefill-4k-e256; do
    TAIL=30 step profile-$v-$s 120 python3 -m cuco_tui.cli eval /tmp/v/moe_$v.cu --workload moe_dispatch_combine \
      --gpus 0,1 --profile "$s" --shapes "$s"
    t=$(grep -o 'trace: [^ ]*' "$OUT/profile-$v-$s.txt" | head -1 | cut -d' ' -f2)
    [ -n "$t" ] && [ -f "$t" ] && cp "$t" "$OUT/profile-$v-$s.trace.json"
  done
done
exit 0
