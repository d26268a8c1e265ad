#!/usr/bin/env bash
# Issue 33 (nvidia-h100-x2 for W=2, -x4 for W=4): ParallelKernelBench's GEMM problems imported on the
# GPU host and searched offline: 11 (all-gather of the transposed K slices → GEMM), 12 (all-gather
# along K → GEMM), 13 (GEMM → all-reduce, K fixed per rank), 14 (GEMM → all-gather along dim 1), 16
# (GEMM → reduce-scatter). Per problem: `cuco workload import` through benchmarks/parallelkernelbench.py
# (its adapters, its table of the CPU columns in $OUT/pkb_table.md), the generated seed through the
# cascade (verified against the program on the GPUs, timed against it at the bench shape: seed_ID.txt),
# then a short offline search from that seed (search_ID.txt; its `cuco show` in show_ID.txt: the best
# speedup over the program). $OUT/pkb.log has the steps' starts and ends, $OUT/run.txt the world size,
# the machine, the date and the problems skipped for time; after each problem $OUT/pkb_table.md is
# written again with its GPU columns (`--gpu-results $OUT`), so a call cut off still leaves its table.
# Here, the docs' table takes the call's columns with (CPU results of all problems kept in /tmp/cuco-pkb):
#   python3 benchmarks/parallelkernelbench.py /tmp/pkb --table-only --gpu-results FILES_AT --world W
# The clone is not in git: copy it into .whl/ here first, with its commit, and carry .whl (3.4 MB):
#   mkdir -p .whl/pkb && cp -r /tmp/pkb/. .whl/pkb/ && git -C /tmp/pkb rev-parse HEAD > .whl/pkb/COMMIT \
#     && rm -rf .whl/pkb/.git
#   W=2 PROBLEMS="11 12 13" bash benchmarks/runs/pkb_gemm.sh   # then PROBLEMS="14 16" in a second call
#   W=4 PROBLEMS="11 12 13" bash benchmarks/runs/pkb_gemm.sh   # on 4 GPUs, likewise
# Measured on 2 of 4 x H200 at W=2 (2026-11-27): the imports 99 s for five problems, then per problem
# the seed 12-14 s and the search up to SEARCH_S (85-90 s of 90): five problems do not fit one call's
# 600 s. A problem whose seed, search and show would end past BUDGET_S (default 570 s of the script's
# time) is skipped and named in run.txt.
# PROBLEMS picks problems; GEN (default 6) the search's generations, SEARCH_S its limit.
set -u
STEP_TAIL=12
source "$(dirname "$0")/common.sh"
W=${W:-2}
PROBLEMS=${PROBLEMS:-"11 12 13 14 16"}
GEN=${GEN:-6}
SEARCH_S=${SEARCH_S:-90}
BUDGET_S=${BUDGET_S:-570}
PKB=${PKB:-$PWD/.whl/pkb}
GPUS=$(seq -s, 0 $((W - 1)))
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
[ -d "$PKB/reference" ] || { echo "no ParallelKernelBench clone at $PKB (see the head of this script)"; exit 2; }
log() { tee -a "$OUT/pkb.log"; }  # what the table reads: each step's start and end
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n "$W" | log
{ echo "world: $W"
  echo "gpus: $GPUS"
  echo "device: $(nvidia-smi -L | wc -l) x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)" \
       "(GPUs $GPUS), $(date +%F)"
  echo "problems: $PROBLEMS"
  echo "generations: $GEN"
  echo "search limit s: $SEARCH_S"; } > "$OUT/run.txt"
SCRATCH=/tmp/cuco-pkb
table() {  # the table with this call's GPU columns so far
  python3 benchmarks/parallelkernelbench.py "$PKB" --table-only --worlds "$W" --scratch "$SCRATCH" \
    --gpu-results "$OUT" --world "$W" --table "$OUT/pkb_table.md" > "$OUT/table.txt" 2>&1 || cat "$OUT/table.txt"
}
step import 900 python3 benchmarks/parallelkernelbench.py "$PKB" --problems "$(echo $PROBLEMS | tr ' ' ,)" \
  --worlds "$W" --scratch "$SCRATCH" --table "$OUT/pkb_table.md" 2>&1 | log
for p in $PROBLEMS; do
  wl=$SCRATCH/workloads/pkb${p}_w$W
  [ -d "$wl" ] || { echo "== pkb$p: not imported at W=$W" | log; continue; }
  need=$((SEARCH_S + 45))  # the seed's evaluation, the search, its show
  if [ $((SECONDS + need)) -gt "$BUDGET_S" ]; then
    echo "skipped $p: $((BUDGET_S - SECONDS)) s of the call's budget left (BUDGET_S=$BUDGET_S), about $need s needed" \
      | tee -a "$OUT/run.txt" | log
    continue
  fi
  step "seed_$p" 300 python3 -m cuco_tui.cli eval "$wl/seed.cu" --workload "$wl" --gpus "$GPUS" 2>&1 | log
  session=/tmp/sess/pkb$p-w$W
  step "search_$p" "$SEARCH_S" python3 -m cuco_tui.cli search --workload "$wl" --agent offline --generations "$GEN" \
    --gpus "$GPUS" --seed 1 --session "$session" 2>&1 | log
  python3 -m cuco_tui.cli show "$session" > "$OUT/show_$p.txt" 2>&1; head -n 12 "$OUT/show_$p.txt"
  table
done
table
grep -E "^\| ($(echo $PROBLEMS | tr ' ' '|')) \|" "$OUT/pkb_table.md" | cut -d'|' -f2,3,7-
