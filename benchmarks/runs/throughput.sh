#!/usr/bin/env bash
# Issue 34 item 1 (nvidia-h100-x4): candidates per device-minute of an offline gemm_allgather search
# at W=2, before and after the fused GEMM prebuilt once per machine (d16594f), on one host in one
# call. .whl/old holds the tree of e5cc450, the commit before it (git archive, carried; no tests,
# docs or sessions). Phase 1: the old tree on GPUs 0,1 and main on GPUs 2,3 at the same time, each
# with a cold build cache of its own, PHASE1_S seconds each. Phase 2: main alone, one group (GPUs
# 0,1) then two groups (GPUs 0-3), PHASE2_S each, each with a search seed of its own so that no
# candidate was built before (the GEMM libraries phase 1 built are kept: they are built once per
# machine). Each search is stopped as Ctrl-C stops it; its wall time is start to exit.
#   R=$OUT; OUT=/tmp/o bash benchmarks/runs/throughput.sh; tar czf $R/t.tgz -C /tmp/o .
set -u
source "$(dirname "$0")/common.sh"
nvidia-smi -L; nproc
PHASE1_S=${PHASE1_S:-180}; PHASE2_S=${PHASE2_S:-120}
search() {  # NAME TREE GPUS CACHE SEED LIMIT_S
  local name=$1 tree=$2 gpus=$3 cache=$4 seed=$5 limit=$6 t0; t0=$(date +%s.%N)
  (cd "$tree" && CUCO_CACHE_DIR=$cache PYTHONPATH=/tmp/site:$tree timeout -s INT -k 150 "$limit" \
    python3 -m cuco_tui.cli search --workload gemm_allgather --agent offline --generations 40 --islands 3 \
    --seed "$seed" --gpus "$gpus" --session "/tmp/tp/$name") > "$OUT/$name.log" 2>&1
  echo "$name rc=$? wall $(python3 -c "import time; print(round(time.time() - $t0, 1))")" | tee -a "$OUT/walls.txt"
}
mkdir -p /tmp/tp
search old-w2 "$PWD/.whl/old" 0,1 /tmp/cc-old 2 "$PHASE1_S" &
search new-w2 "$PWD" 2,3 /tmp/cc-new 2 "$PHASE1_S" &
wait
search new-w2-warm "$PWD" 0,1 /tmp/cc-new 3 "$PHASE2_S"
search new-2groups "$PWD" 0-3 /tmp/cc-new 4 "$PHASE2_S"
args=()
while read -r name _ wall; do args+=("$name=${wall#wall }=/tmp/tp/$name"); done < <(sed 's/ rc=[0-9]*//' "$OUT/walls.txt")
python3 benchmarks/search_throughput.py "${args[@]}" --json "$OUT/throughput.json" | tee "$OUT/throughput.md"
for s in /tmp/tp/*; do python3 -c "from cuco_tui.lineage import SessionRepo, export_bundle; export_bundle(SessionRepo.open('$s'), '$OUT/$(basename "$s").bundle')" || true; done
exit 0
