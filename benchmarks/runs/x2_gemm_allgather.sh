#!/usr/bin/env bash
# Issue 26, call 1 (nvidia-h200-x2, two GPUs): gemm_allgather with the fused strategy. Prebuild
# (every template's defaults and each knob changed alone, fused_tile's CUTLASS configurations
# among them), the baseline with its ceilings and bounds, PyTorch async-TP in the same call, the
# fused template at its defaults timed on every bench shape, an offline search of 40+ candidates
# (the perturbed schedules at L2 on every one: no false alarm is part of the result), its bundle,
# and an Nsight Systems timeline of the best candidate on wide-k-narrow-n if nsys is there.
#   SEARCH_S=330 bash benchmarks/runs/x2_gemm_allgather.sh        # about 9.5 minutes
set -u
STEP_TAIL=16
source "$(dirname "$0")/common.sh"
SEARCH_S=${SEARCH_S:-330}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nvidia-smi topo -m | head -4
step prebuild "${PREBUILD_S:-150}" python3 benchmarks/runs/prebuild.py --jobs 30 gemm_allgather
step baseline 60 python3 -m cuco_tui.cli baseline -w gemm_allgather --gpus 0,1 --json
step yardstick 90 torchrun --nproc_per_node=2 .whl/yardstick_ag_gemm.py
cp -f ag_gemm_w2.json "$OUT/" 2>/dev/null
python3 benchmarks/render_strategy.py gemm_allgather fused_tile /tmp/fused.cu
step fused-default 90 python3 -m cuco_tui.cli eval /tmp/fused.cu --workload gemm_allgather --gpus 0,1 --json
session=/tmp/sess/gemm_allgather-offline-h200x2-fused
step search "$SEARCH_S" python3 -m cuco_tui.cli search --workload gemm_allgather --generations 14 --islands 3 \
  --agent offline --gpus 0,1 --seed 2 --session "$session"
python3 -c "from cuco_tui.lineage import SessionRepo, export_bundle; export_bundle(SessionRepo.open('$session'), '$OUT/gemm_allgather-offline-h200x2-fused.bundle')"
python3 -m cuco_tui.cli show "$session" > "$OUT/show.txt" 2>&1; head -n 14 "$OUT/show.txt"
if command -v nsys >/dev/null; then
  python3 -m cuco_tui.cli export "$session" --out /tmp/best >/dev/null 2>&1 &&
  timeout 60 nsys profile -o "$OUT/best-wide-k" --force-overwrite true python3 -m cuco_tui.cli eval /tmp/best/*.cu \
    --workload gemm_allgather --gpus 0,1 --shapes wide-k-narrow-n > /dev/null 2>&1; ls "$OUT" | grep nsys-rep
fi
