#!/usr/bin/env bash
# One call on a 4-GPU host (nvidia-h100-x4), issue 31: fused_tile with the last chunk cut along K
# (k_slices) against the same knobs uncut, at W=2 (GPUs 0,1) and W=4 (GPUs 0-3), each against the
# reference with the bound of the call's own baseline (benchmarks/runs/fused_sweep.sh), then three
# profiles (CUPTI, per-copy and per-kernel intervals of every rank): the best uncut W=4 variant on
# wide-k-narrow-n (where 0.2-0.3 ms a launch were unaccounted for, ninth session) and the W=2
# k_slices=4 variant on long-seq (is the tail after the last copy down to a slice's work?), and
# fanout=all at W=4 on wide-k-narrow-n (a copy stream per peer: why it lost to the ring, ninth session).
#   R=$OUT; OUT=/tmp/o bash benchmarks/runs/kslices.sh; tar czf $R/k.tgz -C /tmp/o .
set -u
STEP_TAIL=30
source "$(dirname "$0")/common.sh"
need_cupti
W2=${W2:-"c2:chunks=2,tile=256x128 c2s2:chunks=2,tile=256x128,k_slices=2 c2s4:chunks=2,tile=256x128,k_slices=4 c2s8:chunks=2,tile=256x128,k_slices=8 c4s4:chunks=4,tile=256x128,k_slices=4"} \
W4=${W4:-"r1:chunks=1 r1s4:chunks=1,k_slices=4 r2s4:chunks=2,k_slices=4"} \
  bash "$(dirname "$0")/fused_sweep.sh"
python3 benchmarks/render_strategy.py gemm_allgather fused_tile /tmp/v/prof4.cu chunks=1
python3 benchmarks/render_strategy.py gemm_allgather fused_tile /tmp/v/prof2.cu chunks=2 tile=256x128 k_slices=4
TAIL=40 step profile-w4 90 python3 -m cuco_tui.cli eval /tmp/v/prof4.cu --workload gemm_allgather --gpus 0,1,2,3 \
  --profile wide-k-narrow-n --shapes wide-k-narrow-n
python3 benchmarks/render_strategy.py gemm_allgather fused_tile /tmp/v/prof4all.cu chunks=1 fanout=all
TAIL=40 step profile-w4all 90 python3 -m cuco_tui.cli eval /tmp/v/prof4all.cu --workload gemm_allgather \
  --gpus 0,1,2,3 --profile wide-k-narrow-n --shapes wide-k-narrow-n
TAIL=40 step profile-w2 60 python3 -m cuco_tui.cli eval /tmp/v/prof2.cu --workload gemm_allgather --gpus 0,1 \
  --profile long-seq --shapes long-seq
# Ranks sharing one GPU (the CI-like check): a K slice's 2D copy within one GPU must stay on the
# copy engines, or a rank's own persistent GEMM would starve it.
K="fused_tile[4_copy_engine_16_128x256_2x1_auto_ring_"
step shared-kslices 200 python3 benchmarks/shared_gpu_check.py gemm_allgather --out "$OUT/shared" --worlds 2,4 \
  --sweep --only "${K}2],${K}4],${K}8]"
for s in w4 w4all w2; do
  t=$(grep -o 'trace: [^ ]*' "$OUT/profile-$s.txt" | head -1 | cut -d' ' -f2)
  [ -n "$t" ] && [ -f "$t" ] && cp "$t" "$OUT/profile-$s.trace.json"
done
exit 0
