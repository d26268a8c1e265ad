#!/usr/bin/env bash
# One device call for one workload (nvidia-h200-x2): its reference and parts (the lower bound
# max(compute, communication)) and the seed (with TEMPLATES=1 also every strategy template at its
# default knobs; the search measures them anyway), then an offline search in the same call,
# exported as a bundle. Results under $OUT.
#   WORKLOAD=kv_transfer SEARCH_S=300 [TEMPLATES=1] bash benchmarks/runs/workload_search.sh
set -u
STEP_TAIL=20
source "$(dirname "$0")/common.sh"
: "${WORKLOAD:?name the workload}"
SEARCH_S=${SEARCH_S:-300}
step "$WORKLOAD-prebuild" "${PREBUILD_S:-120}" python3 benchmarks/runs/prebuild.py --jobs 14 "$WORKLOAD"
step "$WORKLOAD-bench" 200 python3 benchmarks/workload_bench.py -w "$WORKLOAD" --gpus 0,1 \
  ${TEMPLATES:+--templates} --out "$OUT/bench"
session=/tmp/sess/$WORKLOAD-offline-h200x2
step "$WORKLOAD-search" "$SEARCH_S" python3 -m cuco_tui.cli search --workload "$WORKLOAD" --generations 30 \
  --agent offline --gpus 0,1 --seed 1 --session "$session"
python3 -c "from cuco_tui.lineage import SessionRepo, export_bundle; export_bundle(SessionRepo.open('$session'), '$OUT/$WORKLOAD-offline-h200x2.bundle')"
python3 -m cuco_tui.cli show "$session" > "$OUT/$WORKLOAD-show.txt" 2>&1; head -n 20 "$OUT/$WORKLOAD-show.txt"
