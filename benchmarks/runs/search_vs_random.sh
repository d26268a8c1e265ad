#!/usr/bin/env bash
# Issue 34, item 2 (nvidia-h100-x2, two GPUs): the offline search against random sampling of the
# same space (`cuco search --agent random`), gemm_allgather and moe_dispatch_combine, seeds 1-3,
# about EVALS evaluations each (default 30), compared by benchmarks/search_vs_random.py.
#
# It does not fit one call. Twelve searches of ~32 evaluations (generation 0's seed and fast path,
# then 10 generations of 3) at today's throughput on 2 x H100: gemm_allgather ~14 s a candidate
# (issue 34: an offline search evaluated 15 candidates in 210 s, its fused_tile CUTLASS libraries
# built on the way; prebuilt here, so nearer 10-12 s), moe_dispatch_combine 8-10 s (14 candidates
# in 112 s on 2 x H200, before the perturbed rounds of L2 added a few seconds each), plus ~20-60 s a
# search to start (the session's bounds). One gemm_allgather search is 6.5-8 minutes, a
# moe_dispatch_combine one 5-6: ONE SEARCH A CALL, 12 calls of 7-9 minutes, 80-100 device-minutes
# in all (more than one session's 30). Split by PART (the workload and seed) and AGENTS:
#   PART=1..3: gemm_allgather, seed PART;  PART=4..6: moe_dispatch_combine, seed PART-3
#   R=$OUT; OUT=/tmp/o PART=1 AGENTS=offline bash benchmarks/runs/search_vs_random.sh; tar czf $R/p1o.tgz -C /tmp/o .
#   R=$OUT; OUT=/tmp/o PART=1 AGENTS=random  bash benchmarks/runs/search_vs_random.sh; tar czf $R/p1r.tgz -C /tmp/o .
#   ... PART=2..6 the same. Once item 1 has doubled the throughput, AGENTS="offline random" (the
#   default) fits a pair in one call: 6 calls.
# KEEP=1: both agents' searches with --keep-workers (once measured to be sound and faster).
# Each search stops after SEARCH_S (default 400 s for one agent, 200 s each for two; 470 when the
# machine is warm and the prebuild takes seconds) as Ctrl-C stops it (the evaluations in flight
# are committed), so a call stays under 10 minutes (prebuild 120 s at most): a search
# cut short is compared at the evaluations it reached (the comparison's budget is the fewest any
# session has). The sessions live in runs/search_vs_random and the build cache in
# .cuco-cache/build (both ignored by git, so kept between calls while the machine stays warm:
# a warm call's prebuild takes seconds, and its `compare` step covers every session made so far).
# Each call leaves its sessions as bundles in $OUT/bundles; the comparison of all of them, here:
#   python3 benchmarks/search_vs_random.py DIR_OF_ALL_BUNDLES --out docs/data/DATE-search-vs-random
set -u
STEP_TAIL=12
export CUCO_CACHE_DIR=${CUCO_CACHE_DIR:-$PWD/.cuco-cache/build}
source "$(dirname "$0")/common.sh"
PART=${PART:-1}
AGENTS=${AGENTS:-offline random}
EVALS=${EVALS:-30}
case "$PART" in
  1|2|3) WORKLOAD=gemm_allgather SEED=$PART ;;
  4|5|6) WORKLOAD=moe_dispatch_combine SEED=$((PART - 3)) ;;
  *) echo "PART is 1-6 (gemm_allgather seeds 1-3, then moe_dispatch_combine seeds 1-3), not $PART"; exit 2 ;;
esac
set -- $AGENTS
if [ "${PAIRS:-0}" = 1 ]; then SEARCH_S=${SEARCH_S:-340}; else SEARCH_S=${SEARCH_S:-$((400 / $#))}; fi
ROOT=$PWD/runs/search_vs_random
echo "PART $PART: $WORKLOAD seed $SEED, agents $AGENTS, about $EVALS evaluations, at most $SEARCH_S s each"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nvidia-smi topo -m | head -3
# Every template's defaults, each knob changed alone, and every fused GEMM library configuration.
TAIL=4 step prebuild "${PREBUILD_S:-120}" python3 benchmarks/runs/prebuild.py --jobs 30 "$WORKLOAD"
# PAIRS=1 on a 4-GPU host: the agents side by side, the first on GPUs 0,1 and the second on 2,3,
# each for SEARCH_S (default 340 s), so that one call holds a seed's pair. Each candidate is still
# timed against the reference interleaved in its own group; the two groups share the host's CPUs
# (64 cores: builds do not queue) and no GPU or NVLink pair.
search() {  # AGENT GPUS
  TAIL=8 step "$WORKLOAD-$1-s$SEED" $((SEARCH_S + 200)) python3 benchmarks/search_vs_random.py --run \
    --workloads "$WORKLOAD" --seeds "$SEED" --agents "$1" --candidates "$EVALS" --islands 3 --gpus "$2" \
    --limit-s "$SEARCH_S" --root "$ROOT" --bundles "$OUT/bundles" --out "$OUT/search-$1" ${KEEP:+--keep-workers}
}
if [ "${PAIRS:-0}" = 1 ] && [ $# = 2 ]; then
  search "$1" 0,1 & search "$2" 2,3 & wait
else
  for agent in "$@"; do search "$agent" 0,1; done
fi
TAIL=40 step compare 60 python3 benchmarks/search_vs_random.py "$ROOT" --out "$OUT/compare"
