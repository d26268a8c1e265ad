#!/usr/bin/env bash
# Two offline gemm_allgather searches at W=2 side by side on one 4-GPU host (nvidia-h100-x4), the
# same search seed, each with its own copy of a prebuilt cache (the fused GEMM libraries built
# once per machine): A on GPUs 0,1 with A_FLAGS, B on GPUs 2,3 with B_FLAGS, SEARCH_S seconds each,
# stopped as Ctrl-C stops them. benchmarks/search_throughput.py reports evaluations per minute.
#   R=$OUT; OUT=/tmp/o A=keep A_FLAGS= B=fresh B_FLAGS=--no-keep-workers bash benchmarks/runs/search_ab.sh; tar czf $R/t.tgz -C /tmp/o .
set -u
source "$(dirname "$0")/common.sh"
nvidia-smi -L; nproc
SEARCH_S=${SEARCH_S:-270}; SEED=${SEED:-2}; A=${A:-a}; B=${B:-b}
step prebuild "${PREBUILD_S:-130}" env CUCO_CACHE_DIR=/tmp/cc/build python3 benchmarks/runs/prebuild.py --jobs 48
search() {  # NAME GPUS FLAGS
  local name=$1 gpus=$2 t0; t0=$(date +%s.%N)
  rm -rf "/tmp/cc-$name"; cp -r /tmp/cc/build "/tmp/cc-$name"
  # shellcheck disable=SC2086  # the flags are words
  CUCO_CACHE_DIR="/tmp/cc-$name" timeout -s INT -k 150 "$SEARCH_S" python3 -m cuco_tui.cli search \
    --workload gemm_allgather --agent offline --generations 40 --islands 3 --seed "$SEED" --gpus "$gpus" \
    --session "/tmp/ab/$name" $3 > "$OUT/$name.log" 2>&1
  echo "$name rc=$? wall $(python3 -c "import time; print(round(time.time() - $t0, 1))")" | tee -a "$OUT/walls.txt"
}
mkdir -p /tmp/ab
search "$A" 0,1 "${A_FLAGS:-}" &
search "$B" 2,3 "${B_FLAGS:-}" &
wait
args=()
while read -r name _ wall; do args+=("$name=${wall#wall }=/tmp/ab/$name"); done < <(sed 's/ rc=[0-9]*//' "$OUT/walls.txt")
python3 benchmarks/search_throughput.py "${args[@]}" --json "$OUT/ab.json" | tee "$OUT/ab.md"
for s in /tmp/ab/*; do python3 -c "from cuco_tui.lineage import SessionRepo, export_bundle; export_bundle(SessionRepo.open('$s'), '$OUT/$(basename "$s").bundle')" || true; done
exit 0
