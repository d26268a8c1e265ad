#!/usr/bin/env bash
# One call on a single GPU (nvidia-h100-x1 or nvidia-h200), the one-GPU parts of issues 33 and 31,
# most wanted first, each step under its own limit so that the call's tar always runs:
#   1. every imported ParallelKernelBench folder's reference and every shipped workload's reference on
#      the GPU against float64 (`cuco workload check --gpu --share-gpu`; benchmarks/runs/pkb_refcheck.sh,
#      its carry steps at its head), into $OUT/pkb;
#   2. the single-knob changes no GPU has verified yet with the ranks sharing the GPU at W=2 and W=4:
#      every gemm_reducescatter strategy (ce_fold is new) and fused_tile's fanout=all and =paced, into
#      $OUT/sweeps;
#   3. the one-GPU tests of the new code (the settle pause, the reference check), into $OUT/tests.txt.
#   R=$OUT; OUT=/tmp/o bash benchmarks/runs/one_gpu_call.sh; tar czf $R/c.tgz -C /tmp/o .
set -u
STEP_TAIL=15
source "$(dirname "$0")/common.sh"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
mkdir -p "$OUT/pkb"
TAIL=8 step pkb "${PKB_S:-270}" env OUT="$OUT/pkb" BUDGET_S=$((${PKB_S:-270} - 10)) JOBS="${JOBS:-8}" \
  bash "$(dirname "$0")/pkb_refcheck.sh"
ONLY=$(python3 - <<'PY'
import sys; sys.path.insert(0, "benchmarks")
from pathlib import Path
import shared_gpu_check as s
fused = [l for l, _ in s.sources("gemm_allgather", Path("/tmp/labels/ag"), True) if l.startswith("fused_tile")]
fused = [fused[0]] + [l for l in fused if l.endswith(("_all_1]", "_paced_1]"))]
rs = [l for l, _ in s.sources("gemm_reducescatter", Path("/tmp/labels/rs"), True)]
print(",".join(dict.fromkeys(fused + rs)))
PY
)
TAIL=45 step sweeps "${SWEEPS_S:-220}" python3 benchmarks/shared_gpu_check.py gemm_allgather gemm_reducescatter \
  --out "$OUT/sweeps" --worlds 2,4 --sweep --only "$ONLY" --jobs "${SWEEP_JOBS:-3}" --build-jobs 15
TAIL=20 step tests "${TESTS_S:-60}" bash scripts/gpu-tests.sh -q tests/evaluate/test_gpu_settle.py \
  tests/evaluate/test_gpu_shared.py -k "settle or pause or spoiled or float64_answer"
exit 0
