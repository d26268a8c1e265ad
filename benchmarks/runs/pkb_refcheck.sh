#!/usr/bin/env bash
# Issue 33 on one GPU (nvidia-h100-x1): every imported ParallelKernelBench problem's reference (the
# program under torch.distributed, NCCL) run on the GPU as the harness runs a reference, its ranks
# sharing the GPU, at the world size of each folder (W=2 first, then W=4), against the same program in
# float64 under gloo (`cuco workload check FOLDER --no-compile --gpu --share-gpu --world W --json`).
# The imports are made on a CPU machine first (benchmarks/parallelkernelbench.py /tmp/pkb), then the
# clone and the scratch folder are carried in .whl (not in git) and put back where the adapters name them:
#   mkdir -p .whl/pkb && cp -r /tmp/pkb/. .whl/pkb/ && rm -rf .whl/pkb/.git
#   tar czf .whl/pkb-scratch.tgz -C /tmp/cuco-pkb adapters workloads results.json introspection.json
# Then, back here: python3 benchmarks/parallelkernelbench.py /tmp/pkb --table-only --reference-results FILES_AT
# FOLDERS="71_w4 72_w2" checks only those (a call cut off before them), the shipped ones left out.
# Output: $OUT/reference_ID_wW.json and .err per folder, $OUT/refcheck.log, $OUT/run.txt (device, date).
set -u
source "$(dirname "$0")/common.sh"
JOBS=${JOBS:-6}
BUDGET_S=${BUDGET_S:-500}
mkdir -p /tmp/pkb /tmp/cuco-pkb
cp -r .whl/pkb/. /tmp/pkb/
tar xzf .whl/pkb-scratch.tgz -C /tmp/cuco-pkb
echo "device: 1 x $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1) (every rank on GPU 0), $(date +%F)" \
  > "$OUT/run.txt"
export OUT
one() {  # one folder: its findings as JSON; the log line names it and its exit status
  local dir=$1 name w id
  name=$(basename "$dir"); w=${name##*_w}; id=${name%%_w*}; id=${id#pkb}
  [ "$w" = "$name" ] && { w=2; name=${name}_w2; id=$(basename "$dir"); }  # a shipped workload: W=2
  timeout 300 python3 -m cuco_tui.cli workload check "$dir" --no-compile --gpu --share-gpu --world "$w" --json \
    > "$OUT/reference_${id}_w${w}.json" 2> "$OUT/reference_${id}_w${w}.err"
  echo "$name rc=$?"
}
export -f one
t0=$SECONDS
# The shipped workloads' references first (a handful, W=2): each is what its candidates are verified against.
{ [ -n "${FOLDERS:-}" ] || for w in gemm_allgather gemm_reducescatter moe_dispatch_combine cp_attention kv_transfer tp_attn_out; do
    echo "$PWD/workloads/$w"; done
  if [ -n "${FOLDERS:-}" ]; then for f in $FOLDERS; do echo "/tmp/cuco-pkb/workloads/pkb$f"; done
  else ls -d /tmp/cuco-pkb/workloads/pkb*_w2 /tmp/cuco-pkb/workloads/pkb*_w4 2>/dev/null; fi; } \
  | timeout $((BUDGET_S - (SECONDS - t0))) xargs -P "$JOBS" -I{} bash -c 'one {}' | tee -a "$OUT/refcheck.log"
echo "$(grep -c . "$OUT/refcheck.log") folders in $((SECONDS - t0)) s"
grep -h '"reference on GPU"' -A2 "$OUT"/reference_*.json | grep -c '"level": "ok"' || true
exit 0
