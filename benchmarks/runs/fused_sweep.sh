#!/usr/bin/env bash
# One call on a 4-GPU host (nvidia-h100-x4): fused_tile variants of gemm_allgather at W=4 (GPUs 0-3)
# and W=2 (GPUs 0,1), each against the reference in its own run, and the baselines with their
# bounds, in one table per world size (benchmarks/eval_table.py). Variants are NAME:KNOB=V,KNOB=V
# (knobs of benchmarks/render_strategy.py; NAME alone is the defaults). Optionally the link
# ceilings first (LINKS=1). About 1 min + 12 s per W=4 and 9 s per W=2 evaluation after a parallel
# prebuild (~50 s on 64 cores).
#   W4="ring4 all4:fanout=all" W2="ring2:chunks=2" OUT=/tmp/o bash benchmarks/runs/fused_sweep.sh
set -u
STEP_TAIL=3
source "$(dirname "$0")/common.sh"
nvidia-smi -L
mkdir -p /tmp/v
render() { local name=${1%%:*} knobs=; [[ $1 == *:* ]] && knobs=${1#*:}
  python3 benchmarks/render_strategy.py gemm_allgather fused_tile /tmp/v/$name.cu ${knobs//,/ }; echo $name; }
names4=$(for s in ${W4:-}; do render "$s"; done); names2=$(for s in ${W2:-}; do render "$s"; done)
(python3 benchmarks/runs/prebuild.py --jobs 24 --files /tmp/v/*.cu > "$OUT/prebuild.txt" 2>&1; echo "prebuild rc=$?" >> "$OUT/prebuild.txt") &
build=$!
if [ "${LINKS:-0}" = 1 ]; then
  for mib in 256 16; do STEP_TAIL=40 step links-$mib 90 python3 benchmarks/link_ceilings.py --mib $mib --json "$OUT/links-$mib.json"; done
fi
[ -n "$names4" ] && step baseline4 120 python3 -m cuco_tui.cli baseline -w gemm_allgather --gpus 0,1,2,3 --json
[ -n "$names2" ] && step baseline2 120 python3 -m cuco_tui.cli baseline -w gemm_allgather --gpus 0,1 --json
wait $build; tail -n 3 "$OUT/prebuild.txt"
for v in $names4; do step w4-$v 120 python3 -m cuco_tui.cli eval /tmp/v/$v.cu --workload gemm_allgather --gpus 0,1,2,3 --json; done
for v in $names2; do step w2-$v 100 python3 -m cuco_tui.cli eval /tmp/v/$v.cu --workload gemm_allgather --gpus 0,1 --json; done
for f in "$OUT"/w[24]-*.txt "$OUT"/baseline[24].txt; do [ -f "$f" ] && sed -n '/^{/,$p' "$f" > "${f%.txt}.json"; done
[ -n "$names4" ] && { echo "== W=4"; python3 benchmarks/eval_table.py "$OUT/baseline4.json" $(for v in $names4; do echo "$v=$OUT/w4-$v.json"; done); }
[ -n "$names2" ] && { echo "== W=2"; python3 benchmarks/eval_table.py "$OUT/baseline2.json" $(for v in $names2; do echo "$v=$OUT/w2-$v.json"; done); }
exit 0
