#!/usr/bin/env bash
# One call on a 2- or 4-GPU host (nvidia-h100-x2 / -x4): moe_dispatch_combine's pipelined
# templates with each way of running the expert GEMMs (knob `gemm`: the prebuilt CUTLASS ptr-array
# grouped GEMM of cuco_grouped_gemm_lib.h, 128x256 tiles with 1x1 or 1x2 clusters, or cuBLAS), each evaluated
# against the reference in its own run, and the baseline with its bounds, in one table per world
# size (benchmarks/eval_table.py). Variants are NAME:STRATEGY[:KNOB=V,KNOB=V] (knobs of
# benchmarks/render_strategy.py; no knobs: the strategy's defaults). The prebuild (parallel, the
# grouped GEMM libraries first) runs while the baselines measure. W4 is empty by default.
#   OUT=/tmp/o bash benchmarks/runs/moe_sweep.sh
#   W2="a:arrival_pipeline:gemm=cutlass_grouped,chunks=2" W4="..." OUT=/tmp/o bash benchmarks/runs/moe_sweep.sh
set -u
STEP_TAIL=3
source "$(dirname "$0")/common.sh"
nvidia-smi -L
DEFAULT="arr-cublas:arrival_pipeline:gemm=cublas arr-cutlass:arrival_pipeline:gemm=cutlass_grouped
arr-cutlass12:arrival_pipeline:gemm=cutlass_grouped_1x2 arr-cutlass-c2:arrival_pipeline:gemm=cutlass_grouped,chunks=2
exp-cublas:expert_pipeline:gemm=cublas exp-cutlass:expert_pipeline:gemm=cutlass_grouped
exp-cutlass12:expert_pipeline:gemm=cutlass_grouped_1x2"
W2=${W2-$DEFAULT}
W4=${W4-}
mkdir -p /tmp/v
render() { local name=${1%%:*} rest=${1#*:} strategy knobs=; strategy=${rest%%:*}
  [[ $rest == *:* ]] && knobs=${rest#*:}
  python3 benchmarks/render_strategy.py moe_dispatch_combine "$strategy" /tmp/v/$name.cu ${knobs//,/ }; echo $name; }
names4=$(for s in $W4; do render "$s"; done); names2=$(for s in $W2; do render "$s"; done)
(python3 benchmarks/runs/prebuild.py --jobs 24 --files /tmp/v/*.cu > "$OUT/prebuild.txt" 2>&1; echo "prebuild rc=$?" >> "$OUT/prebuild.txt") &
build=$!
[ -n "$names4" ] && step baseline4 200 python3 -m cuco_tui.cli baseline -w moe_dispatch_combine --gpus 0,1,2,3 --json
[ -n "$names2" ] && step baseline2 200 python3 -m cuco_tui.cli baseline -w moe_dispatch_combine --gpus 0,1 --json
wait $build; tail -n 4 "$OUT/prebuild.txt"
for v in $names4; do step w4-$v 150 python3 -m cuco_tui.cli eval /tmp/v/$v.cu --workload moe_dispatch_combine --gpus 0,1,2,3 --json; done
for v in $names2; do step w2-$v 120 python3 -m cuco_tui.cli eval /tmp/v/$v.cu --workload moe_dispatch_combine --gpus 0,1 --json; done
for f in "$OUT"/w[24]-*.txt "$OUT"/baseline[24].txt; do [ -f "$f" ] && sed -n '/^{/,$p' "$f" > "${f%.txt}.json"; done
[ -n "$names4" ] && { echo "== W=4"; python3 benchmarks/eval_table.py "$OUT/baseline4.json" $(for v in $names4; do echo "$v=$OUT/w4-$v.json"; done); }
[ -n "$names2" ] && { echo "== W=2"; python3 benchmarks/eval_table.py "$OUT/baseline2.json" $(for v in $names2; do echo "$v=$OUT/w2-$v.json"; done); }
exit 0
