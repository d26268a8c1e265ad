#!/usr/bin/env bash
# One call on a 4-GPU host (nvidia-h100-x4): the ranks lined up on the GPUs before each timed
# repetition (--align device, the default since 2026-11-27) against the host barrier alone
# (--align host, every figure before), each variant evaluated with both, one after the other, so
# that each pair shares the machine's state: gemm_allgather's seed and fused_tile at W=2 (where the
# sixteenth session's profile showed the kernel at 0.407 ms and the timed launch at 0.440 ms on
# long-seq) and at W=4 (where the ring's ranks drift apart), against the bounds of the call's
# own baselines (benchmarks/eval_table.py). Expected: device alignment lowers the
# communication-bound shapes' times by the ranks' start skew (20-60 µs), the references' with them.
# At W=4 also fanout=paced (each ring step waits for the right neighbour's previous one, so no
# rank receives from two peers at once): expected to remove what drift is left after alignment.
#   R=$OUT; OUT=/tmp/o bash benchmarks/runs/align_ab.sh; tar czf $R/a.tgz -C /tmp/o .
set -u
STEP_TAIL=3
source "$(dirname "$0")/common.sh"
nvidia-smi -L
mkdir -p /tmp/v
W2=${W2:-"c2s4:chunks=2,tile=256x128,k_slices=4 c2:chunks=2,tile=256x128"}
W4=${W4:-"r1:chunks=1 p1:chunks=1,fanout=paced r1s4:chunks=1,k_slices=4"}  # p1: the ring paced by its neighbours
render() { local name=${1%%:*} knobs=; [[ $1 == *:* ]] && knobs=${1#*:}
  python3 benchmarks/render_strategy.py gemm_allgather fused_tile /tmp/v/$name.cu ${knobs//,/ }; echo $name; }
names4=$(for s in $W4; do render "$s"; done); names2=$(for s in $W2; do render "$s"; done)
cp workloads/gemm_allgather/seed.cu /tmp/v/seed.cu; names2="seed $names2"
(python3 benchmarks/runs/prebuild.py --jobs 24 --files /tmp/v/*.cu > "$OUT/prebuild.txt" 2>&1; echo "prebuild rc=$?" >> "$OUT/prebuild.txt") &
build=$!
for a in device host; do
  step baseline4-$a 120 python3 -m cuco_tui.cli baseline -w gemm_allgather --gpus 0,1,2,3 --json --align $a
  step baseline2-$a 120 python3 -m cuco_tui.cli baseline -w gemm_allgather --gpus 0,1 --json --align $a
done
wait $build; tail -n 3 "$OUT/prebuild.txt"
for v in $names4; do for a in device host; do
  step w4-$v-$a 120 python3 -m cuco_tui.cli eval /tmp/v/$v.cu --workload gemm_allgather --gpus 0,1,2,3 --json --align $a
done; done
for v in $names2; do for a in device host; do
  step w2-$v-$a 100 python3 -m cuco_tui.cli eval /tmp/v/$v.cu --workload gemm_allgather --gpus 0,1 --json --align $a
done; done
for f in "$OUT"/w[24]-*.txt "$OUT"/baseline[24]-*.txt; do [ -f "$f" ] && sed -n '/^{/,$p' "$f" > "${f%.txt}.json"; done
for a in device host; do
  echo "== W=4, --align $a"
  python3 benchmarks/eval_table.py "$OUT/baseline4-$a.json" $(for v in $names4; do echo "$v=$OUT/w4-$v-$a.json"; done)
  echo "== W=2, --align $a"
  python3 benchmarks/eval_table.py "$OUT/baseline2-$a.json" $(for v in $names2; do echo "$v=$OUT/w2-$v-$a.json"; done)
done
exit 0
