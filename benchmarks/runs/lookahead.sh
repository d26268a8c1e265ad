#!/usr/bin/env bash
# Issue 34 item 1 (nvidia-h100-x4): the look-ahead's worth, on one host in one call. After a
# parallel prebuild (the fused GEMM libraries, built once per machine), two offline gemm_allgather
# searches at W=2 run side by side with the same search seed, each with its own copy of the
# prebuilt cache: the look-ahead on GPUs 0,1 and --no-lookahead on GPUs 2,3, SEARCH_S seconds each,
# stopped as Ctrl-C stops them. benchmarks/search_throughput.py reports evaluations per minute.
#   R=$OUT; OUT=/tmp/o bash benchmarks/runs/lookahead.sh; tar czf $R/t.tgz -C /tmp/o .
set -u
source "$(dirname "$0")/common.sh"
nvidia-smi -L; nproc
SEARCH_S=${SEARCH_S:-270}; SEED=${SEED:-2}
step prebuild "${PREBUILD_S:-130}" env CUCO_CACHE_DIR=/tmp/cc/build python3 benchmarks/runs/prebuild.py --jobs 48
search() {  # NAME GPUS FLAG...
  local name=$1 gpus=$2 t0; shift 2; t0=$(date +%s.%N)
  rm -rf "/tmp/cc-$name"; cp -r /tmp/cc/build "/tmp/cc-$name"
  CUCO_CACHE_DIR="/tmp/cc-$name" timeout -s INT -k 150 "$SEARCH_S" python3 -m cuco_tui.cli search \
    --workload gemm_allgather --agent offline --generations 40 --islands 3 --seed "$SEED" --gpus "$gpus" \
    --session "/tmp/la/$name" "$@" > "$OUT/$name.log" 2>&1
  echo "$name rc=$? wall $(python3 -c "import time; print(round(time.time() - $t0, 1))")" | tee -a "$OUT/walls.txt"
}
mkdir -p /tmp/la
search lookahead 0,1 &
search no-lookahead 2,3 --no-lookahead &
wait
args=()
while read -r name _ wall; do args+=("$name=${wall#wall }=/tmp/la/$name"); done < <(sed 's/ rc=[0-9]*//' "$OUT/walls.txt")
python3 benchmarks/search_throughput.py "${args[@]}" --json "$OUT/lookahead.json" | tee "$OUT/lookahead.md"
for s in /tmp/la/*; do python3 -c "from cuco_tui.lineage import SessionRepo, export_bundle; export_bundle(SessionRepo.open('$s'), '$OUT/$(basename "$s").bundle')" || true; done
exit 0
