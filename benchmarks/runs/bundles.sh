#!/usr/bin/env bash
# The example bundles the issues ask for (31: >= 40 candidates of gemm_allgather and
# gemm_reducescatter at W=2 and W=4; 32: >= 30 of every workload): per workload and world size,
# an offline search that stops itself after N evaluations (`--evaluations`), on every GPU of the
# host cut into groups of W (two W=2 groups on 4 GPUs: finalists timed beside the other group are
# re-measured alone before they can rank), its bounds and machine recorded in the session, then
# exported as $OUT/<workload>-offline-<kind>-w<W>.bundle with `cuco show` beside it. The build
# cache is warmed first for every workload named, in parallel. A 40-evaluation search takes 3-6
# minutes: one workload and world size per 10-minute call, with the prebuild.
#   WORKLOADS=gemm_allgather N=40 WORLDS=2 [SEARCH_S=400] bash benchmarks/runs/bundles.sh
set -u
STEP_TAIL=12
source "$(dirname "$0")/common.sh"
: "${WORKLOADS:?name the workloads}"
N=${N:-40}
WORLDS=${WORLDS:-2 4}
SEARCH_S=${SEARCH_S:-400}  # a safety limit: the search ends itself after N evaluations
STEP_SIGNAL=INT  # at the limit, as Ctrl-C: what is in flight is committed and the session exported
gpus=$(nvidia-smi -L | grep -c '^GPU ')  # MIG instances are listed under their GPU
model=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -oiE 'H100|H200|B200|A100' | tr 'A-Z' 'a-z')
kind=${model:-gpu}x$gpus
step prebuild "${PREBUILD_S:-150}" python3 benchmarks/runs/prebuild.py --jobs "$(nproc)" $WORKLOADS
for W in $WORLDS; do
  if [ "$W" -gt "$gpus" ]; then echo "== skip W=$W: $gpus GPUs here"; continue; fi
  for w in $WORKLOADS; do
    name=$w-offline-$kind-w$W
    session=/tmp/sess/$name
    rm -rf "$session"
    step "$name" "$SEARCH_S" python3 -m cuco_tui.cli search --workload "$w" --agent offline --world "$W" \
      --gpus "0-$((gpus - 1))" --generations 60 --evaluations "$N" --seed 1 --session "$session"
    python3 -c "from cuco_tui.lineage import SessionRepo, export_bundle; export_bundle(SessionRepo.open('$session'), '$OUT/$name.bundle')" \
      && python3 -m cuco_tui.cli show "$session" > "$OUT/$name-show.txt" 2>&1
    head -n 12 "$OUT/$name-show.txt" 2>/dev/null
  done
done
