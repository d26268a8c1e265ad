#!/usr/bin/env bash
# One device call on a single GPU (nvidia-h100-x1) after the architecture step (rooms moved, the
# rank worker split): every workload's seed and strategy templates verified with 2 and 4 ranks
# sharing the GPU, the one-GPU tests (references against float64, tp_attn_out's among them, every
# seed shared at 2 and 4 ranks), and a knob-varied tp_attn_out candidate at 2 and 4 ranks.
# Results under $OUT.
#   bash benchmarks/runs/arch_one_gpu.sh
set -u
STEP_TAIL=25
source "$(dirname "$0")/common.sh"
nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv
python3 - <<'PY' > /tmp/tp_knobs.cu
from pathlib import Path
from cuco_tui.source.knobs import with_knobs
print(with_knobs(Path("workloads/tp_attn_out/seed.cu").read_text(),
                 {"kChunks": 4, "kNcclMaxCtas": 16, "kNormThreads": 512}), end="")
PY
step shared-check "${CHECK_S:-330}" python3 benchmarks/shared_gpu_check.py --out "$OUT/check" --jobs "${JOBS:-3}" \
  --worlds 2,4
step tp-knobs-w2 60 python3 -m cuco_tui.cli eval /tmp/tp_knobs.cu --workload tp_attn_out --share-gpu --world 2
step tp-knobs-w4 60 python3 -m cuco_tui.cli eval /tmp/tp_knobs.cu --workload tp_attn_out --share-gpu --world 4
step gpu-tests "${TESTS_S:-180}" bash scripts/gpu-tests.sh -q
