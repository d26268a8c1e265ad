#!/usr/bin/env bash
# Issue 33 (nvidia-h100-x2 for W=2, -x4 for W=4): ParallelKernelBench's GEMM problems imported on the
# GPU host and searched offline: 11 (all-gather of the transposed K slices → GEMM), 12 (all-gather
# along K → GEMM), 13 (GEMM → all-reduce, K fixed per rank), 14 (GEMM → all-gather along dim 1), 16
# (GEMM → reduce-scatter). Per problem: `cuco workload import` through benchmarks/parallelkernelbench.py
# (its adapters, its table of the CPU columns in $OUT/pkb_table.md), the generated seed through the
# cascade (verified against the program on the GPUs, timed against it at the bench shape), then a short
# offline search from that seed (its `cuco show` in $OUT/show_ID.txt: the best speedup over the program).
# The clone is not in git: copy it into .whl/ here first and carry .whl (3.4 MB):
#   mkdir -p .whl/pkb && cp -r /tmp/pkb/. .whl/pkb/ && rm -rf .whl/pkb/.git
#   W=2 bash benchmarks/runs/pkb_gemm.sh     # about 6 minutes on 2 x H100 (estimated)
#   W=4 bash benchmarks/runs/pkb_gemm.sh     # about 7 minutes on 4 x H100 (estimated)
# PROBLEMS="12 14" picks problems; GEN (default 6) the search's generations, SEARCH_S its limit.
set -u
STEP_TAIL=12
source "$(dirname "$0")/common.sh"
W=${W:-2}
PROBLEMS=${PROBLEMS:-"11 12 13 14 16"}
GEN=${GEN:-6}
SEARCH_S=${SEARCH_S:-90}
PKB=${PKB:-$PWD/.whl/pkb}
GPUS=$(seq -s, 0 $((W - 1)))
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
[ -d "$PKB/reference" ] || { echo "no ParallelKernelBench clone at $PKB (see the head of this script)"; exit 2; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n "$W"
SCRATCH=/tmp/cuco-pkb
step import 900 python3 benchmarks/parallelkernelbench.py "$PKB" --problems "$(echo $PROBLEMS | tr ' ' ,)" \
  --worlds "$W" --scratch "$SCRATCH" --table "$OUT/pkb_table.md"
for p in $PROBLEMS; do
  wl=$SCRATCH/workloads/pkb${p}_w$W
  [ -d "$wl" ] || { echo "== pkb$p: not imported at W=$W"; continue; }
  step "seed_$p" 300 python3 -m cuco_tui.cli eval "$wl/seed.cu" --workload "$wl" --gpus "$GPUS"
  session=/tmp/sess/pkb$p-w$W
  step "search_$p" "$SEARCH_S" python3 -m cuco_tui.cli search --workload "$wl" --agent offline --generations "$GEN" \
    --gpus "$GPUS" --seed 1 --session "$session"
  python3 -m cuco_tui.cli show "$session" > "$OUT/show_$p.txt" 2>&1; head -n 12 "$OUT/show_$p.txt"
done
