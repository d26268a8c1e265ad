#!/usr/bin/env bash
# One call on a single GPU (nvidia-h100-x1), issue 31's one-GPU part: every single-knob change of
# fused_tile (gemm_allgather; k_slices and fanout=paced/all are new since the last W=4 sweep) and of
# every gemm_reducescatter strategy (ce_fold never ran on a GPU) verified with the ranks sharing the
# GPU at W=2 and W=4, perturbed rounds on; then every shipped workload's reference against float64
# on the GPU (`cuco workload check --gpu`, new); then the one-GPU tests of the code no GPU has run yet
# (the settle pause of device alignment) and gemm_reducescatter's shared-GPU tests. Results under $OUT.
#   R=$OUT; OUT=/tmp/o bash benchmarks/runs/one_gpu_sweeps.sh; tar czf $R/s.tgz -C /tmp/o .
set -u
STEP_TAIL=12
source "$(dirname "$0")/common.sh"
nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv,noheader
ONLY=$(python3 - <<'PY'
import sys; sys.path.insert(0, "benchmarks")
from pathlib import Path
import shared_gpu_check as s
fused = [l for l, _ in s.sources("gemm_allgather", Path("/tmp/labels/ag"), True) if l.startswith("fused_tile")]
rs = [l for l, _ in s.sources("gemm_reducescatter", Path("/tmp/labels/rs"), True)]
print(",".join(dict.fromkeys(fused + rs)))
PY
)
TAIL=70 step sweeps "${SWEEPS_S:-330}" python3 benchmarks/shared_gpu_check.py gemm_allgather gemm_reducescatter \
  --out "$OUT/sweeps" --worlds 2,4 --sweep --only "$ONLY" --jobs "${JOBS:-3}" --build-jobs 15
# `cuco workload check --gpu` (new): each shipped workload's reference on the GPU, its ranks sharing
# it at W=2, against expected() in float64 at the verify shapes.
TAIL=30 step refcheck "${REFCHECK_S:-100}" bash -c 'for w in gemm_allgather gemm_reducescatter \
  moe_dispatch_combine cp_attention kv_transfer tp_attn_out; do python3 -m cuco_tui.cli workload check \
  "workloads/$w" --no-compile --gpu --share-gpu --world 2 | grep -E "reference on GPU|error"; done'
TAIL=30 step tests "${TESTS_S:-120}" bash scripts/gpu-tests.sh -q tests/evaluate/test_gpu_settle.py \
  tests/workloads/gemm_reducescatter/test_rs_gpu.py
exit 0
