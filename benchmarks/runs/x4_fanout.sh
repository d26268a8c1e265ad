#!/usr/bin/env bash
# nvidia-h100-x4, one call: what the links deliver under the overlap kernels' traffic
# (benchmarks/link_ceilings.py at 4, 16 and 256 MiB per stream, copy engines and store/load kernels,
# with and without a GEMM beside them), the gemm_allgather baseline at W=4 and W=2, and fused_tile
# at W=4 and W=2 with the peers served in a ring (as before) or all at once (fanout=all), by copy
# engine and by store kernel, at several chunk counts. About 9 minutes.
#   OUT=/tmp/o bash benchmarks/runs/x4_fanout.sh ; tar czf $REAL_OUT/x4.tgz -C /tmp/o .
set -u
STEP_TAIL=40
source "$(dirname "$0")/common.sh"
nvidia-smi -L; nvidia-smi topo -m | head -6
mkdir -p /tmp/v
R() { python3 benchmarks/render_strategy.py gemm_allgather fused_tile /tmp/v/$1.cu "${@:2}"; }
R ring4; R ring2 chunks=2; R all4 fanout=all; R all2 fanout=all chunks=2; R all8 fanout=all chunks=8
R all1 fanout=all chunks=1; R small32 fanout=all mover=sm_store mover_blocks=32; R smring32 mover=sm_store mover_blocks=32
VARIANTS_W4="ring4 ring2 all4 all2 all8 all1 small32 smring32"
VARIANTS_W2="ring2 all2 ring4 smring32"
(python3 benchmarks/runs/prebuild.py --jobs 16 --files /tmp/v/*.cu > "$OUT/prebuild.txt" 2>&1; echo "prebuild rc=$?" >> "$OUT/prebuild.txt") &
build=$!
for mib in 256 16 4; do step links-$mib 90 python3 benchmarks/link_ceilings.py --mib $mib --reps 7 --json "$OUT/links-$mib.json"; done
step baseline4 120 python3 -m cuco_tui.cli baseline -w gemm_allgather --gpus 0,1,2,3 --json
step baseline2 120 python3 -m cuco_tui.cli baseline -w gemm_allgather --gpus 0,1 --json
wait $build; tail -n 12 "$OUT/prebuild.txt"
for v in $VARIANTS_W4; do
  TAIL=3 step w4-$v 120 python3 -m cuco_tui.cli eval /tmp/v/$v.cu --workload gemm_allgather --gpus 0,1,2,3 --json
done
for v in $VARIANTS_W2; do
  TAIL=3 step w2-$v 100 python3 -m cuco_tui.cli eval /tmp/v/$v.cu --workload gemm_allgather --gpus 0,1 --json
done
# The JSON starts at the first '{' of each eval's output (progress lines go to stderr, but be safe).
for f in "$OUT"/w[24]-*.txt "$OUT"/baseline[24].txt; do sed -n '/^{/,$p' "$f" > "${f%.txt}.json"; done
echo "== W=4"; python3 benchmarks/eval_table.py "$OUT/baseline4.json" $(for v in $VARIANTS_W4; do echo "$v=$OUT/w4-$v.json"; done)
echo "== W=2"; python3 benchmarks/eval_table.py "$OUT/baseline2.json" $(for v in $VARIANTS_W2; do echo "$v=$OUT/w2-$v.json"; done)
