#!/usr/bin/env bash
# Issue 31, item 2 (nvidia-h100-x2 or -x4): gemm_reducescatter in one call on W GPUs. The pip line,
# the prebuild (the seed and every template at its defaults and at each single-knob change, in
# parallel), `cuco baseline` (the reference, the GEMM and the reduce-scatter alone, the peer copy,
# the bounds), PyTorch async-TP's fused_matmul_reduce_scatter at the same shapes
# (benchmarks/yardstick_gemm_rs.py, torchrun), the seed, every template at its defaults (ce_fold
# among them) and gemm_rs.py's POINTS (ce_push where the searches ended, ce_fold at 8 chunks)
# through the cascade timed against the reference (benchmarks/gemm_rs.py: ms, speedup, time over
# the bound, async-TP beside them; six candidates, so its cap is 420 s), then a short offline
# search and its bundle. Every step ends
# with a short table (its output in $OUT/NAME.txt, the tail echoed).
#   W=2 SEARCH_S=120 bash benchmarks/runs/gemm_rs.sh      # about 7 minutes on 2 x H100 (estimated)
#   W=4 SEARCH_S=90 bash benchmarks/runs/gemm_rs.sh       # about 8 minutes on 4 x H100 (estimated)
# The device tool returns at most 8 files and this writes more: run it with OUT=/tmp/o and tar
# /tmp/o into the real $OUT (the device command in benchmarks/runs/README.md).
set -u
STEP_TAIL=14
source "$(dirname "$0")/common.sh"
export OUT  # torchrun's ranks write the yardstick's JSON there
W=${W:-2}
SEARCH_S=${SEARCH_S:-120}
GPUS=$(seq -s, 0 $((W - 1)))
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n "$W"; nvidia-smi topo -m | head -n $((W + 1))
kind=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -q H200 && echo h200 || echo h100)
step prebuild "${PREBUILD_S:-100}" python3 benchmarks/runs/prebuild.py --jobs 30 gemm_reducescatter
step baseline 120 python3 -m cuco_tui.cli baseline -w gemm_reducescatter --gpus "$GPUS"
TAIL=10 step yardstick 150 torchrun --nproc_per_node="$W" benchmarks/yardstick_gemm_rs.py
TAIL=16 step candidates 420 python3 benchmarks/gemm_rs.py --gpus "$GPUS" --out "$OUT/rs" --yardstick "$OUT/rs_gemm_w$W.json"
session=/tmp/sess/gemm_reducescatter-offline-${kind}x$W
step search "$SEARCH_S" python3 -m cuco_tui.cli search --workload gemm_reducescatter --generations 12 --islands 2 \
  --agent offline --gpus "$GPUS" --seed 1 --session "$session"
python3 -c "from cuco_tui.lineage import SessionRepo, export_bundle; export_bundle(SessionRepo.open('$session'), '$OUT/gemm_reducescatter-offline-${kind}x$W.bundle')"
python3 -m cuco_tui.cli show "$session" > "$OUT/show.txt" 2>&1; head -n 16 "$OUT/show.txt"
